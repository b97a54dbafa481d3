"""RLOO: REINFORCE with a leave-one-out baseline (TRL's RLOOTrainer). Each completion's advantage is its reward
minus the mean of the other completions of its prompt; it takes the job's rewards like GRPO, from the shared
``rollout`` part, but no environment (TRL 1.16's RLOOTrainer has no ``environment_factory``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.spec import JobSpec, Method
from backend.methods import rollout
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_prompt_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs

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
        **base_training_kwargs(spec, output_dir),
        **rloo_config_kwargs(spec),
        num_completions_to_print=2,
        reward_weights=reward_weights or None,
        **(vllm_kwargs or {"use_vllm": False}),
    )


def build_rloo_trainer(inputs: TrainerInputs) -> RLOOTrainer:
    """The trainer on the job's prompts, scored by its rewards; its sampled completions go to the samples table."""
    from trl import RLOOTrainer

    spec = inputs.spec
    reward_funcs, weights = rollout.reward_functions(spec)
    vllm_kwargs, notice = rollout.vllm_settings(spec)
    rollout.log.info(notice)
    policy = load_policy(spec, inputs.models_dir, inputs.parent_adapter)
    trainer = RLOOTrainer(
        args=to_rloo_config(spec, inputs.output_dir, weights, vllm_kwargs),
        reward_funcs=reward_funcs,
        train_dataset=inputs.dataset,
        callbacks=inputs.callbacks,
        **policy.trainer_kwargs(),
    )
    rollout.watch_completions(trainer, inputs.callbacks)
    return trainer


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    rows = rollout.card_rows(spec)
    return [
        *rows[:3],
        ("KL beta", spec.rloo.beta),
        ("normalized advantages", spec.rloo.normalize_advantages),
        *rows[3:],
    ]


SUPPORT = MethodSupport(
    method=Method.rloo,
    spec_part="rloo",
    summary="REINFORCE leave-one-out (RLOO) with rewards",
    formats=(DataFormat("prompt-only", ("prompt",)),),
    config_kwargs=rloo_config_kwargs,
    build_trainer=build_rloo_trainer,
    evaluate=rollout.reward_scores,
    learning_metrics=rollout.learning_metrics,
    render=render_prompt_row,
    card_rows=_card_rows,
    plots=rollout.PLOTS,
    reference_model=lambda spec: spec.rloo.beta > 0,  # the KL penalty's reference (the adapter off, with LoRA)
    generation=rollout.generation,
    template_kwargs=rollout.template_kwargs,
    cli_extras=rollout.cli_extras,
    cli_notes=rollout.cli_notes,
    loss_unit="policy loss",
    monitored=rollout.MONITORED,
    log_columns=rollout.LOG_COLUMNS,
)
