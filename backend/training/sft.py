"""SFT: translate a JobSpec into TRL's SFTConfig and build an SFTTrainer (TRL does the training)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.spec import JobSpec
from backend.training.common import base_training_kwargs, load_policy

if TYPE_CHECKING:
    from datasets import Dataset
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

    completion_only = spec.sft.completion_only_loss
    return SFTConfig(
        **base_training_kwargs(spec, output_dir),
        max_length=spec.training.max_length,
        packing=bool(spec.sft.packing),  # best-fit decreasing (TRL's default strategy), padding-free
        assistant_only_loss=completion_only and dataset_format == "conversational" and assistant_masks,
        completion_only_loss=completion_only if dataset_format == "prompt-completion" else None,
    )


def build_sft_trainer(
    spec: JobSpec,
    output_dir: Path,
    models_dir: Path,
    callbacks: list,
    dataset: "Dataset",
    dataset_format: str,
    parent_adapter: Path | None = None,
    eval_dataset: "Dataset | None" = None,
) -> "SFTTrainer":
    """TRL's SFTTrainer for a job, on its policy, with completion-only loss where the template allows it."""
    from trl import SFTTrainer

    policy = load_policy(spec, models_dir, parent_adapter)
    args = to_sft_config(spec, output_dir, dataset_format, assistant_only_loss_supported(policy.tokenizer))
    return SFTTrainer(
        args=args, train_dataset=dataset, eval_dataset=eval_dataset, callbacks=callbacks, **policy.trainer_kwargs()
    )
