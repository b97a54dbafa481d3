"""Steps per second of one SFT job trained in 1 process and in 2 CPU processes (DDP over gloo), on the same work: the
same spec, so the same global batch (each of the 2 processes takes half of it), through the real scheduler.

    python benchmarks/distributed.py [--steps 30] [--batch-size 16] [--record]

Run it on an idle machine with at least 2 cores: two processes on cores that other work shares measure the sharing.
Prints, for each run, the optimizer steps per second of its training loop (rank 0's performance figures: steps over
the seconds they took, model loading and evaluation left out) and the wall time of the whole job; ``--record`` appends
the steps/s to docs/benchmarks.md (benchmarks/record.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")  # one thread per process: 2 processes use 2 cores


def spec(processes: int, steps: int, batch_size: int) -> dict:
    """The SFT example's model and data, ``steps`` steps of ``batch_size`` examples (over all processes)."""
    return {
        "method": "sft",
        "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
        "dataset": {"source": "builtin", "name": "arith-sft"},
        "training": {
            "max_steps": steps,
            "batch_size": batch_size,
            "max_length": 128,
            "learning_rate": 2e-3,
            "save_steps": steps + 1,
            "num_processes": processes,
        },
    }


def run(processes: int, steps: int, batch_size: int) -> tuple[float, float]:
    """(steps per second of the training loop, wall seconds of the whole job) of one job, in a fresh data dir."""
    from backend.api import StudioAPI
    from backend.jobs.records import JobStatus
    from backend.jobs.scheduler import Scheduler

    with tempfile.TemporaryDirectory() as data_dir:
        api = StudioAPI(data_dir, scheduler="none")
        job = api.jobs.submit(spec(processes, steps, batch_size)).job
        started = time.monotonic()
        scheduler = Scheduler(api.core.paths, poll_interval=0.1).start()
        try:
            while not (done := api.core.store.get(job.id)).status.finished:
                time.sleep(0.2)
        finally:
            scheduler.stop()
        wall = time.monotonic() - started
        if done.status is not JobStatus.succeeded:
            raise SystemExit(f"the {processes}-process job {done.status.value}: {done.error}")
        performance = done.artifacts.performance or {}
        return performance["steps"] / performance["seconds"], wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=16, help="examples per optimizer step, over all processes")
    parser.add_argument("--record", action="store_true", help="append the steps/s to docs/benchmarks.md")
    args = parser.parse_args(argv)
    figures = {}
    for processes in (1, 2):
        rate, wall = run(processes, args.steps, args.batch_size)
        figures[processes] = rate
        print(f"{processes} process{'es' if processes > 1 else ''}: {rate:.2f} steps/s, job {wall:.1f} s wall")
    print(f"2 processes / 1 process: {figures[2] / figures[1]:.2f}x steps/s on the same work")
    if args.record:
        from benchmarks.record import record

        what = f"SFT tiny-qwen3-arith, {args.steps} steps of {args.batch_size} examples, 1 vs 2 CPU processes (DDP)"
        record([(what, f"{figures[1]:.2f} vs {figures[2]:.2f} steps/s ({figures[2] / figures[1]:.2f}x)")])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
