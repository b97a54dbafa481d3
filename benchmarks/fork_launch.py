"""How long a job waits for its first step: a worker started as a fresh interpreter, against one forked from a parent
that has already imported the training stack, and through the scheduler with its own pool (backend/worker_pool.py).

    python benchmarks/fork_launch.py [--trials N]

CPU only: a parent that has initialised CUDA cannot fork a child that uses it, so a pre-imported pool on a GPU must
import torch without touching CUDA before it forks; that has not been measured here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

SPEC = {
    "method": "sft",
    "model": {"name_or_path": "builtin:tiny-qwen3"},
    "dataset": {"source": "builtin", "name": "chat-demo"},
    "training": {"max_steps": 3, "batch_size": 2, "max_length": 128, "learning_rate": 1e-3, "save_steps": 100},
}


def _queued(api) -> str:
    job = api.jobs.submit(SPEC).job
    assert api.core.store.claim_next().id == job.id
    return job.id


def _first_step(api, job_id: str, started: float, alive) -> float | None:
    """Seconds from ``started`` to the job's first logged training step; None if the worker ended first."""
    while True:
        if any("loss" in m for m in api.core.store.metrics(job_id)):
            return time.monotonic() - started
        if not alive():
            return None
        time.sleep(0.05)


def _fresh(api, data_dir: str) -> float | None:
    job_id = _queued(api)
    started = time.monotonic()
    command = [sys.executable, "-m", "backend.worker", "--job-id", job_id, "--data-dir", data_dir]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seconds = _first_step(api, job_id, started, lambda: proc.poll() is None)
    proc.wait()
    return seconds


def _forked(api, data_dir: str) -> float | None:
    from backend.core.paths import DataPaths
    from backend.worker import run_job

    job_id = _queued(api)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: its own session, quiet, the job, then out without the parent's cleanup
        os.setsid()
        quiet = os.open(os.devnull, os.O_WRONLY)
        os.dup2(quiet, 1)
        os.dup2(quiet, 2)
        os._exit(run_job(job_id, DataPaths(data_dir), threading.Event()) or 0)
    seconds = _first_step(api, job_id, started, lambda: os.waitpid(pid, os.WNOHANG) == (0, 0))
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:  # reaped by the liveness check
        pass
    assert api.jobs.get_job(job_id).status.value == "succeeded", api.jobs.get_job(job_id).error
    return seconds


def _through_the_pool(data_dir: str, trials: int) -> None:
    """Submit -> first step through the real scheduler and its own pool (STUDIO_PREIMPORT_WORKERS=1), once it is
    ready: what production gets with the pool on."""
    from backend.api import StudioAPI
    from backend.jobs.launchers import PoolLauncher
    from backend.jobs.scheduler import Scheduler

    started = time.monotonic()
    launcher = PoolLauncher.own_pool(Path(data_dir) / "worker-pool.log")
    while not os.path.exists(launcher.socket_path):
        time.sleep(0.1)
    print(f"the pool ready after {time.monotonic() - started:.1f} s, once", flush=True)
    api = StudioAPI(data_dir, scheduler="none")
    scheduler = Scheduler(api.core.paths, poll_interval=0.1, launcher=launcher).start()
    try:
        for _ in range(trials):
            submitted = time.monotonic()
            job = api.jobs.submit(SPEC).job
            scheduler.notify()
            seconds = _first_step(api, job.id, submitted, lambda: True)
            print(f"through the scheduler and its pool: first step {seconds:.1f} s after the submit", flush=True)
            assert scheduler.wait_idle(120) and api.jobs.get_job(job.id).status.value == "succeeded"
    finally:
        scheduler.stop()
        api.close()


def main(argv: list[str] | None = None) -> int:
    """Print the launch-to-first-step time of each kind of worker, ``--trials`` times each."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=2)
    args = parser.parse_args(argv)
    from backend.api import StudioAPI

    with tempfile.TemporaryDirectory() as data_dir:
        api = StudioAPI(data_dir, scheduler="none")
        try:
            _fresh(api, data_dir)  # builds the demo model and warms the page cache
            for _ in range(args.trials):
                print(f"fresh interpreter: first step after {_fresh(api, data_dir):.1f} s", flush=True)
            started = time.monotonic()
            import trl  # noqa: F401
            from trl import SFTTrainer  # noqa: F401

            import backend.worker  # noqa: F401

            print(f"the parent's imports: {time.monotonic() - started:.1f} s, once", flush=True)
            for _ in range(args.trials):
                print(f"forked from the pre-imported parent: first step after {_forked(api, data_dir):.1f} s")
        finally:
            api.close()
        _through_the_pool(data_dir, args.trials)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
