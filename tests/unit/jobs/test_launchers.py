"""The launcher seam: workers forked from the pre-imported pool run, stop, die and are recognised as fresh ones are;
the pool is used only where a fork behaves as a fresh interpreter would, and a pool that is gone or asked nonsense
costs nothing but the fork."""

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.jobs.failures import describe_exit
from backend.jobs.launchers import (
    PooledWorker,
    PoolLauncher,
    SubprocessLauncher,
    pool_request,
    worker_alive,
    worker_comm,
)
from backend.jobs.reaping import RunningWorker
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec, wait_for, wait_status

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}
LONG = {"training": {"max_steps": 100000, "save_steps": 100000}}


def _parent_and_name(pid: int) -> tuple[int, str]:
    with open(f"/proc/{pid}/stat") as fh:
        name, rest = fh.read().split(" (", 1)[1].rsplit(")", 1)
    return int(rest.split()[1]), name


def _pooled_launcher(pool_socket) -> PoolLauncher:
    launcher = PoolLauncher(pool_socket)
    launcher.fallback = _Refusing(launcher)
    return launcher


class _Refusing:
    """A fallback that fails the test: these jobs must be forked by the pool."""

    def __init__(self, launcher):
        self.launcher = launcher

    def launch(self, *args, **kwargs):
        raise AssertionError(f"the pool refused a job it should fork: {self.launcher.refusal}")


def test_a_pooled_worker_trains_is_cancelled_and_frees_its_slot_as_a_fresh_one_does(
    paths, store, scheduler_factory, pool_socket
):
    pool_pid = pool_request(pool_socket, {"op": "describe"})["pid"]
    api = StudioAPI(paths.root, scheduler="none")
    long_job = api.jobs.submit(tiny_spec(**LONG)).job
    short_job = api.jobs.submit(tiny_spec()).job
    scheduler_factory(launcher=_pooled_launcher(pool_socket))
    wait_for(lambda: store.get(long_job.id).progress.get("step", 0) >= 1, 120, what="the pooled worker to train")
    pid = store.get(long_job.id).pid
    # The pool's child, in its own session, named for its job: recognised after a restart as a fresh worker is.
    assert _parent_and_name(pid) == (pool_pid, worker_comm(long_job.id))
    assert os.getpgid(pid) == pid
    assert worker_alive(pid, long_job.id) and not worker_alive(pid, short_job.id)
    assert api.jobs.cancel(long_job.id) is JobStatus.running
    done = wait_status(store, long_job.id, FINAL, timeout=60)
    assert done.status is JobStatus.cancelled and done.cancelled_at_step >= 1
    wait_for(lambda: not worker_alive(pid, long_job.id), 30, what="the cancelled worker to exit")
    finished = wait_status(store, short_job.id, FINAL)
    assert finished.status is JobStatus.succeeded, finished.error
    assert finished.artifacts.adapter_dir and os.path.isdir(finished.artifacts.adapter_dir)
    log = paths.job_log(short_job.id).read_text()
    assert f"worker for job {short_job.id} running under {sys.executable}" in log
    assert "worker exiting with 0" in log


def test_a_killed_pooled_worker_ends_its_job_with_the_sentence_a_fresh_one_gets(
    paths, store, scheduler_factory, pool_socket
):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(**LONG)).job
    scheduler_factory(launcher=_pooled_launcher(pool_socket))
    wait_for(lambda: store.get(job.id).progress.get("step", 0) >= 1, 120, what="the pooled worker to train")
    os.killpg(store.get(job.id).pid, signal.SIGKILL)
    done = wait_status(store, job.id, FINAL, timeout=60)
    status, reason = describe_exit(-signal.SIGKILL, False, None)
    assert done.status is status
    assert done.error.startswith(reason.split(";")[0])


def test_the_pool_forks_only_what_a_fresh_interpreter_would_run_the_same(tmp_path):
    launcher = PoolLauncher(tmp_path / "no-pool.sock")
    launcher._pool = {"python": sys.executable, "env": {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "STUDIO_X": "a"}}
    same = {"PATH": "/bin", "HF_HUB_OFFLINE": "1", "PYTHONPATH": "/a"}
    # The project's own settings, the user's token and the temporary folder are read at run time: a fork takes the
    # job's values; a PYTHONPATH that names a folder twice gives the same sys.path.
    runtime = {"STUDIO_X": "b", "HF_TOKEN": "t", "TMPDIR": "/tmp/x", "GRADIO_SERVER_PORT": "1", "PYTHONPATH": "/a:/a"}
    runtime["HF_HUB_DISABLE_TELEMETRY"] = "True"  # what Gradio sets in the app
    runtime.update(KMP_DUPLICATE_LIB_OK="True", KMP_INIT_AT_FORK="FALSE")  # what scikit-learn sets when imported
    runtime["MPLBACKEND"] = "agg"  # what app.py sets for Gradio's matplotlib (no worker imports matplotlib)
    # A Space's own variables: its id and host are read per call, its sign-in settings set again in the child.
    runtime.update(SPACE_ID="alice/studio", SYSTEM="spaces", OAUTH_CLIENT_ID="c", OPENID_PROVIDER_URL="http://h")
    launcher._pool["env"]["PYTHONPATH"] = "/a"
    assert launcher.why_not_pooled("backend.worker", {**same, **runtime}, sys.executable, None) is None
    # What a library read at import time must match the pool's; each refusal is a sentence naming the cause.
    assert "HF_ENDPOINT" in launcher.why_not_pooled(
        "backend.worker", {**same, "HF_ENDPOINT": "http://127.0.0.1:1"}, sys.executable, None
    )
    assert "HF_HUB_OFFLINE" in launcher.why_not_pooled("backend.worker", {"PATH": "/bin"}, sys.executable, None)
    assert "/usr/bin/python3" in launcher.why_not_pooled("backend.worker", same, "/usr/bin/python3", None)
    # Another venv's python is another environment, though both link the same binary.
    other_venv = tmp_path / "venv" / "bin" / "python"
    other_venv.parent.mkdir(parents=True)
    other_venv.symlink_to(os.path.realpath(sys.executable))
    assert str(other_venv) in launcher.why_not_pooled("backend.worker", same, str(other_venv), None)
    assert "cap" in launcher.why_not_pooled("backend.worker", same, sys.executable, 2**30)
    assert "not the worker" in launcher.why_not_pooled("accelerate.commands.launch", same, sys.executable, None)


def test_a_pooled_child_reads_the_hubs_import_time_settings_from_its_jobs_environment(monkeypatch):
    from huggingface_hub import constants

    from backend.worker_pool import _reread_import_time_settings

    for name in ("HF_HUB_DISABLE_TELEMETRY", "OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES"):
        monkeypatch.setattr(constants, name, getattr(constants, name))  # restored afterwards
    monkeypatch.setattr(constants, "OPENID_PROVIDER_URL", None)
    monkeypatch.setenv("DO_NOT_TRACK", "1")
    monkeypatch.setenv("OAUTH_CLIENT_ID", "space-client")
    monkeypatch.setenv("OPENID_PROVIDER_URL", "https://huggingface.co")
    monkeypatch.delenv("OAUTH_SCOPES", raising=False)
    _reread_import_time_settings()
    assert constants.HF_HUB_DISABLE_TELEMETRY is True
    assert (constants.OAUTH_CLIENT_ID, constants.OPENID_PROVIDER_URL) == ("space-client", "https://huggingface.co")
    assert constants.OAUTH_SCOPES is None


class _Recording:
    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)
        return "fresh"


def test_a_pool_that_is_not_there_costs_only_the_fork(tmp_path):
    launcher = PoolLauncher(tmp_path / "no-pool.sock", fallback=_Recording())
    args = ["--job-id", "J", "--data-dir", str(tmp_path)]
    with open(tmp_path / "log", "ab") as log:
        assert launcher.launch("backend.worker", args, log, {"HF_TOKEN": "t"}, sys.executable) == "fresh"
    # The same process a scheduler without a pool would start, and the reason is kept for the log.
    assert launcher.fallback.calls == [("backend.worker", args, log, {"HF_TOKEN": "t"}, sys.executable, None)]
    assert "did not answer" in launcher.refusal
    # A pooled worker whose pool went away is judged by /proc: gone is gone, and its slot is freed.
    proc = subprocess.Popen(["true"])
    proc.wait()
    orphan = PooledWorker(proc.pid, "J", str(tmp_path / "no-pool.sock"))
    assert orphan.wait(5) is None and orphan.ended
    run = RunningWorker("J", proc.pid, 0, PooledWorker(proc.pid, "J", str(tmp_path / "no-pool.sock")), tmp_path / "log")
    assert run.exit_code() == (True, None)


def test_a_bad_request_gets_a_sentence_and_the_pool_serves_the_next(pool_socket):
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(10)
        conn.connect(str(pool_socket))
        conn.sendall(b"\x00not json\n")
        assert b"could not answer" in conn.recv(4096)
    for request, words in [
        ({"op": "poll", "pid": 1}, "not a worker of this pool"),
        ({"op": "reboot"}, "unknown request"),
        ({"op": "fork", "args": ["--data-dir", "x"]}, "could not answer"),
    ]:
        with pytest.raises(Exception, match=words):
            pool_request(pool_socket, request)
    assert pool_request(pool_socket, {"op": "describe"})["python"] == sys.executable


def test_without_a_pool_the_launcher_is_a_fresh_interpreter(monkeypatch, tmp_path):
    from backend.jobs.launchers import PREIMPORT_VAR, WORKER_POOL_VAR, default_launcher

    monkeypatch.delenv(WORKER_POOL_VAR, raising=False)
    monkeypatch.delenv(PREIMPORT_VAR, raising=False)
    assert isinstance(default_launcher(tmp_path), SubprocessLauncher)
    monkeypatch.setenv(WORKER_POOL_VAR, "/tmp/pool.sock")
    assert isinstance(default_launcher(tmp_path), PoolLauncher)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.slow
def test_with_preimported_workers_the_scheduler_runs_its_own_pool_and_stops_it(paths, store, monkeypatch):
    from backend.jobs.launchers import PREIMPORT_VAR, WORKER_POOL_VAR
    from backend.jobs.scheduler import Scheduler

    monkeypatch.delenv(WORKER_POOL_VAR, raising=False)
    monkeypatch.setenv(PREIMPORT_VAR, "1")
    scheduler = Scheduler(paths, poll_interval=0.1).start()
    launcher = scheduler.launcher
    try:
        assert isinstance(launcher, PoolLauncher) and launcher._own is not None
        pool_pid = launcher._own.pid
        wait_for(lambda: os.path.exists(launcher.socket_path), 180, what="the scheduler's pool to be ready")
        job = StudioAPI(paths.root, scheduler="none").jobs.submit(tiny_spec()).job
        scheduler.notify()
        done = wait_status(store, job.id, FINAL)
        assert done.status is JobStatus.succeeded, done.error
        assert f"forked worker {done.pid} for job {job.id}" in (paths.root / "worker-pool.log").read_text()
    finally:
        scheduler.stop()
    # The pool goes with its scheduler, and leaves no socket folder behind.
    wait_for(lambda: _gone(pool_pid), 30, what="the pool to stop")
    assert launcher._own is None and not os.path.exists(os.path.dirname(launcher.socket_path))


@pytest.mark.slow
def test_a_pool_whose_starter_dies_ends_too(tmp_path):
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from backend.jobs.launchers import start_pool; "
            "print(start_pool(sys.argv[1], open(sys.argv[2], 'ab')).pid, flush=True); time.sleep(600)",
            str(tmp_path / "pool.sock"),
            str(tmp_path / "pool.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pool_pid = int(starter.stdout.readline())
        wait_for((tmp_path / "pool.sock").exists, 180, what="the pool to be ready")
    finally:
        starter.kill()
        starter.wait()
    # Orphaned, it stops serving (its memory is freed) rather than waiting for a scheduler that is gone.
    wait_for(lambda: _gone(pool_pid), 30, what="the orphaned pool to end")
    assert not (tmp_path / "pool.sock").exists()


_STARTER = """
import sys, time
from pathlib import Path
from backend.jobs.launchers import start_pool
with open(sys.argv[2], "ab") as log:
    pool = start_pool(Path(sys.argv[1]), log)
print(pool.pid, flush=True)
time.sleep(600)
"""


def _importing_torch(pid: int) -> bool:
    """Whether ``pid`` has mapped torch's library: it is past its start, in the imports."""
    try:
        return "libtorch" in Path(f"/proc/{pid}/maps").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False


@pytest.mark.slow
def test_a_pool_whose_app_is_killed_while_it_imports_ends_too(tmp_path):
    # Issue 48: an app SIGKILLed while its pool imported the training stack left the pool serving, parented to init,
    # for good (610 MB found 80 minutes later). The pool now knows which process started it, whenever it looks.
    from tests.helpers import ROOT

    socket_path = tmp_path / "pool.sock"
    starter = subprocess.Popen(
        [sys.executable, "-c", _STARTER, str(socket_path), str(tmp_path / "pool.log")],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pool_pid = int(starter.stdout.readline())
        wait_for(lambda: _importing_torch(pool_pid), 60, what="the pool to import torch")
        assert not socket_path.exists(), "the pool should still be importing"
    finally:
        starter.kill()  # the app's death: no handler runs, nothing is told
        starter.wait()
    try:
        wait_for(lambda: _gone(pool_pid), 120, what="the orphaned pool to end")
    finally:
        if not _gone(pool_pid):
            os.kill(pool_pid, signal.SIGKILL)
    assert not socket_path.exists()
