"""Hugging Face Jobs end to end against the local fake Hub, whose jobs really run here (tests/helpers/hub_jobs.py):
sent through the facade with the smallest flavor that fits, followed from scheduling to completion, its logs read
back, its adapter pushed back by the job itself, listed like a local job; and a second one cancelled, its processes
gone."""

import pytest

from backend.api import StudioAPI
from backend.core.users import User
from backend.jobs.records import JobStatus
from components.jobs.handlers import listing
from components.jobs.views import TABLE_COLUMNS
from tests.helpers import tiny_spec, wait_for
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_JOBS_FLOW_TOKEN_5a4b3c"
TERMINAL = {"COMPLETED", "ERROR", "CANCELED", "DELETED"}


@pytest.fixture()
def hub(monkeypatch, models_dir):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at import; conftest set it for this process
    with FakeHub(TOKEN, user="tester", jobs_models_dir=models_dir) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.delenv("SPACE_ID", raising=False)
        monkeypatch.delenv("STUDIO_JOBS_IMAGE", raising=False)
        yield server


def _spec(run_name: str, max_steps: int) -> dict:
    return tiny_spec(
        output={"push_to_hub": True, "hub_repo_id": f"tester/{run_name}", "run_name": run_name},
        training={"max_steps": max_steps, "save_steps": 1000},
    )


@pytest.mark.slow
def test_a_job_sent_to_hf_jobs_runs_there_pushes_its_adapter_and_is_listed_like_a_local_one(paths, hub):
    api = StudioAPI(paths.root, scheduler="none")
    user = User("tester", token=TOKEN)
    try:
        hf_id = api.hub.send_to_hf_jobs(_spec("remote-flow", 2), user)  # flavor: auto
        record = api.hub.remote_job(hf_id, user)
        assert record.flavor == "t4-small", "the tiny model fits the smallest GPU flavor"
        assert api.jobs.list_jobs(user=user) == [], "nothing was queued locally"
        sent = hub.requests_to("run_job")[0].json
        assert sent["flavor"] == "t4-small" and sent["secrets"] == {"HF_TOKEN": TOKEN}

        stages: list[str] = []

        def finished():
            stage, _, lines = api.hub.remote_job_status(hf_id, user, log_lines=200)
            stages.append(stage)
            return stage in TERMINAL and lines

        lines = wait_for(finished, timeout=300, interval=0.3, what="the remote job to end")
        assert stages[-1] == "COMPLETED", "\n".join(lines[-40:])
        assert "RUNNING" in stages and stages.index("RUNNING") < len(stages) - 1
        assert any("step" in line or "loss" in line for line in lines), "training lines come back as the logs"
        assert any("adapter pushed to" in line for line in lines)
        assert TOKEN not in "\n".join(lines)

        from huggingface_hub import HfApi

        (listed_by_hub,) = HfApi(endpoint=hub.url, token=TOKEN).list_jobs(namespace="tester")
        assert listed_by_hub.id == hf_id and listed_by_hub.status.stage == "COMPLETED"
        repo = hub.repos["tester/remote-flow"]
        assert {"adapter_model.safetensors", "adapter_config.json", "README.md"} <= set(repo.files)

        # The Jobs tab's listing: the remote job with a local job's status, its method and a link to it.
        (listed,) = api.hub.list_remote_jobs(user, refresh=True)
        assert listed.hf_job_id == hf_id and listed.status is JobStatus.succeeded and listed.method == "sft"
        assert api.hub.remote_job_url(listed) == f"{hub.url}/jobs/tester/{hf_id}"
        assert api.hub.list_remote_jobs(User("mallory", token="hf_other")) == []
        row = dict(zip(TABLE_COLUMNS, listing(api, user, None)[1][0]))  # the Jobs tab's table
        assert (row["id"], row["status"], row["method"], row["queue"]) == (
            hf_id,
            "succeeded",
            "sft",
            "HF Jobs · t4-small",
        )
    finally:
        api.close()


@pytest.mark.slow
def test_cancelling_a_remote_job_stops_its_processes_and_says_cancelled(paths, hub):
    api = StudioAPI(paths.root, scheduler="none")
    user = User("tester", token=TOKEN)
    try:
        hf_id = api.hub.send_to_hf_jobs(_spec("remote-cancel", 5000), user, flavor="l4x1")
        fake = hub.jobs.jobs[hf_id]
        # Cancelled once it trains (its loss lines come back), so the stop goes through the training loop.
        wait_for(
            lambda: any("'loss'" in line for line in api.hub.remote_job_status(hf_id, user, log_lines=200)[2]),
            240,
            0.5,
            what="the remote job to train",
        )
        pid = fake.process.pid
        api.hub.cancel_remote_job(hf_id, user)
        stage, sentence, _ = api.hub.remote_job_status(hf_id, user)
        assert stage == "CANCELED" and "Cancelled" in sentence
        wait_for(lambda: not fake.alive(), 60, what=f"the job's process group {pid} to be gone")
        assert "ended cancelled" in "\n".join(fake.log_lines()), "SIGTERM stopped the training loop, not a kill"
        (listed,) = api.hub.list_remote_jobs(user, refresh=True)
        assert listed.status is JobStatus.cancelled
        assert "remote-cancel" not in hub.repos or not hub.repos["tester/remote-cancel"].files
    finally:
        api.close()
