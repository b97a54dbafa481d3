"""Runs the examples on builtin:tiny-qwen3-arith in-process and prints each job's learning verdict and time.

    python benchmarks/learning.py [sft-demo dpo-demo ...] [--seed S | --seeds 0,1,2] [--record]

``--record`` appends each job's verdict (its sentence names the guards it was checked on) to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

EXAMPLES = (
    "sft-demo",
    "dpo-demo",
    "kto-demo",
    "grpo-demo",
    "rloo-demo",
    "grpo-env-demo",
    "reward-demo",
    "distillation-demo",
    "grpo-rm-demo",
)
# Examples that learn from another example's finished job: (that example, the settings that name its job). It runs
# once per invocation, with its own seed, in the data folder its pupils share; the seeds vary the pupil, and the time
# printed is the pupil's alone.
TEACHERS = {
    "distillation-demo": ("sft-demo", lambda job_id: {"distillation": {"teacher": job_id}}),
    "grpo-rm-demo": ("reward-demo", lambda job_id: {"rollout": {"rewards": [{"model": job_id, "weight": 1.0}]}}),
}


def run_example(name: str, data_dir: Path, seed: int | None = None, overrides: dict | None = None):
    """Store the example's spec, run its worker in this process, and return the finished record and seconds taken."""
    from backend.api import StudioAPI, load_spec_text
    from backend.worker import run_job

    path = ROOT / "examples" / f"{name}.yaml"
    spec = load_spec_text(path.read_text(), path.name)
    if seed is not None:
        spec.setdefault("training", {})["seed"] = seed
    for part, values in (overrides or {}).items():
        spec.setdefault(part, {}).update(values)
    api = StudioAPI(data_dir, scheduler="none")
    try:
        job = api.jobs.submit(spec).job
        assert api.core.store.claim_next().id == job.id
        started = time.monotonic()
        run_job(job.id, api.core.paths, threading.Event())
        return api.jobs.get_job(job.id), time.monotonic() - started
    finally:
        api.close()


def main(argv: list[str] | None = None) -> int:
    """Run the named examples (all by default) and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", default=list(EXAMPLES))
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--seeds", default=None, help="comma-separated seeds, each example run once per seed")
    parser.add_argument("--record", action="store_true", help="append the verdicts to docs/benchmarks.md")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else [args.seed]
    rows = []
    for name in args.examples:
        with tempfile.TemporaryDirectory() as shared:
            overrides = None
            if name in TEACHERS:
                teacher_example, naming = TEACHERS[name]
                teacher, seconds = run_example(teacher_example, Path(shared))
                print(f"{name}: teacher {teacher_example} {teacher.status.value} in {seconds:.0f}s", flush=True)
                overrides = naming(teacher.id)
            for seed in seeds:
                with tempfile.TemporaryDirectory() as tmp:
                    job, seconds = run_example(name, Path(shared if overrides else tmp), seed, overrides)
                learning = job.artifacts.learning
                said = learning.verdict + ": " + learning.sentence if learning else "no verdict: " + str(job.error)
                print(f"{name}: {job.status.value} in {seconds:.0f}s; {said}", flush=True)
                rows.append(
                    (f"{name} verdict, seed {seed if seed is not None else 'default'}", f"{said} ({seconds:.0f} s)")
                )
    if args.record:
        from benchmarks.record import record

        record(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
