"""The app launched as a real process on 127.0.0.1, driven through gradio_client."""

import os
import signal
import socket
import subprocess
import sys
import urllib.request

import pytest

from backend.store import JobStatus
from tests.conftest import ROOT, wait_for, wait_status

pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _up(url):
    try:
        return urllib.request.urlopen(url, timeout=2).status == 200
    except OSError:
        return False


@pytest.fixture()
def app_url(data_dir):
    port = _free_port()
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_SERVER_NAME": "127.0.0.1",
           "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_for(lambda: _up(url) or proc.poll() is not None, 90, 0.5, "the app to start")
        assert proc.poll() is None, "the app exited at start-up"
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(20)


def test_app_queues_and_runs_a_job_through_the_api(app_url, store):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    status, table = client.predict("builtin:tiny-qwen3", "chat-demo", 4, 1e-3, "none", api_name="/submit_job")
    assert status.startswith("Queued **")
    job_id = status.split("**")[1]
    assert table["data"][0][0] == job_id
    done = wait_status(store, job_id, {JobStatus.succeeded, JobStatus.failed})
    assert done.status is JobStatus.succeeded, done.error
    rows = client.predict(api_name="/list_jobs")["data"]
    assert rows[0][:2] == [job_id, "succeeded"]


def test_app_shows_spec_errors_instead_of_queueing(app_url, store):
    from gradio_client import Client

    client = Client(app_url, verbose=False)
    status, _ = client.predict("nobody/missing-model", "chat-demo", 4, 1e-3, "none", api_name="/submit_job")
    assert "Not queued" in status and "was not found" in status
    assert store.list() == []
