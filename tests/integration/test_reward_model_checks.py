"""A Hub reward model named in a GRPO spec, on a Space: it is looked up and sized from the Hub's metadata, and the
pre-flight that scores a group with it runs in a child with limits, never in the app. The app's peak memory does not
grow by the reward model's size, a missing id and too many reward models get one sentence naming the field, and
another user's job list answers within 2 s throughout.

The Hub is the fake one (tests/helpers/hub_server.py) serving a reward model built here (about 190 MB of float32
weights: four layers of width 1024 on the demo tokenizer), so a load in the app would show in its VmHWM."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from gradio_client.exceptions import AppError

from backend.core.paths import DataPaths
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from tests.helpers.apps import data_dir_with_models, launch_app
from tests.helpers.faults import timed_all_through
from tests.helpers.hub_server import FakeCommit, FakeHub

pytestmark = pytest.mark.slow

RM = "tester/wide-rm"
OTHERS_WAIT_S = 2.0


def _grpo(*rewards: dict) -> str:
    return json.dumps(
        {
            "method": "grpo",
            "model": {"name_or_path": "builtin:tiny-qwen3"},
            "dataset": {"source": "builtin", "name": "math-demo"},
            "rollout": {"num_generations": 2, "max_completion_length": 8, "rewards": list(rewards)},
            "training": {"max_steps": 1, "batch_size": 2, "max_length": 64},
        }
    )


def _build_reward_model(target: Path, models_dir: Path) -> int:
    """A sequence-classification model on the demo tokenizer, wide enough to see in a process's memory; the bytes of
    its weights."""
    import torch
    from transformers import AutoConfig, Qwen3Config, Qwen3ForSequenceClassification

    from backend.models.demo import ensure_demo_model

    demo = ensure_demo_model(models_dir)
    tiny = AutoConfig.from_pretrained(demo)
    config = Qwen3Config(
        vocab_size=tiny.vocab_size,
        hidden_size=1024,
        intermediate_size=2816,
        num_hidden_layers=4,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=64,
        num_labels=1,
        eos_token_id=tiny.eos_token_id,
        pad_token_id=tiny.pad_token_id,
    )
    torch.manual_seed(0)
    Qwen3ForSequenceClassification(config).to(torch.float32).save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"):
        if (demo / name).is_file():
            shutil.copy(demo / name, target / name)
    return sum(p.stat().st_size for p in target.glob("*.safetensors"))


@pytest.fixture(scope="module")
def hub(tmp_path_factory, models_dir):
    folder = tmp_path_factory.mktemp("wide-rm")
    size = _build_reward_model(folder, models_dir)
    with FakeHub("hf_unused_token", user="tester") as server:
        files = {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}
        server.add_repo(RM).commits.append(FakeCommit("1" * 40, "the reward model", "", files))
        server.rm_bytes = size
        yield server


@pytest.fixture(scope="module")
def space(tmp_path_factory, models_dir, hub):
    base = tmp_path_factory.mktemp("reward-checks")
    root = data_dir_with_models(base / "data", models_dir)
    extra = {
        "HF_ENDPOINT": hub.url,
        "HF_HUB_OFFLINE": "0",  # the fake Hub is on this machine
        "HF_HOME": str(base / "hf-home"),  # where a download would land, this test's own
        "HF_DATASETS_CACHE": str(base / "datasets-cache"),
    }
    with launch_app(root, space=True, extra_env=extra) as app:
        yield app


@pytest.fixture(scope="module")
def alice(space):
    return space.client("alice")


@pytest.fixture(scope="module")
def bob(space):
    client = space.client("bob")
    client.predict(None, api_name="/list_jobs")  # the first call of a process is slow for reasons of its own
    return client


def _memory(pid: int) -> dict[str, int]:
    """The process's resident memory now and its high-water mark (VmRSS, VmHWM), in bytes."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(("VmHWM:", "VmRSS:")):
            fields[line.split(":")[0]] = int(line.split()[1]) * 1024
    return fields


def _submit(client, text: str) -> str:
    """The job id, or the refusal's sentence."""
    try:
        return client.predict(text, api_name="/submit_spec")
    except AppError as exc:
        return f"refused: {exc}"


def _cancel(space, job_id: str) -> None:
    """Cancel a job a case queued (the case is about the submit, not the training), and wait for it to end."""
    store = JobStore(DataPaths(space.data_dir).db)
    store.request_cancel(job_id)
    from tests.helpers import wait_status

    wait_status(store, job_id, {JobStatus.cancelled, JobStatus.failed, JobStatus.succeeded}, timeout=120)


def _stored(space) -> int:
    return len(JobStore(DataPaths(space.data_dir).db).list())


def test_a_missing_reward_model_gets_a_sentence_naming_the_field(space, alice, bob):
    before = _stored(space)
    with timed_all_through(lambda: bob.predict(None, api_name="/list_jobs"), every_s=0.2) as waits:
        said = _submit(alice, _grpo({"name": "accuracy"}, {"model": "tester/no-such-rm"}))
    assert said.startswith("refused"), said
    assert "rollout.rewards[1].model" in said and "could not be found on the Hub" in said, said
    assert _stored(space) == before, "a refused spec was stored"
    assert max(waits) < OTHERS_WAIT_S, f"bob's /list_jobs took {max(waits):.1f} s"


def test_too_many_reward_models_get_a_sentence(space, alice):
    before = _stored(space)
    said = _submit(alice, _grpo(*({"model": f"tester/rm-{i}"} for i in range(5))))
    assert "rollout.rewards: at most 4 different reward models" in said, said
    assert _stored(space) == before, "a refused spec was stored"


def test_a_hub_reward_model_never_enters_the_app(space, hub, alice, bob):
    warm = _submit(alice, _grpo({"name": "accuracy"}))  # the same pre-flight without a reward model: the baseline
    assert not warm.startswith("refused"), warm
    _cancel(space, warm)
    before = _memory(space.proc.pid)
    with timed_all_through(lambda: bob.predict(None, api_name="/list_jobs"), every_s=0.2) as waits:
        job_id = _submit(alice, _grpo({"name": "accuracy"}, {"model": RM, "weight": 0.5}))
    after = _memory(space.proc.pid)
    assert not job_id.startswith("refused"), job_id
    _cancel(space, job_id)
    said = JobStore(DataPaths(space.data_dir).db).get(job_id).artifacts.preflight_warnings or []
    assert not [w for w in said if "could not check" in w], said  # the check ran, in its child
    grown = after["VmHWM"] - before["VmHWM"]
    print(
        f"\napp memory around a submit naming a {hub.rm_bytes / 2**20:.0f} MB reward model: "
        f"RSS {before['VmRSS'] / 2**20:.0f} -> {after['VmRSS'] / 2**20:.0f} MB, "
        f"peak {before['VmHWM'] / 2**20:.0f} -> {after['VmHWM'] / 2**20:.0f} MB; bob's longest /list_jobs "
        f"{max(waits):.2f} s"
    )
    assert grown < hub.rm_bytes / 2, f"the app's peak memory grew by {grown / 2**20:.0f} MB"
    assert max(waits) < OTHERS_WAIT_S, f"bob's /list_jobs took {max(waits):.1f} s"
