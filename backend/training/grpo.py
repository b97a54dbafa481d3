"""GRPO: translate a JobSpec into TRL's GRPOConfig and build a GRPOTrainer with the job's reward functions."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from backend.spec import JobSpec, SpecError
from backend.training.common import base_training_kwargs, load_policy

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
            raise SpecError([f"grpo.use_vllm: vLLM needs a CUDA GPU and the vllm package in the trainer's environment "
                             f"({VLLM_INSTALL}); set it to auto or off to generate with transformers"])
        return {"use_vllm": False}, ("generation: transformers; vLLM colocate mode needs a CUDA GPU and the vllm "
                                     f"package ({VLLM_INSTALL}), so generation is slower here")
    return (
        {"use_vllm": True, "vllm_mode": "colocate",
         "vllm_gpu_memory_utilization": spec.grpo.vllm_gpu_memory_utilization},
        f"generation: vLLM colocate mode, {spec.grpo.vllm_gpu_memory_utilization:.0%} of GPU memory",
    )


def to_grpo_config(spec: JobSpec, output_dir: Path, reward_weights: list[float],
                   vllm_kwargs: dict | None = None) -> "GRPOConfig":
    """The job's GRPOConfig: the shared training arguments plus sampling, loss, reward weights and vLLM."""
    from trl import GRPOConfig

    g = spec.grpo
    return GRPOConfig(
        **base_training_kwargs(spec, output_dir),
        num_generations=g.num_generations,
        max_completion_length=g.max_completion_length,
        temperature=g.temperature,
        top_p=g.top_p,
        beta=g.beta,
        loss_type=g.loss_type,
        chat_template_kwargs={"enable_thinking": g.enable_thinking} if g.enable_thinking is not None else None,
        log_completions=g.log_completions,
        num_completions_to_print=2,
        reward_weights=reward_weights or None,
        # The environment's loop: how many model turns (tool calls) one episode may take.
        max_tool_calling_iterations=spec.environment.max_tool_calling_iterations if spec.environment.name else None,
        **(vllm_kwargs or {"use_vllm": False}),
    )


def build_grpo_trainer(
    spec: JobSpec, output_dir: Path, models_dir: Path, callbacks: list, dataset: "Dataset",
    parent_adapter: Path | None = None, environment: "ActiveEnvironment | None" = None,
) -> "GRPOTrainer":
    """The trainer; with an environment, TRL runs the multi-turn tool loop and adds the environment's reward."""
    from trl import GRPOTrainer

    from backend.data import conversational_prompts
    from backend.rewards import build_rewards

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
