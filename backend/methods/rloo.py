"""RLOO: REINFORCE with a leave-one-out baseline (TRL's RLOOTrainer). Each completion's advantage is its reward
minus the mean of the other completions of its prompt; it takes the job's rewards like GRPO, from the shared
``rollout`` part, but no environment (TRL 1.16's RLOOTrainer has no ``environment_factory``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.spec import JobSpec, Method
from backend.methods import rollout
from backend.methods.support import TrainerInputs

if TYPE_CHECKING:
    from trl import RLOOConfig, RLOOTrainer


def rloo_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """RLOOConfig's method kwargs (the rollout's, with RLOO's KL beta and advantage scaling), for the trainer and the
    TRL CLI export alike."""
    return {
        **rollout.rollout_config_kwargs(spec),
        "beta": spec.rloo.beta,
        "normalize_advantages": spec.rloo.normalize_advantages,
    }


def to_rloo_config(
    spec: JobSpec, output_dir: Path, reward_weights: list[float] | None = None, vllm_kwargs: dict | None = None
) -> RLOOConfig:
    """The spec's settings, the reward weights and the generation engine's settings as TRL's RLOOConfig."""
    from trl import RLOOConfig

    return RLOOConfig(
        **rollout.trainer_config_kwargs(spec, output_dir, reward_weights, vllm_kwargs), **rloo_config_kwargs(spec)
    )


def build_rloo_trainer(inputs: TrainerInputs) -> RLOOTrainer:
    """The trainer on the job's prompts, scored by its rewards; its sampled completions go to the samples table."""
    from trl import RLOOTrainer

    return rollout.build_trainer(RLOOTrainer, to_rloo_config, inputs, train_dataset=inputs.dataset)


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    own = [("KL beta", spec.rloo.beta), ("normalized advantages", spec.rloo.normalize_advantages)]
    return rollout.card_rows(spec, own)


SUPPORT = rollout.online_support(
    method=Method.rloo,
    spec_part="rloo",
    summary="REINFORCE leave-one-out (RLOO) with rewards",
    config_kwargs=rloo_config_kwargs,
    build_trainer=build_rloo_trainer,
    card_rows=_card_rows,
    reference_model=lambda spec: spec.rloo.beta > 0,  # the KL penalty's reference (the adapter off, with LoRA)
)
