"""Pushing a finished job to the Hub (a local fake speaking the Hub API to the real client): one commit with a model
card, clear errors that keep the adapter, and a token that is never written anywhere."""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import time
from pathlib import Path

import pytest

from backend.api import StudioAPI
from backend.core.artifacts import JobArtifacts
from backend.core.paths import DataPaths
from backend.core.spec import parse_spec
from backend.hub.model_card import build_model_card, draw_training_curves
from backend.hub.publish import PushError, push_job
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.scheduler import Scheduler
from backend.jobs.store import JobStore
from tests.helpers import tiny_spec, wait_status
from tests.helpers.hub_server import FakeHub

TOKEN = "hf_test_token_0123456789"
FAKE_TOKEN = "hf_FAKE_TOKEN_ab12cd34"  # recognisable, for the grep test
ADAPTER_FILES = {
    "adapter_config.json",
    "adapter_model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
}
GENERATED_FILES = {
    "README.md",
    "training_config.yaml",
    "spec.json",
    "metrics.jsonl",
    "final_metrics.json",
    "training_curves.png",
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory, models_dir):
    """One real tiny SFT job, trained once for the module: (paths, store, job); its facade is closed after them."""
    root = tmp_path_factory.mktemp("publish") / "data"
    root.mkdir()
    (root / "models").symlink_to(models_dir, target_is_directory=True)
    paths = DataPaths(root).ensure()
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec(output={"run_name": "tiny chat sft"})).job
    try:
        scheduler = Scheduler(paths, poll_interval=0.1).start()
        try:
            done = wait_status(api.core.store, job.id, {JobStatus.succeeded, JobStatus.failed})
        finally:
            scheduler.stop()
        assert done.status is JobStatus.succeeded, done.error
        yield paths, api.core.store, done
    finally:
        api.close()


@pytest.fixture()
def online(monkeypatch):
    """The tests run with HF_HUB_OFFLINE=1 (conftest); the fake Hub is local, so let huggingface_hub talk to it."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture()
def hub(online):
    with FakeHub(TOKEN, user="tester", orgs=("studio-org",)) as server:
        yield server


def folder_digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def fenced(text: str, language: str) -> str:
    match = re.search(rf"```{language}\n(.*?)\n```", text, re.S)
    assert match, f"no {language} block in the card"
    return match.group(1)


def test_push_creates_a_private_repo_and_uploads_everything_in_one_commit(trained, hub, tmp_path):
    from huggingface_hub import ModelCard
    from PIL import Image

    paths, store, job = trained
    adapter = Path(job.artifacts.adapter_dir)
    result = push_job(job, paths, store, TOKEN, endpoint=hub.url)

    assert result.repo_id == "tester/tiny-chat-sft"
    created = hub.requests_to("create")
    assert len(created) == 1 and created[0].json == {
        "name": "tiny-chat-sft",
        "organization": "tester",
        "visibility": "private",
        "type": "model",
    }
    repo = hub.repos["tester/tiny-chat-sft"]
    assert repo.private and len(repo.commits) == 1 and len(hub.requests_to("commit")) == 1
    assert set(repo.files) == ADAPTER_FILES | GENERATED_FILES
    assert sorted(repo.files) == result.files
    assert result.commit_url == f"{hub.url}/tester/tiny-chat-sft/commit/{repo.commits[0].oid}"
    for name in ADAPTER_FILES:
        assert repo.files[name] == (adapter / name).read_bytes(), name
    assert not hub.requests_to("model_info"), "a built-in base has no Hub license to look up"

    recorded = store.get(job.id).artifacts
    assert recorded.hub.repo_id == "tester/tiny-chat-sft" and recorded.hub.commit == result.commit_url
    assert recorded.hub_error is None

    metrics = [json.loads(line) for line in repo.files["metrics.jsonl"].decode().splitlines()]
    assert len(metrics) == len(store.metrics(job.id)) and all("step" in row for row in metrics)
    assert [r["loss"] for r in metrics if "loss" in r] == [m["loss"] for m in store.metrics(job.id) if "loss" in m]
    assert json.loads(repo.files["final_metrics.json"])["train_loss"] == job.artifacts.final_metrics["train_loss"]
    assert json.loads(repo.files["spec.json"])["training"]["max_steps"] == 4
    plot = Image.open(io.BytesIO(repo.files["training_curves.png"]))
    assert plot.format == "PNG" and plot.size[0] > 100

    text = repo.files["README.md"].decode()
    card = ModelCard(text)
    data = card.data.to_dict()
    assert "base_model" not in data, "builtin:tiny-qwen3 is not a Hub id"
    assert "builtin:tiny-qwen3` is the app's built-in tiny random demo model" in text
    assert data["library_name"] == "peft" and data["pipeline_tag"] == "text-generation"
    assert {"trl", "sft", "lora"} <= set(data["tags"])
    assert "datasets" not in data and "license" not in data
    assert "| method | SFT |" in text and "| learning rate | 0.001 |" in text and "| max steps | 4 |" in text
    assert "| LoRA rank / alpha / dropout | 16 / 32 / 0.05 |" in text
    assert f"| train_loss | {job.artifacts.final_metrics['train_loss']:.4g} |" in text
    assert "![training curves](training_curves.png)" in text
    assert "## How to use" in text and 'adapter_id = "tester/tiny-chat-sft"' in text
    assert "--enable-lora" in text and "--lora-modules tiny-chat-sft=tester/tiny-chat-sft" in text  # vLLM's snippet
    assert fenced(text, "yaml") + "\n" == repo.files["training_config.yaml"].decode()


def test_the_cards_trl_config_parses_and_its_usage_snippet_runs(trained, hub, tmp_path, demo_model_path):
    from trl.scripts.sft import make_parser

    paths, store, job = trained
    push_job(job, paths, store, TOKEN, repo_id="studio-org/snippet-check", endpoint=hub.url)
    repo = hub.repos["studio-org/snippet-check"]
    text = repo.files["README.md"].decode()

    config = tmp_path / "training_config.yaml"
    config.write_text(fenced(text, "yaml"))
    script_args, args, model_args, _ = make_parser().parse_args_and_config(["--config", str(config), "--bf16", "false"])
    assert (args.learning_rate, args.max_steps, args.max_length) == (1e-3, 4, 128)
    assert model_args.use_peft and model_args.lora_r == 16

    # The how-to-use code, pointed at the uploaded files and the local base instead of Hub ids, loads and chats.
    downloaded = tmp_path / "downloaded"
    downloaded.mkdir()
    for name, content in repo.files.items():
        (downloaded / name).write_bytes(content)
    snippet = fenced(text, "python")
    snippet = re.sub(r"^base_model_id = .*$", f'base_model_id = "{demo_model_path}"', snippet, flags=re.M)
    snippet = snippet.replace('adapter_id = "studio-org/snippet-check"', f'adapter_id = "{downloaded}"')
    snippet = snippet.replace("max_new_tokens=128", "max_new_tokens=4")
    namespace: dict = {}
    exec(compile(snippet, "model-card-snippet", "exec"), namespace)  # noqa: S102 - our own card's code
    assert type(namespace["model"]).__name__ == "PeftModelForCausalLM"
    assert namespace["output"].shape[1] > namespace["inputs"]["input_ids"].shape[1]


def test_public_when_asked(trained, hub):
    paths, store, job = trained
    result = push_job(job, paths, store, TOKEN, repo_id="tester/public-one", private=False, endpoint=hub.url)
    assert hub.requests_to("create")[-1].json["visibility"] == "public"
    assert not hub.repos[result.repo_id].private


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        (lambda h: h.fail(403, on="create"), "the token cannot write to tester: it needs write access"),
        (lambda h: h.fail(403, on="commit"), "the token cannot write to tester: it needs write access"),
        (lambda h: h.fail(401, on="whoami"), "the token cannot write to tester: the Hub did not accept it (401"),
        (
            lambda h: h.fail(409, on="commit"),
            "the repo tester/tiny-chat-sft exists and the Hub refused to write to it (409 conflict)",
        ),
        (
            lambda h: setattr(h, "role", "read"),
            "the token cannot write to tester: it needs write access (this one is read-only)",
        ),
        (lambda h: h.stop(), "the Hub is not reachable: http://127.0.0.1:"),
    ],
    ids=["403-create", "403-commit", "401", "409", "read-token", "down"],
)
def test_failed_push_says_why_keeps_the_adapter_and_records_the_error(trained, hub, setup, expected):
    paths, store, job = trained
    adapter = Path(job.artifacts.adapter_dir)
    before = folder_digest(adapter)
    setup(hub)
    with pytest.raises(PushError) as caught:
        push_job(job, paths, store, TOKEN, repo_id="tester/tiny-chat-sft", endpoint=hub.url)
    message = str(caught.value)
    assert expected in message
    assert folder_digest(adapter) == before
    assert store.get(job.id).artifacts.hub_error == message
    assert not any(repo.commits for repo in hub.repos.values())
    if "not reachable" in message:
        assert f"the adapter is kept at {adapter}; retry later" in message


def hub_based_job(store: JobStore, adapter_dir: str, **spec_overrides) -> JobRecord:
    """A succeeded job record on a Hub base model that reuses the trained adapter folder (push reads it only)."""
    spec = parse_spec(
        tiny_spec(
            model={"name_or_path": "Qwen/Qwen3-0.6B"},
            dataset={"source": "hub", "name": "trl-lib/Capybara"},
            **spec_overrides,
        )
    )
    job = store.add(spec)
    assert store.claim_next().id == job.id
    store.merge_artifacts(job.id, {"adapter_dir": adapter_dir, "final_metrics": {"train_loss": 1.5}})
    store.finish(job.id, JobStatus.succeeded)
    return store.get(job.id)


@pytest.mark.parametrize("license_lookup", ["found", "fails"])
def test_hub_base_license_is_inherited_and_the_spec_chooses_the_repo(trained, online, license_lookup):
    from huggingface_hub import ModelCard

    paths, store, trained_job = trained
    job = hub_based_job(
        store,
        trained_job.artifacts.adapter_dir,
        output={"hub_repo_id": "studio-org/from-spec", "private": False, "push_to_hub": True},
    )
    models = {"Qwen/Qwen3-0.6B": {"cardData": {"license": "apache-2.0"}}}
    with FakeHub(TOKEN, user="tester", orgs=("studio-org",), models=models) as server:
        if license_lookup == "fails":
            server.fail(500, on="model_info")
        result = push_job(job, paths, store, TOKEN, endpoint=server.url)
    assert result.repo_id == "studio-org/from-spec" and not server.repos["studio-org/from-spec"].private
    assert [r.path for r in server.requests_to("model_info")] == ["/api/models/Qwen/Qwen3-0.6B"]
    data = ModelCard(server.repos["studio-org/from-spec"].files["README.md"].decode()).data.to_dict()
    assert data["base_model"] == "Qwen/Qwen3-0.6B" and data["datasets"] == ["trl-lib/Capybara"]
    assert "base_model:adapter:Qwen/Qwen3-0.6B" in data["tags"]
    assert data.get("license") == ("apache-2.0" if license_lookup == "found" else None)


def test_pushing_under_someone_elses_name_is_refused_before_any_upload(trained, hub):
    paths, store, job = trained
    hub.add_repo("someone-else/taken")
    with pytest.raises(
        PushError,
        match="the repo someone-else/taken is under someone-else, which tester cannot write to: push to tester/taken",
    ):
        push_job(job, paths, store, TOKEN, repo_id="someone-else/taken", endpoint=hub.url)
    assert not hub.requests_to("create") and not hub.requests_to("commit")


def test_no_token_and_offline_mode_fail_without_calling_the_hub(trained, hub, monkeypatch):
    from huggingface_hub import constants

    paths, store, job = trained
    with pytest.raises(PushError, match="no Hugging Face token: sign in, or set HF_TOKEN"):
        push_job(job, paths, store, None, endpoint=hub.url)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(PushError, match=r"the Hub is not reachable: offline mode is on \(HF_HUB_OFFLINE\)"):
        push_job(job, paths, store, TOKEN, endpoint=hub.url)
    assert hub.requests == []


def test_an_unfinished_job_or_a_malformed_repo_id_is_not_pushed(trained, paths, store, hub):
    job = store.add(parse_spec(tiny_spec()))
    with pytest.raises(PushError, match=f"job {job.id} is queued and has no saved adapter to push"):
        push_job(job, paths, store, TOKEN, endpoint=hub.url)
    assert store.get(job.id).artifacts.hub_error.startswith(f"job {job.id} is queued")
    trained_paths, trained_store, trained_job = trained
    with pytest.raises(PushError, match="the hub repo id 'no-slash' must look like owner/name"):
        push_job(trained_job, trained_paths, trained_store, TOKEN, repo_id="no-slash", endpoint=hub.url)
    assert hub.requests == []


def test_the_token_is_written_nowhere(trained, online, caplog):
    paths, store, job = trained
    caplog.set_level(logging.DEBUG)
    with FakeHub(FAKE_TOKEN, user="tester") as server:
        push_job(job, paths, store, FAKE_TOKEN, repo_id="tester/grep-check", endpoint=server.url)
        server.fail(403, on="commit")
        with pytest.raises(PushError) as caught:
            push_job(job, paths, store, FAKE_TOKEN, repo_id="tester/grep-check-2", endpoint=server.url)
    needle = FAKE_TOKEN.encode()

    # It went where it must: the Authorization header of the requests (so a leak would have been found).
    assert all(r.headers.get("authorization") == f"Bearer {FAKE_TOKEN}" for r in server.requests)
    # And nowhere else: request bodies, other headers, committed files, the data dir, logs, errors.
    for request in server.requests:
        assert needle not in request.body, request.path
        assert not any(FAKE_TOKEN in v for k, v in request.headers.items() if k.lower() != "authorization")
    assert all(needle not in content for repo in server.repos.values() for content in repo.files.values())
    leaks = []
    for folder, _, names in os.walk(paths.root):  # the SQLite database and its WAL, job folders, logs, uploads
        for name in names:
            if needle in (Path(folder) / name).read_bytes():
                leaks.append(str(Path(folder) / name))
    assert leaks == []
    assert FAKE_TOKEN not in caplog.text
    assert FAKE_TOKEN not in str(caught.value) and FAKE_TOKEN not in json.dumps(store.get(job.id).to_dict())


def test_card_for_a_staged_grpo_job_with_an_environment(tmp_path):
    """Metadata, evaluation tables, success rate and lineage, from a job record (no training needed)."""
    from huggingface_hub import ModelCard
    from PIL import Image

    spec = parse_spec(
        {
            "method": "grpo",
            "model": {"name_or_path": "Qwen/Qwen3-0.6B", "parent_job_id": "parent-1"},
            "dataset": {"source": "hub", "name": "openenv/echo-prompts"},
            "environment": {"name": "builtin:echo"},
            "grpo": {"rewards": [{"name": "think_format", "weight": 0.5}]},
            "training": {"batch_size": 4},
        }
    )
    parent_spec = parse_spec(
        {
            "method": "sft",
            "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
            "dataset": {"source": "builtin", "name": "echo-tools-sft"},
        }
    )
    now = time.time()
    parent = JobRecord(
        "parent-1",
        1,
        "local",
        JobStatus.succeeded,
        parent_spec,
        now,
        artifacts=JobArtifacts(hub={"repo_id": "tester/echo-sft"}),
    )
    job = JobRecord(
        "child-2",
        2,
        "local",
        JobStatus.succeeded,
        spec,
        now,
        artifacts=JobArtifacts.model_validate(
            {
                "global_step": 3,
                "parent_adapter": "/data/jobs/parent-1/adapter",
                "final_metrics": {"train_loss": 0.01},
                "evaluation": {"rows": 8, "tuned": {"reward/total": 0.75}, "base": {"reward/total": 0.25}},
                "environment_evaluation": {
                    "episodes": 16,
                    "tuned": {"success_rate": 0.5, "mean_reward": 0.5},
                    "base": {"success_rate": 0.125, "mean_reward": 0.125},
                },
            }
        ),
    )
    metrics = [{"step": s, "loss": 0.1 / s, "reward": 0.2 * s} for s in (1, 2, 3)]
    plot = draw_training_curves(metrics, spec.method, tmp_path / "training_curves.png")
    image = Image.open(plot)
    assert image.size == (1280, 320), "one panel for the loss, one for the reward"
    assert (44, 160, 44) in {colour for _, colour in image.getcolors(1 << 16)}, "the reward curve is drawn"

    card = build_model_card(job, metrics, "apache-2.0", plot, repo_id="tester/echo-grpo", parent=parent)
    data = ModelCard(str(card)).data.to_dict()
    assert data["base_model"] == "Qwen/Qwen3-0.6B" and data["license"] == "apache-2.0"
    assert data["datasets"] == ["openenv/echo-prompts"]
    assert {"trl", "grpo", "lora", "openenv", "echo", "base_model:adapter:Qwen/Qwen3-0.6B"} <= set(data["tags"])
    text = card.text
    assert "| reward/total | 0.25 | 0.75 |" in text
    assert "| success_rate | 0.125 | 0.5 |" in text and "**Success rate: 50%** (base: 12%)" in text
    assert "| first mean reward | 0.2 |" in text and "| last mean reward | 0.6 |" in text
    assert "## Lineage" in text and "| parent job | `parent-1` |" in text
    assert "| parent adapter | [tester/echo-sft](https://huggingface.co/tester/echo-sft) |" in text
    assert "| parent method | SFT |" in text
    assert "the TRL CLI cannot attach an environment" in " ".join(text.split())


def test_the_card_leads_its_results_with_the_verdict_and_says_when_a_run_had_no_signal():
    spec = parse_spec(
        {
            "method": "grpo",
            "model": {"name_or_path": "Qwen/Qwen3-0.6B"},
            "dataset": {"source": "builtin", "name": "math-demo"},
            "grpo": {"rewards": [{"name": "regex", "pattern": "^NEVER-MATCHES$"}]},
            "training": {"batch_size": 4},
        }
    )
    warning = "Every group scored the same for 5 logged steps: try a reward that tells completions apart."
    sentence = "Held-out reward 0 -> 0 (+0, ±0) on 8 rows. The run learned nothing: every group scored the same."
    artifacts = JobArtifacts.model_validate(
        {
            "global_step": 5,
            "final_metrics": {"train_loss": 0.0},
            "learning": {
                "metric": "reward/total",
                "label": "held-out reward",
                "before": 0.0,
                "after": 0.0,
                "delta": 0.0,
                "ci95": 0.0,
                "rows": 8,
                "verdict": "no_signal",
                "sentence": sentence,
            },
            "signal": {
                "warning": warning,
                "since_step": 1,
                "consecutive": 5,
                "steps_logged": 5,
                "steps_with_signal": 0,
                "stopped_early": True,
            },
        }
    )
    job = JobRecord("nosignal-1", 1, "local", JobStatus.succeeded, spec, time.time(), artifacts=artifacts)
    text = build_model_card(job, [{"step": s, "loss": 0.0, "reward": 0.0} for s in (1, 2, 3, 4, 5)]).text
    results = text.split("## Results\n\n", 1)[1]
    assert results.startswith(
        f"**Verdict: learned nothing.** {sentence}\n\n> **Training stopped early: no learning "
        "signal** (none since step 1; a learning signal on 0 of 5 logged steps). "
        f"{warning}\n\n| metric | value |"
    ), results[:600]

    # A run that improved: the verdict word and sentence, and no word of a missing signal.
    improved = artifacts.model_copy(
        update={
            "learning": artifacts.learning.model_copy(
                update={"verdict": "improved", "sentence": "Held-out reward 0.1 -> 0.6 (+0.5, ±0.2) on 8 rows."}
            ),
            "signal": artifacts.signal.model_copy(update={"warning": None, "stopped_early": False}),
        }
    )
    text = build_model_card(
        JobRecord("better-2", 2, "local", JobStatus.succeeded, spec, time.time(), artifacts=improved), []
    ).text
    assert "## Results\n\n**Verdict: improved.** Held-out reward 0.1 -> 0.6 (+0.5, ±0.2) on 8 rows.\n" in text
    assert "learning signal" not in text
    # Still running out of signal at the end, without stopping early: said as such.
    ended = artifacts.model_copy(update={"signal": artifacts.signal.model_copy(update={"stopped_early": False})})
    text = build_model_card(
        JobRecord("ended-3", 3, "local", JobStatus.succeeded, spec, time.time(), artifacts=ended), []
    ).text
    assert "> **No learning signal as training ended** (none since step 1" in text and "stopped early" not in text
