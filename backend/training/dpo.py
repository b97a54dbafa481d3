"""DPO: translate a JobSpec into TRL's DPOConfig and build a DPOTrainer.

With LoRA the reference model is the policy with its adapter disabled (no second copy in memory); when the job
starts from a parent job's adapter, TRL keeps a frozen copy of that adapter as the reference instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.spec import JobSpec
from backend.training.common import base_training_kwargs, load_policy

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer


def to_dpo_config(spec: JobSpec, output_dir: Path) -> "DPOConfig":
    """The job's DPOConfig: the shared training arguments plus max_length, beta and the loss."""
    from trl import DPOConfig

    return DPOConfig(
        **base_training_kwargs(spec, output_dir),
        max_length=spec.training.max_length,
        beta=spec.dpo.beta,
        loss_type=[spec.dpo.loss_type],
    )


def build_dpo_trainer(
    spec: JobSpec, output_dir: Path, models_dir: Path, callbacks: list, dataset: "Dataset",
    parent_adapter: Path | None = None,
) -> "DPOTrainer":
    """TRL's DPOTrainer for a job, on its policy (with a parent job's adapter, if any)."""
    from trl import DPOTrainer

    policy = load_policy(spec, models_dir, parent_adapter)
    return DPOTrainer(
        args=to_dpo_config(spec, output_dir), train_dataset=dataset, callbacks=callbacks, **policy.trainer_kwargs()
    )
