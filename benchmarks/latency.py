"""Does the app stay responsive while a job trains? p50/p95 latency of the Jobs tab's list (``/list_jobs``), idle
and during an SFT job on the demo model, against the app launched as a real process.

Two clients: the request the browser sends every 2 s (an HTTP POST to ``/gradio_api/run/list_jobs`` with the page's
session hash, as Gradio's JS client sends an event that skips the queue), and ``gradio_client``'s ``predict``, whose
own round trip polls in 50 ms sleeps and so adds ~150 ms that no browser sees.

    python benchmarks/latency.py [--calls 200] [--steps 400] [--jobs 200]

``--jobs N`` fills the store with N finished jobs (with metrics rows) first, as on a Space used for a while.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from backend.environments.launcher import free_port  # noqa: E402 - after the path, so it runs from anywhere
from components.jobs.views import TABLE_COLUMNS  # noqa: E402


def _wait_up(url: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("the app exited at start-up")
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the app did not start")


def _browser_call(url: str) -> Callable[[], object]:
    """One Jobs-tab refresh as the page sends it (same session each time, as one open tab)."""
    body = json.dumps({"data": [None], "event_data": None, "fn_index": None, "session_hash": "latencybench1"}).encode()

    def call():
        request = urllib.request.Request(
            url + "gradio_api/run/list_jobs", data=body, headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())["data"]

    return call


def _measure(call: Callable[[], object], calls: int) -> list[float]:
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return times


def _summary(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {
        "calls": len(times),
        "p50_ms": round(statistics.median(ordered), 1),
        "p95_ms": round(ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)], 1),  # nearest rank: a few calls' max
        "max_ms": round(ordered[-1], 1),
    }


def _fill_store(data: Path, jobs: int) -> None:
    """N finished jobs of several owners, each with 50 metric rows, written through the real store."""
    from backend.core.paths import DataPaths
    from backend.core.spec import parse_spec
    from backend.jobs.records import JobStatus
    from backend.jobs.store import JobStore

    store = JobStore(DataPaths(data).ensure().db)
    for i in range(jobs):
        spec = parse_spec(
            {
                "method": "sft",
                "model": {"name_or_path": "builtin:tiny-qwen3"},
                "owner": f"user{i % 7}",
                "output": {"run_name": f"run {i}"},
            }
        )
        job = store.add(spec)
        store.claim_next()
        store.report(
            job.id,
            [(step, time.time(), {"loss": 1.0 / step}) for step in range(1, 51)],
            {"step": 50, "total_steps": 50},
        )
        store.finish(job.id, JobStatus.succeeded if i % 5 else JobStatus.failed)


def launch_app(data: Path) -> tuple[subprocess.Popen, str]:
    """``python app.py`` on ``data`` and a free port, up: (its process, in a session of its own, and its URL)."""
    port = free_port()
    env = {
        **os.environ,
        "STUDIO_DATA_DIR": str(data),
        "GRADIO_SERVER_PORT": str(port),
        "HF_HUB_OFFLINE": "1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "PYTHONPATH": str(ROOT),
    }
    proc = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}/"
    _wait_up(url, proc)
    return proc, url


def job_status(client, job_id: str) -> dict:
    """The job's row of the Jobs table, by column name."""
    rows = client.predict(None, api_name="/list_jobs")[0]["data"]
    return dict(zip(TABLE_COLUMNS, next(r for r in rows if r[0] == job_id)))


def start_training(client, steps: int) -> str:
    """Queue an SFT job of the demo model and return its id once it is really training (a step reported)."""
    spec = {
        "method": "sft",
        "model": {"name_or_path": "builtin:tiny-qwen3"},
        "training": {"max_steps": steps, "batch_size": 4, "max_length": 256, "save_steps": 10 * steps},
    }
    job_id = client.predict(json.dumps(spec), api_name="/submit_spec")
    while not ((row := job_status(client, job_id))["status"] == "running" and row["progress"]):
        time.sleep(0.5)
    return job_id


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--jobs", type=int, default=0, help="finished jobs in the store before measuring")
    args = parser.parse_args()
    from gradio_client import Client

    data = Path(tempfile.mkdtemp(prefix="studio-latency-"))
    _fill_store(data, args.jobs)
    proc, url = launch_app(data)
    try:
        client = Client(url, verbose=False)
        clients = {"browser": _browser_call(url), "gradio_client": lambda: client.predict(None, api_name="/list_jobs")}
        for call in clients.values():
            _measure(call, 10)  # warm up
        idle = {name: _summary(_measure(call, args.calls)) for name, call in clients.items()}
        job_id = start_training(client, args.steps)  # measured only while the job is really training
        training = {name: _summary(_measure(call, args.calls)) for name, call in clients.items()}
        still = job_status(client, job_id)["status"]
        client.predict(job_id, api_name="/cancel_job")
        print(
            json.dumps(
                {
                    "jobs_in_store": args.jobs + 1,
                    "idle": idle,
                    "while_training": training,
                    "job_still_running_at_end": still == "running",
                    "cpu_cores": os.cpu_count(),
                },
                indent=2,
            )
        )
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(30)


if __name__ == "__main__":
    main()
