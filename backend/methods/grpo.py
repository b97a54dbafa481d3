"""GRPO: translate a JobSpec into TRL's GRPOConfig and build a GRPOTrainer with the job's rewards, and an OpenEnv
environment when one is named (the rollout's shared parts are in ``rollout.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from backend.core.spec import JobSpec, Method
from backend.methods import rollout
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_prompt_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from backend.environments.runtime import ActiveEnvironment


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
        **base_training_kwargs(spec, output_dir),
        **grpo_config_kwargs(spec),
        num_completions_to_print=2,
        reward_weights=reward_weights or None,
        # The environment's loop: how many model turns (tool calls) one episode may take.
        max_tool_calling_iterations=spec.environment.max_tool_calling_iterations if spec.environment.name else None,
        **(vllm_kwargs or {"use_vllm": False}),
    )


def build_grpo_trainer(
    spec: JobSpec,
    output_dir: Path,
    models_dir: Path,
    callbacks: list,
    dataset: Dataset,
    parent_adapter: Path | None = None,
    environment: ActiveEnvironment | None = None,
) -> GRPOTrainer:
    """The trainer; with an environment, TRL runs the multi-turn tool loop and adds the environment's reward."""
    from trl import GRPOTrainer

    reward_funcs, weights = rollout.reward_functions(spec)
    vllm_kwargs, notice = rollout.vllm_settings(spec)
    rollout.log.info(notice)
    policy = load_policy(spec, models_dir, parent_adapter)
    trainer = GRPOTrainer(
        args=to_grpo_config(spec, output_dir, weights, vllm_kwargs),
        reward_funcs=reward_funcs,
        train_dataset=rollout.conversational_prompts(dataset) if environment is not None else dataset,
        callbacks=callbacks,
        environment_factory=environment.factory if environment is not None else None,
        **policy.trainer_kwargs(),
    )
    rollout.watch_completions(trainer, callbacks)
    return trainer


def _build(inputs: TrainerInputs):
    return build_grpo_trainer(
        inputs.spec,
        inputs.output_dir,
        inputs.models_dir,
        inputs.callbacks,
        inputs.dataset,
        inputs.parent_adapter,
        environment=inputs.environment,
    )


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    rows = rollout.card_rows(spec)
    return [*rows[:3], ("KL beta", spec.grpo.beta), ("GRPO loss", spec.grpo.loss_type), *rows[3:]]


SUPPORT = MethodSupport(
    method=Method.grpo,
    spec_part="grpo",
    summary="group relative policy optimization (GRPO) with rewards",
    formats=(DataFormat("prompt-only", ("prompt",)),),
    config_kwargs=grpo_config_kwargs,
    build_trainer=_build,
    evaluate=rollout.reward_scores,
    learning_metrics=rollout.learning_metrics,
    render=render_prompt_row,
    card_rows=_card_rows,
    plots=rollout.PLOTS,
    reference_model=lambda spec: spec.grpo.beta > 0,  # the KL term's reference; beta 0 (TRL's default) needs none
    generation=rollout.generation,
    template_kwargs=rollout.template_kwargs,
    cli_extras=rollout.cli_extras,
    cli_notes=rollout.cli_notes,
    loss_unit="policy loss",
    monitored=(*rollout.MONITORED, *rollout.TOOL_METRICS),
    log_columns=rollout.LOG_COLUMNS,
)
