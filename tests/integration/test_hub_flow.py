"""The Hub paths end to end against the local fake Hub: a job queued by a signed-in user pushes itself when it
finishes (the token travels only in the worker's environment), a retry from the facade after a failed push, and
the entry point a Hugging Face job runs."""

import os
import subprocess
import sys

import pytest

from backend.api import StudioAPI
from backend.core.spec import parse_spec
from backend.core.users import User
from backend.hub.hf_jobs import encode_spec
from backend.jobs.records import JobStatus
from tests.helpers import ROOT, tiny_spec, wait_for, wait_status
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_FLOW_TOKEN_9f8e7d6c"
FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}


@pytest.fixture()
def hub(monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at import; conftest set it for this process
    with FakeHub(TOKEN, user="tester") as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # workers inherit it; the fake Hub is local
        yield server


def _grep(root, needle: str) -> list[str]:
    hits = []
    for path in root.rglob("*"):
        if path.is_file() and needle.encode() in path.read_bytes():
            hits.append(str(path))
    return hits


@pytest.mark.slow
def test_a_signed_in_users_job_pushes_itself_and_the_token_stays_in_memory(paths, hub):
    api = StudioAPI(paths.root, scheduler="thread", poll_interval=0.1)
    try:
        user = User("tester", token=TOKEN)
        job = api.jobs.submit(tiny_spec(output={"push_to_hub": True, "run_name": "flow"}), user=user).job
        done = wait_status(api.core.store, job.id, FINAL, timeout=240)
        assert done.status is JobStatus.succeeded, done.error
        # The worker pushes right after recording success.
        done = wait_for(
            lambda: (j := api.jobs.get_job(job.id)).artifacts.hub or j.artifacts.hub_error and j, 120, what="the push"
        )
        done = api.jobs.get_job(job.id)
        hub_info = done.artifacts.hub
        assert hub_info and hub_info.repo_id == "tester/flow", done.artifacts.hub_error
        repo = hub.repos["tester/flow"]
        assert repo.private and "adapter_model.safetensors" in repo.files and "README.md" in repo.files
        assert _grep(paths.root, TOKEN) == [], "the token never reaches the store, job files or logs"
        assert api.core.tokens == {}, "the token is dropped once the worker has it"
    finally:
        api.close()


@pytest.mark.slow
def test_a_failed_push_keeps_the_job_and_can_be_retried_from_the_facade(paths, hub, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(output={"push_to_hub": True, "run_name": "retry"}), user=User("tester")).job
    # The submitter had no token (e.g. the app restarted since): the push fails, the job does not.
    scheduler_factory()
    done = wait_status(api.core.store, job.id, FINAL, timeout=240)
    assert done.status is JobStatus.succeeded, "a push problem never fails a trained job"
    done = wait_for(lambda: (j := api.jobs.get_job(job.id)).artifacts.hub_error and j, 120, what="the push")
    assert "token" in done.artifacts.hub_error
    result = api.hub.push_to_hub(job.id, User("tester", token=TOKEN))
    assert result.repo_id == "tester/retry" and api.jobs.get_job(job.id).artifacts.hub.repo_id == "tester/retry"
    assert "adapter_model.safetensors" in hub.repos["tester/retry"].files


@pytest.mark.slow
def test_the_hf_jobs_entry_point_trains_and_pushes_in_a_fresh_data_dir(tmp_path, hub, models_dir):
    spec = parse_spec(tiny_spec(output={"push_to_hub": True, "hub_repo_id": "tester/remote", "private": False}))
    data = tmp_path / "remote-data"
    data.mkdir()
    (data / "models").symlink_to(models_dir, target_is_directory=True)  # the image would build it itself
    env = {
        **os.environ,
        "HF_TOKEN": TOKEN,
        "HF_ENDPOINT": hub.url,
        "STUDIO_DATA_DIR": str(data),
        "PYTHONPATH": str(ROOT),
    }
    env.pop("HF_HUB_OFFLINE", None)
    out = subprocess.run(
        [sys.executable, "-m", "backend.remote_job", "--spec-b64", encode_spec(spec), "--job-id", "remote-1"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    repo = hub.repos["tester/remote"]
    assert not repo.private and "adapter_model.safetensors" in repo.files
    assert TOKEN not in out.stdout + out.stderr

    # Without the token secret it refuses at once, with the reason.
    env.pop("HF_TOKEN")
    out = subprocess.run(
        [sys.executable, "-m", "backend.remote_job", "--spec-b64", encode_spec(spec)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "HF_TOKEN is not set" in out.stderr
