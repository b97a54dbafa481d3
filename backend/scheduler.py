"""The scheduler: claims queued jobs, runs each in its own worker process, enforces cancels, reconciles on start.

One scheduler owns a data directory at a time (an exclusive flock on ``scheduler.lock``). The app runs one in a
background thread; the CLI starts a detached one (``python -m backend.scheduler --exit-when-idle``) when none runs.
"""

from __future__ import annotations

import argparse
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from backend.failures import describe_exit, looks_like_oom, tail_lines, with_log_tail
from backend.hardware import gpu_count_without_torch
from backend.paths import DataPaths
from backend.store import JobStatus, JobStore

log = logging.getLogger("studio.scheduler")

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def worker_alive(pid: int, job_id: str) -> bool:
    """True while ``pid`` is a live (not zombie) worker for ``job_id``; guards against pid reuse."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().split(b"\0")
        with open(f"/proc/{pid}/stat", "rb") as fh:
            state = fh.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z" and job_id.encode() in cmdline and b"backend.worker" in cmdline


def default_max_concurrent() -> int:
    configured = os.environ.get("STUDIO_MAX_CONCURRENT_JOBS")
    if configured:
        return max(1, int(configured))
    return max(1, gpu_count_without_torch())


@dataclass
class _Running:
    job_id: str
    pid: int
    slot: int
    popen: subprocess.Popen | None  # None for a worker adopted from a previous scheduler
    log_path: Path
    term_sent_at: float | None = None
    log_file: object | None = field(default=None, repr=False)
    gpus: int = 1

    def exit_code(self) -> tuple[bool, int | None]:
        if self.popen is not None:
            code = self.popen.poll()
            return code is not None, code
        return not worker_alive(self.pid, self.job_id), None


class Scheduler:
    def __init__(
        self,
        paths: DataPaths,
        max_concurrent: int | None = None,
        poll_interval: float = 0.5,
        cancel_grace_s: float | None = None,
        exit_when_idle: bool = False,
        secret_env=None,
    ):
        self.paths = paths.ensure()
        self.store = JobStore(paths.db)
        self.max_concurrent = max_concurrent or default_max_concurrent()
        self.poll_interval = poll_interval
        self.cancel_grace_s = (
            cancel_grace_s if cancel_grace_s is not None else float(os.environ.get("STUDIO_CANCEL_GRACE_S", "20"))
        )
        self.exit_when_idle = exit_when_idle
        # job id -> extra environment for its worker (the user's Hub token): held in memory, never stored.
        self.secret_env = secret_env or (lambda job_id: {})
        self._running: dict[str, _Running] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file = None

    # --- ownership of the data directory ------------------------------------------------------------
    def try_acquire(self) -> bool:
        fh = open(self.paths.scheduler_lock, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.close()
            return False
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self._lock_file = fh
        return True

    def release(self) -> None:
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    @staticmethod
    def is_running(paths: DataPaths) -> bool:
        """Whether some process holds the scheduler lock of ``paths``."""
        paths.ensure()
        with open(paths.scheduler_lock, "a+") as fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh, fcntl.LOCK_UN)
        return False

    # --- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> "Scheduler":
        """Run in a background thread (the app's mode); waits for the lock if another scheduler holds it."""
        self._thread = threading.Thread(target=self._serve, name="studio-scheduler", daemon=True)
        self._thread.start()
        return self

    def notify(self) -> None:
        """Wake the loop now (a job was submitted or cancelled)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop scheduling. Running workers keep going: a later scheduler adopts them."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self.try_acquire():
                break
            self._stop.wait(1.0)
        else:
            return
        try:
            self.reconcile()
            while not self._stop.is_set():
                self.tick()
                self._wake.wait(self.poll_interval)
                self._wake.clear()
        finally:
            self.release()

    def run_until_idle(self) -> None:
        """Serve until nothing runs or waits (the CLI's detached mode); must already hold the lock."""
        self.reconcile()
        while True:
            self.tick()
            if not self._running and not self.store.list(statuses=[JobStatus.queued]):
                self.release()
                # A submitter may have seen the lock held just before we let go: look once more after releasing.
                if self.store.list(statuses=[JobStatus.queued]) and self.try_acquire():
                    continue
                return
            time.sleep(self.poll_interval)

    # --- the work ------------------------------------------------------------------------------------
    def reconcile(self) -> None:
        """After a restart: adopt workers still alive, mark jobs whose worker is gone as interrupted."""
        for job in self.store.list(statuses=[JobStatus.running]):
            if job.pid and worker_alive(job.pid, job.id) and len(self._running) < self.max_concurrent:
                log.info("adopting running worker %d for job %s", job.pid, job.id)
                self._running[job.id] = _Running(job.id, job.pid, self._free_slot(), None, self.paths.job_log(job.id),
                                                 gpus=job.spec.training.num_gpus)
                continue
            reason = "the app stopped while this job was running and its worker is gone; resume it to continue"
            checkpoint_note = " from its last checkpoint" if any(self.paths.job_output(job.id).glob("checkpoint-*")) else ""
            if self.store.finish(job.id, JobStatus.interrupted, reason + checkpoint_note):
                log.info("job %s marked interrupted", job.id)

    def tick(self) -> None:
        self._reap_and_enforce_cancels()
        while len(self._running) < self.max_concurrent:
            waiting = self.store.list(statuses=[JobStatus.queued])
            # A multi-GPU job takes the whole machine: it waits for the others to finish, and others wait for it.
            if waiting and self._running and (
                waiting[0].spec.training.num_gpus > 1 or any(r.gpus > 1 for r in self._running.values())
            ):
                break
            job = self.store.claim_next()
            if job is None:
                break
            self._launch(job.id, job.spec.training.num_gpus)

    def _free_slot(self) -> int:
        used = {r.slot for r in self._running.values()}
        return next(i for i in range(self.max_concurrent + 1) if i not in used)

    def _launch(self, job_id: str, gpus: int = 1) -> None:
        slot = self._free_slot()
        log_path = self.paths.job_log(job_id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {"PYTHONUNBUFFERED": "1"}
        if gpus == 1 and gpu_count_without_torch() > 1:
            # One GPU per concurrent job; the slot number is the device index.
            env["CUDA_VISIBLE_DEVICES"] = str(slot)
        env.update(self.secret_env(job_id))
        module, args = worker_command(job_id, self.paths, gpus)
        log_file = open(log_path, "ab")
        try:
            popen = spawn_backend_process(module, args, log_file, extra_env=env, preexec_fn=_memory_limit_preexec())
        except OSError as exc:
            log_file.close()
            self.store.finish(job_id, JobStatus.failed, f"could not start the worker process: {exc}")
            return
        self.store.set_pid(job_id, popen.pid)
        self._running[job_id] = _Running(job_id, popen.pid, slot, popen, log_path, log_file=log_file, gpus=gpus)
        log.info("job %s started in worker %d (slot %d)", job_id, popen.pid, slot)

    def _reap_and_enforce_cancels(self) -> None:
        for job_id, run in list(self._running.items()):
            exited, code = run.exit_code()
            if exited:
                del self._running[job_id]
                if run.log_file is not None:
                    run.log_file.close()
                self._record_exit(run, code)
                continue
            if self.store.cancel_requested(job_id):
                self._stop_worker(run)

    def _stop_worker(self, run: _Running) -> None:
        now = time.monotonic()
        try:
            if run.term_sent_at is None:
                os.killpg(run.pid, signal.SIGTERM)
                run.term_sent_at = now
                log.info("asked job %s to stop", run.job_id)
            elif now - run.term_sent_at > self.cancel_grace_s:
                os.killpg(run.pid, signal.SIGKILL)
                log.warning("job %s did not stop within %.0fs; killed", run.job_id, self.cancel_grace_s)
        except ProcessLookupError:
            pass

    def _record_exit(self, run: _Running, code: int | None) -> None:
        job = self.store.get(run.job_id)
        if job.status is not JobStatus.running:
            return  # the worker recorded its own end
        status, reason = describe_exit(code, job.cancel_requested)
        if status is JobStatus.failed:
            if looks_like_oom("\n".join(tail_lines(run.log_path))):
                reason = "Out of memory: " + reason
            reason = with_log_tail(reason, run.log_path)
        self.store.finish(run.job_id, status, reason)
        log.info("job %s ended %s: %s", run.job_id, status.value, reason.splitlines()[0])

    def wait_idle(self, timeout: float) -> bool:
        """Test helper: block until nothing is queued or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.store.list(statuses=[JobStatus.queued, JobStatus.running]):
                return True
            time.sleep(0.1)
        return False


def _memory_limit_preexec():
    """Cap each worker's address space when STUDIO_WORKER_MEMORY_LIMIT_MB is set, so a runaway job fails alone."""
    limit_mb = os.environ.get("STUDIO_WORKER_MEMORY_LIMIT_MB")
    if not limit_mb:
        return None
    limit = int(limit_mb) * 2**20

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def worker_command(job_id: str, paths: DataPaths, gpus: int = 1) -> tuple[str, list[str]]:
    """(module, args) that run a job: ``backend.worker`` itself, or through ``accelerate launch`` (DDP, one process
    per GPU) when the job asks for several GPUs."""
    args = ["--job-id", job_id, "--data-dir", str(paths.root)]
    if gpus <= 1:
        return "backend.worker", args
    return "accelerate.commands.launch", ["--multi_gpu", "--num_processes", str(gpus), "--num_machines", "1",
                                          "--mixed_precision", "no", "--module", "backend.worker", *args]


def spawn_backend_process(module: str, args: list[str], log_file, extra_env: dict[str, str] | None = None,
                          preexec_fn=None) -> subprocess.Popen:
    """``python -m module args`` from the project root, in its own process session, output appended to log_file."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.update(extra_env or {})
    return subprocess.Popen(
        [sys.executable, "-m", module, *args],  # an argv list, never a shell string
        cwd=PROJECT_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


def spawn_detached(paths: DataPaths) -> subprocess.Popen:
    """Start a scheduler process that outlives the caller and exits once the queue is empty."""
    paths.ensure()
    with open(paths.root / "scheduler.log", "ab") as out:
        return spawn_backend_process(
            "backend.scheduler", ["--data-dir", str(paths.root), "--exit-when-idle"], out
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run the Post-Training Studio job scheduler.")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--exit-when-idle", action="store_true", help="exit once nothing is queued or running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    scheduler = Scheduler(DataPaths(args.data_dir), exit_when_idle=args.exit_when_idle)
    if args.exit_when_idle:
        if not scheduler.try_acquire():
            return 0  # another scheduler already serves this data directory
        scheduler.run_until_idle()
        return 0
    signal.signal(signal.SIGTERM, lambda *_: scheduler.stop(timeout=0))
    scheduler.start()
    while scheduler._thread.is_alive():
        scheduler._thread.join(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
