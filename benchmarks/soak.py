"""Does a page stay fast after use? Three signed-in users' pages open for ``--minutes`` on an emulated Space, with two
jobs training, each user picking a job every ``--period`` seconds, switching tabs and sending a chat (issue 47).

The app runs as a real process in Space mode (OAuth settings as the platform sets them; each user's session cookie
signed as Gradio's middleware checks it, tests/helpers/apps.py), with two workers (``STUDIO_MAX_CONCURRENT_JOBS=2``).
Each user first queues two short SFT jobs through the API and waits for them; then two long SFT jobs (two users')
train for the whole soak. One headless Chromium holds the three pages; Playwright drives them in turn (one thread),
so every page stays open and live (its Jobs tab ticking) while the others act. Each turn of a user:

* pick the other of their finished jobs in the Jobs tab, timed from Enter until the summary names it (plots come in
  the same answer): ``pick``;
* open the Train tab, then the Chat tab, ask the finished job a question, timed from Send until both sides answered:
  ``chat``; back to the Jobs tab.

A fourth page (the first user's, another window) stays open on the Jobs tab untouched for the whole soak, and is
picked once at the end: a page's first action after it was left open that long.

Recorded: p50 and p95 of picks and chats, the pick latency's slope over the soak (least squares, ms per minute) and
its first-third and last-third medians; the app's resident memory and threads at the start and the end of the soak;
each page's live resize observers and long-task time at the end (tests/helpers/browser.py's page counters).

    python benchmarks/soak.py [--minutes 20] [--period 10] [--record]

``--record`` appends the rows to docs/benchmarks.md (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.apps import data_dir_with_models, launch_app, session_cookie  # noqa: E402 - after the path
from tests.helpers.browser import chromium, count_page_work, page_work, timed_pick  # noqa: E402

USERS = ("ada", "grace", "linus")
SHORT = {
    "method": "sft",
    "model": {"name_or_path": "builtin:tiny-qwen3"},
    "training": {"max_steps": 6, "batch_size": 2, "max_length": 128, "save_steps": 100},
}
LONG = {**SHORT, "training": {"max_steps": 100_000, "batch_size": 2, "max_length": 128, "save_steps": 100_000}}


def _proc_status(pid: int) -> dict[str, int]:
    """The process's resident memory (MiB) and threads, from /proc."""
    fields = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                fields[key] = int(value.split()[0])
    return {"rss_mb": fields["VmRSS"] // 1024, "threads": fields["Threads"]}


def _slope_ms_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds since start, latency s) as ms per minute."""
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var * 1000 * 60


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def _submit(app, user: str, spec: dict) -> str:
    return app.client(user).predict(json.dumps(spec), api_name="/submit_spec")


def _wait(store, job_ids: list[str], timeout_s: float = 600) -> None:
    from backend.jobs.records import JobStatus

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        jobs = [store.get(j) for j in job_ids]
        if all(j.status.finished for j in jobs):
            failed = [j for j in jobs if j.status is not JobStatus.succeeded]
            assert not failed, [(j.id, j.error) for j in failed]
            return
        time.sleep(1)
    raise TimeoutError("the users' short jobs did not finish")


def _ask(page, text: str) -> float:
    """Send ``text`` in the Chat tab; seconds until both sides have answered."""
    import re

    from playwright.sync_api import expect

    page.get_by_label("Message to both models").fill(text)
    started = time.monotonic()
    page.locator("#chat-send").click()
    expect(page.locator("#chat-tuned [data-testid='user']").last).to_have_text(text, timeout=120_000)
    expect(page.locator("#chat-tuned [data-testid='status-tracker']")).to_have_class(
        re.compile("hide"), timeout=120_000
    )
    return time.monotonic() - started


def _open_user_page(browser, app, user: str, jobs: list[str]):
    from playwright.sync_api import expect

    from tests.helpers.browser import type_job

    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.add_cookies([{"name": "session", "value": session_cookie(user), "url": app.url}])
    count_page_work(context)
    page = context.new_page()
    page.goto(app.url)
    expect(page.locator("#header-status")).to_contain_text("Device:", timeout=60_000)
    page.get_by_role("tab", name="Chat").click()
    type_job(page, "#chat-job", jobs[0])
    page.get_by_role("tab", name="Jobs").click()
    return page


def soak(minutes: float, period: float) -> dict:
    from backend.core.paths import DataPaths
    from backend.jobs.store import JobStore
    from backend.models.demo import ensure_demo_model

    root = Path(tempfile.mkdtemp(prefix="studio-soak-"))
    models = root / "models"
    models.mkdir()
    ensure_demo_model(models)
    data = data_dir_with_models(root / "data", models)
    with launch_app(data, space=True, extra_env={"STUDIO_MAX_CONCURRENT_JOBS": "2"}) as app:
        store = JobStore(DataPaths(data).db)
        finished = {
            user: [_submit(app, user, {**SHORT, "output": {"run_name": f"{user}-{i}"}}) for i in (1, 2)]
            for user in USERS
        }
        _wait(store, [j for jobs in finished.values() for j in jobs])
        training = [_submit(app, user, LONG) for user in USERS[:2]]
        with chromium() as browser:
            pages = {user: _open_user_page(browser, app, user, finished[user]) for user in USERS}
            # A fourth page, the first user's in another window, left open on the Jobs tab and untouched until the
            # end: its one pick then is a page's first action after ``--minutes`` of ticking beside a training job.
            idle = _open_user_page(browser, app, USERS[0], finished[USERS[0]])
            start, before = time.monotonic(), _proc_status(app.proc.pid)
            picks: list[tuple[float, float]] = []
            by_user: dict[str, list[float]] = {user: [] for user in USERS}
            chats: list[float] = []
            turn = 0
            while time.monotonic() - start < minutes * 60:
                user = USERS[turn % len(USERS)]
                page, jobs = pages[user], finished[user]
                due = start + turn * period / len(USERS)
                if (wait := due - time.monotonic()) > 0:
                    page.wait_for_timeout(wait * 1000)
                picks.append((time.monotonic() - start, timed_pick(page, jobs[(turn // len(USERS)) % 2])))
                by_user[user].append(picks[-1][1])
                page.get_by_role("tab", name="Train").click()
                page.get_by_role("tab", name="Chat").click()
                chats.append(_ask(page, f"What is {turn % 9} + {turn % 7}?"))
                page.get_by_role("tab", name="Jobs").click()
                turn += 1
            after = _proc_status(app.proc.pid)
            idle_pick = timed_pick(idle, finished[USERS[0]][1])
            work = {user: page_work(page) for user, page in [*pages.items(), ("idle", idle)]}
        still = [store.get(j).status.value for j in training]
    times = [t for _, t in picks]
    third = max(1, len(times) // 3)
    return {
        "minutes": minutes,
        "turns": len(picks),
        "pick_p50_s": round(statistics.median(times), 2),
        "pick_p95_s": round(_p95(times), 2),
        "pick_max_s": round(max(times), 2),
        "pick_first_third_p50_s": round(statistics.median(times[:third]), 2),
        "pick_last_third_p50_s": round(statistics.median(times[-third:]), 2),
        "pick_slope_ms_per_min": round(_slope_ms_per_min(picks), 1),
        "idle_page_pick_s": round(idle_pick, 2),
        # each user's own picks, alternating between their two jobs: the first ten's median against the last ten's
        "picks_per_user": {u: len(t) for u, t in by_user.items()},
        "user_first_ten_p50_s": {u: round(statistics.median(t[:10]), 2) for u, t in by_user.items() if t},
        "user_last_ten_p50_s": {u: round(statistics.median(t[-10:]), 2) for u, t in by_user.items() if t},
        "chat_p50_s": round(statistics.median(chats), 2),
        "chat_p95_s": round(_p95(chats), 2),
        "app_rss_mb": [before["rss_mb"], after["rss_mb"]],
        "app_threads": [before["threads"], after["threads"]],
        "live_resize_observers": {u: w["live"] for u, w in work.items()},
        "long_task_s": {u: round(w["longTaskMs"] / 1000, 1) for u, w in work.items()},
        "training_jobs": still,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--period", type=float, default=10.0, help="seconds between one user's picks")
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args()
    result = soak(args.minutes, args.period)
    print(json.dumps(result, indent=2))
    if args.record:
        from benchmarks.record import record

        what = f"soak: 3 Space users, 2 jobs training, a pick + tabs + chat per user every {args.period:.0f} s"
        record(
            [
                (
                    f"{what}, {args.minutes:.0f} min ({result['turns']} turns): picks",
                    f"p50 {result['pick_p50_s']} s, p95 {result['pick_p95_s']} s, max {result['pick_max_s']} s; "
                    f"first third p50 {result['pick_first_third_p50_s']} s, last third "
                    f"{result['pick_last_third_p50_s']} s; slope {result['pick_slope_ms_per_min']} ms/min; each user's "
                    f"first ten / last ten picks p50 {result['user_first_ten_p50_s']} / "
                    f"{result['user_last_ten_p50_s']}",
                ),
                (
                    f"{what}: chats, the app, the pages",
                    f"a page left open {args.minutes:.0f} min, then its first pick: {result['idle_page_pick_s']} s; "
                    f"chat p50 {result['chat_p50_s']} s, p95 {result['chat_p95_s']} s; app RSS "
                    f"{result['app_rss_mb'][0]} -> {result['app_rss_mb'][1]} MiB, threads {result['app_threads'][0]} "
                    f"-> {result['app_threads'][1]}; live resize observers per page at the end "
                    f"{sorted(result['live_resize_observers'].values())}",
                ),
            ]
        )


if __name__ == "__main__":
    main()
