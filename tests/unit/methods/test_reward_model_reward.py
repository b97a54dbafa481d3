"""A reward model in ``rollout.rewards``: a finished reward job (the base model, its SEQ_CLS adapter and saved score
head) scores GRPO's completions; a job that is not the user's finished reward job is refused at the field; the bench
shows its scores beside the code rewards; pre-flight warns when its scores barely vary within a group."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from backend.core.spec import SpecError, parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.training.callbacks import StoreReportingCallback
from backend.training.named_jobs import reward_model_sources
from backend.worker import build_trainer
from tests.helpers import job_data, tiny_spec

ALICE, BOB = User("alice"), User("bob")
REWARD_JOB = {"method": "reward", "dataset": {"source": "builtin", "name": "preferences-demo"}, "owner": "alice"}


def _grpo(model: str, **rollout) -> dict:
    return tiny_spec(
        method="grpo",
        owner="alice",
        dataset={"source": "builtin", "name": "math-demo"},
        rollout={
            "num_generations": 4,
            "max_completion_length": 8,
            "rewards": [{"model": model, "weight": 1.0}],
            **rollout,
        },
        training={"max_steps": 2, "batch_size": 4, "learning_rate": 1e-3, "max_length": 128, "save_steps": 100},
    )


def _save_score_adapter(paths, folder: Path, constant: bool = False) -> None:
    """A reward job's output as RewardTrainer saves it: a SEQ_CLS LoRA on the demo model with the score head saved
    whole (``modules_to_save``), and the tokenizer. ``constant``: a head of zeros, which scores every text 0."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    from backend.core.spec import ModelSpec
    from backend.models.loading import load_tokenizer, resolve_model

    path = resolve_model(ModelSpec(name_or_path="builtin:tiny-qwen3"), paths.models)
    torch.manual_seed(0)
    base = AutoModelForSequenceClassification.from_pretrained(path, num_labels=1)
    config = LoraConfig(r=4, lora_alpha=8, task_type="SEQ_CLS", modules_to_save=["score"])
    model = get_peft_model(base, config)
    with torch.no_grad():
        head = model.base_model.model.score.modules_to_save["default"].weight
        head.copy_(torch.zeros_like(head) if constant else torch.randn_like(head))
    model.save_pretrained(folder)
    load_tokenizer(path, ModelSpec(name_or_path="builtin:tiny-qwen3")).save_pretrained(folder)


def _reward_job(paths, store: JobStore, status=JobStatus.succeeded, constant=False, **spec) -> str:
    """A reward job of alice's left in ``status``, its adapter saved where the worker saves it."""
    job = store.add(parse_spec(tiny_spec(**{**REWARD_JOB, **spec})))
    if status is JobStatus.queued:
        return job.id
    assert store.claim_next().id == job.id
    folder = paths.job_adapter(job.id)
    _save_score_adapter(paths, folder, constant)
    store.merge_artifacts(job.id, {"adapter_dir": str(folder)})
    if status is not JobStatus.running:
        store.finish(job.id, status, None if status is JobStatus.succeeded else "stopped")
    return job.id


def _independent_scores(paths, job_id: str, prompts, completions) -> list[float]:
    """The reward job's scores, by code that shares nothing with the app's scorer: PEFT's adapter left unmerged,
    the tokenizer's own chat template, one text at a time."""
    from peft import PeftModel
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    adapter = paths.job_adapter(job_id)
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    base = AutoModelForSequenceClassification.from_pretrained(paths.models / "tiny-qwen3", num_labels=1)
    model = PeftModel.from_pretrained(base, adapter).eval()
    scores = []
    for prompt, completion in zip(prompts, completions):
        text = tokenizer.apply_chat_template(prompt + [{"role": "assistant", "content": completion}], tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
        with torch.inference_mode():
            scores.append(float(model(**ids).logits[0, 0]))
    return scores


def test_a_reward_job_scores_grpos_completions_and_its_scores_are_the_logged_rewards(paths, store):
    rm = _reward_job(paths, store)
    spec = parse_spec(_grpo(rm))
    sources = reward_model_sources(store, spec, ALICE)
    assert sources[rm].adapter == paths.job_adapter(rm) and sources[rm].model.name_or_path == "builtin:tiny-qwen3"
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, _ = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths), reward_models=sources)
    assert trainer.args.reward_weights == [1.0]
    trainer.train()
    logged = [m for m in store.metrics(job.id) if "reward" in m]
    assert len(logged) == 2 and all("rewards/reward_model/mean" in m for m in logged)
    samples = store.samples(job.id)
    assert len(samples) == 2 * 4
    kept = [s["rewards"]["reward_model"] for s in samples]
    completions = [
        s["completion"] if isinstance(s["completion"], str) else s["completion"][-1]["content"] for s in samples
    ]
    expected = _independent_scores(paths, rm, [s["prompt"] for s in samples], completions)
    assert len(set(round(v, 4) for v in kept)) > 1, "the head's scores differ between completions"
    assert kept == pytest.approx(expected, abs=1e-3)


def test_only_the_users_own_finished_reward_job_is_taken(paths, store):
    from backend.api import StudioAPI

    finished = _reward_job(paths, store)
    running = _reward_job(paths, store, JobStatus.running)
    failed = _reward_job(paths, store, JobStatus.failed)
    sft = _reward_job(paths, store, method="sft", dataset={"source": "builtin", "name": "chat-demo"})
    api = StudioAPI(paths.root, scheduler="none")
    try:
        cases = {
            running: f"rollout.rewards[0].model: job {running} is running; only a reward job that succeeded",
            failed: f"rollout.rewards[0].model: job {failed} is failed; only a reward job that succeeded",
            sft: f"rollout.rewards[0].model: job {sft} trained a sft model, not a reward model",
            "20990101-000000-abcdef": "rollout.rewards[0].model: there is no job '20990101-000000-abcdef' of yours",
        }
        for model, sentence in cases.items():
            with pytest.raises(SpecError) as said:
                api.jobs.submit(_grpo(model), user=ALICE)
            assert sentence in str(said.value), str(said.value)
        with pytest.raises(SpecError) as said:  # alice's job is not bob's to use
            api.jobs.submit(_grpo(finished), user=BOB)
        assert f"there is no job '{finished}' of yours" in str(said.value)
        with pytest.raises(SpecError) as said:  # a server folder is the local admin's only
            api.jobs.submit(_grpo("/etc/models/rm"), user=ALICE)
        assert "rollout.rewards[0].model: '/etc/models/rm' is a path on the server" in str(said.value)
        assert len(store.list()) == 4, "nothing refused was stored"
    finally:
        api.close()


@pytest.mark.slow  # the reward model is loaded in a child of its own (training.reward_checks): an interpreter's start
def test_the_bench_shows_the_reward_model_beside_the_code_rewards(paths, store):
    from backend.api import StudioAPI

    rm = _reward_job(paths, store)
    api = StudioAPI(paths.root, scheduler="none")
    try:
        rewards = [{"model": rm, "weight": 0.5}, {"name": "length", "target_length": 2, "weight": 1.0}]
        row = {"prompt": [{"role": "user", "content": "What is 2 + 2?"}]}
        scored = api.datasets.score_rewards(rewards, ["4", "It is four, I think."], row, user=ALICE)
    finally:
        api.close()
    expected = _independent_scores(paths, rm, [row["prompt"]] * 2, ["4", "It is four, I think."])
    assert [s["scores"]["reward_model"] for s in scored] == pytest.approx(expected, abs=1e-3)
    assert [s["total"] for s in scored] == pytest.approx(
        [0.5 * e + s["scores"]["length"] for e, s in zip(expected, scored)], abs=1e-3
    )


def test_preflight_warns_when_the_reward_model_scores_a_group_alike(paths, store):
    from backend.training.reward_models import reward_model_warnings

    constant = _reward_job(paths, store, constant=True)
    varying = _reward_job(paths, store)
    for rm, warns in ((constant, True), (varying, False)):
        spec = parse_spec(_grpo(rm, temperature=1.0))
        said = reward_model_warnings(spec, reward_model_sources(store, spec, ALICE), paths.models)
        assert bool(said) is warns, said
        if warns:
            assert said[0].startswith("rollout.rewards[0].model: the reward model scores the completions of a group")


def test_rloo_takes_the_reward_model_as_grpo_does(paths, store):
    rm = _reward_job(paths, store)
    spec = parse_spec({**_grpo(rm), "method": "rloo"})
    job = store.add(spec)
    trainer, _ = build_trainer(
        spec, paths, job.id, [], None, job_data(spec, paths), reward_models=reward_model_sources(store, spec, ALICE)
    )
    assert type(trainer).__name__ == "RLOOTrainer"
    (scorer,), weights = trainer.studio_rewards
    assert scorer.__name__ == "reward_model" and weights == [1.0] and trainer.reward_funcs == [scorer]
    assert next(scorer.model.parameters()).device == trainer.accelerator.device


def test_a_reward_entry_names_a_model_or_a_function_not_both():
    from backend.core.spec import RewardSpec

    assert RewardSpec.model_validate({"model": "owner/rm", "weight": 2}).name == "reward_model"
    for entry, sentence in (
        ({"name": "reward_model"}, "reward_model needs model"),
        ({"name": "accuracy", "model": "owner/rm"}, "model is for a reward model"),
    ):
        with pytest.raises(ValueError, match=sentence):
            RewardSpec.model_validate(entry)


def test_the_example_is_grpo_of_the_arith_model_scored_by_a_reward_job_and_judged_by_answer_accuracy():
    import yaml

    from backend.methods.table import support
    from tests.helpers import ROOT

    text = (ROOT / "examples" / "grpo-rm-demo.yaml").read_text()
    assert "python -m backend submit examples/reward-demo.yaml --wait" in text
    spec = parse_spec(yaml.safe_load(text.replace("REWARD_JOB_ID", "20261205-154120-3fa9c2")))
    assert spec.model.name_or_path == "builtin:tiny-qwen3-arith" and spec.dataset.name == "arith-prompts"
    assert [(r.name, r.model) for r in spec.rollout.rewards] == [("reward_model", "20261205-154120-3fa9c2")]
    # The reward model's own score is no yardstick of itself: the verdict reads the answers' accuracy first.
    assert [m.key for m in support(spec.method).learning_metrics(spec)] == ["accuracy", "reward/total"]
    mixed = parse_spec(_grpo("owner/rm", rewards=[{"name": "accuracy"}, {"model": "owner/rm", "weight": 0.1}]))
    assert [m.key for m in support(mixed.method).learning_metrics(mixed)] == ["accuracy", "reward/total"]


def test_the_trl_cli_export_names_a_hub_reward_model_first_with_its_weight(tmp_path):
    from backend.hub.trl_cli import trl_cli_yaml
    from tests.unit.hub.test_trl_cli import parse_like_trl_cli

    rewards = [{"name": "accuracy", "weight": 1.0}, {"model": "owner/rm", "weight": 2.0}]
    spec = parse_spec(_grpo("owner/rm", rewards=rewards))
    script_args, args, _, _ = parse_like_trl_cli("grpo", trl_cli_yaml(spec), tmp_path)
    assert script_args.reward_model_name_or_path == "owner/rm" and script_args.reward_funcs == ["accuracy_reward"]
    assert args.reward_weights == [2.0, 1.0]  # the script scores its reward model first
