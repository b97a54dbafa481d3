"""What every method's trainer shares: the starting policy (fresh LoRA or a parent job's adapter) and base args."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.hub_names import run_repo_name
from backend.core.spec import JobSpec, checkpointing
from backend.models import loading as models
from backend.models.loading import LANGUAGE_MODEL_HEAD

AUTO_FIND_BATCH_START = 16


@dataclass
class Policy:
    """Keyword arguments for a TRL trainer's model side."""

    model: Any  # a path TRL loads itself, or a PeftModel carrying a parent job's adapter
    tokenizer: Any
    peft_config: Any
    quantization_config: Any

    def trainer_kwargs(self) -> dict[str, Any]:
        """The model, tokenizer, PEFT and quantization arguments every TRL trainer takes."""
        return {
            "model": self.model,
            "processing_class": self.tokenizer,
            "peft_config": self.peft_config,
            "quantization_config": self.quantization_config,
        }


def load_policy(
    spec: JobSpec, models_dir: Path, parent_adapter: Path | None = None, head: models.ModelHead = LANGUAGE_MODEL_HEAD
) -> Policy:
    """A fresh LoRA on the base model with ``head`` (TRL loads it), or the base with ``parent_adapter`` loaded as
    trainable."""
    path = models.resolve_model(spec.model, models_dir)
    tokenizer = models.load_tokenizer(str(parent_adapter or path), spec.model)
    if parent_adapter is None:
        return Policy(path, tokenizer, models.to_peft_config(spec.lora, head), models.to_bnb_config(spec.quantization))

    import torch
    import transformers
    from peft import PeftModel, get_peft_model, prepare_model_for_kbit_training

    kwargs = models.model_init_kwargs(spec.model, spec.quantization, spec.training.attn_implementation)
    if torch.cuda.is_available() and "device_map" not in kwargs:
        # Straight onto this process's GPU (its LOCAL_RANK under accelerate launch), as TRL loads a fresh model,
        # rather than onto the CPU and copied over afterwards.
        kwargs["device_map"] = {"": int(os.environ.get("LOCAL_RANK", "0"))}
    base = getattr(transformers, head.auto_class).from_pretrained(
        path, quantization_config=models.to_bnb_config(spec.quantization), **models.head_init_kwargs(head), **kwargs
    )
    if spec.quantization.mode != "none":
        base = prepare_model_for_kbit_training(base, use_gradient_checkpointing=checkpointing(spec))
    # Staged training continues the parent's adapter rather than stacking a new one on top; a head of the job's own
    # (a reward model's score on a language model's LoRA) is trained and saved beside it.
    config, new_head = models.adapter_for_head(parent_adapter, head.peft_task, inference=False)
    if new_head:
        model = get_peft_model(base, config)
        models.load_lora_only(model, parent_adapter)
    else:
        model = PeftModel.from_pretrained(base, str(parent_adapter), is_trainable=True)
    return Policy(model, tokenizer, None, None)


def policy_trainer(trainer_cls: type, args: Any, inputs: Any, head: models.ModelHead = LANGUAGE_MODEL_HEAD) -> Any:
    """``trainer_cls`` (a TRL trainer) with ``args`` on the job's policy (the base model with ``head``) and rows, for
    the methods that need nothing else (DPO, KTO); ``inputs`` is the worker's ``methods.TrainerInputs``."""
    policy = load_policy(inputs.spec, inputs.models_dir, inputs.parent_adapter, head)
    return trainer_cls(args=args, train_dataset=inputs.dataset, callbacks=inputs.callbacks, **policy.trainer_kwargs())


def checkpoint_training_kwargs(spec: JobSpec, job_id: str) -> dict[str, Any]:
    """The TrainingArguments fields that push each checkpoint as it is saved (none without output.push_checkpoints;
    backend/hub/checkpoints.py has the rest of it).

    A repo name without an owner (the default) is created under the token's account by Transformers itself. No
    ``hub_token``: Transformers pickles the TrainingArguments into every checkpoint and pushes them; the Hub client
    reads the token the scheduler hands the worker in HF_TOKEN.
    """
    if not spec.output.push_checkpoints:
        return {}
    return {
        "push_to_hub": True,
        "hub_model_id": spec.output.hub_repo_id or run_repo_name(spec.output.run_name, spec.method.value, job_id),
        "hub_strategy": "checkpoint",
        "hub_private_repo": spec.output.private,
    }


def base_training_kwargs(spec: JobSpec, output_dir: Path) -> dict[str, Any]:
    """TrainingArguments fields every method sets the same way from the spec."""
    t = spec.training
    kwargs: dict[str, Any] = dict(
        output_dir=str(output_dir),
        num_train_epochs=t.epochs,
        max_steps=t.max_steps or -1,
        learning_rate=t.learning_rate,
        # The worker's spec is tuned (an int); an untuned auto (the TRL CLI export) starts here and halves on OOM.
        per_device_train_batch_size=t.batch_or(AUTO_FIND_BATCH_START),
        auto_find_batch_size=t.batch_size == "auto",
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        warmup_steps=t.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio of total steps
        seed=t.seed,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=2,
        gradient_checkpointing=checkpointing(spec),
        use_liger_kernel=bool(t.use_liger_kernel),
        bf16=models.compute_dtype_name() == "bfloat16",
        report_to="none",
        disable_tqdm=True,
        run_name=spec.output.run_name,
    )
    kwargs.update(checkpoint_training_kwargs(spec, Path(output_dir).parent.name))
    if spec.output.trackio:
        from backend.platform.tracking import trackio_training_kwargs, trackio_unavailable

        missing = trackio_unavailable()
        if missing:  # tracking is never required: the job trains and says why nothing reached trackio
            print(f"output.trackio: {missing}; training without it", flush=True)
        else:
            # output_dir is the job's jobs/<id>/output (DataPaths.job_output): its parent names the job.
            kwargs.update(trackio_training_kwargs(spec.owner, Path(output_dir).parent.name, spec.output.run_name))
    if spec.model.parent_job_id is None:
        kwargs["model_init_kwargs"] = models.model_init_kwargs(spec.model, spec.quantization, t.attn_implementation)
    return kwargs
