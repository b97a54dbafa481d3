"""What every online method shares (GRPO, RLOO): the ``rollout`` part as TRL config kwargs, the generation engine
(vLLM or transformers), the rewards as TRL takes them, the held-out reward evaluation, the TRL CLI's reward keys and
notes, the model card's rows, and what the Jobs tab monitors of a run that samples and scores."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, SpecError
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_prompt_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs
from backend.models.mixed_batch import GenerationSettings
from backend.models.scoring import PER_ROW, as_messages, generate_completions

log = logging.getLogger("studio.rollout")


# vLLM cannot be installed beside the app (gradio, openenv): it goes into the environment the worker runs in.
VLLM_INSTALL = "pip install -r requirements-trainer-gpu.txt into the trainer environment, STUDIO_TRAINER_PYTHON's"


def vllm_available() -> bool:
    """A CUDA GPU and an importable vLLM: colocated generation is possible. Asked in the worker, so it is the trainer
    environment's vLLM that counts."""
    import importlib.util

    import torch

    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


def vllm_settings(spec: JobSpec, available: bool | None = None) -> tuple[dict, str]:
    """The config's kwargs for generation, and a notice saying which engine generates and why."""
    mode = spec.rollout.use_vllm
    if mode == "off":
        return {"use_vllm": False}, "generation: transformers (rollout.use_vllm is off)"
    available = vllm_available() if available is None else available
    if not available:
        if mode == "on":
            raise SpecError(
                [
                    f"rollout.use_vllm: vLLM needs a CUDA GPU and the vllm package in the trainer's environment "
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
            "vllm_gpu_memory_utilization": spec.rollout.vllm_gpu_memory_utilization,
        },
        f"generation: vLLM colocate mode, {spec.rollout.vllm_gpu_memory_utilization:.0%} of GPU memory",
    )


def rollout_config_kwargs(spec: JobSpec) -> dict:
    """The config kwargs of ``rollout`` every online trainer takes (GRPOConfig and RLOOConfig alike); the app bounds
    an online method by max_completion_length, not max_length."""
    r = spec.rollout
    kwargs: dict[str, Any] = {
        "num_generations": r.num_generations,
        "max_completion_length": r.max_completion_length,
        "temperature": r.temperature,
        "top_p": r.top_p,
        "log_completions": r.log_completions,
    }
    if r.enable_thinking is not None:
        kwargs["chat_template_kwargs"] = {"enable_thinking": r.enable_thinking}
    return kwargs


def generation(spec: JobSpec) -> tuple[int, int]:
    """(completions sampled per prompt, most completion tokens): the method table's ``generation``."""
    return spec.rollout.num_generations, spec.rollout.max_completion_length


def reward_functions(spec: JobSpec, models: dict | None = None) -> tuple[list, list[float]]:
    """The job's reward callables and their weights, as TRL's trainers take them; ``models``: the loaded reward models
    its rewards name (``model_reward.load_model_rewards``)."""
    from backend.methods.rewards.registry import build_rewards

    return build_rewards(spec.rollout.rewards, models)


def watch_completions(trainer, callbacks: list) -> None:
    """Let the reporting callback keep the trainer's sampled completions (its ``samples`` table)."""
    for callback in callbacks:
        if hasattr(callback, "watch_completions"):
            callback.watch_completions(trainer)


# The app's rewards TRL's GRPO and RLOO scripts know by name (its ``reward_funcs_registry``).
TRL_REWARD_NAMES = {
    "accuracy": "accuracy_reward",
    "reasoning_accuracy": "reasoning_accuracy_reward",
    "think_format": "think_format_reward",
}


def cli_extras(spec: JobSpec) -> dict:
    """The online scripts' keys beyond the config kwargs (``trl grpo``, ``trl rloo``): TRL's own reward functions by
    name, and vLLM when forced."""
    g = spec.rollout
    section: dict = {}
    known = [TRL_REWARD_NAMES[r.name] for r in g.rewards if r.name in TRL_REWARD_NAMES]
    models = [r for r in g.rewards if r.model is not None]
    if known:
        section["reward_funcs"] = known
    if len(models) == 1:  # the script takes one reward model, scored before its reward_funcs
        section["reward_model_name_or_path"] = models[0].model
    if g.rewards and len(known) + min(len(models), 1) == len(g.rewards):
        ordered = models + [r for r in g.rewards if r.name in TRL_REWARD_NAMES]
        section["reward_weights"] = [r.weight for r in ordered]
    if g.use_vllm == "on":
        section.update(use_vllm=True, vllm_mode="colocate", vllm_gpu_memory_utilization=g.vllm_gpu_memory_utilization)
    return section


def _reward_description(reward) -> str:
    params = reward.model_dump(exclude={"name", "weight"}, exclude_defaults=True)
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return f"{reward.name}({shown}) weight {reward.weight}" if shown else f"{reward.name} weight {reward.weight}"


def cli_notes(spec: JobSpec) -> list[str]:
    """What the TRL CLI cannot say about an online job: the app's own rewards, an environment, vLLM's auto mode."""
    notes = []
    custom = [r for r in spec.rollout.rewards if r.name not in TRL_REWARD_NAMES and r.model is None]
    if spec.rollout.rewards:
        listed = "; ".join(_reward_description(r) for r in spec.rollout.rewards)
        notes.append(f"rewards: the app scored completions with {listed}.")
    if custom:
        names = ", ".join(r.name for r in custom)
        notes.append(
            f"rewards: {names}: the app's own rewards (backend/methods/rewards/), not in TRL's registry; TRL's CLI "
            "takes such functions as dotted import paths in reward_funcs (e.g. my_rewards.length_reward), with "
            "reward_weights in the same order."
        )
    if any(r.model is not None for r in spec.rollout.rewards):
        notes.append(
            "rewards: reward_model: TRL's script takes one reward model (reward_model_name_or_path, a Hub id or a "
            "folder of a sequence-classification model); a reward job's id names no such folder: give its base "
            "model with the job's adapter (jobs/<id>/adapter) merged in."
        )
    if spec.environment.name:
        notes.append(
            f"environment: the OpenEnv environment {spec.environment.name} rewarded each episode "
            f"({spec.environment.reward}, up to {spec.environment.max_tool_calling_iterations} tool calls); "
            "the TRL CLI cannot attach an environment: use GRPOTrainer(environment_factory=...) in a script."
        )
    if spec.rollout.use_vllm == "auto":
        notes.append(
            "generation: the app uses vLLM colocate mode when a CUDA GPU and vllm are present "
            "(use_vllm: true, vllm_mode: colocate)."
        )
    return notes


def card_rows(spec: JobSpec, own: Sequence[tuple[str, object]]) -> list[tuple[str, object]]:
    """The model card's rows of an online job: group and sampling, the method's ``own`` rows, then the rewards and the
    environment when one played."""
    r = spec.rollout
    rows: list[tuple[str, object]] = [
        ("generations per prompt", r.num_generations),
        ("max completion length", r.max_completion_length),
        ("temperature / top-p", f"{r.temperature} / {r.top_p}"),
        *own,
    ]
    if r.rewards:
        named = [f"{x.name} `{x.model}`" if x.model else x.name for x in r.rewards]  # which reward model scored
        rows.append(("rewards (weight)", ", ".join(f"{name} ({x.weight})" for name, x in zip(named, r.rewards))))
    if spec.environment.name:
        rows.append(("OpenEnv environment", f"`{spec.environment.name}` (reward: {spec.environment.reward})"))
    return rows


def template_kwargs(spec: JobSpec, dataset_format: str, tokenizer) -> dict:
    """The chat template's extra arguments (Qwen3's enable_thinking) when the rollout sets them."""
    return {"enable_thinking": spec.rollout.enable_thinking} if spec.rollout.enable_thinking is not None else {}


def only_accuracy(spec: JobSpec) -> bool:
    """Whether the job's reward is TRL's accuracy check alone (the held-out reward is then accuracy)."""
    return [r.name for r in spec.rollout.rewards] == ["accuracy"] and spec.rollout.rewards[0].weight == 1


# A reward of format, length or keywords can be gamed: where the rows carry a ``solution``, the greedy answers'
# accuracy against it guards the verdict (scored by TRL's accuracy check, as GRPO's accuracy reward is).
ANSWER_ACCURACY_GUARD = LearningMetric("accuracy", "held-out answer accuracy", rate=True)


def learning_metrics(spec: JobSpec) -> tuple[LearningMetric, ...]:
    """The held-out reward of greedy answers; called accuracy when the only reward is TRL's accuracy check. When a
    reward model scores, the total is no yardstick of itself (a policy learns to please a reward model: the demo's
    did, its score up, its answers wrong): the verdict then reads the greedy answers' accuracy where the rows carry a
    ``solution`` (the first metric the evaluation has), else the held-out reward."""
    label = "held-out accuracy" if only_accuracy(spec) else "held-out reward"
    reward = LearningMetric("reward/total", label, rate=only_accuracy(spec))
    if any(r.model is not None for r in spec.rollout.rewards):
        return (ANSWER_ACCURACY_GUARD, reward)
    return (reward,)


def guards(spec: JobSpec) -> tuple[LearningMetric, ...]:
    """The answer-accuracy guard, unless the reward already is that accuracy."""
    return () if only_accuracy(spec) else (ANSWER_ACCURACY_GUARD,)


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
    # The trainer's own rewards (a reward model is loaded once, on the trainer's device), else built from the spec.
    funcs, weights = getattr(trainer, "studio_rewards", None) or reward_functions(spec)
    settings = GenerationSettings(
        max_new_tokens=spec.rollout.max_completion_length, temperature=0, seed=spec.training.seed
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
        if "solution" in columns and guards(spec):
            from backend.methods.rewards.accuracy_rewards import TRLReward

            right = [1.0 if v == 1 else 0.0 for v in TRLReward("accuracy")(completions=completions, **columns)]
            scores["accuracy"] = sum(right) / len(right)
            scores[PER_ROW]["accuracy"] = right
        result[side] = scores
    return result


# What the Jobs tab plots and lists of a run that samples and scores (the tools/* metrics appear only with tools).
PLOTS = (("loss", "loss"), ("reward", "mean reward"))
MONITORED = (
    "reward",
    "reward_std",
    "kl",
    "completions/mean_length",
    "completions/min_length",
    "completions/max_length",
    "frac_reward_zero_std",
    "completions/clipped_ratio",
)
TOOL_METRICS = ("tools/call_frequency", "tools/failure_frequency")
LOG_COLUMNS = (
    ("reward", "reward"),
    ("reward_std", "reward std"),
    ("kl", "kl"),
    ("completions/mean_length", "length (tokens)"),
    ("loss", "loss"),
    ("learning_rate", "lr"),
)


def trainer_config_kwargs(
    spec: JobSpec, output_dir: Path, reward_weights: list[float] | None, vllm_kwargs: dict | None
) -> dict[str, Any]:
    """An online config's kwargs beyond the method's own: the shared training arguments, the reward weights and the
    generation engine's settings (transformers unless ``vllm_kwargs`` say otherwise)."""
    return {
        **base_training_kwargs(spec, output_dir),
        "num_completions_to_print": 2,
        "reward_weights": reward_weights or None,
        **(vllm_kwargs or {"use_vllm": False}),
    }


def build_trainer(
    trainer_class: Callable[..., Any],
    to_config: Callable[[JobSpec, Path, list[float], dict], Any],
    inputs: TrainerInputs,
    **method_kwargs: Any,
):
    """An online method's trainer: the job's rewards, the generation engine (said in the log), the starting policy;
    its sampled completions go to the samples table. ``method_kwargs`` are the trainer's own (the dataset, an
    environment)."""
    spec = inputs.spec
    models = {}
    if inputs.reward_models:
        from backend.methods.rewards.model_reward import load_model_rewards

        models = load_model_rewards(inputs.reward_models, inputs.models_dir)
    reward_funcs, weights = reward_functions(spec, models)
    vllm_kwargs, notice = vllm_settings(spec)
    log.info(notice)
    policy = load_policy(spec, inputs.models_dir, inputs.parent_adapter)
    args = to_config(spec, inputs.output_dir, weights, vllm_kwargs)
    # The studio keeps the completions itself (the samples table, from the trainer's ``_logs``). TRL's own logging of
    # them prints a table into train.log and writes a parquet file at every step: 5% of a demo step's time, and a log
    # of thousands of lines. The TRL CLI export keeps ``rollout.log_completions`` as set.
    args.log_completions = False
    trainer = trainer_class(
        args=args,
        reward_funcs=reward_funcs,
        callbacks=inputs.callbacks,
        **method_kwargs,
        **policy.trainer_kwargs(),
    )
    for scorer in models.values():  # scored in batches where the policy trains, as TRL places a reward model
        scorer.to(trainer.accelerator.device)
    trainer.studio_rewards = (reward_funcs, weights)  # the held-out evaluation scores with the same, loaded once
    if spec.rollout.log_completions:
        watch_completions(trainer, inputs.callbacks)
    return trainer


def online_support(**row: Any) -> MethodSupport:
    """A method table row for an online method: what every one shares (prompt-only data, the held-out reward, the
    prompt's rendering, the rollout's plots, monitoring, template and TRL CLI keys), with ``row`` its own fields."""
    shared: dict[str, Any] = {
        "formats": (DataFormat("prompt-only", ("prompt",)),),
        # Kept where the rows have it, whatever the rewards read: the answer-accuracy guard (and the verdict of a job
        # scored by reward models alone) reads the greedy answers against it.
        "optional_columns": ("solution",),
        "evaluate": reward_scores,
        "learning_metrics": learning_metrics,
        "guards": guards,
        "render": render_prompt_row,
        "plots": PLOTS,
        "generation": generation,
        "template_kwargs": template_kwargs,
        "cli_extras": cli_extras,
        "cli_notes": cli_notes,
        "loss_unit": "policy loss",
        "monitored": MONITORED,
        "log_columns": LOG_COLUMNS,
    }
    return MethodSupport(**{**shared, **row})
