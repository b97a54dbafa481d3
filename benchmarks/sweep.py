"""A sweep's overhead per child against plain jobs of the same spec.

    python benchmarks/sweep.py [--children 3] [--steps 4] [--repeats 2] [--record]

Four figures, each per child:
  submit       ``api.sweeps.submit`` of N children against N ``api.jobs.submit`` calls (validation, pre-flight, rows)
  end to end   N children through the queue against N plain jobs queued at once (submit -> last one finished)
  scheduler    the tick's ``SweepStore.advance`` with no TPE sweep active (what every tick pays), and with one
  tpe          one Optuna ask + tell on the SQLite study (what a TPE child adds)

Runs offline on the demo model (builtin:tiny-qwen3, random weights: the training itself is not the point); nothing
here needs a GPU. Figures from a contended machine are not figures: run it on idle cores.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from backend.api import StudioAPI  # noqa: E402
from backend.jobs.records import JobStatus  # noqa: E402
from backend.jobs.sweep_search import parse_vary, tpe_ask, tpe_tell  # noqa: E402
from backend.jobs.sweeps import SweepStore  # noqa: E402
from backend.models.demo import ensure_demo_model  # noqa: E402


def _spec(steps: int) -> dict:
    """The job both sides run: SFT of the demo model, a few steps (the training itself is not what is measured)."""
    return {
        "method": "sft",
        "model": {"name_or_path": "builtin:tiny-qwen3"},
        "dataset": {"source": "builtin", "name": "chat-demo"},
        "training": {
            "max_steps": steps,
            "batch_size": 2,
            "max_length": 128,
            "learning_rate": 1e-3,
            "save_steps": steps,
        },
        "eval": {"holdout_rows": 8},  # a sweep ranks its children by their verdicts, so each scores held-out rows
    }


def _values(n: int) -> list[str]:
    return [f"{(i + 1) * 1e-4:g}" for i in range(n)]


def _finish_all(api: StudioAPI, job_ids: list[str]) -> float:
    """Wait for every job; the time the last one finished (the workers' own records)."""
    while not all(api.jobs.get_job(j).status.finished for j in job_ids):
        time.sleep(0.25)
    jobs = [api.jobs.get_job(j) for j in job_ids]
    assert all(j.status is JobStatus.succeeded for j in jobs), [j.error for j in jobs]
    return max(j.finished_at or 0.0 for j in jobs)


def plain_run(api: StudioAPI, n: int, steps: int) -> tuple[float, float]:
    """(submit seconds, submit -> last finished seconds) of n plain jobs, one learning rate each."""
    started = time.time()
    ids = []
    for value in _values(n):
        data = _spec(steps)
        data["training"]["learning_rate"] = float(value)
        ids.append(api.jobs.submit(data).job.id)
    submitted = time.time() - started
    return submitted, _finish_all(api, ids) - started


def sweep_run(api: StudioAPI, n: int, steps: int) -> tuple[float, float]:
    """(submit seconds, submit -> last finished seconds) of a sweep of n children over the same learning rates."""
    started = time.time()
    report = api.sweeps.submit(_spec(steps), [f"training.learning_rate={','.join(_values(n))}"]).report
    submitted = time.time() - started
    return submitted, _finish_all(api, [c.child.job_id for c in report.children]) - started


def tick_cost(api: StudioAPI, data_dir: Path, repeats: int = 200) -> float:
    """Seconds of one ``SweepStore.advance`` with no TPE sweep active."""
    sweeps = SweepStore(api.core.store)
    started = time.perf_counter()
    for _ in range(repeats):
        sweeps.advance(data_dir / "sweeps")
    return (time.perf_counter() - started) / repeats


def tpe_cost(folder: Path, trials: int = 10) -> float:
    """Seconds of one Optuna ask + tell on a SQLite study (the first ask, which creates the file, left out)."""
    dims = [parse_vary("training.learning_rate=1e-5..1e-2")]
    number, _ = tpe_ask(folder, "sweep-bench", dims, trials + 1, 0)
    tpe_tell(folder, "sweep-bench", number, 0.5, trials + 1)
    started = time.perf_counter()
    for asked in range(1, trials + 1):
        number, point = tpe_ask(folder, "sweep-bench", dims, trials + 1, asked)
        tpe_tell(folder, "sweep-bench", number, -abs(float(point["training.learning_rate"]) - 1e-3), trials + 1)
    return (time.perf_counter() - started) / trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--children", type=int, default=3)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--record", action="store_true", help="append the overheads to docs/benchmarks.md")
    args = parser.parse_args()
    n = args.children

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        ensure_demo_model(data_dir / "models")
        api = StudioAPI(data_dir, scheduler="thread")
        try:
            plain_run(api, 1, args.steps)  # warm the page cache and the worker's imports
            plain, sweep = [], []
            for i in range(args.repeats):  # alternated, so drift on the machine falls on both sides alike
                plain.append(plain_run(api, n, args.steps))
                sweep.append(sweep_run(api, n, args.steps))
                print(f"run {i + 1}: plain {plain[-1][1]:.2f}s  sweep {sweep[-1][1]:.2f}s ({n} jobs each)", flush=True)
            med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
            print(f"\n{n} children x {args.steps} steps, demo model, median of {args.repeats}, {os.cpu_count()} cores")
            print(
                f"submit      plain {med(plain, 0) / n * 1000:7.1f} ms/job   sweep {med(sweep, 0) / n * 1000:7.1f} "
                f"ms/child   overhead {(med(sweep, 0) - med(plain, 0)) / n * 1000:+.1f} ms/child"
            )
            print(
                f"end to end  plain {med(plain, 1) / n:7.2f} s/job    sweep {med(sweep, 1) / n:7.2f} s/child    "
                f"overhead {(med(sweep, 1) - med(plain, 1)) / n:+.2f} s/child"
            )
            tick = tick_cost(api, data_dir)
            print(f"scheduler   SweepStore.advance, no TPE sweep active: {tick * 1e6:.0f} us a tick")
        finally:
            api.close()
        tpe = tpe_cost(Path(tmp) / "optuna")
        print(f"tpe         Optuna ask + tell on SQLite: {tpe * 1000:.1f} ms a child")
    if args.record:
        from benchmarks.record import record

        what = f"sweep overhead per child ({n} children x {args.steps} steps, demo model, median of {args.repeats})"
        record(
            [
                (
                    what,
                    f"submit {(med(sweep, 0) - med(plain, 0)) / n * 1000:+.1f} ms, end to end "
                    f"{(med(sweep, 1) - med(plain, 1)) / n:+.2f} s against a plain job "
                    f"({med(plain, 1) / n:.2f} s/job); a tick {tick * 1e6:.0f} us; "
                    f"a TPE ask + tell {tpe * 1000:.1f} ms",
                )
            ]
        )


if __name__ == "__main__":
    main()
