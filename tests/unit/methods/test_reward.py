"""Reward modeling, added through the method table: the preference data DPO reads trains a LoRA and a score head on
the base model, and a finished job's adapter scores held-out right answers above the model's own mistakes, scored
here by code that shares nothing with the method's own evaluation."""

from __future__ import annotations

import hashlib
import json
import threading

import pytest
import torch
import yaml

from backend.core.spec import DatasetSpec, Method, parse_spec
from backend.data.builtin import BUILTIN_DATASETS
from backend.data.loading import load_training_dataset
from backend.hub.trl_cli import trl_cli_config, trl_cli_yaml
from backend.training.callbacks import StoreReportingCallback
from backend.worker import build_trainer
from tests.helpers import ROOT, cli, job_data, tiny_spec
from tests.unit.hub.test_trl_cli import parse_like_trl_cli

REWARD = {
    "method": "reward",
    "dataset": {"source": "builtin", "name": "preferences-demo"},
    "training": {"max_steps": 3, "batch_size": 2, "learning_rate": 5e-3, "max_length": 128, "save_steps": 100},
}


def test_the_preference_datasets_dpo_reads_are_reward_data(tmp_path):
    assert {"dpo", "reward"} <= set(BUILTIN_DATASETS["arith-preferences"].methods())
    assert {"dpo", "reward"} <= set(BUILTIN_DATASETS["preferences-demo"].methods())
    ds, fmt = load_training_dataset(DatasetSpec(source="builtin", name="arith-preferences"), Method.reward)
    assert fmt == "preference" and ds.column_names == ["prompt", "chosen", "rejected"]
    # Without a prompt column (TRL's implicit prompt), and as plain text from a file.
    csv = tmp_path / "pairs.csv"
    csv.write_text("chosen,rejected\n2 + 2 = 4,2 + 2 = 5\n")
    plain, fmt = load_training_dataset(DatasetSpec(source="file", name=str(csv)), Method.reward)
    assert fmt == "implicit-preference" and plain["chosen"] == ["2 + 2 = 4"]


def test_the_chats_picks_export_as_reward_data(paths):
    from backend.api import StudioAPI

    api = StudioAPI(paths.root, scheduler="none")
    try:
        picks = api.chat.preference_log()
        for i in range(4):
            picks.record([{"role": "user", "content": f"What is {i} + {i}?"}], f"{2 * i}.", "No idea.", "job-a")
        exported = api.chat.export_preferences(format="dpo")
    finally:
        api.close()
    ds, fmt = load_training_dataset(DatasetSpec(source="file", name=str(exported)), Method.reward)
    assert fmt == "preference" and ds.num_rows == 4 and ds[0]["chosen"][0]["role"] == "assistant"


def test_the_example_is_a_valid_reward_job_of_the_arithmetic_model(paths):
    from backend.training.preflight import check_spec

    spec = parse_spec(yaml.safe_load((ROOT / "examples" / "reward-demo.yaml").read_text()))
    assert spec.method is Method.reward and spec.dataset.name == "arith-preferences" and spec.eval.holdout_rows
    check_spec(spec, paths.models)  # pre-flight: the pairs load and the hold-out leaves rows to train


def test_the_trl_cli_export_parses_into_the_trainers_reward_settings(tmp_path):
    from backend.methods.reward import to_reward_config

    spec = parse_spec(tiny_spec(**REWARD, reward={"center_rewards_coefficient": 0.01}))
    text = trl_cli_yaml(spec)
    assert text.splitlines()[1] == "#   trl reward --config training_config.yaml"
    assert yaml.safe_load(text) == trl_cli_config(spec)
    script_args, args, model_args, _ = parse_like_trl_cli("reward", text, tmp_path)
    app = to_reward_config(spec, tmp_path / "out")
    for name in ("center_rewards_coefficient", "max_length", "max_steps", "learning_rate"):
        assert getattr(args, name) == getattr(app, name), name
    # The CLI's adapter is a score head's, as the app's is.
    assert model_args.use_peft and model_args.lora_task_type == "SEQ_CLS"
    assert model_args.lora_modules_to_save == ["score"]


@pytest.mark.slow
def test_reward_trains_the_adapter_and_the_head_only_and_logs_accuracy_and_margin(paths, store):
    spec = parse_spec(tiny_spec(**REWARD))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, _ = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    assert type(trainer).__name__ == "RewardTrainer" and trainer.model.config.num_labels == 1
    before = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    after = {n: p.detach().float().clone() for n, p in trainer.model.named_parameters()}
    trained = [n for n in before if "lora_" in n or "modules_to_save" in n]
    assert any("lora_" in n and not torch.equal(before[n], after[n]) for n in trained)
    assert any("score" in n and not torch.equal(before[n], after[n]) for n in trained)  # the head learns too
    assert all(torch.equal(before[n], after[n]) for n in before if n not in trained)
    logged = [m for m in store.metrics(job.id) if "loss" in m]
    assert len(logged) == 3 and all("accuracy" in m and "margin" in m for m in logged)


def test_a_reward_model_staged_on_an_sft_job_starts_from_its_adapter_and_keeps_its_head(paths, store, tmp_path):
    """Staged training: a reward model from a finished SFT job continues the job's LoRA, with the score head trained
    and saved beside it (loaded as the SFT job's causal-LM adapter, it trained the LoRA and saved no head)."""
    from peft import PeftConfig
    from safetensors.torch import load_file

    from tests.unit.chat.test_chat import _build_adapter

    sft_adapter = _build_adapter(paths.models, tmp_path / "sft-adapter", seed=3)
    spec = parse_spec(tiny_spec(**REWARD))
    job = store.add(spec)
    trainer, _ = build_trainer(spec, paths, job.id, [], sft_adapter, job_data(spec, paths))
    parent = load_file(sft_adapter / "adapter_model.safetensors")
    started = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if "lora_B" in n}
    assert started and all(torch.equal(w, parent[n.replace(".default", "")]) for n, w in started.items())
    trainer.train()
    from backend.training.evaluation import evaluation_sides

    assert len(evaluation_sides(trainer.model, spec, sft_adapter)) == 3  # base, start (the SFT job's) and tuned
    trainer.save_model(str(tmp_path / "reward-adapter"))
    saved = PeftConfig.from_pretrained(tmp_path / "reward-adapter")
    assert saved.task_type == "SEQ_CLS" and "score" in (saved.modules_to_save or [])
    assert any("score" in k for k in load_file(tmp_path / "reward-adapter" / "adapter_model.safetensors"))


def _held_out_pairs(spec) -> list[tuple[list[dict], str, str]]:
    """(prompt, chosen reply, rejected reply) of the rows the job held out: right answers against the arithmetic
    model's own mistakes, none of them trained on. (Against arbitrary near misses the demo's head does little better
    than chance: it learns the model's own mistakes, which is what its pairs hold.)"""
    from backend.data.loading import split_holdout

    dataset, _ = load_training_dataset(spec.dataset, spec.method)
    _, held_out = split_holdout(dataset, spec.eval.holdout_fraction, spec.eval.holdout_rows, spec.training.seed)
    rows = [held_out[i] for i in range(len(held_out))]
    return [(r["prompt"], r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows]


def _pair_accuracy(model, tokenizer, pairs) -> float:
    """The share of pairs whose right reply ``model`` scores above the near miss, one sequence at a time."""

    def score(prompt, reply) -> float:
        ids = tokenizer.apply_chat_template(prompt + [{"role": "assistant", "content": reply}], return_tensors="pt")
        ids = ids["input_ids"] if hasattr(ids, "keys") else ids
        with torch.no_grad():
            return float(model(input_ids=ids).logits[0, 0])

    return sum(score(prompt, right) > score(prompt, wrong) for prompt, right, wrong in pairs) / len(pairs)


@pytest.mark.slow
def test_a_reward_job_from_the_cli_scores_held_out_right_answers_above_mistakes(data_dir, tmp_path):
    from peft import PeftModel
    from safetensors import safe_open
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from backend.models.demo import ARITH_MODEL_DIR

    shipped = ARITH_MODEL_DIR / "model.safetensors"
    base_digest = hashlib.sha256(shipped.read_bytes()).hexdigest()
    spec = yaml.safe_load((ROOT / "examples" / "reward-demo.yaml").read_text())
    spec_file = tmp_path / "reward.yaml"
    spec_file.write_text(yaml.safe_dump(spec))
    result = cli("submit", str(spec_file), "--wait", "--json", timeout=480)
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(result.stdout)
    assert record["status"] == "succeeded", record
    assert record["artifacts"]["learning"]["metric"] == "pairwise_accuracy"

    # The base weights did not move: the shipped file is as it was, and the adapter holds LoRA and the head only.
    assert hashlib.sha256(shipped.read_bytes()).hexdigest() == base_digest
    adapter_dir = record["artifacts"]["adapter_dir"]
    with safe_open(f"{adapter_dir}/adapter_model.safetensors", "pt") as saved:
        keys = list(saved.keys())
    assert any("lora_" in k for k in keys) and any("score" in k for k in keys)
    assert all("lora_" in k or "score" in k for k in keys), keys

    tokenizer = AutoTokenizer.from_pretrained(adapter_dir)
    torch.manual_seed(0)
    untrained = AutoModelForSequenceClassification.from_pretrained(ARITH_MODEL_DIR, num_labels=1).eval()
    base = AutoModelForSequenceClassification.from_pretrained(ARITH_MODEL_DIR, num_labels=1)
    tuned = PeftModel.from_pretrained(base, adapter_dir).eval()
    pairs = _held_out_pairs(parse_spec(spec))
    assert len(pairs) == 256
    before, after = _pair_accuracy(untrained, tokenizer, pairs), _pair_accuracy(tuned, tokenizer, pairs)
    assert after >= before + 0.08, (before, after)


def test_a_reward_job_is_refused_with_a_sentence_where_a_language_model_is_needed(paths):
    """A reward model scores answers and writes none: the chat, the merged export, lm-eval and another method's
    staged job each refuse it with a sentence naming the job, before loading anything."""
    from backend.api import SpecError, StudioAPI
    from backend.jobs.records import JobStatus

    api = StudioAPI(paths.root, scheduler="none")
    try:
        job = api.core.store.add(parse_spec(tiny_spec(**REWARD)))
        api.core.store.claim_next()
        adapter = paths.root / "jobs" / job.id / "adapter"
        adapter.mkdir(parents=True)
        assert api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
        refusals = {
            "chat": lambda: api.chat.for_job(job.id, None),
            "export": lambda: api.export.submit(job.id),
            "benchmark": lambda: api.benchmarks.evaluate(job.id, ["arith-sums"]),
            "stage": lambda: api.jobs.submit(tiny_spec(model={"parent_job_id": job.id})),
        }
        for what, act in refusals.items():
            with pytest.raises(SpecError) as refused:
                act()
            assert f"job {job.id} trained a reward model, which scores answers" in str(refused.value), what
        assert [j.id for j in api.jobs.list_jobs()] == [job.id], "nothing was queued"
        # The Chat tab's pickers (its chat, its arena) list only models that write answers.
        from backend.core.users import local_user
        from components.job_pickers import finished_job_choices, job_choice_id

        assert finished_job_choices(api, local_user(), generates=True) == [""]
        assert [job_choice_id(c) for c in finished_job_choices(api, local_user())] == [None, job.id]
        assert [j.id for j in api.jobs.finished_jobs(local_user(), generates=False)] == [job.id]
    finally:
        api.close()


def test_a_reward_models_use_snippet_loads_its_score_head_and_scores_an_answer(paths, store, tmp_path, capsys):
    """The card's "How to use" loaded a reward model as a language model and generated with it, and offered vLLM's
    LoRA serving, which takes language models only: it now loads the score head and prints an answer's score."""
    import re

    from backend.hub.snippets import use_snippets

    spec = parse_spec(tiny_spec(**REWARD))
    job = store.add(spec)
    trainer, _ = build_trainer(spec, paths, job.id, [], None, job_data(spec, paths))
    trainer.train()
    trainer.save_model(str(tmp_path / "adapter"))
    trainer.processing_class.save_pretrained(tmp_path / "adapter")
    snippets = use_snippets(spec, job.id, str(tmp_path / "adapter"))
    assert [s.title for s in snippets] == ["Adapter with transformers + peft"]
    code = re.sub(
        r"^base_model_id = .*$", f'base_model_id = "{paths.models / "tiny-qwen3"}"', snippets[0].code, flags=re.M
    )
    namespace: dict = {}
    exec(compile(code, "reward-snippet", "exec"), namespace)  # noqa: S102 - our own card's code
    assert type(namespace["model"]).__name__ == "PeftModelForSequenceClassification"
    float(capsys.readouterr().out.strip().splitlines()[-1])  # the answer's score
