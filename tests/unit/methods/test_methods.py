"""DPO, GRPO, staged training and the before/after evaluation on the tiny model, plus their bad-input refusals."""

import json
import threading
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from backend.api import StudioAPI
from backend.core.spec import SpecError, parse_spec
from backend.jobs.records import JobStatus
from backend.training.callbacks import StoreReportingCallback
from backend.training.named_jobs import read_named_jobs
from backend.worker import build_trainer
from tests.helpers import job_data, tiny_spec, wait_status

FINAL = {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}

DPO = {
    "method": "dpo",
    "dataset": {"source": "builtin", "name": "preferences-demo"},
    "training": {"max_steps": 6, "batch_size": 4, "learning_rate": 5e-3, "max_length": 128, "save_steps": 100},
}
GRPO = {
    "method": "grpo",
    "dataset": {"source": "builtin", "name": "math-demo"},
    "grpo": {
        "num_generations": 4,
        "max_completion_length": 12,
        "rewards": [
            {"name": "accuracy", "weight": 1.0},
            {"name": "length", "target_length": 4, "tolerance": 2, "weight": 0.5},
        ],
    },
    "training": {"max_steps": 3, "batch_size": 4, "learning_rate": 1e-3, "max_length": 128, "save_steps": 100},
}


def _in_process(paths, store, spec_dict, parent_adapter=None):
    spec = parse_spec(tiny_spec(**spec_dict))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, held_out = build_trainer(spec, paths, job.id, [callback], parent_adapter, job_data(spec, paths))
    return job, trainer, held_out


def _weights(model):
    return {n: p.detach().float().clone() for n, p in model.named_parameters()}


@pytest.mark.slow
def test_dpo_trains_the_adapter_only_and_logs_margins(paths, store):
    job, trainer, _ = _in_process(paths, store, DPO)
    before = _weights(trainer.model)
    trainer.train()
    after = _weights(trainer.model)
    lora = [n for n in before if "lora_" in n]
    assert lora and all(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)
    logged = [m for m in store.metrics(job.id) if "loss" in m]
    assert len(logged) == 6 and all("rewards/margins" in m and "rewards/accuracies" in m for m in logged)
    assert logged[-1]["rewards/margins"] > 0, "chosen answers end up preferred on the training pairs"


@pytest.mark.slow
def test_dpo_in_4bit_trains(paths, store):
    job, trainer, _ = _in_process(
        paths, store, {**DPO, "quantization": {"mode": "4bit"}, "training": {**DPO["training"], "max_steps": 2}}
    )
    trainer.train()
    assert len([m for m in store.metrics(job.id) if "loss" in m]) == 2


@pytest.mark.slow
def test_grpo_with_two_weighted_rewards_logs_each_and_keeps_completions(paths, store, capfd):
    job, trainer, _ = _in_process(paths, store, GRPO)
    assert trainer.args.reward_weights == [1.0, 0.5]
    trainer.train()
    # The studio keeps the completions (below); TRL's own table in the log and parquet file per step stay off.
    assert "Advantage" not in capfd.readouterr().out
    assert not list(Path(trainer.args.output_dir).rglob("*.parquet"))
    logged = [m for m in store.metrics(job.id) if "reward" in m]
    assert len(logged) == 3
    for m in logged:
        assert {
            "rewards/accuracy/mean",
            "rewards/length/mean",
            "reward_std",
            "frac_reward_zero_std",
            "completions/clipped_ratio",
            "completions/mean_length",
        } <= m.keys()
    samples = store.samples(job.id)
    assert len(samples) == 3 * 4  # every generation batch: batch_size completions
    assert {"prompt", "completion", "rewards", "advantage"} <= samples[0].keys()
    assert set(samples[0]["rewards"]) == {"accuracy", "length"}


def test_rollout_log_completions_off_keeps_no_samples(paths, store):
    spec = parse_spec(tiny_spec(**{**GRPO, "grpo": {**GRPO["grpo"], "log_completions": False}}))
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    trainer, _ = build_trainer(spec, paths, job.id, [callback], None, job_data(spec, paths))
    assert callback._sample_source is None and trainer.args.log_completions is False


@pytest.mark.slow
def test_rloo_takes_the_same_rollout_trains_the_adapter_only_and_keeps_completions(paths, store):
    """RLOO from the shared rollout part: TRL's RLOOTrainer with the job's rewards, its KL beta as the reference's
    switch, the same monitored metrics and sampled completions as GRPO (the samples table)."""
    rloo = {**GRPO, "method": "rloo", "rollout": GRPO["grpo"], "grpo": {}, "rloo": {"beta": 0.05}}
    job, trainer, _ = _in_process(paths, store, rloo)
    assert type(trainer).__name__ == "RLOOTrainer"
    assert trainer.args.reward_weights == [1.0, 0.5] and trainer.args.beta == 0.05
    before = _weights(trainer.model)
    trainer.train()
    after = _weights(trainer.model)
    lora = [n for n in before if "lora_" in n]
    assert lora and any(not torch.equal(before[n], after[n]) for n in lora)
    assert all(torch.equal(before[n], after[n]) for n in before if "lora_" not in n)
    logged = [m for m in store.metrics(job.id) if "reward" in m]
    assert len(logged) == 3 and all({"rewards/accuracy/mean", "rewards/length/mean", "kl"} <= m.keys() for m in logged)
    samples = store.samples(job.id)
    assert len(samples) == 3 * 4 and set(samples[0]["rewards"]) == {"accuracy", "length"}


@pytest.mark.slow
def test_sft_then_dpo_starts_from_the_sft_adapter_and_records_lineage(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    sft = api.jobs.submit(tiny_spec()).job
    scheduler_factory()
    sft_done = wait_status(store, sft.id, FINAL)
    assert sft_done.status is JobStatus.succeeded, sft_done.error
    sft_adapter = load_file(f"{sft_done.artifacts.adapter_dir}/adapter_model.safetensors")

    # The starting weights of the staged job are exactly the SFT job's saved adapter.
    staged = read_named_jobs(parse_spec(tiny_spec(**DPO, model={"parent_job_id": sft.id})), store).spec
    assert staged.model.name_or_path == sft_done.spec.model.name_or_path and staged.lora == sft_done.spec.lora
    probe = store.add(staged)
    trainer, _ = build_trainer(staged, paths, probe.id, [], paths.job_adapter(sft.id), job_data(staged, paths))
    start = {n: p for n, p in trainer.model.named_parameters() if ".default." in n}
    assert len(start) == len(sft_adapter)
    for name, tensor in sft_adapter.items():
        live = name.replace(".weight", ".default.weight")
        assert torch.equal(start[live].detach().cpu(), tensor), name

    dpo = api.jobs.submit(tiny_spec(**DPO, model={"parent_job_id": sft.id})).job
    dpo_done = wait_status(store, dpo.id, FINAL)
    assert dpo_done.status is JobStatus.succeeded, dpo_done.error
    assert dpo_done.artifacts.parent_job_id == sft.id
    assert dpo_done.artifacts.parent_adapter == sft_done.artifacts.adapter_dir
    trained = load_file(f"{dpo_done.artifacts.adapter_dir}/adapter_model.safetensors")
    assert any(not torch.equal(trained[n], sft_adapter[n]) for n in sft_adapter), "DPO moved the SFT adapter"


@pytest.mark.slow
def test_sft_before_after_evaluation_shows_the_tuned_model_fits_held_out_chats_better(paths, store, scheduler_factory):
    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(
        tiny_spec(
            training={"max_steps": 40, "learning_rate": 3e-3, "batch_size": 8, "save_steps": 100},
            eval={"holdout_rows": 8},
        )
    ).job
    scheduler_factory()
    done = wait_status(store, job.id, FINAL)
    assert done.status is JobStatus.succeeded, done.error
    evaluation = done.artifacts.evaluation
    assert evaluation["rows"] == 8
    assert evaluation["tuned"]["eval_loss"] < evaluation["base"]["eval_loss"]
    # The file keeps each row's scores too (the verdict's interval comes from them); the artifact keeps the summary.
    stored = json.loads((paths.job_dir(job.id) / "evaluation.json").read_text())
    assert {k: v for k, v in stored.items() if k != "per_row"} == evaluation
    assert len(stored["per_row"]["tuned"]["token_nll"]) == 8 and done.artifacts.learning.rows == 8


@pytest.mark.slow
def test_dpo_and_grpo_evaluations_score_base_and_tuned(paths, store):
    from backend.training.evaluation import evaluate_before_after

    # DPO also checks the greedy answers against the chosen one and the chosen answers' likelihood (preferring must
    # not cost accuracy); GRPO's reward mixes in length, so the answers' accuracy guards it on its own.
    for spec_dict, keys in (
        (DPO, {"preference_accuracy", "logprob_margin", "exact_match", "reference_logprob"}),
        (GRPO, {"reward/accuracy", "reward/length", "reward/total", "accuracy"}),
    ):
        spec_dict = {**spec_dict, "eval": {"holdout_rows": 4}}
        job, trainer, held_out = _in_process(paths, store, spec_dict)
        trainer.train()
        result = evaluate_before_after(trainer, parse_spec(tiny_spec(**spec_dict)), held_out)
        assert set(result["tuned"]) == keys and set(result["base"]) == keys and result["rows"] == 4
        assert all(len(values) == 4 for side in result["per_row"].values() for values in side.values())
        if spec_dict["method"] == "dpo":
            assert result["tuned"]["logprob_margin"] > result["base"]["logprob_margin"]


# --- bad input: refused at submit with a message that says what to change ---------------------------------


def _refused(paths, spec, fragment):
    api = StudioAPI(paths.root, scheduler="none")
    before = len(api.jobs.list_jobs())
    with pytest.raises(SpecError) as err:
        api.jobs.submit(spec)
    assert fragment in str(err.value), str(err.value)
    assert len(api.jobs.list_jobs()) == before, "a refused job must not be stored"


@pytest.mark.parametrize(
    "rows, fragment",
    [
        ([{"prompt": "p", "chosen": "good", "rejected": ""}], "rows have an empty 'rejected'"),
        ([{"prompt": "p", "chosen": "good"}], "DPO needs columns prompt/chosen/rejected or chosen/rejected"),
        ([{"prompt": "p", "chosen": [], "rejected": [{"role": "assistant", "content": "x"}]}], "empty 'chosen'"),
    ],
)
def test_bad_preference_data(paths, tmp_path, rows, fragment):
    data = tmp_path / "prefs.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    _refused(paths, tiny_spec(**{**DPO, "dataset": {"source": "file", "name": str(data)}}), fragment)


def test_grpo_reward_needing_a_missing_column(paths):
    spec = tiny_spec(**{**GRPO, "grpo": {**GRPO["grpo"], "rewards": [{"name": "exact_match", "column": "answer"}]}})
    _refused(paths, spec, "column 'answer' is needed by the rewards")


@pytest.mark.parametrize(
    "reward, fragment",
    [
        ({"name": "regex", "pattern": "(unclosed"}, "is not a valid regular expression"),
        ({"name": "valid_json", "json_schema": {"type": "nonsense"}}, "json_schema is not a valid JSON schema"),
    ],
)
def test_invalid_reward_settings(paths, reward, fragment):
    _refused(paths, tiny_spec(**{**GRPO, "grpo": {**GRPO["grpo"], "rewards": [reward]}}), fragment)


def test_grpo_batch_must_hold_whole_groups(paths):
    _refused(
        paths,
        tiny_spec(**{**GRPO, "training": {**GRPO["training"], "batch_size": 3}}),
        "must be a multiple of rollout.num_generations (4)",
    )


def test_parent_job_that_does_not_exist_or_failed(paths, store):
    _refused(paths, tiny_spec(**DPO, model={"parent_job_id": "nope"}), "there is no job 'nope'")
    failed = store.add(parse_spec(tiny_spec()))
    store.claim_next()
    store.finish(failed.id, JobStatus.failed, "boom")
    _refused(
        paths,
        tiny_spec(**DPO, model={"parent_job_id": failed.id}),
        "is failed; only the adapter of a job that succeeded",
    )
