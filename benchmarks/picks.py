"""Is a page's twentieth pick as fast as its first? ``--picks`` alternating picks between two finished jobs in one Jobs
tab of one page, each timed from Enter until the summary names the job (its plots, log rows and log come in the same
answer), with the page's own blocked time (long tasks) per pick and what the page keeps in its localStorage.

The app runs as a real process (``python app.py``, local mode) on a store holding two finished jobs, an SFT one and a
GRPO one with sampled completions, each with ``--steps`` metric rows written through the real store; a
headless Chromium (Debian's, as the browser tests use) opens the page once, with tests/helpers/browser.py's page
counters installed before its scripts.

Recorded: the medians of the first five and the last five picks, and of their long-task time; the last five's over
the first five's; the largest pick; the bytes of Gradio's run history in the page's localStorage at the end (Gradio
6.31 keeps every event's inputs and outputs there unless the app turns it off).

    python benchmarks/picks.py [--picks 20] [--steps 200] [--label TEXT] [--record]

``--record`` appends the row to docs/benchmarks.md (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.latency import launch_app  # noqa: E402 - after the path
from tests.helpers.browser import (  # noqa: E402
    count_page_work,
    kept_after_collection,
    launch_chromium,
    page_work,
    stored_run_history,
    timed_pick,
)


def fill_store(data: Path, steps: int) -> list[str]:
    """Two finished jobs of the local user, an SFT one and a GRPO one (another set of log columns, and sampled
    completions: a pick between them redraws every table), each with ``steps`` metric rows: their ids."""
    from backend.core.paths import DataPaths
    from backend.core.spec import parse_spec
    from backend.jobs.records import JobStatus
    from backend.jobs.store import JobStore
    from tests.helpers import tiny_spec

    store = JobStore(DataPaths(data).ensure().db)
    sft = tiny_spec(output={"run_name": "picks-a"})
    grpo = tiny_spec(
        method="grpo",
        dataset={"source": "builtin", "name": "echo-demo"},
        output={"run_name": "picks-b"},
        grpo={"num_generations": 2, "rewards": [{"name": "length", "target_length": 4, "unit": "chars"}]},
    )
    now = time.time()
    ids = []
    for spec, metrics in ((sft, _sft_metrics), (grpo, _grpo_metrics)):
        job = store.add(parse_spec(spec))
        store.claim_next()
        rows = [(step, now - steps + step, metrics(step, steps)) for step in range(1, steps + 1)]
        samples = [
            (
                step,
                {
                    "prompt": [{"role": "user", "content": f"Say something {step} {k} times."}],
                    "completion": [{"role": "assistant", "content": "word " * (5 + (step * k) % 40)}],
                    "rewards": {"length": -abs(4 - k)},
                    "advantage": (k - 1.5) / 1.5,
                },
            )
            for step in range(max(1, steps - 8), steps + 1)
            for k in range(4)
        ]
        store.report(job.id, rows, {"step": steps, "total_steps": steps}, samples if spec is grpo else ())
        store.finish(job.id, JobStatus.succeeded)
        ids.append(job.id)
    return ids


def _sft_metrics(step: int, steps: int) -> dict:
    return {
        "loss": 2.0 / step**0.5,
        "learning_rate": 2e-4 * (1 - step / steps),
        "mean_token_accuracy": 1 - 1 / (1 + step),
        "grad_norm": 1.0 + 1 / step,
        "train_tokens_per_second": 900.0 + step % 7,
    }


def _grpo_metrics(step: int, steps: int) -> dict:
    return {
        "loss": 0.01 * (step % 5),
        "learning_rate": 1e-5 * (1 - step / steps),
        "reward": -3 + 3 * step / steps,
        "reward_std": 0.5,
        "rewards/length/mean": -3 + 3 * step / steps,
        "kl": 0.001 * step,
        "completions/mean_length": 40 - 30 * step / steps,
        "frac_reward_zero_std": 0.25,
    }


def measure(picks: int, steps: int) -> dict:
    from playwright.sync_api import expect, sync_playwright

    data = Path(tempfile.mkdtemp(prefix="picks-bench-"))
    ids = fill_store(data, steps)
    proc, url = launch_app(data)
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            count_page_work(page)
            page.goto(url)
            page.get_by_role("tab", name="Jobs").click()
            expect(page.locator("#jobs-table")).to_contain_text("picks-b", timeout=60_000)
            times, blocked, kept = [], [], []
            for i in range(picks):
                before = page_work(page)["longTaskMs"]
                times.append(timed_pick(page, ids[i % 2]))
                page.wait_for_timeout(500)  # the pick's drawing ends in long tasks after the summary shows
                blocked.append(page_work(page)["longTaskMs"] - before)
                if i in (5, picks - 1):
                    kept.append(kept_after_collection(page))
            stored = sum(stored_run_history(page).values())
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    first, last = statistics.median(times[:5]), statistics.median(times[-5:])
    first_blocked, last_blocked = statistics.median(blocked[:5]), statistics.median(blocked[-5:])
    return {
        "picks": picks,
        "steps": steps,
        "pick_s": [round(t, 2) for t in times],
        "blocked_ms": [round(b) for b in blocked],
        "first_five_p50_s": round(first, 2),
        "last_five_p50_s": round(last, 2),
        "first_five_blocked_p50_ms": round(first_blocked),
        "last_five_blocked_p50_ms": round(last_blocked),
        "blocked_last_over_first": round(last_blocked / max(first_blocked, 1), 2),
        "max_pick_s": round(max(times), 2),
        "run_history_chars": stored,
        "kept_after_sixth": kept[0],
        "kept_after_last": kept[-1],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--picks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="metric rows of each finished job")
    parser.add_argument("--label", default="", help="what is measured (a commit, a setting)")
    parser.add_argument("--record", action="store_true", help="append the figures to docs/benchmarks.md")
    args = parser.parse_args()
    result = measure(args.picks, args.steps)
    print(json.dumps(result, indent=2))
    if args.record:
        from benchmarks.record import record

        label = f" ({args.label})" if args.label else ""
        record(
            [
                (
                    f"{args.picks} picks in one page's Jobs tab, an SFT and a GRPO job of {args.steps} steps{label}",
                    f"pick p50 first five {result['first_five_p50_s']} s, last five {result['last_five_p50_s']} s "
                    f"(max {result['max_pick_s']} s); blocked time a pick, p50 first five "
                    f"{result['first_five_blocked_p50_ms']} ms, last five {result['last_five_blocked_p50_ms']} ms "
                    f"(x{result['blocked_last_over_first']}); run history in localStorage "
                    f"{result['run_history_chars']:,} characters; alive after a collection, sixth pick -> last: "
                    f"{result['kept_after_sixth']['listeners']} -> {result['kept_after_last']['listeners']} listeners, "
                    f"{result['kept_after_sixth']['nodes']:,} -> {result['kept_after_last']['nodes']:,} nodes",
                )
            ]
        )


if __name__ == "__main__":
    main()
