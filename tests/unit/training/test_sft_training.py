"""SFT end to end on the tiny model: what training means, checked on the weights and the saved adapter."""

import json
import threading
from pathlib import Path

import pytest
import torch

from backend.core.spec import parse_spec
from backend.data.loading import load_training_dataset
from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore
from backend.methods.sft import build_sft_trainer
from backend.training.callbacks import StoreReportingCallback
from tests.helpers import tiny_spec, wait_status
from tests.unit.training.test_performance import check_the_figures_of_a_finished_sft_job


def _train_in_process(tmp_path, models_dir, **overrides):
    spec = parse_spec(tiny_spec(**overrides))
    store = JobStore(tmp_path / "db.sqlite3")
    job = store.add(spec)
    callback = StoreReportingCallback(store, job.id, threading.Event())
    dataset, fmt = load_training_dataset(spec.dataset, spec.method)
    trainer = build_sft_trainer(spec, tmp_path / "out", models_dir, [callback], dataset, fmt)
    return spec, store, job, trainer


def _split_weights(model):
    lora = {n: p.detach().float().clone() for n, p in model.named_parameters() if "lora_" in n}
    base = {n: p.detach().float().clone() for n, p in model.named_parameters() if "lora_" not in n}
    return lora, base


@pytest.mark.slow
@pytest.mark.parametrize("quant", ["none", "4bit"])
def test_lora_training_changes_adapter_not_base(tmp_path, models_dir, quant):
    _, store, job, trainer = _train_in_process(tmp_path, models_dir, quantization={"mode": quant})
    if quant == "4bit":
        assert getattr(trainer.model, "is_loaded_in_4bit", False) or trainer.model.base_model.model.is_loaded_in_4bit
    lora_before, base_before = _split_weights(trainer.model)
    assert lora_before and base_before
    trainer.train()
    lora_after, base_after = _split_weights(trainer.model)
    changed = [n for n in lora_before if not torch.equal(lora_before[n], lora_after[n])]
    assert len(changed) == len(lora_before), "every LoRA tensor should move"
    assert all(torch.equal(base_before[n], base_after[n]) for n in base_before), "base weights must stay frozen"
    losses = [m["loss"] for m in store.metrics(job.id) if "loss" in m]
    assert len(losses) == 4 and all(loss > 0 for loss in losses)


@pytest.mark.slow
def test_full_finetune_without_lora_does_change_base(tmp_path, models_dir):
    # The counter-test: proves the base-unchanged assertion above can fail.
    _, _, _, trainer = _train_in_process(tmp_path, models_dir, lora={"enabled": False})
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())


@pytest.mark.slow
def test_assistant_only_loss_is_used_for_chat_data(tmp_path, models_dir):
    _, _, _, trainer = _train_in_process(tmp_path, models_dir)
    assert trainer.args.assistant_only_loss is True
    batch = next(iter(trainer.get_train_dataloader()))
    labels = batch["labels"]
    assert (labels == -100).any() and (labels != -100).any(), "prompt tokens masked, answer tokens trained"


@pytest.mark.slow
def test_loss_drops_when_training_longer(tmp_path, models_dir):
    _, store, job, trainer = _train_in_process(
        tmp_path, models_dir, training={"max_steps": 40, "learning_rate": 3e-3, "batch_size": 8, "save_steps": 100}
    )
    trainer.train()
    losses = [m["loss"] for m in store.metrics(job.id) if "loss" in m]
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5


@pytest.mark.slow
def test_worker_saves_a_reloadable_adapter(paths, store, scheduler_factory, demo_model_path):
    from peft import PeftConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.api import StudioAPI

    api = StudioAPI(paths.root, scheduler="none")
    job = api.jobs.submit(tiny_spec()).job
    scheduler_factory()
    done = wait_status(store, job.id, {JobStatus.succeeded, JobStatus.failed})
    assert done.status is JobStatus.succeeded, done.error
    adapter = done.artifacts.adapter_dir
    # Auto-tune ran in the worker: on this CPU with RAM to spare, no recompute; said in the log, kept with the job.
    tuned = done.artifacts.auto_tune
    assert tuned.settings["training.gradient_checkpointing"] is False
    log_text = Path(done.artifacts.log_file).read_text()
    assert "auto-tune: gradient checkpointing: off (the job fits without it" in log_text
    ran = json.loads((Path(done.artifacts.job_dir) / "spec.json").read_text())["training"]
    assert ran["gradient_checkpointing"] is False and ran["attn_implementation"] == "sdpa"
    check_the_figures_of_a_finished_sft_job(api, done, demo_model_path)
    assert PeftConfig.from_pretrained(adapter).r == 16
    base = AutoModelForCausalLM.from_pretrained(demo_model_path)
    tuned = PeftModel.from_pretrained(base, adapter)
    lora_b = [p for n, p in tuned.named_parameters() if "lora_B" in n]
    assert lora_b and all(p.abs().sum() > 0 for p in lora_b), "LoRA B starts at zero; trained ones are not"
    tok = AutoTokenizer.from_pretrained(adapter)
    enc = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = tuned.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape[-1] > enc["input_ids"].shape[-1]
    metrics = api.jobs.metrics(job.id)
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2, 3, 4]
    assert done.progress["step"] == 4 and done.progress["total_steps"] == 4
