"""The scheduler: claims queued jobs, runs each in its own worker process, enforces cancels, reconciles on start.

One scheduler owns a data directory at a time (an exclusive flock on ``scheduler.lock``). The app runs one in a
background thread; the CLI starts a detached one (``python -m backend.jobs.scheduler --exit-when-idle``) when none runs.
Its workers, once started, are watched by its ``Reaper`` (``jobs/reaping.py``): reaped, stopped, adopted on start.
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO

from backend.core.paths import DataPaths
from backend.jobs.failures import describe_failure, disk_full_reason, oom_kill_count
from backend.jobs.launchers import Launcher, default_launcher, spawn_backend_process
from backend.jobs.multiprocess import GPU_ONLY_STRATEGIES, LaunchPlan, launch_plan, trl_config_file
from backend.jobs.reaping import Reaper, RunningWorker, free_slot
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store import JobStore
from backend.jobs.sweep_door import ChildDoor
from backend.jobs.sweeps import SweepStore
from backend.platform.hardware import gpu_count_without_torch
from backend.platform.interpreters import APP_PYTHON_VAR, InterpreterError, app_python, trainer_python
from backend.platform.limits import int_setting
from backend.platform.mirror import Mirror
from backend.platform.storage import storage_plan

log = logging.getLogger("studio.scheduler")


def _seconds_from_env(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


@dataclass(frozen=True)
class SchedulerHealth:
    """How the queue's scheduler is doing, for the header (``StudioAPI.scheduler_health``).

    ``ok``: alive and the last tick went through. ``last_error`` is the latest tick failure as one sentence; it stays
    after recovery (with ``last_error_at``, a ``time.time()``) so a flaky disk is visible, while
    ``consecutive_failures`` drops back to 0. ``owns_queue`` is False while another process's scheduler holds the
    data directory (this one waits). ``alive`` is False once the loop has stopped, or died (``last_error`` says why).
    """

    ok: bool
    alive: bool
    owns_queue: bool
    running: int
    consecutive_failures: int
    last_error: str | None
    last_error_at: float | None
    last_tick_at: float | None


def default_max_exports() -> int:
    """How many export jobs run at once beside the training ones: ``STUDIO_MAX_EXPORTS`` (default 2; one per user)."""
    return int_setting("STUDIO_MAX_EXPORTS", 2, low=1, high=64)


def default_max_concurrent() -> int:
    """How many jobs run at once: ``STUDIO_MAX_CONCURRENT_JOBS``, else one per GPU (at least one)."""
    configured = os.environ.get("STUDIO_MAX_CONCURRENT_JOBS")
    if configured:
        return max(1, int(configured))
    return max(1, gpu_count_without_torch())


class Scheduler:
    """Runs queued jobs, each in its own worker process, at most ``max_concurrent`` at once."""

    def __init__(
        self,
        paths: DataPaths,
        max_concurrent: int | None = None,
        poll_interval: float = 0.5,
        cancel_grace_s: float | None = None,
        exit_when_idle: bool = False,
        secret_env=None,
        final_grace_s: float | None = None,
        backoff_cap_s: float = 30.0,
        launcher: Launcher | None = None,
        resume_interrupted: bool | None = None,
        sweep_door: ChildDoor | None = None,
    ):
        self.paths = paths.ensure()
        # What a TPE sweep's next child passes before it is queued: the facade's door, when the app runs this one.
        self.sweep_door = sweep_door
        # How workers start: a fresh interpreter, or a fork of the pre-imported pool (``jobs.launchers``).
        self.launcher = launcher or default_launcher(self.paths.root)
        self.store = JobStore(paths.db)
        self.max_concurrent = max_concurrent or default_max_concurrent()
        self._next_download_sweep = 0.0
        self.max_exports = default_max_exports()  # exports have their own lane: they never wait behind training
        self.poll_interval = poll_interval
        self.backoff_cap_s = backoff_cap_s
        # Freed to record a job's end when the data disk is full (STUDIO_SPACE_RESERVE_MB, 0 for none).
        self.space_reserve_bytes = int_setting("STUDIO_SPACE_RESERVE_MB", 8, low=0, high=1024) * 2**20
        self.exit_when_idle = exit_when_idle
        # job id -> extra environment for its worker (the user's Hub token): held in memory, never stored.
        self.secret_env: Callable[[str], dict[str, str]] = secret_env or (lambda job_id: {})
        # The workers this scheduler launched or adopted; the reaper records their ends and frees their slots.
        self._running: dict[str, RunningWorker] = {}
        self.reaper = Reaper(
            self.store,
            self.paths,
            self._running,
            cancel_grace_s=(
                cancel_grace_s if cancel_grace_s is not None else float(os.environ.get("STUDIO_CANCEL_GRACE_S", "20"))
            ),
            # A worker whose job is final gets this long to exit before it is killed: it may hang in interpreter
            # shutdown (seen with open websockets) and would hold its slot, and the queue, forever.
            final_grace_s=(
                final_grace_s if final_grace_s is not None else _seconds_from_env("STUDIO_FINAL_GRACE_S", 10)
            ),
            # A succeeded job pushes to the Hub after recording its status: that may take a while on a slow link.
            push_grace_s=_seconds_from_env("STUDIO_PUSH_GRACE_S", 1800),
            # After a restart, queue the jobs the restart interrupted again (from their last checkpoint) rather than
            # leaving them for a Resume click: on by default where the storage survives restarts by a durable copy.
            resume_interrupted=(
                resume_interrupted
                if resume_interrupted is not None
                else os.environ.get("STUDIO_RESUME_INTERRUPTED", "").strip() == "1"
            ),
        )
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock_file: IO[str] | None = None
        self._reconciled = False
        # job id -> reason, for jobs that could not be launched and whose failure could not be written yet (full disk)
        self._unrecorded_failures: dict[str, str] = {}
        self._consecutive_failures = 0
        self._last_error: str | None = None
        self._last_error_at: float | None = None
        self._last_tick_at: float | None = None
        self._died = False
        self._idle = False  # run_until_idle's view after the last step
        try:
            log.info("training workers run under %s", trainer_python())
        except InterpreterError as exc:  # said now, in the log and in health(); each job fails with it at launch
            self._refuse_interpreter(None, exc)

    # --- ownership of the data directory ------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the scheduler lock for this data directory (writing our pid in it); False if another holds it."""
        try:
            fh = open(self.paths.scheduler_lock, "a+")
        except OSError as exc:  # a read-only data dir: nothing could be run there anyway; the header says why
            log.warning("cannot take the scheduler lock %s: %s", self.paths.scheduler_lock, exc)
            return False
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
        """Let go of the scheduler lock, so another scheduler may serve this data directory."""
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
    def start(self) -> Scheduler:
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
        self.launcher.close()

    def health(self) -> SchedulerHealth:
        """A snapshot for the UI: whether the loop is alive and ticking, and its latest error."""
        alive = self._thread.is_alive() if self._thread is not None else self._lock_file is not None and not self._died
        return SchedulerHealth(
            ok=alive and self._consecutive_failures == 0,
            alive=alive,
            owns_queue=self._lock_file is not None,
            running=len(self._running),
            consecutive_failures=self._consecutive_failures,
            last_error=self._last_error,
            last_error_at=self._last_error_at,
            last_tick_at=self._last_tick_at,
        )

    def _serve(self) -> None:
        while not self._stop.is_set():
            if self.try_acquire():
                break
            self._stop.wait(1.0)
        else:
            return
        try:
            while not self._stop.is_set():
                if self._step():
                    self._wake.wait(self.poll_interval)
                    self._wake.clear()
                else:
                    self._stop.wait(self._backoff_delay())
        except BaseException as exc:  # not an Exception (SystemExit, KeyboardInterrupt...): the thread ends here
            self._died = True
            self._note_failure(exc, "the scheduler stopped")
            raise
        finally:
            self.release()

    def run_until_idle(self) -> None:
        """Serve until nothing runs or waits (the CLI's detached mode); must already hold the lock."""
        while True:
            if not self._step(lambda: not self._running and not self.store.list(statuses=[JobStatus.queued])):
                time.sleep(self._backoff_delay())
                continue
            if self._idle:
                self.release()
                # A submitter may have seen the lock held just before we let go: look once more after releasing.
                if self.store.list(statuses=[JobStatus.queued]) and self.try_acquire():
                    continue
                return
            time.sleep(self.poll_interval)

    def _step(self, then=None) -> bool:
        """Reconcile (until that has worked once), tick, then ``then()`` into ``self._idle``; False when any raised.

        Nothing a tick meets may end the loop: it is logged, shown by ``health()``, retried after a growing delay.
        """
        try:
            if not self._reconciled:
                self.reaper.reconcile(self.max_concurrent)
                self._reconciled = True
            self.tick()
            self._idle = then() if then is not None else False
        except Exception as exc:  # noqa: BLE001 - see the docstring
            self._note_failure(exc)
            return False
        self._consecutive_failures = 0
        self._last_tick_at = time.time()
        return True

    def _note_failure(self, exc: BaseException, what: str = "a scheduler tick failed") -> None:
        self._consecutive_failures += 1
        self._last_error = f"{what}: {disk_full_reason(exc, self.paths.root) or describe_failure(exc)}"
        self._last_error_at = time.time()
        log.error(
            "%s (%d in a row); retrying in %.1fs",
            self._last_error,
            self._consecutive_failures,
            self._backoff_delay(),
            exc_info=exc,
        )

    def _backoff_delay(self) -> float:
        return min(self.backoff_cap_s, self.poll_interval * 2**self._consecutive_failures)

    # --- the work ------------------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass: record failures, reap finished workers, enforce cancels, and launch queued jobs into free slots."""
        self.paths.keep_space_reserve(self.space_reserve_bytes)  # one stat while it is there
        self._record_unrecorded_failures()
        self.reaper.reap()
        self._advance_sweeps()
        if time.monotonic() >= self._next_download_sweep:  # downloads a day old go (hourly; DataPaths)
            self._next_download_sweep = time.monotonic() + 3600
            self.paths.sweep_downloads()
        training = {k: r for k, r in self._running.items() if not r.export}
        while len(training) < self.max_concurrent:
            waiting = [job for job in self.store.list(statuses=[JobStatus.queued]) if job.spec.export is None]
            # A job of several processes (GPUs, or CPU cores) takes the whole machine: it waits for the others
            # to finish, and others wait for it.
            if (
                waiting
                and training
                and (waiting[0].spec.training.num_processes > 1 or any(r.gpus > 1 for r in training.values()))
            ):
                break
            if not self._claim_and_launch(exports=False):
                break
            training = {k: r for k, r in self._running.items() if not r.export}
        while sum(r.export for r in self._running.values()) < self.max_exports:
            if not self._claim_and_launch(exports=True):
                break

    def _claim_and_launch(self, exports: bool) -> bool:
        """Claim the next queued job of one lane and start its worker; False when none waits."""
        job = self.store.claim_next(exports=exports)
        if job is None:
            return False
        try:
            self._launch(job)
        except InterpreterError as exc:  # a setting, not a fault of this tick: the job fails, the queue moves on
            self._refuse_interpreter(job.id, exc)
        except Exception as exc:
            self._fail_unlaunched(job.id, exc)
            raise  # and the loop counts it, so health() shows it
        return True

    def _advance_sweeps(self) -> None:
        """Let TPE sweeps queue their next child (backend/jobs/sweeps.py); a sweep that cannot is logged, and never
        stops the queue."""
        try:
            SweepStore(self.store).advance(self.paths.root / "sweeps", self.sweep_door)
        except Exception as exc:  # noqa: BLE001 - a sweep's fault is not the queue's
            log.warning("a sweep could not queue its next child: %s", describe_failure(exc))

    def _launch(self, job: JobRecord) -> None:
        processes = job.spec.training.num_processes
        export = job.spec.export is not None
        slot = -1 if export else free_slot(self._running)
        log_path = self.paths.job_log(job.id)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {"PYTHONUNBUFFERED": "1"}
        gpus_here = gpu_count_without_torch()
        if processes == 1 and gpus_here > 1:
            # One GPU per concurrent job; the slot number is the device index.
            env["CUDA_VISIBLE_DEVICES"] = str(slot)
        if export:  # an export merges and checks on the CPU: a training job's GPU memory is never at stake
            env["CUDA_VISIBLE_DEVICES"] = ""
        env.update(self.secret_env(job.id))
        python = trainer_python()
        # The worker may run in the trainer's environment; built-in environment servers need this (the app's) one.
        env[APP_PYTHON_VAR] = app_python()
        plan = job_launch_plan(job, self.paths, gpus_here > 0, python)
        env.update(plan.env)
        module, args = plan.module, plan.args
        log_file = open(log_path, "ab", buffering=0)  # unbuffered: a failed write must not fail again at close
        popen = None
        try:
            # Marks where each attempt starts (a resumed job appends here), and finds a full disk before a worker runs.
            log_file.write(f"--- attempt {job.attempts} started {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n".encode())
            oom_kills = oom_kill_count()
            popen = self.launcher.launch(module, args, log_file, env, python, memory_limit_bytes())
            self.store.set_pid(job.id, popen.pid)
        except BaseException:
            if popen is not None:  # started, but nobody would know its pid: it must not train unseen
                _kill_group(popen.pid)
                popen.wait()
            log_file.close()
            raise
        self._running[job.id] = RunningWorker(
            job.id,
            popen.pid,
            slot,
            popen,
            log_path,
            log_file=log_file,
            gpus=processes,
            launched_monotonic=time.monotonic(),
            oom_kills_at_launch=oom_kills,
            export=export,
        )
        log.info("job %s started in worker %d (slot %d)", job.id, popen.pid, slot)

    def _fail_unlaunched(self, job_id: str, exc: BaseException) -> None:
        """A claimed job whose worker could not start ends failed with the cause (retried if even that write fails)."""
        reason = (
            disk_full_reason(exc, self.paths.root) or f"could not start the worker process ({describe_failure(exc)})"
        )
        self._unrecorded_failures[job_id] = reason
        self._record_unrecorded_failures()

    def _refuse_interpreter(self, job_id: str | None, exc: InterpreterError) -> None:
        """A misconfigured interpreter: the sentence goes to the log and health(); the job (if any) fails with it."""
        log.error("%s", exc)
        self._last_error, self._last_error_at = str(exc), time.time()
        if job_id is not None:
            self._unrecorded_failures[job_id] = str(exc)
            self._record_unrecorded_failures()

    def _record_unrecorded_failures(self) -> None:
        for job_id, reason in list(self._unrecorded_failures.items()):
            try:
                self.reaper.finish(job_id, JobStatus.failed, reason)
            except Exception:  # noqa: BLE001 - kept, and tried again next tick
                log.warning("could not record job %s as failed yet; will retry", job_id, exc_info=True)
                continue
            del self._unrecorded_failures[job_id]
            log.info("job %s failed: %s", job_id, reason)

    def wait_idle(self, timeout: float) -> bool:
        """Test helper: block until nothing is queued or running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.store.list(statuses=[JobStatus.queued, JobStatus.running]):
                return True
            time.sleep(0.1)
        return False


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def memory_limit_bytes() -> int | None:
    """Each worker's address-space cap from STUDIO_WORKER_MEMORY_LIMIT_MB, so a runaway job fails alone; else None."""
    limit_mb = os.environ.get("STUDIO_WORKER_MEMORY_LIMIT_MB")
    return int(limit_mb) * 2**20 if limit_mb else None


def worker_command(job_id: str, paths: DataPaths, gpus: int = 1) -> tuple[str, list[str]]:
    """(module, args) that run a job on ``gpus`` GPUs with DDP (``multiprocess.launch_plan`` has every case)."""
    plan = launch_plan(job_id, paths, gpus)
    return plan.module, plan.args


def job_launch_plan(job: JobRecord, paths: DataPaths, on_gpu: bool, python: str) -> LaunchPlan:
    """What starts ``job``: the worker, or ``accelerate launch`` of ``training.num_processes`` ranks with
    ``training.distributed`` (GPUs where the machine has them, else CPU processes over gloo)."""
    t = job.spec.training
    strategy = t.distributed if on_gpu else "ddp"  # pre-flight refuses FSDP2 / ZeRO without a GPU
    config = trl_config_file(strategy, python) if t.num_processes > 1 and strategy in GPU_ONLY_STRATEGIES else None
    return launch_plan(job.id, paths, t.num_processes, strategy, on_gpu, config_file=config)


def spawn_detached(paths: DataPaths) -> subprocess.Popen:
    """Start a scheduler process that outlives the caller and exits once the queue is empty."""
    paths.ensure()
    with open(paths.root / "scheduler.log", "ab") as out:
        return spawn_backend_process("backend.jobs.scheduler", ["--data-dir", str(paths.root), "--exit-when-idle"], out)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.jobs.scheduler``: serve the queue until stopped, or with ``--exit-when-idle`` until empty."""
    parser = argparse.ArgumentParser(description="Run the Post-Training Studio job scheduler.")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--exit-when-idle", action="store_true", help="exit once nothing is queued or running")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    plan = storage_plan()
    paths = DataPaths(args.data_dir if args.data_dir is not None else plan.live)
    durable = plan.durable if plan.mode == "network" and paths.root == plan.live else None
    scheduler = Scheduler(
        paths, exit_when_idle=args.exit_when_idle, resume_interrupted=True if durable is not None else None
    )
    mirror = None
    try:
        if args.exit_when_idle:
            if not scheduler.try_acquire():
                return 0  # another scheduler already serves this data directory
            if durable is not None:  # whoever serves the queue keeps the durable copy (backend/platform/mirror.py)
                mirror = Mirror(plan.live, durable).start()
            scheduler.run_until_idle()
            return 0
        if durable is not None:
            mirror = Mirror(plan.live, durable, owns=lambda: scheduler.health().owns_queue).start()
        signal.signal(signal.SIGTERM, lambda *_: scheduler.stop(timeout=0))
        thread = scheduler.start()._thread
        while thread is not None and thread.is_alive():
            thread.join(0.5)
        return 1 if scheduler._died else 0
    finally:
        if mirror is not None:  # a last cycle where this process served the queue (exit-when-idle: it did)
            mirror.stop(last_cycle=True if args.exit_when_idle else None)


if __name__ == "__main__":
    sys.exit(main())
