"""DPO: translate a JobSpec into TRL's DPOConfig and build a DPOTrainer.

With LoRA the reference model is the policy with its adapter disabled (no second copy in memory); when the job
starts from a parent job's adapter, TRL keeps a frozen copy of that adapter as the reference instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.evaluation import preference_scores
from backend.learning import LearningMetric
from backend.preview import render_preference_row
from backend.spec import JobSpec, Method
from backend.training.common import base_training_kwargs, policy_trainer
from backend.training.methods import DataFormat, MethodSupport, TrainerInputs, always

if TYPE_CHECKING:
    from trl import DPOConfig, DPOTrainer


def dpo_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """DPOConfig's method kwargs, for the trainer and the TRL CLI export alike."""
    return {"max_length": spec.training.max_length, "beta": spec.dpo.beta, "loss_type": [spec.dpo.loss_type]}


def to_dpo_config(spec: JobSpec, output_dir: Path) -> DPOConfig:
    """Pure translation of the spec's settings into TRL's DPOConfig."""
    from trl import DPOConfig

    return DPOConfig(**base_training_kwargs(spec, output_dir), **dpo_config_kwargs(spec))


def build_dpo_trainer(inputs: TrainerInputs) -> DPOTrainer:
    """The DPOTrainer; the reference is the policy with its adapter off (or the parent's frozen adapter)."""
    from trl import DPOTrainer

    return policy_trainer(DPOTrainer, to_dpo_config(inputs.spec, inputs.output_dir), inputs)


SUPPORT = MethodSupport(
    method=Method.dpo,
    spec_part="dpo",
    summary="direct preference optimization (DPO) on preference pairs",
    formats=(
        DataFormat("preference", ("prompt", "chosen", "rejected")),
        DataFormat("implicit-preference", ("chosen", "rejected")),
    ),
    config_kwargs=dpo_config_kwargs,
    build_trainer=build_dpo_trainer,
    evaluate=preference_scores,
    learning_metrics=lambda spec: (LearningMetric("preference_accuracy", "held-out preference accuracy", rate=True),),
    render=render_preference_row,
    card_rows=lambda spec: [("DPO beta", spec.dpo.beta), ("DPO loss", spec.dpo.loss_type)],
    form_fields=("dpo.beta", "dpo.loss_type"),
    reference_model=always,  # the reference log-probs, every step (the studio does not precompute them)
    sequences_per_example=2,  # chosen and rejected go through the model in one concatenated batch
    loss_unit="DPO loss (nats)",
    monitored=("rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected"),
    log_columns=(
        ("loss", "loss"),
        ("rewards/margins", "margin"),
        ("rewards/accuracies", "pref acc"),
        ("rewards/chosen", "chosen"),
        ("rewards/rejected", "rejected"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
)
