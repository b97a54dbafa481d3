"""The app as a real process for tests: locally (the local admin) or as it runs on a Space, with signed sign-ins.

Space mode sets what the Hugging Face platform sets (SPACE_ID, SPACE_AUTHOR_NAME, SPACE_HOST and the OAuth client
settings of ``hf_oauth: true``), so Gradio mounts its real OAuth routes and session middleware. Nobody can sign in
through the Hub here (no network), so a test signs a session cookie itself, exactly as Gradio's middleware checks
it: starlette's SessionMiddleware, an itsdangerous TimestampSigner keyed with sha256(OAUTH_CLIENT_SECRET + "-v4"),
holding the ``oauth_info`` the OAuth callback would have stored. A forged or unsigned cookie is ignored by Gradio,
as it would be on a Space.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from backend.core.paths import DataPaths
from backend.environments.launcher import free_port
from backend.jobs.store import JobStatus, JobStore
from tests.helpers import ROOT, wait_status

SPACE_OWNER = "space-owner"
OAUTH_CLIENT_SECRET = "test-oauth-client-secret"  # what the platform injects; here it only keys the cookie signer
SPACE_ENV = {
    "SYSTEM": "spaces",  # what Gradio reads to know it is on a Space (gradio.utils.get_space)
    "SPACE_ID": f"{SPACE_OWNER}/post-training-studio",
    "SPACE_AUTHOR_NAME": SPACE_OWNER,
    "SPACE_HOST": f"{SPACE_OWNER}-post-training-studio.hf.space",
    "SPACE_REPO_NAME": "post-training-studio",
    "OAUTH_CLIENT_ID": "00000000-0000-0000-0000-000000000000",
    "OAUTH_CLIENT_SECRET": OAUTH_CLIENT_SECRET,
    "OAUTH_SCOPES": "openid profile contribute-repos jobs",
    # Never contacted: sign-ins are signed cookies, and the tests run offline.
    "OPENID_PROVIDER_URL": "http://127.0.0.1:9",
}


def _up(url: str) -> bool:
    try:
        return urllib.request.urlopen(url, timeout=10).status == 200
    except OSError:
        return False


def session_cookie(
    username: str, token: str | None = None, secret: str = OAUTH_CLIENT_SECRET, expires_in: int = 8 * 3600
) -> str:
    """The value of Gradio's ``session`` cookie after ``username`` signed in with Hugging Face."""
    import itsdangerous

    now = int(time.time())
    oauth_info = {
        "access_token": token or f"hf_oauth_{username}",
        "token_type": "bearer",
        "expires_in": expires_in,
        "expires_at": now + expires_in,
        "scope": SPACE_ENV["OAUTH_SCOPES"],
        "userinfo": {
            "sub": hashlib.sha1(username.encode()).hexdigest()[:24],
            "name": username.title(),
            "preferred_username": username,
            "profile": f"https://huggingface.co/{username}",
            "picture": "",
            "website": "",
        },
    }
    payload = base64.b64encode(json.dumps({"oauth_info": oauth_info}).encode("utf-8"))
    signer = itsdangerous.TimestampSigner(hashlib.sha256((secret + "-v4").encode()).hexdigest())
    return signer.sign(payload).decode("utf-8")


@dataclass
class RunningApp:
    url: str
    data_dir: Path
    proc: subprocess.Popen
    log_path: Path
    space: bool

    def client(self, username: str | None = None, token: str | None = None):
        """A gradio_client for ``username`` signed in (Space mode), or a visitor who has not signed in (None)."""
        from gradio_client import Client

        headers = {"Cookie": f"session={session_cookie(username, token)}"} if username else None
        return Client(self.url, verbose=False, headers=headers)

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_path.read_text(errors="replace")[-chars:]

    def serving(self) -> bool:
        return self.proc.poll() is None and _up(self.url)

    def rss_mb(self) -> float:
        """The app process's resident memory now, in MiB (Linux: /proc)."""
        with open(f"/proc/{self.proc.pid}/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmRSS:")) / 1024


def data_dir_with_models(root: Path, models_dir: Path) -> Path:
    """A fresh data dir whose models/ links to the session's built demo model."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    return root


@contextmanager
def launch_app(data_dir: Path, space: bool = False, extra_env: dict[str, str] | None = None) -> Iterator[RunningApp]:
    """``python app.py`` on a free port of 127.0.0.1; stopped (its whole process group) afterwards."""
    port = free_port()
    # As on a Space with persistent storage (/data/studio): the data dir lies outside the working directory and
    # outside the app's temp folder, the two places Gradio serves files from unless told otherwise.
    app_tmp = data_dir.parent / f"app-tmp-{port}"
    app_tmp.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "TMPDIR": str(app_tmp),
        "GRADIO_TEMP_DIR": str(app_tmp / "gradio"),
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_SERVER_NAME": "127.0.0.1",
        "GRADIO_ANALYTICS_ENABLED": "False",
        "HF_HUB_OFFLINE": "1",
        "STUDIO_DATA_DIR": str(data_dir),
        "PYTHONPATH": str(ROOT),
        **(SPACE_ENV if space else {}),
        **(extra_env or {}),
    }
    if not space:
        for name in SPACE_ENV:
            env.pop(name, None)
    log_path = data_dir.parent / f"app-{port}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "app.py"], cwd=ROOT, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT
        )
    app = RunningApp(f"http://127.0.0.1:{port}/", data_dir, proc, log_path, space)
    try:
        deadline, up = time.monotonic() + 90, False
        while proc.poll() is None and time.monotonic() < deadline and not (up := _up(app.url)):
            time.sleep(0.5)
        # Once it answered it is up: asking again could time out on a loaded machine (both pytest processes and the
        # worker pool importing at the session's start) and call a running app dead.
        assert up, f"the app did not start (exit code {proc.poll()}):\n" + app.log_tail()
        yield app
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        stop_leftovers(data_dir)


def stop_leftovers(data_dir: Path) -> list[int]:
    """Kill the workers the app started in sessions of their own and left running (a worker outlives its app by
    design, to be adopted by the next one): every ``backend.worker`` or ``backend.worker_pool`` process whose
    environment names ``data_dir`` as its data dir. A test that fails with a job training must not leave it training
    on the cores the next tests share."""
    marker = f"STUDIO_DATA_DIR={data_dir}".encode()
    killed = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if b"backend.worker" not in (entry / "cmdline").read_bytes():
                continue
            if marker not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            os.kill(int(entry.name), signal.SIGKILL)
            killed.append(int(entry.name))
        except (OSError, ValueError):  # gone meanwhile, or not ours to read
            continue
    return killed


def app_fixture(*, space: bool = False, extra_env: dict[str, str] | None = None, finished_job: dict | None = None):
    """A module fixture: the app launched once for the module's tests (``launch_app``, with ``space`` and
    ``extra_env``) on a fresh data dir whose models/ links to the session's demo model. A test module names it by
    assigning it: ``app = app_fixture()``.

    With ``finished_job`` (a spec dict), the app first runs that job to success through its API, and its id is the
    app's ``job_id``.
    """

    @pytest.fixture(scope="module")
    def fixture(request, tmp_path_factory, models_dir) -> Iterator[RunningApp]:
        module = request.module.__name__.rpartition(".")[2]
        root = data_dir_with_models(tmp_path_factory.mktemp(module) / "data", models_dir)
        with launch_app(root, space=space, extra_env=extra_env) as running:
            if finished_job is not None:
                job_id = running.client().predict(json.dumps(finished_job), api_name="/submit_spec")
                job = wait_status(JobStore(DataPaths(root).db), job_id, {JobStatus.succeeded, JobStatus.failed}, 300)
                assert job.status is JobStatus.succeeded, job.error
                running.job_id = job_id
            yield running

    return fixture
