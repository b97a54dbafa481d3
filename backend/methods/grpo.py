"""GRPO: translate a JobSpec into TRL's GRPOConfig and build a GRPOTrainer with the job's reward functions."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method, SpecError
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_prompt_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs
from backend.models.mixed_batch import GenerationSettings
from backend.models.scoring import PER_ROW, as_messages, generate_completions

log = logging.getLogger("studio.grpo")

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from backend.environments.runtime import ActiveEnvironment


# vLLM cannot be installed beside the app (gradio, openenv): it goes into the environment the worker runs in.
VLLM_INSTALL = "pip install -r requirements-trainer-gpu.txt into the trainer environment, STUDIO_TRAINER_PYTHON's"


def vllm_available() -> bool:
    """A CUDA GPU and an importable vLLM: colocated generation is possible. Asked in the worker, so it is the trainer
    environment's vLLM that counts."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def vllm_settings(spec: JobSpec, available: bool | None = None) -> tuple[dict, str]:
    """GRPOConfig kwargs for generation, and a notice saying which engine generates and why."""
    mode = spec.grpo.use_vllm
    if mode == "off":
        return {"use_vllm": False}, "generation: transformers (grpo.use_vllm is off)"
    available = vllm_available() if available is None else available
    if not available:
        if mode == "on":
            raise SpecError(
                [
                    f"grpo.use_vllm: vLLM needs a CUDA GPU and the vllm package in the trainer's environment "
                    f"({VLLM_INSTALL}); set it to auto or off to generate with transformers"
                ]
            )
        return {"use_vllm": False}, (
            "generation: transformers; vLLM colocate mode needs a CUDA GPU and the vllm "
            f"package ({VLLM_INSTALL}), so generation is slower here"
        )
    return (
        {
            "use_vllm": True,
            "vllm_mode": "colocate",
            "vllm_gpu_memory_utilization": spec.grpo.vllm_gpu_memory_utilization,
        },
        f"generation: vLLM colocate mode, {spec.grpo.vllm_gpu_memory_utilization:.0%} of GPU memory",
    )


def grpo_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """GRPOConfig's method kwargs from the spec, for the trainer and the TRL CLI export alike (the app bounds GRPO by
    max_completion_length, not max_length)."""
    g = spec.grpo
    kwargs = {
        "num_generations": g.num_generations,
        "max_completion_length": g.max_completion_length,
        "temperature": g.temperature,
        "top_p": g.top_p,
        "beta": g.beta,
        "loss_type": g.loss_type,
        "log_completions": g.log_completions,
    }
    if g.enable_thinking is not None:
        kwargs["chat_template_kwargs"] = {"enable_thinking": g.enable_thinking}
    return kwargs


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

    from backend.methods.rewards import build_rewards

    reward_funcs, weights = build_rewards(spec.grpo.rewards)
    vllm_kwargs, notice = vllm_settings(spec)
    log.info(notice)
    policy = load_policy(spec, models_dir, parent_adapter)
    trainer = GRPOTrainer(
        args=to_grpo_config(spec, output_dir, weights, vllm_kwargs),
        reward_funcs=reward_funcs,
        train_dataset=conversational_prompts(dataset) if environment is not None else dataset,
        callbacks=callbacks,
        environment_factory=environment.factory if environment is not None else None,
        **policy.trainer_kwargs(),
    )
    for callback in callbacks:
        if hasattr(callback, "watch_completions"):
            callback.watch_completions(trainer)
    return trainer


# The app's rewards TRL's GRPO script knows by name (its ``reward_funcs_registry``).
TRL_REWARD_NAMES = {
    "accuracy": "accuracy_reward",
    "reasoning_accuracy": "reasoning_accuracy_reward",
    "think_format": "think_format_reward",
}


def cli_extras(spec: JobSpec) -> dict:
    """The GRPO script's keys beyond the config kwargs: TRL's own reward functions by name, and vLLM when forced."""
    g = spec.grpo
    section: dict = {}
    known = [TRL_REWARD_NAMES[r.name] for r in g.rewards if r.name in TRL_REWARD_NAMES]
    if known:
        section["reward_funcs"] = known
    if g.rewards and len(known) == len(g.rewards):
        section["reward_weights"] = [r.weight for r in g.rewards]
    if g.use_vllm == "on":
        section.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization)
    return section


def _reward_description(reward) -> str:
    params = reward.model_dump(exclude={"name", "weight"}, exclude_defaults=True)
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{reward.name}({shown}) weight {reward.weight}" if shown else f"{reward.name} weight {reward.weight}"


def cli_notes(spec: JobSpec) -> list[str]:
    """What the TRL CLI cannot say about a GRPO job: the app's own rewards, an environment, vLLM's auto mode."""
    notes = []
    custom = [r for r in spec.grpo.rewards if r.name not in TRL_REWARD_NAMES]
    if spec.grpo.rewards:
        listed = "; ".join(_reward_description(r) for r in spec.grpo.rewards)
        notes.append(f"rewards: the app scored completions with {listed}.")
    if custom:
        names = ", ".join(r.name for r in custom)
        notes.append(
            f"rewards: {names}: the app's own rewards (backend/methods/rewards.py), not in TRL's registry; TRL's CLI "
            "takes such functions as dotted import paths in reward_funcs (e.g. my_rewards.length_reward), with "
            "reward_weights in the same order."
        )
    if spec.environment.name:
        notes.append(
            f"environment: the OpenEnv environment {spec.environment.name} rewarded each episode "
            f"({spec.environment.reward}, up to {spec.environment.max_tool_calling_iterations} tool calls); "
            "the TRL CLI cannot attach an environment: use GRPOTrainer(environment_factory=...) in a script."
        )
    if spec.grpo.use_vllm == "auto":
        notes.append(
            "generation: the app uses vLLM colocate mode when a CUDA GPU and vllm are present "
            "(use_vllm: true, vllm_mode: colocate)."
        )
    return notes


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    g = spec.grpo
    rows: list[tuple[str, object]] = [
        ("generations per prompt", g.num_generations),
        ("max completion length", g.max_completion_length),
        ("temperature / top-p", f"{g.temperature} / {g.top_p}"),
        ("KL beta", g.beta),
        ("GRPO loss", g.loss_type),
    ]
    if g.rewards:
        rows.append(("rewards (weight)", ", ".join(f"{r.name} ({r.weight})" for r in g.rewards)))
    if spec.environment.name:
        rows.append(("OpenEnv environment", f"`{spec.environment.name}` (reward: {spec.environment.reward})"))
    return rows


def _template_kwargs(spec: JobSpec, dataset_format: str, tokenizer) -> dict:
    return {"enable_thinking": spec.grpo.enable_thinking} if spec.grpo.enable_thinking is not None else {}


def learning_metrics(spec: JobSpec) -> tuple[LearningMetric, ...]:
    """The held-out reward of greedy answers; called accuracy when the only reward is TRL's accuracy check."""
    only_accuracy = [r.name for r in spec.grpo.rewards] == ["accuracy"] and spec.grpo.rewards[0].weight == 1
    label = "held-out accuracy" if only_accuracy else "held-out reward"
    return (LearningMetric("reward/total", label, rate=only_accuracy),)


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


def conversational_prompts(ds):
    """Plain-text prompts as one user message each; conversations as they are.

    With an environment, TRL appends the reset observation to the prompt's last message: a plain-text prompt column
    failed the first training step (``string indices must be integers``)."""
    if "prompt" not in ds.column_names or not any(isinstance(p, str) for p in ds["prompt"]):
        return ds
    return ds.map(
        lambda row: {
            "prompt": [{"role": "user", "content": row["prompt"]}] if isinstance(row["prompt"], str) else row["prompt"]
        }
    )


def reward_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Mean reward per reward function and in total per side, over each side's greedy completions of the prompts
    (greedy: the answer the model gives, not one draw of many, so the before/after is not sampling noise)."""
    model, tokenizer = trainer.model, trainer.processing_class
    from backend.methods.rewards import build_rewards

    funcs, weights = build_rewards(spec.grpo.rewards)
    settings = GenerationSettings(
        max_new_tokens=spec.grpo.max_completion_length, temperature=0, seed=spec.training.seed
    )
    prompts = [row["prompt"] for row in rows]
    columns = {k: [row[k] for row in rows] for k in rows[0] if k != "prompt"}
    result = {}
    for side, texts in generate_completions(model, tokenizer, prompts, sides, settings).items():
        completions = [
            [{"role": "assistant", "content": text}] if as_messages(prompt) is not None else text
            for prompt, text in zip(prompts, texts)
        ]
        scores: dict[str, Any] = {}
        total = [0.0] * len(rows)
        for func, weight in zip(funcs, weights):
            values = func(completions=completions, prompts=prompts, **columns)
            values = [0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v) for v in values]
            scores[f"reward/{func.__name__}"] = sum(values) / len(values)
            total = [t + weight * v for t, v in zip(total, values)]
        scores["reward/total"] = sum(total) / len(total)
        scores[PER_ROW] = {"reward/total": total}
        result[side] = scores
    return result


SUPPORT = MethodSupport(
    method=Method.grpo,
    spec_part="grpo",
    summary="group relative policy optimization (GRPO) with rewards",
    formats=(DataFormat("prompt-only", ("prompt",)),),
    config_kwargs=grpo_config_kwargs,
    build_trainer=_build,
    evaluate=reward_scores,
    learning_metrics=learning_metrics,
    render=render_prompt_row,
    card_rows=_card_rows,
    form_fields=(
        "grpo.num_generations",
        "grpo.max_completion_length",
        "grpo.temperature",
        "grpo.rewards",
        "environment.name",
        "environment.reward",
        "environment.max_tool_calling_iterations",
        "environment.eval_episodes",
    ),
    plots=(("loss", "loss"), ("reward", "mean reward")),
    reference_model=lambda spec: spec.grpo.beta > 0,  # the KL term's reference; beta 0 (TRL's default) needs none
    generation=lambda spec: (spec.grpo.num_generations, spec.grpo.max_completion_length),
    template_kwargs=_template_kwargs,
    cli_extras=cli_extras,
    cli_notes=cli_notes,
    loss_unit="policy loss",
    monitored=(
        "reward",
        "reward_std",
        "kl",
        "completions/mean_length",
        "completions/min_length",
        "completions/max_length",
        "frac_reward_zero_std",
        "completions/clipped_ratio",
        "tools/call_frequency",
        "tools/failure_frequency",
    ),
    log_columns=(
        ("reward", "reward"),
        ("reward_std", "reward std"),
        ("kl", "kl"),
        ("completions/mean_length", "length (tokens)"),
        ("loss", "loss"),
        ("learning_rate", "lr"),
    ),
)
