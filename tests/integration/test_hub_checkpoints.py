"""Checkpoints on the Hub end to end against the local fake Hub, with real workers and the real Hub client: a job
pushes each checkpoint to a private repo's last-checkpoint/ as it trains, a failed push is recorded and the job
still succeeds, and a job on a fresh data dir (another machine) resumes from the step that was pushed."""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.api import StudioAPI
from backend.core.artifacts import JobArtifacts
from backend.core.paths import DataPaths
from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.hub.checkpoints import hub_token_warnings, repo_creation_failed
from backend.jobs.records import JobStatus
from tests.helpers import tiny_spec, wait_status
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_CKPT_TOKEN_5a4b3c2d"
FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled}
CHECKPOINT_FILES = ("adapter_model.safetensors", "trainer_state.json", "optimizer.pt")


@pytest.fixture(scope="module")
def hub():
    from huggingface_hub import constants

    with pytest.MonkeyPatch.context() as patch, FakeHub(TOKEN, user="tester") as server:
        patch.setattr(constants, "HF_HUB_OFFLINE", False)  # read at import; conftest set it for this process
        patch.setenv("HF_ENDPOINT", server.url)
        patch.delenv("HF_HUB_OFFLINE", raising=False)  # workers inherit it; the fake Hub is local
        patch.delenv("HF_TOKEN", raising=False)  # the token travels from the signed-in user only
        yield server


def _machine(tmp_path_factory, models_dir) -> Path:
    """A fresh data dir, as on another machine (the demo model built once for the session)."""
    root = tmp_path_factory.mktemp("machine")
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    return root


def _train(root: Path, spec: dict, token: str | None = TOKEN):
    """Submit ``spec`` as a signed-in tester on the data dir ``root``; the job at its end, its metrics, the
    pre-flight warnings and the tokens the app still holds."""
    api = StudioAPI(root, scheduler="thread", poll_interval=0.1)
    try:
        submitted = api.jobs.submit(spec, user=User("tester", token=token))
        done = wait_status(api.core.store, submitted.job.id, FINAL, timeout=240)
        return done, api.jobs.metrics(done.id), submitted.warnings, api.core.tokens
    finally:
        api.close()


@pytest.fixture(scope="module")
def pushed(hub, tmp_path_factory, models_dir):
    """A job that pushed its checkpoints (4 steps, one every 2), trained once for the tests that read it: its data
    dir and what ``_train`` returns."""
    root = _machine(tmp_path_factory, models_dir)
    return root, *_train(root, tiny_spec(output={"push_checkpoints": True, "run_name": "ckpt"}))


def _pushed_step(repo) -> int:
    return json.loads(repo.files["last-checkpoint/trainer_state.json"])["global_step"]


def _files_holding(root, needle: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and needle.encode() in p.read_bytes()]


@pytest.mark.slow
def test_a_job_pushes_each_checkpoint_to_a_private_repo_as_it_trains(hub, pushed):
    root, done, _, warnings, tokens = pushed
    assert done.status is JobStatus.succeeded, done.error
    assert not warnings and tokens == {}, "the user's token went to the worker, and from memory once it had it"

    repo = hub.repos["tester/ckpt"]  # the adapter push's default name, under the token's account
    assert repo.private
    assert all(f"last-checkpoint/{name}" in repo.files for name in CHECKPOINT_FILES), sorted(repo.files)
    summaries = [commit.summary for commit in repo.commits]
    assert "Training in progress, step 2, checkpoint" in summaries, "the step-2 checkpoint went up while training ran"
    assert not any(s in ("End of training", "Model save") for s in summaries), "no Transformers push at the end"
    recorded = done.artifacts.hub_checkpoint
    assert recorded.repo_id == "tester/ckpt" and recorded.step == _pushed_step(repo) and recorded.private
    assert done.artifacts.hub_checkpoint_error is None and done.artifacts.hub is None
    assert _files_holding(root, TOKEN) == [], "the token is never written to the job's files (nor pushed)"
    assert not any(TOKEN.encode() in content for content in repo.files.values())


@pytest.mark.slow
def test_a_failed_checkpoint_push_is_recorded_and_the_job_still_succeeds(hub, tmp_path_factory, models_dir):
    root = _machine(tmp_path_factory, models_dir)
    hub.fail(403, on="commit")  # e.g. a read-only token (a 5xx is retried by the client for half a minute first)
    try:
        done, _, _, _ = _train(root, tiny_spec(output={"push_checkpoints": True, "run_name": "down"}))
    finally:
        hub.clear_failures()
    assert done.status is JobStatus.succeeded, done.error
    assert hub.repos["tester/down"].commits == []
    error = done.artifacts.hub_checkpoint_error  # the last failure's: step 2's, or step 4's when it was tried too
    assert re.match(r"the checkpoint of step [24] could not be pushed to tester/down: the token cannot write", error)
    assert error.endswith("the job goes on without it") and done.artifacts.hub_checkpoint.step is None
    assert "checkpoint push failed: the checkpoint of step 2" in DataPaths(root).job_log(done.id).read_text()
    assert done.artifacts.global_step == 4 and done.artifacts.adapter_dir


@pytest.mark.slow
def test_a_repo_the_hub_will_not_create_is_recorded_and_the_job_trains_without_pushing(
    hub, tmp_path_factory, models_dir
):
    root = _machine(tmp_path_factory, models_dir)
    spec = tiny_spec(output={"push_checkpoints": True, "hub_repo_id": "someone-else/theirs"})
    done, _, _, _ = _train(root, spec)
    assert done.status is JobStatus.succeeded, done.error
    assert "someone-else/theirs" not in hub.repos and done.artifacts.hub_checkpoint is None
    error = done.artifacts.hub_checkpoint_error
    assert error.startswith("checkpoints could not be pushed to someone-else/theirs: the token cannot write"), error
    assert done.artifacts.global_step == 4 and done.artifacts.adapter_dir


@pytest.mark.slow
def test_a_job_on_a_fresh_data_dir_resumes_from_the_pushed_checkpoint(hub, pushed, tmp_path_factory, models_dir):
    step = _pushed_step(hub.repos["tester/ckpt"])
    elsewhere = _machine(tmp_path_factory, models_dir)
    spec = tiny_spec(training={"max_steps": step + 2, "resume_from_hub": "tester/ckpt"}, output={"run_name": "more"})
    done, metrics, _, _ = _train(elsewhere, spec)
    assert done.status is JobStatus.succeeded, done.error
    resumed = done.artifacts.resumed_from_hub
    assert resumed.repo_id == "tester/ckpt" and resumed.step == step
    assert done.artifacts.resumed_from.endswith(f"checkpoint-{step}") and done.artifacts.global_step == step + 2
    steps = sorted({row["step"] for row in metrics if "loss" in row})
    assert steps == list(range(step + 1, step + 3)), "training went on after the pushed step, not from the start"


# --- the parts on their own (fast) ----------------------------------------------------------------------------------


def test_push_checkpoints_asks_transformers_for_checkpoint_pushes_without_the_token():
    from backend.methods.common import base_training_kwargs

    output = Path("/data/jobs/job-1/output")
    kwargs = base_training_kwargs(
        parse_spec(tiny_spec(output={"push_checkpoints": True, "run_name": "My run"})), output
    )
    assert {k: kwargs[k] for k in ("push_to_hub", "hub_model_id", "hub_strategy", "hub_private_repo")} == {
        "push_to_hub": True,
        "hub_model_id": "My-run",  # the adapter push's default name; the Hub puts it under the token's account
        "hub_strategy": "checkpoint",
        "hub_private_repo": True,
    }
    assert "hub_token" not in kwargs, "Transformers pickles its arguments into every checkpoint"
    named = parse_spec(tiny_spec(output={"push_checkpoints": True, "hub_repo_id": "org/x", "private": False}))
    assert base_training_kwargs(named, output)["hub_model_id"] == "org/x"
    assert not base_training_kwargs(named, output)["hub_private_repo"]
    assert base_training_kwargs(parse_spec(tiny_spec()), output).get("push_to_hub") is None
    assert base_training_kwargs(parse_spec(tiny_spec(output={"push_checkpoints": True})), output)["hub_model_id"] == (
        "sft-job-1"
    )


def test_resume_from_hub_takes_a_repo_id():
    assert parse_spec(tiny_spec(training={"resume_from_hub": " you/run "})).training.resume_from_hub == "you/run"
    assert parse_spec(tiny_spec(training={"resume_from_hub": ""})).training.resume_from_hub is None
    with pytest.raises(SpecError) as refused:
        parse_spec(tiny_spec(training={"resume_from_hub": "https://hf.co/you/run"}))
    assert refused.value.problems[0].startswith(
        "training.resume_from_hub: must be the Hub repo id the checkpoints were pushed to: owner/name"
    )


def test_preflight_refuses_the_hub_offline_and_warns_without_a_token(paths, monkeypatch):
    api = StudioAPI(paths.root, scheduler="none")
    pushing = tiny_spec(output={"push_checkpoints": True})
    resuming = tiny_spec(training={"resume_from_hub": "you/run"})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as conftest has it (this file's Hub fixture unsets it meanwhile)
    for spec, field in ((pushing, "output.push_checkpoints"), (resuming, "training.resume_from_hub")):
        with pytest.raises(SpecError) as refused:
            api.jobs.check(spec, user=User("local", token=TOKEN))
        assert refused.value.problems == [p for p in refused.value.problems if p.startswith(field)]
        assert "HF_HUB_OFFLINE is set" in refused.value.problems[0]

    monkeypatch.delenv("HF_HUB_OFFLINE")
    warnings, _ = api.jobs.check(pushing, user=User("local", token=None))
    assert any(w.startswith("output.push_checkpoints: there is no Hugging Face token") for w in warnings), warnings
    assert not any("token" in w for w in api.jobs.check(pushing, user=User("local", token=TOKEN))[0])
    assert hub_token_warnings(parse_spec(resuming), None)[0].startswith(
        "training.resume_from_hub: there is no Hugging Face token, so you/run can only be read if it is public"
    )


def test_a_failure_in_transformers_repo_creation_is_told_apart():
    def init_hf_repo():
        raise OSError("403")

    try:
        init_hf_repo()
    except OSError as exc:
        assert repo_creation_failed(exc)
    assert not repo_creation_failed(OSError("elsewhere"))


def test_the_job_view_says_where_the_checkpoints_are():
    from components.jobs.views import hub_checkpoint_lines

    artifacts = JobArtifacts(
        hub_checkpoint={"repo_id": "you/run", "step": 40, "url": "https://hf.co/you/run/tree/main/last-checkpoint"},
        hub_checkpoint_error="the checkpoint of step 50 could not be pushed to you/run: <b>",
        resumed_from_hub={"repo_id": "you/run", "step": 20},
    )
    assert hub_checkpoint_lines(SimpleNamespace(artifacts=artifacts)) == [
        "Resumed from the checkpoint of step 20 pushed to you/run",
        "Checkpoints on the Hub: [you/run/last-checkpoint](https://hf.co/you/run/tree/main/last-checkpoint), last "
        "pushed at step 40",
        "**Checkpoint push failed:** the checkpoint of step 50 could not be pushed to you/run: &lt;b&gt;",
    ]


def test_the_train_form_ticks_checkpoint_pushes_next_to_push_to_hub():
    from components.train.form import form_to_spec, spec_to_form
    from components.train.layout import SETTINGS_ROWS

    spec = parse_spec(form_to_spec({"push_checkpoints": True}))
    assert spec.output.push_checkpoints and not parse_spec(form_to_spec({})).output.push_checkpoints
    assert spec_to_form(spec)["push_checkpoints"] is True  # a cloned job keeps it
    row = next(row for row in SETTINGS_ROWS if "push_to_hub" in row)
    assert row[row.index("push_to_hub") + 1] == "push_checkpoints"
