"""Is the learnability forecast right? Each recipe's forecast against the verdict of the same job trained anyway.

    python benchmarks/forecast.py [RECIPE ...] [--seeds 0,1,2] [--record]

Every recipe is an example of examples/ (or a broken variant of one) run in-process with
``forecast.train_anyway: true``: the worker forecasts first, as every rollout job does, then trains whatever the
forecast said, and evaluates. The rule checked (issue 50): every ``no_signal`` forecast ends in a verdict that is not
``improved``, and every ``learnable`` one in ``improved`` (``weak`` promises neither). A recipe it gets wrong is
printed and recorded as a row like the others, marked WRONG. ``--record`` appends one row per recipe and seed as
soon as it ends (the forecast, its cause, its time; the verdict and its drift) and a summary to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.learning import ROOT as _ROOT  # noqa: E402  (sets HF_HUB_OFFLINE, as every benchmark)
from benchmarks.learning import run_example  # noqa: E402

assert _ROOT == ROOT
TRAIN_ANYWAY = {"forecast": {"train_anyway": True}}
REWARD_JOB = "reward-demo"
# name -> (example, overrides over it). The first five are the examples as they ship; the others break one thing.
RECIPES: dict[str, tuple[str, dict]] = {
    "grpo-demo": ("grpo-demo", {}),
    "rloo-demo": ("rloo-demo", {}),
    "grpo-env-demo": ("grpo-env-demo", {}),
    "warm-up-demo": ("warm-up-demo", {}),
    "grpo-rm-demo": ("grpo-rm-demo", {}),
    "env-24-tokens": ("grpo-env-demo", {"rollout": {"max_completion_length": 24}}),
    "reward-every-answer-earns": (
        "grpo-demo",
        {"rollout": {"rewards": [{"name": "regex", "pattern": r"\d", "weight": 1.0}]}},
    ),
    "random-model-in-arith-env": ("grpo-env-demo", {"model": {"name_or_path": "builtin:tiny-qwen3"}}),
    "grpo-demo-near-greedy": ("grpo-demo", {"rollout": {"temperature": 0.01}}),
}


def _merged(overrides: dict, more: dict) -> dict:
    out = {part: dict(values) for part, values in overrides.items()}
    for part, values in more.items():
        out.setdefault(part, {}).update(values)
    return out


def run_warm_up(data_dir: Path, seed: int, overrides: dict):
    """The warm-up example: its demonstrations written, its SFT job and then its GRPO job run in this process; the
    GRPO job's record and the seconds both took."""
    from backend.api import StudioAPI, load_spec_text
    from backend.worker import run_job

    path = ROOT / "examples" / "warm-up-demo.yaml"
    spec = load_spec_text(path.read_text(), path.name)
    spec.setdefault("training", {})["seed"] = seed
    for part, values in overrides.items():
        spec.setdefault(part, {}).update(values)
    api = StudioAPI(data_dir, scheduler="none")
    try:
        started = time.monotonic()
        warm = api.environments.warm_up(spec)
        for _ in range(2):
            job = api.core.store.claim_next()
            run_job(job.id, api.core.paths, threading.Event())
        return api.jobs.get_job(warm.grpo.job.id), time.monotonic() - started
    finally:
        api.close()


def judged(forecast: str | None, verdict: str | None) -> str:
    """'right', 'WRONG' or 'free' (a weak forecast, or none, promises nothing).

    >>> judged("no_signal", "no_change"), judged("learnable", "worse"), judged("weak", "improved")
    ('right', 'WRONG', 'free')
    """
    if forecast == "no_signal":
        return "right" if verdict != "improved" else "WRONG"
    if forecast == "learnable":
        return "right" if verdict == "improved" else "WRONG"
    return "free"


def drift_said(learning) -> str:
    """The verdict's drift, for the row (the drift threshold is set from these figures)."""
    drift = getattr(learning, "drift", None)
    if drift is None or drift.mean is None:
        return "drift: none"
    return f"drift {drift.mean:.3f} ±{drift.ci95 or 0:.3f} nats/token from the {drift.reference}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("recipes", nargs="*", default=list(RECIPES))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--record", action="store_true", help="append the rows to docs/benchmarks.md")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")]
    tally = {"right": 0, "WRONG": 0, "free": 0}

    def keep(what: str, figure: str) -> None:  # each row as soon as it is known: a long run stopped keeps its rows
        if args.record:
            from benchmarks.record import record

            record([(what, figure)])

    with tempfile.TemporaryDirectory() as shared:
        reward_job = None
        for seed in seeds:  # every recipe once before any twice: an interrupted run still covers the table
            for name in args.recipes:
                example, overrides = RECIPES[name]
                overrides = _merged(overrides, TRAIN_ANYWAY)
                if example == "grpo-rm-demo":
                    if reward_job is None:
                        reward_job, seconds = run_example(REWARD_JOB, Path(shared))
                        print(f"reward model: {REWARD_JOB} {reward_job.status.value} in {seconds:.0f}s", flush=True)
                    overrides = _merged(overrides, {"rollout": {"rewards": [{"model": reward_job.id, "weight": 1.0}]}})
                with tempfile.TemporaryDirectory() as tmp:
                    where = Path(shared if example == "grpo-rm-demo" else tmp)
                    if example == "warm-up-demo":
                        job, seconds = run_warm_up(where, seed, overrides)
                    else:
                        job, seconds = run_example(example, where, seed, overrides)
                forecast, learning = job.artifacts.forecast, job.artifacts.learning
                verdict = learning.verdict if learning else None
                mark = judged(forecast.forecast if forecast else None, verdict)
                tally[mark] += 1
                said = forecast.sentence() if forecast else "no forecast"
                outcome = f"{verdict}: {learning.sentence}" if learning else f"{job.status.value}: {job.error}"
                line = f"{mark}: {said} Verdict {outcome} ({drift_said(learning)}; job {seconds:.0f} s)"
                print(f"{name}, seed {seed}: {line}", flush=True)
                keep(f"forecast vs verdict: {name}, seed {seed}", line.replace("|", "/"))
    summary = f"{tally['right']} right, {tally['WRONG']} wrong, {tally['free']} weak (no promise)"
    print(summary)
    keep(f"forecast vs verdict: {len(args.recipes)} recipes x seeds {args.seeds}", summary)
    return 1 if tally["WRONG"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
