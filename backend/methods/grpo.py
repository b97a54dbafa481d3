"""GRPO: translate a JobSpec into TRL's GRPOConfig and build a GRPOTrainer with the job's rewards, and an OpenEnv
environment when one is named (the rollout's shared parts are in ``rollout.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.spec import JobSpec, Method
from backend.methods import rollout
from backend.methods.support import TrainerInputs

if TYPE_CHECKING:
    from trl import GRPOConfig, GRPOTrainer


def grpo_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """GRPOConfig's method kwargs from the spec (the rollout's, with GRPO's KL beta and loss), for the trainer and
    the TRL CLI export alike."""
    return {**rollout.rollout_config_kwargs(spec), "beta": spec.grpo.beta, "loss_type": spec.grpo.loss_type}


def to_grpo_config(
    spec: JobSpec, output_dir: Path, reward_weights: list[float], vllm_kwargs: dict | None = None
) -> GRPOConfig:
    """The spec's settings, the reward weights and the generation engine's settings as TRL's GRPOConfig."""
    from trl import GRPOConfig

    return GRPOConfig(
        **rollout.trainer_config_kwargs(spec, output_dir, reward_weights, vllm_kwargs),
        **grpo_config_kwargs(spec),
        # The environment's loop: how many model turns (tool calls) one episode may take.
        max_tool_calling_iterations=spec.environment.max_tool_calling_iterations if spec.environment.name else None,
    )


def build_grpo_trainer(inputs: TrainerInputs) -> GRPOTrainer:
    """The trainer; with an environment, TRL runs the multi-turn tool loop and adds the environment's reward."""
    from trl import GRPOTrainer

    environment = inputs.environment
    return rollout.build_trainer(
        GRPOTrainer,
        to_grpo_config,
        inputs,
        train_dataset=rollout.conversational_prompts(inputs.dataset) if environment is not None else inputs.dataset,
        environment_factory=environment.factory if environment is not None else None,
    )


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    return rollout.card_rows(spec, [("KL beta", spec.grpo.beta), ("GRPO loss", spec.grpo.loss_type)])


SUPPORT = rollout.online_support(
    method=Method.grpo,
    spec_part="grpo",
    summary="group relative policy optimization (GRPO) with rewards",
    config_kwargs=grpo_config_kwargs,
    build_trainer=build_grpo_trainer,
    card_rows=_card_rows,
    reference_model=lambda spec: spec.grpo.beta > 0,  # the KL term's reference; beta 0 (TRL's default) needs none
    monitored=(*rollout.MONITORED, *rollout.TOOL_METRICS),
)
