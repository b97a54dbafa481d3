"""The scheduler under faults, with real processes: killed workers and schedulers, a full disk, failing ticks, and
workers that outlive their job's final status."""

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.jobs.failures import describe_exit, disk_full_reason, oom_kill_count
from backend.jobs.launchers import worker_alive
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status
from tests.helpers.faults import fill, tmpfs
from tests.integration.test_lifecycle import FINAL, _kill_group, _start_scheduler_process, _wait_training

# The worker process is the subject here: each starts as production starts it, a fresh interpreter.
pytestmark = pytest.mark.usefixtures("fresh_workers")

LONG = {"training": {"max_steps": 100000, "save_steps": 100000}}
slow = pytest.mark.slow


def _fail_once(monkeypatch, exc: BaseException, method: str = "claim_next"):
    """Make the next ``JobStore.<method>`` call (in any thread) raise ``exc``; later calls work."""
    original = getattr(JobStore, method)
    raised = []

    def flaky(self, *args, **kwargs):
        if not raised:
            raised.append(exc)
            raise exc
        return original(self, *args, **kwargs)

    monkeypatch.setattr(JobStore, method, flaky)
    return raised


# --- how endings are described (no processes) -------------------------------------------------------------------


def test_a_sigkill_is_blamed_on_memory_only_with_evidence(tmp_path):
    assert describe_exit(-signal.SIGKILL, False) == (JobStatus.failed, "the worker was killed (SIGKILL)")
    status, reason = describe_exit(-signal.SIGKILL, False, "the kernel log names process 42")
    assert status is JobStatus.failed and "out-of-memory killer (the kernel log names process 42)" in reason
    v2, v1 = tmp_path / "memory.events", tmp_path / "memory.oom_control"
    v2.write_text("low 0\nhigh 0\nmax 3\noom 2\noom_kill 2\noom_group_kill 0\n")
    v1.write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    assert oom_kill_count([tmp_path / "missing", v2]) == 2 and oom_kill_count([v1]) == 7
    assert oom_kill_count([tmp_path / "missing"]) is None


def test_a_full_disk_is_named_with_the_path_and_what_to_do():
    enospc = OSError(errno.ENOSPC, "No space left on device", "/data/jobs/x/train.log")
    assert disk_full_reason(enospc, "/data") == (
        "the data disk is full (/data/jobs/x/train.log): free space on it, then resume or queue the job again"
    )
    full = sqlite3.OperationalError("database or disk is full")
    assert "the data disk is full (/data)" in disk_full_reason(full, "/data")
    assert disk_full_reason(OSError(errno.EACCES, "Permission denied"), "/data") is None


# --- the loop survives ------------------------------------------------------------------------------------------


@slow
def test_an_exception_in_a_tick_is_survived_and_the_next_job_runs(paths, store, scheduler_factory, monkeypatch):
    _fail_once(monkeypatch, RuntimeError("injected store failure"))
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec()).job
    sched = scheduler_factory()
    started = wait_for(lambda: (j := store.get(job.id)).pid and j, 30, what="the job to start after the failed tick")
    assert started.status is JobStatus.running and worker_alive(started.pid, job.id)
    health = wait_for(lambda: (h := sched.health()).consecutive_failures == 0 and h, 10)
    assert health.ok and health.alive and health.running == 1
    assert health.last_error == "a scheduler tick failed: RuntimeError: injected store failure"
    assert health.last_error_at <= health.last_tick_at


@slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_a_dead_scheduler_thread_says_so_in_its_health(paths, scheduler_factory, monkeypatch):
    _fail_once(monkeypatch, SystemExit(3), method="list")  # not an Exception: nothing may swallow it
    sched = scheduler_factory()
    health = wait_for(lambda: (h := sched.health()).alive is False and h, 10, what="the thread to die")
    assert not health.ok and health.last_error == "the scheduler stopped: SystemExit: 3"
    assert StudioAPI(paths.root, scheduler="none").scheduler_health() is None


@slow
def test_a_full_disk_fails_the_job_being_launched_and_the_queue_recovers_once_space_is_freed(
    paths, store, scheduler_factory
):
    # Where logs and checkpoints go; the store stays writable, as with a nearly full disk.
    jobs_dir = paths.root / "jobs"
    with tmpfs(jobs_dir, "64m"):
        filler = fill(jobs_dir)
        api = StudioAPI(paths.root, scheduler="none")
        doomed = api.jobs.submit(tiny_spec()).job
        sched = scheduler_factory()
        failed = wait_status(store, doomed.id, FINAL, timeout=30)
        assert failed.status is JobStatus.failed
        assert failed.error == (
            f"the data disk is full ({paths.root}): free space on it, then resume or queue the job again"
        )
        health = sched.health()
        assert health.alive and "a scheduler tick failed: the data disk is full" in health.last_error
        filler.unlink()
        after = api.jobs.submit(tiny_spec()).job
        assert wait_status(store, after.id, FINAL).status is JobStatus.succeeded
        assert sched.health().ok


@slow
def test_a_disk_that_fills_up_mid_job_fails_it_within_30_s_while_reads_still_answer(tmp_path, models_dir):
    """The whole data dir (store included) on a small tmpfs, filled while a job trains: the job ends failed with the
    sentence naming the disk well within 30 s, although the store has no free byte (the space reserve pays for that
    write), every read answers within 2 s meanwhile, and once space is freed the next job trains."""
    root = tmp_path / "data"
    with tmpfs(root, "128m"):
        (root / "models").symlink_to(models_dir, target_is_directory=True)
        api = StudioAPI(root, scheduler="thread", poll_interval=0.2)
        try:
            doomed = api.jobs.submit(tiny_spec(**LONG)).job
            wait_for(lambda: api.jobs.metrics(doomed.id), 120, what="the first training step")
            assert (root / ".space-reserve").stat().st_size == 2**20
            filler = fill(root)
            filled_at, slowest = time.monotonic(), 0.0
            while (job := api.jobs.get_job(doomed.id)).status is JobStatus.running:
                assert time.monotonic() - filled_at < 30, "the job still reads running 30 s after the disk filled"
                started = time.monotonic()
                assert [j.id for j in api.jobs.list_jobs()] == [doomed.id] and api.jobs.metrics(doomed.id)
                api.jobs.log_tail(doomed.id)
                slowest = max(slowest, time.monotonic() - started)
                time.sleep(0.2)
            assert slowest < 2, f"a read took {slowest:.1f} s on the full disk"
            assert job.status is JobStatus.failed
            assert job.error.splitlines()[0] == (
                f"the data disk is full ({root}): free space on it, then resume or queue the job again"
            ), job.error
            wait_for(lambda: api.core.scheduler.health().running == 0, 10, what="the slot to be freed")
            filler.unlink()
            after = api.jobs.submit(tiny_spec()).job
            assert (
                wait_for(lambda: api.jobs.get_job(after.id).status.finished and api.jobs.get_job(after.id), 120).status
                is JobStatus.succeeded
            )
            wait_for(lambda: (root / ".space-reserve").exists(), 10, what="the reserve to be written again")
        finally:
            api.close()
            api.core.store.close()


def _kill_group_of(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- workers and schedulers that die or linger --------------------------------------------------------------------


@slow
def test_a_worker_killed_with_sigkill_is_reported_as_a_kill_not_as_out_of_memory(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(**LONG)).job
    sched = scheduler_factory()
    _wait_training(store, job.id)
    os.kill(store.get(job.id).pid, signal.SIGKILL)
    failed = wait_status(store, job.id, FINAL, timeout=30)
    assert failed.status is JobStatus.failed
    assert failed.error.splitlines()[0] == "the worker was killed (SIGKILL)", failed.error
    assert "Last log lines:" in failed.error
    wait_for(lambda: sched.health().running == 0, 5, what="the slot to be freed")


@slow
@pytest.mark.parametrize("finished", ["while adopted", "before the scheduler started"])
def test_a_worker_that_outlives_its_final_status_is_killed_and_frees_its_slot(
    paths, store, scheduler_factory, finished
):
    api = StudioAPI(paths.root, scheduler="none")
    done = api.jobs.submit(tiny_spec()).job
    assert store.claim_next().id == done.id
    # Stands in for a worker hung in interpreter shutdown: it has the worker's argv and ignores SIGTERM.
    lingering = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)",
            "backend.worker",
            "--job-id",
            done.id,
        ],
        start_new_session=True,
    )
    try:
        store.set_pid(done.id, lingering.pid)
        wait_for(lambda: worker_alive(lingering.pid, done.id), 10)
        queued = api.jobs.submit(tiny_spec()).job
        if finished == "before the scheduler started":
            store.finish(done.id, JobStatus.succeeded)
        sched = scheduler_factory(final_grace_s=1.0, max_concurrent=1)
        wait_for(lambda: sched.health().running == 1, 10, what="the worker to be adopted")
        if finished == "while adopted":
            time.sleep(0.5)
            assert store.get(queued.id).status is JobStatus.queued, "the slot is still taken"
            store.finish(done.id, JobStatus.succeeded)
        finished_at = time.monotonic()
        wait_for(lambda: store.get(queued.id).status is JobStatus.running, 1.0 + 6, what="the queued job to start")
        assert time.monotonic() - finished_at >= 1.0, "the worker gets its grace period"
        assert lingering.wait(timeout=5) == -signal.SIGKILL, "SIGTERM was ignored, so SIGKILL followed"
        record = store.get(done.id)
        assert record.status is JobStatus.succeeded and record.error is None, "the worker's own status stands"
    finally:
        _kill_group_of(lingering.pid)
        lingering.wait()


@slow
def test_killed_scheduler_then_lost_worker_leaves_a_resumable_job_and_no_slot_taken(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    app = _start_scheduler_process(paths)
    try:
        job = api.jobs.submit(tiny_spec(training={"max_steps": 30, "save_steps": 2})).job
        wait_for(lambda: any(paths.job_output(job.id).glob("checkpoint-*/trainer_state.json")), 120, what="checkpoint")
        pid = store.get(job.id).pid
        os.kill(pid, signal.SIGSTOP)  # frozen, still alive: nothing below can race the end of training
    finally:
        _kill_group(app)  # kill -9 of the scheduler's process: its worker has its own session and lives on
    assert worker_alive(pid, job.id)
    sched = scheduler_factory()
    wait_for(lambda: sched.health().running == 1, 10, what="the live worker to be adopted")
    os.killpg(pid, signal.SIGKILL)  # then the adopted worker dies too, its exit status unknowable
    lost = wait_status(store, job.id, FINAL, timeout=30)
    assert lost.status is JobStatus.interrupted
    assert lost.error.endswith("resume it to continue from its last checkpoint")
    assert sched.health().running == 0
    api.jobs.resume(job.id)
    resumed = wait_status(store, job.id, FINAL)
    assert resumed.status is JobStatus.succeeded and resumed.artifacts.resumed_from
    wait_for(lambda: sched.health().running == 0, 10, what="the resumed worker's slot to be freed")


@slow
def test_the_worker_process_ends_once_its_job_is_recorded_even_if_shutdown_would_block(paths, store, tmp_path):
    # The quickest real way through the worker: a dataset that does not exist fails it before any model loads. (Not a
    # missing parent job: claim_next itself fails that one, so the worker would start on a job already ended.)
    job = store.add(parse_spec(tiny_spec(dataset={"name": "no-such-dataset"})))
    assert store.claim_next().status is JobStatus.running
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    # A thread nobody stops, as an open websocket's reader can be: a normal exit would wait for it forever.
    (blocker / "sitecustomize.py").write_text(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n"
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "backend.worker", "--job-id", job.id, "--data-dir", str(paths.root)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)])},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        failed = wait_status(store, job.id, FINAL, timeout=120)
        assert failed.status is JobStatus.failed and "no-such-dataset" in failed.error  # the worker's own record
        assert worker.wait(timeout=30) == 1
    finally:
        _kill_group_of(worker.pid)
        worker.wait()
