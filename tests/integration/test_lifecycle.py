"""Worker lifecycle with real processes: run, cancel, crash, out of memory, restart, resume, ordering (kills and other
faults: test_scheduler_faults.py)."""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from backend.api import StudioAPI
from backend.jobs.launchers import worker_alive
from backend.jobs.records import JobStatus
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status

pytestmark = pytest.mark.slow
# Tests whose subject is the worker process itself (a grace period, a kill, adoption, a memory cap) take
# ``fresh_workers``: each worker starts as production starts it, a fresh interpreter. The others fork theirs from the
# session's pre-imported pool.

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
# Long enough to kill the job between its first checkpoint and its end, short enough for a loaded CI machine.
RESUME_STEPS = 120
LONG = {"training": {"max_steps": 100000, "save_steps": 100000}}


def _wait_training(store, job_id, min_step=1):
    return wait_for(lambda: store.get(job_id).progress.get("step", 0) >= min_step, 120, what=f"{job_id} to train")


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"


def test_cancel_queued_job_never_starts(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec()).job
    assert api.jobs.cancel(job.id) is JobStatus.cancelled
    scheduler_factory()
    time.sleep(1.0)
    got = store.get(job.id)
    assert got.status is JobStatus.cancelled and got.started_at is None and got.pid is None
    assert not paths.job_log(job.id).exists()


def test_cancel_running_job_stops_it_frees_its_process_and_next_job_runs(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    long_job = api.jobs.submit(tiny_spec(**LONG)).job
    next_job = api.jobs.submit(tiny_spec()).job
    scheduler_factory()
    _wait_training(store, long_job.id)
    pid = store.get(long_job.id).pid
    assert api.jobs.cancel(long_job.id) is JobStatus.running
    done = wait_status(store, long_job.id, FINAL, timeout=60)
    # A cancel is not an error: the UI reads "Cancelled at step N" from the step kept with it.
    assert done.status is JobStatus.cancelled and done.error is None
    assert done.cancelled_at_step == done.artifacts.cancelled_at_step == done.progress["step"] >= 1
    wait_for(lambda: _gone(pid), 30, what="the cancelled worker to exit")
    assert done.artifacts.adapter_dir is None
    assert wait_status(store, next_job.id, FINAL).status is JobStatus.succeeded


def test_worker_that_ignores_the_stop_is_killed_after_the_grace_period(paths, store, scheduler_factory, fresh_workers):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(**LONG)).job
    scheduler_factory(cancel_grace_s=1.0)
    # Cancel once the worker handles SIGTERM but is still loading: it cannot reach a training step within 1 s.
    wait_for(lambda: paths.job_log(job.id).exists() and "SFT of" in paths.job_log(job.id).read_text(), 60)
    pid = store.get(job.id).pid
    # A stopped process cannot act on SIGTERM (it stays pending), so the worker truly ignores the stop: on a fast,
    # warm machine a running worker could otherwise reach its own pre-training cancel check within the 1 s grace.
    os.kill(pid, signal.SIGSTOP)
    started = time.monotonic()
    api.jobs.cancel(job.id)
    done = wait_status(store, job.id, FINAL, timeout=30)
    assert done.status is JobStatus.cancelled and done.error is None
    assert "killed after the grace period" in (done.artifacts.cancel_note or ""), done.artifacts
    assert time.monotonic() - started < 10
    wait_for(lambda: _gone(pid), 10, what="killed worker to be gone")


def test_crashing_worker_fails_with_cause_and_log_tail_and_queue_moves_on(
    paths, store, scheduler_factory, demo_model_path, tmp_path
):
    model_copy = tmp_path / "model"
    shutil.copytree(demo_model_path, model_copy)
    api = StudioAPI(paths.root, scheduler="none")
    bad = api.jobs.submit(tiny_spec(model={"name_or_path": str(model_copy)})).job
    good = api.jobs.submit(tiny_spec()).job
    (model_copy / "model.safetensors").unlink()  # breaks after pre-flight: a real exception inside the worker
    scheduler_factory()
    failed = wait_status(store, bad.id, FINAL)
    assert failed.status is JobStatus.failed
    assert "Error" in failed.error.splitlines()[0] and "Last log lines:" in failed.error
    assert "Traceback" in paths.job_log(bad.id).read_text()
    assert wait_status(store, good.id, FINAL).status is JobStatus.succeeded


def _oversized_model(target, demo_model_path, vocab_size=6_000_000):
    """The demo model with a 6M-row embedding (1.5 GB): written from zeros in seconds, too big for the cap below."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoConfig

    target.mkdir()
    config = AutoConfig.from_pretrained(demo_model_path)
    config.vocab_size = vocab_size
    config.save_pretrained(target)
    weights = load_file(demo_model_path / "model.safetensors")
    weights["model.embed_tokens.weight"] = torch.zeros(vocab_size, config.hidden_size)
    save_file(weights, target / "model.safetensors", metadata={"format": "pt"})
    for name in os.listdir(demo_model_path):
        if "token" in name or name.endswith((".jinja", "generation_config.json")):
            shutil.copy(demo_model_path / name, target / name)
    return target


def test_out_of_memory_job_fails_clearly_and_the_next_job_runs(
    paths, store, scheduler_factory, demo_model_path, tmp_path, monkeypatch, fresh_workers
):
    huge = _oversized_model(tmp_path / "huge", demo_model_path)
    monkeypatch.setenv("STUDIO_WORKER_MEMORY_LIMIT_MB", "3500")  # the demo job peaks near 2.6 GB of address space
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(model={"name_or_path": str(huge)})).job
    follower = api.jobs.submit(tiny_spec()).job
    scheduler_factory()
    failed = wait_status(store, job.id, FINAL)
    assert failed.status is JobStatus.failed
    assert failed.error.startswith("Out of memory"), failed.error
    assert wait_status(store, follower.id, FINAL).status is JobStatus.succeeded


def _start_scheduler_process(paths):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, "-m", "backend.jobs.scheduler", "--data-dir", str(paths.root)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def test_app_killed_with_its_worker_restart_marks_interrupted_and_queue_proceeds(
    paths, store, scheduler_factory, fresh_workers
):
    api = StudioAPI(paths.root, scheduler="none")
    app = _start_scheduler_process(paths)
    try:
        running = api.jobs.submit(tiny_spec(**LONG)).job
        queued = api.jobs.submit(tiny_spec()).job
        _wait_training(store, running.id)
        worker_pid = store.get(running.id).pid
        os.kill(worker_pid, signal.SIGKILL)  # the machine goes down: app and worker both die
        _kill_group(app)
    finally:
        _kill_group(app)
    wait_for(lambda: _gone(worker_pid), 10)
    assert store.get(running.id).status is JobStatus.running  # nobody was left to record anything
    con = sqlite3.connect(paths.db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok", "the store survives the crash intact"
    con.close()
    scheduler_factory()  # the app starts again
    interrupted = wait_status(store, running.id, FINAL, timeout=30)
    assert interrupted.status is JobStatus.interrupted and "resume it to continue" in interrupted.error
    assert wait_status(store, queued.id, FINAL).status is JobStatus.succeeded


def test_app_killed_while_worker_lives_restart_adopts_the_worker(paths, store, scheduler_factory, fresh_workers):
    api = StudioAPI(paths.root, scheduler="none")
    app = _start_scheduler_process(paths)
    try:
        job = api.jobs.submit(tiny_spec(training={"max_steps": 150, "save_steps": 1000})).job
        _wait_training(store, job.id)
    finally:
        _kill_group(app)  # the worker has its own session: it keeps training
    pid = store.get(job.id).pid
    assert worker_alive(pid, job.id)
    sched = scheduler_factory()
    wait_for(lambda: job.id in sched._running, 10, what="adoption")
    done = wait_status(store, job.id, FINAL)
    assert done.status is JobStatus.succeeded and done.attempts == 1


def test_resume_continues_from_the_last_checkpoint(paths, store, scheduler_factory, fresh_workers):
    api = StudioAPI(paths.root, scheduler="none")
    app = _start_scheduler_process(paths)
    try:
        job = api.jobs.submit(tiny_spec(training={"max_steps": RESUME_STEPS, "save_steps": 5})).job
        wait_for(lambda: any(paths.job_output(job.id).glob("checkpoint-*/trainer_state.json")), 120, what="checkpoint")
        pid = store.get(job.id).pid
        os.killpg(pid, signal.SIGKILL)
    finally:
        _kill_group(app)
    scheduler_factory()
    assert wait_status(store, job.id, FINAL, timeout=30).status is JobStatus.interrupted
    last_id_before = max((m["id"] for m in api.jobs.metrics(job.id)), default=0)
    api.jobs.resume(job.id)
    done = wait_status(store, job.id, FINAL)
    assert done.status is JobStatus.succeeded and done.attempts == 2
    resumed_from = done.artifacts.resumed_from
    checkpoint_step = int(resumed_from.rsplit("-", 1)[1])
    assert checkpoint_step >= 5 and checkpoint_step % 5 == 0
    metrics = api.jobs.metrics(job.id)
    resumed_steps = [m["step"] for m in metrics if m["id"] > last_id_before and "loss" in m]
    assert resumed_steps == list(range(checkpoint_step + 1, RESUME_STEPS + 1)), (
        "training continues after the checkpoint"
    )
    # Steps between the checkpoint and the kill ran twice; the plot shows each once (the second run's).
    loss_steps = [m["step"] for m in metrics if "loss" in m]
    assert loss_steps == sorted(set(loss_steps)), "each step is stored once"
    assert done.progress["step"] == RESUME_STEPS


def _stop_after_first_checkpoint(paths, store, sched, api, how):
    """Run a 30-step job until its first checkpoint, then end it ``how`` ("cancel": by request; "kill": SIGKILL of
    the worker, which the live scheduler records as failed). The worker is frozen (SIGSTOP) meanwhile, so training
    cannot finish first."""
    job = api.jobs.submit(tiny_spec(training={"max_steps": 30, "save_steps": 2})).job
    wait_for(lambda: any(paths.job_output(job.id).glob("checkpoint-*/trainer_state.json")), 120, what="checkpoint")
    pid = store.get(job.id).pid
    os.killpg(pid, signal.SIGSTOP)
    if how == "kill":
        os.killpg(pid, signal.SIGKILL)
    else:
        api.jobs.cancel(job.id)
        wait_for(lambda: sched._running[job.id].term_sent_at is not None, 10, what="the stop request to be sent")
        os.killpg(pid, signal.SIGCONT)
    return wait_status(store, job.id, FINAL, timeout=60)


@pytest.mark.parametrize("how, status", [("cancel", JobStatus.cancelled), ("kill", JobStatus.failed)])
def test_a_cancelled_or_failed_job_with_a_checkpoint_resumes_and_finishes(
    paths, store, scheduler_factory, how, status, fresh_workers
):
    api = StudioAPI(paths.root, scheduler="none")
    sched = scheduler_factory()
    stopped = _stop_after_first_checkpoint(paths, store, sched, api, how)
    assert stopped.status is status, stopped.error
    if status is JobStatus.cancelled:
        assert stopped.error is None and stopped.cancelled_at_step >= 2
    else:
        assert "killed" in stopped.error
    assert api.jobs.resumable(stopped) and api.jobs.resume_refusal(stopped) is None
    api.jobs.resume(stopped.id)
    done = wait_status(store, stopped.id, FINAL)
    assert done.status is JobStatus.succeeded and done.attempts == 2
    assert done.error is None and done.artifacts.cancelled_at_step is None, "the first attempt's ending is gone"
    assert int(done.artifacts.resumed_from.rsplit("-", 1)[1]) >= 2
    assert done.progress["step"] == 30 and not api.jobs.resumable(done)


def test_simultaneous_submissions_from_two_owners_are_both_stored_and_run_in_order(paths, store, scheduler_factory):
    barrier = threading.Barrier(2)
    results = {}

    def submit(owner):
        api = StudioAPI(paths.root, scheduler="none")
        barrier.wait()
        results[owner] = api.jobs.submit(tiny_spec(), owner=owner).job

    threads = [threading.Thread(target=submit, args=(o,)) for o in ("alice", "bob")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    first, second = sorted(results.values(), key=lambda j: j.seq)
    assert {first.owner, second.owner} == {"alice", "bob"}
    scheduler_factory()
    a = wait_status(store, first.id, FINAL)
    b = wait_status(store, second.id, FINAL)
    assert a.status is b.status is JobStatus.succeeded
    assert a.finished_at <= b.started_at, "one GPU slot: the second job starts after the first ends"


def test_two_app_processes_on_one_data_dir_share_its_queue_and_the_second_takes_over(
    tmp_path, models_dir, fresh_workers
):
    """Issue 20: a second app started on the same data dir (a Space's old and new process overlapping in a
    restart, or two started by hand). One scheduler runs the queue (the data dir's lock); the other waits, says so,
    and takes over when the first goes. Jobs queued through either run once, and both list them."""
    import json

    from backend.core.paths import DataPaths
    from backend.jobs.store import JobStore
    from tests.helpers.apps import data_dir_with_models, launch_app

    root = data_dir_with_models(tmp_path / "data", models_dir)
    store = JobStore(DataPaths(root).db)
    spec = json.dumps(tiny_spec(training={"max_steps": 2, "save_steps": 2}))
    with launch_app(root) as first:
        wait_for(lambda: "Queue: ok" in first.client().predict(api_name="/status"), 60, what="the first to schedule")
        with launch_app(root) as second:
            a, b = first.client(), second.client()
            assert "Queue: waiting for another scheduler" in b.predict(api_name="/status")
            job_b = b.predict(spec, api_name="/submit_spec")  # queued through the second, run by the first
            job_a = a.predict(spec, api_name="/submit_spec")
            for job_id in (job_b, job_a):
                assert (
                    wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed}, 300).status
                    is JobStatus.succeeded
                )
            listed = [c.predict(None, api_name="/list_jobs") for c in (a, b)]
            assert all(job_a in str(view) and job_b in str(view) for view in listed)
            assert store.get(job_b).attempts == 1 and store.get(job_a).attempts == 1  # each ran once
            first.proc.terminate()  # the first goes away; the second takes the queue within a few seconds
            first.proc.wait(30)
            wait_for(lambda: "Queue: ok" in b.predict(api_name="/status"), 30, what="the second to take over")
            job_c = b.predict(spec, api_name="/submit_spec")
            assert wait_status(store, job_c, {JobStatus.succeeded, JobStatus.failed}, 300).status is JobStatus.succeeded
