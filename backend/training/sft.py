"""SFT: translate a JobSpec into TRL's SFTConfig and build an SFTTrainer (TRL does the training)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.data import load_training_dataset
from backend.spec import JobSpec
from backend.training import models

if TYPE_CHECKING:
    from trl import SFTConfig, SFTTrainer


def assistant_only_loss_supported(tokenizer) -> bool:
    """True when TRL can mask non-assistant tokens for this chat template (it has or can swap in generation tags)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return False
    if has_generation_markers(template):
        return True
    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        return False
    return True


def to_sft_config(spec: JobSpec, output_dir: Path, dataset_format: str, assistant_masks: bool) -> "SFTConfig":
    """Pure translation of the spec's settings into TRL's SFTConfig."""
    from trl import SFTConfig

    t = spec.training
    completion_only = spec.sft.completion_only_loss
    return SFTConfig(
        output_dir=str(output_dir),
        num_train_epochs=t.epochs,
        max_steps=t.max_steps or -1,
        learning_rate=t.learning_rate,
        per_device_train_batch_size=t.batch_size,
        gradient_accumulation_steps=t.gradient_accumulation_steps,
        max_length=t.max_length,
        warmup_steps=t.warmup_ratio,  # transformers 5: a float in [0, 1) is a ratio of total steps
        seed=t.seed,
        logging_steps=t.logging_steps,
        save_strategy="steps",
        save_steps=t.save_steps,
        save_total_limit=2,
        gradient_checkpointing=t.gradient_checkpointing,
        bf16=models.compute_dtype_name() == "bfloat16",
        packing=spec.sft.packing,
        assistant_only_loss=completion_only and dataset_format == "conversational" and assistant_masks,
        completion_only_loss=completion_only if dataset_format == "prompt-completion" else None,
        model_init_kwargs=models.model_init_kwargs(spec.model, spec.quantization),
        report_to="none",
        disable_tqdm=True,
        run_name=spec.output.run_name,
    )


def build_sft_trainer(spec: JobSpec, output_dir: Path, models_dir: Path, callbacks: list) -> "SFTTrainer":
    from trl import SFTTrainer

    model_path = models.resolve_model(spec.model, models_dir)
    tokenizer = models.load_tokenizer(model_path, spec.model)
    dataset, fmt = load_training_dataset(spec.dataset, spec.method)
    args = to_sft_config(spec, output_dir, fmt, assistant_only_loss_supported(tokenizer))
    return SFTTrainer(
        model=model_path,
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=models.to_peft_config(spec.lora),
        quantization_config=models.to_bnb_config(spec.quantization),
        callbacks=callbacks,
    )
