"""Runs the examples on builtin:tiny-qwen3-arith in-process and prints each job's learning verdict and time.

    python benchmarks/learning.py [sft-demo dpo-demo ...] [--seed S]

The figures in the README's "Examples that learn" table come from this script.
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

EXAMPLES = ("sft-demo", "dpo-demo", "kto-demo", "grpo-demo", "rloo-demo", "grpo-env-demo")


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
        job = api.submit(spec).job
        assert api.store.claim_next().id == job.id
        started = time.monotonic()
        run_job(job.id, api.paths, threading.Event())
        return api.get_job(job.id), time.monotonic() - started
    finally:
        api.close()


def main(argv: list[str] | None = None) -> int:
    """Run the named examples (all by default) and print one line each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", default=list(EXAMPLES))
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args(argv)
    for name in args.examples:
        with tempfile.TemporaryDirectory() as tmp:
            job, seconds = run_example(name, Path(tmp), args.seed)
        learning = job.artifacts.learning
        print(
            f"{name}: {job.status.value} in {seconds:.0f}s; "
            f"{learning.verdict + ': ' + learning.sentence if learning else 'no verdict: ' + str(job.error)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
