"""The fake Hub's Jobs API (tests/helpers/hub_server.py routes to it): jobs that really run, as processes here.

``POST /api/jobs/{ns}`` (``run_job``) records the job in ``SCHEDULING`` and, after ``schedule_delay`` seconds,
spawns its command as a subprocess of this machine in a fresh temp dir, in its own process group: the image is
this checkout, so

- ``python`` is this interpreter (``sys.executable``) and the working directory is :attr:`FakeJobs.app_dir`
  (the repository root, standing in for the image's ``APP_DIR``, /home/user/app); ``PYTHONPATH`` is set to it too;
- the environment is the job's ``environment`` plus its ``secrets`` (the HF_TOKEN), with ``HF_ENDPOINT`` pointing
  at this fake Hub, ``STUDIO_DATA_DIR`` in the job's temp dir (the container's /tmp), and the host's PATH, HOME and
  caches; HF_HUB_OFFLINE, HF_TOKEN and STUDIO_DATA_DIR of the host are not passed on;
- ``models_dir``, when given, is linked into the data dir as ``models`` (the image builds the built-in models
  itself; a test lends its session's cache to save the seconds).

``GET /api/jobs/{ns}/{id}`` (``inspect_job``) follows the process: RUNNING while it runs, COMPLETED on exit code 0,
ERROR otherwise (message: the exit code), CANCELED once cancelled. ``GET .../logs`` answers its output so far as
server-sent events (``tail`` honoured) and ends the stream; ``POST .../cancel`` sends SIGTERM to the job's process
group (the one this fake started, by its id) and SIGKILL after ``cancel_grace`` seconds if it is still there.
``GET /api/jobs/{ns}`` (``list_jobs``) lists the namespace's jobs.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

_HOST_ONLY = ("HF_HUB_OFFLINE", "HF_TOKEN", "STUDIO_DATA_DIR", "HF_ENDPOINT", "PYTHONPATH")
TERMINAL = ("COMPLETED", "CANCELED", "ERROR", "DELETED")


def _stamp(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(at % 1 * 1000):03d}Z"


@dataclass
class FakeJob:
    """One job the fake Hub was sent, and the process that runs it (None until it is scheduled)."""

    id: str
    namespace: str
    body: dict[str, Any]
    created_at: float
    workdir: Path
    process: subprocess.Popen | None = None
    started_at: float | None = None
    finished_at: float | None = None
    cancelled: bool = False
    failed_to_start: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "job.log"

    @property
    def stage(self) -> str:
        if self.cancelled:
            return "CANCELED"
        if self.failed_to_start:
            return "ERROR"
        if self.process is None:
            return "SCHEDULING"
        code = self.process.poll()
        if code is None:
            return "RUNNING"
        if self.finished_at is None:
            self.finished_at = time.time()
        return "COMPLETED" if code == 0 else "ERROR"

    @property
    def message(self) -> str | None:
        if self.failed_to_start:
            return self.failed_to_start
        if self.stage == "ERROR" and self.process is not None:
            return f"the job's command exited with code {self.process.returncode}"
        return None

    def log_lines(self) -> list[str]:
        if not self.log_path.exists():
            return []
        return self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()

    def alive(self) -> bool:
        """Whether any process of the job's group is still there."""
        if self.process is None:
            return False
        self.process.poll()
        try:
            os.killpg(self.process.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


class FakeJobs:
    """The jobs of one fake Hub. ``app_dir``: the checkout that stands in for the image (default: this repo)."""

    def __init__(
        self,
        hub_url: str,
        app_dir: Path | None = None,
        models_dir: Path | None = None,
        schedule_delay: float = 0.5,
        cancel_grace: float = 15.0,
    ):
        self.hub_url = hub_url
        self.app_dir = Path(app_dir or Path(__file__).resolve().parents[2])
        self.models_dir = models_dir
        self.schedule_delay = schedule_delay
        self.cancel_grace = cancel_grace
        self.jobs: dict[str, FakeJob] = {}
        self._root = Path(tempfile.mkdtemp(prefix="fake-hub-jobs-"))
        self._lock = threading.Lock()

    # --- the API's operations ------------------------------------------------------------------------------------
    def run(self, namespace: str, body: dict[str, Any]) -> FakeJob:
        """Record a job and schedule its process."""
        job_id = uuid.uuid4().hex[:24]
        workdir = self._root / job_id
        workdir.mkdir()
        job = FakeJob(job_id, namespace, body, time.time(), workdir)
        with self._lock:
            self.jobs[job_id] = job
        threading.Thread(target=self._start_later, args=(job,), name=f"fake-job-{job_id}", daemon=True).start()
        return job

    def info(self, job: FakeJob) -> dict[str, Any]:
        """The JSON ``JobInfo`` parses."""
        body = job.body
        image = {"spaceId": body["spaceId"]} if "spaceId" in body else {"dockerImage": body.get("dockerImage")}
        info: dict[str, Any] = {
            "id": job.id,
            "createdAt": _stamp(job.created_at),
            **image,
            "command": body.get("command"),
            "arguments": body.get("arguments", []),
            "environment": body.get("environment", {}),
            "secrets": {name: "(encrypted)" for name in body.get("secrets", {})},
            "flavor": body.get("flavor"),
            "labels": body.get("labels"),
            "status": {"stage": job.stage, "message": job.message},
            "owner": {"id": "u-" + job.namespace, "name": job.namespace, "type": "user"},
        }
        if job.started_at:
            info["startedAt"] = _stamp(job.started_at)
        if job.finished_at:
            info["finishedAt"] = _stamp(job.finished_at)
        return info

    def log_events(self, job: FakeJob, tail: int | None) -> bytes:
        """The job's output so far as server-sent events, after the Hub's "Job started" line."""
        lines = job.log_lines()
        if tail:
            lines = lines[-tail:]
        at = _stamp(job.started_at or job.created_at)
        events = [f"===== Job started at {at} =====", *lines] if job.started_at else []
        return "".join(f"data: {json.dumps({'data': line, 'timestamp': at})}\n\n" for line in events).encode()

    def cancel(self, job: FakeJob) -> None:
        """CANCELED at once; SIGTERM to the job's process group, SIGKILL after the grace period."""
        with self._lock:  # not between _start_later's check and its spawn
            if job.stage in TERMINAL:
                return
            job.cancelled = True
            if job.process is None:
                return
            self._signal(job, signal.SIGTERM)
        threading.Thread(target=self._kill_after_grace, args=(job,), daemon=True).start()

    def close(self) -> None:
        """Stop every job still running (SIGKILL to the groups this fake started) and remove the temp dirs."""
        for job in list(self.jobs.values()):
            if job.process is not None and job.process.poll() is None:
                self._signal(job, signal.SIGKILL)
                job.process.wait(10)
            if job.process is not None and job.process.stdout:
                job.process.stdout.close()
        shutil.rmtree(self._root, ignore_errors=True)

    # --- the processes ------------------------------------------------------------------------------------------
    def _environment(self, job: FakeJob) -> dict[str, str]:
        data_dir = job.workdir / "data"
        data_dir.mkdir()
        if self.models_dir is not None:
            (data_dir / "models").symlink_to(self.models_dir, target_is_directory=True)
        env = {key: value for key, value in os.environ.items() if key not in _HOST_ONLY}
        env.update({str(k): str(v) for k, v in job.body.get("environment", {}).items()})
        env.update({str(k): str(v) for k, v in job.body.get("secrets", {}).items()})
        env.update(
            {
                "HF_ENDPOINT": self.hub_url,  # the job talks to the Hub it was sent through
                "PYTHONPATH": str(self.app_dir),  # the image's APP_DIR is this checkout
                "STUDIO_DATA_DIR": str(data_dir),  # the container's throwaway disk
            }
        )
        return env

    def _start_later(self, job: FakeJob) -> None:
        time.sleep(self.schedule_delay)
        command = [str(part) for part in job.body.get("command", [])]
        if command and command[0] in ("python", "python3"):
            command[0] = sys.executable
        job.env = self._environment(job)
        try:
            with self._lock, job.log_path.open("wb") as log:
                if job.cancelled:
                    return
                job.process = subprocess.Popen(
                    command,
                    cwd=self.app_dir,
                    env=job.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: cancel reaches what it starts, and only that
                )
                job.started_at = time.time()
        except OSError as exc:
            job.failed_to_start = f"the job's command could not start: {exc}"
            return
        threading.Thread(target=job.process.wait, daemon=True).start()  # reap it as soon as it ends

    def _signal(self, job: FakeJob, sig: signal.Signals) -> None:
        try:
            os.killpg(job.process.pid, sig)  # the group this fake started (start_new_session: pgid == pid)
        except ProcessLookupError:
            pass

    def _kill_after_grace(self, job: FakeJob) -> None:
        deadline = time.monotonic() + self.cancel_grace
        while time.monotonic() < deadline and job.alive():
            time.sleep(0.1)
        if job.alive():
            self._signal(job, signal.SIGKILL)
