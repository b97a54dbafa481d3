"""training.auto_tune: the fast settings a job can afford, chosen from the memory estimate and the device.

What the spec leaves empty (gradient checkpointing, SFT packing, Liger kernels, the attention kernel) is decided
here, once, before the trainer is built; what the user set is kept. With auto_tune off the empty fields take TRL's
defaults. Every decision comes with a sentence saying what was chosen and why: the job log and the Jobs tab show
them, so a job that runs slower or faster than expected says so itself.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.spec import JobSpec
from backend.methods.table import support
from backend.platform.hardware import DeviceInfo
from backend.training.memory import (
    GB,
    MemoryEstimate,
    estimate_memory,
    format_bytes,
    memory_budget,
    process_budget_sentence,
    read_total_ram,
)

if TYPE_CHECKING:
    from transformers import PretrainedConfig

    from backend.core.artifacts import JobArtifacts
    from backend.data.loading import JobData

# Pack when a typical example fills at most this fraction of training.max_length.
PACK_WHEN_SHORTER_THAN = 0.25
# training.batch_size: auto on a GPU tries powers of two up to this; on a CPU bigger batches gain little.
AUTO_BATCH_GPU_MAX = 64
AUTO_BATCH_CPU = 4
# Examples sampled to measure lengths (rendered with the chat template, as the trainer tokenizes them).
LENGTH_SAMPLE_ROWS = 64


@dataclass(frozen=True)
class ExampleLengths:
    """Token counts of a sample of the job's examples (for GRPO: its prompts)."""

    longest: int
    median: int


@dataclass(frozen=True)
class Tuning:
    """What auto-tune decided for a job: the tuned spec, one sentence per choice, and its memory estimate."""

    spec: JobSpec  # every speed setting decided
    choices: list[str]  # one sentence per decision
    estimate: MemoryEstimate  # of the tuned job
    budget_bytes: int | None  # what the job may use on this device (memory_budget), when known
    settings: dict[str, Any] = field(default_factory=dict)  # spec path -> the value auto-tune chose

    def describe(self) -> str:
        """The choices as a Markdown list, for the log and the UI."""
        return "\n".join(f"- {choice}" for choice in self.choices)


def installed(module: str) -> bool:
    """Whether ``module`` can be imported here (checked without importing it)."""
    return importlib.util.find_spec(module) is not None


@dataclass
class _Decisions:
    """What ``tune`` has decided so far: spec path -> value, and one sentence per decision."""

    changes: dict[str, Any] = field(default_factory=dict)
    choices: list[str] = field(default_factory=list)

    def decide(self, path: str, value: Any, reason: str) -> None:
        """Set ``path`` to ``value``, saying why."""
        self.changes[path] = value
        self.choices.append(reason)


def tune(
    spec: JobSpec,
    config: PretrainedConfig,
    device: DeviceInfo,
    lengths: ExampleLengths | None,
    total_ram: int | None = None,
    is_installed: Callable[[str], bool] = installed,
) -> Tuning:
    """Decide the empty speed settings of ``spec`` for ``device`` (pure: the caller measures lengths and, on a CPU,
    the machine's RAM)."""
    t = spec.training
    budget = memory_budget(device, total_ram, t.num_processes)
    said = process_budget_sentence(device, budget, t.num_processes)
    decisions = _Decisions(choices=[sentence for sentence in [said] if sentence])
    budget = _leave_room_for_vllm(spec, device, budget, is_installed, decisions)
    if not t.auto_tune:
        _take_trl_defaults(spec, decisions)
    else:
        _decide_kernels(spec, device, is_installed, decisions)
        _decide_packing(spec, device, lengths, decisions)
        if t.batch_size == "auto":
            _decide_batch(spec, config, device, lengths, budget, decisions)
        _decide_checkpointing(spec, config, device, lengths, budget, decisions)
        _rebalance_batch(spec, config, device, lengths, budget, decisions)
    tuned = _apply(spec, decisions.changes)
    return Tuning(tuned, decisions.choices, _estimate(tuned, config, device, lengths), budget, decisions.changes)


def _leave_room_for_vllm(
    spec: JobSpec, device: DeviceInfo, budget: int | None, is_installed: Callable[[str], bool], decisions: _Decisions
) -> int | None:
    """The memory budget left to training once vLLM colocate mode has taken its share of the whole GPU (before
    training allocates anything)."""
    if (
        budget is not None
        and device.kind == "cuda"
        and support(spec.method).generation is not None
        and spec.rollout.use_vllm != "off"
        and is_installed("vllm")
        and device.total_memory_gb
    ):
        kept = int(device.total_memory_gb * GB * spec.rollout.vllm_gpu_memory_utilization)
        budget = max(budget - kept, 0)
        decisions.choices.append(
            f"memory: vLLM colocate keeps {spec.rollout.vllm_gpu_memory_utilization:.0%} of the GPU "
            f"({format_bytes(kept)}) for generation; training plans within the other {format_bytes(budget)}"
        )
    return budget


def _take_trl_defaults(spec: JobSpec, decisions: _Decisions) -> None:
    """auto_tune off: the settings left empty take TRL's defaults."""
    method = support(spec.method)
    defaults = {
        "training.gradient_checkpointing": True,
        "training.use_liger_kernel": False,
        "training.batch_size": method.smallest_batch(spec),
    }
    if method.packing_path is not None:
        defaults[method.packing_path] = False
    for path, value in defaults.items():
        if _get(spec, path) in (None, "auto"):
            decisions.changes[path] = value
    decisions.choices.append(
        "auto-tune is off (training.auto_tune): settings left empty take TRL's defaults "
        "(gradient checkpointing on, no packing, no fused kernels, the model's default attention)"
    )


def _decide_kernels(
    spec: JobSpec, device: DeviceInfo, is_installed: Callable[[str], bool], decisions: _Decisions
) -> None:
    """The attention kernel and Liger's fused kernels, when left empty."""
    t, cuda, decide = spec.training, device.kind == "cuda", decisions.decide
    # Attention: flash attention needs the flash-attn package, a CUDA GPU and 16-bit weights.
    if t.attn_implementation is None:
        if cuda and device.bf16 and is_installed("flash_attn"):
            decide(
                "training.attn_implementation",
                "flash_attention_2",
                "attention: flash_attention_2 (flash-attn is installed on this GPU)",
            )
        else:
            why = "flash-attn is not installed" if cuda else "flash attention needs a CUDA GPU"
            decide("training.attn_implementation", "sdpa", f"attention: sdpa, PyTorch's fused attention ({why})")
    # Liger: a fused linear + cross-entropy never materializes the fp32 logits, the largest term at a large vocabulary.
    if t.use_liger_kernel is None:
        if cuda and is_installed("liger_kernel"):
            decide(
                "training.use_liger_kernel",
                True,
                "Liger kernels: on (fused linear + cross-entropy: the fp32 logits are never held whole)",
            )
        else:
            why = "liger-kernel is not installed" if cuda else "Liger's kernels need a CUDA GPU"
            decide("training.use_liger_kernel", False, f"Liger kernels: off ({why})")


def _decide_packing(spec: JobSpec, device: DeviceInfo, lengths: ExampleLengths | None, decisions: _Decisions) -> None:
    """Packing (SFT), when left empty: short examples padded to the longest in a batch leave the GPU idle; packed,
    a sequence holds many."""
    t, decide = spec.training, decisions.decide
    packing = support(spec.method).packing_path
    if packing is None or _get(spec, packing) is not None:
        return
    if device.kind != "cuda":
        decide(packing, False, f"packing: off (on a CPU packing gains no speed; set {packing} to pack anyway)")
    elif lengths is None or lengths.median > t.max_length * PACK_WHEN_SHORTER_THAN:
        typical = f"~{lengths.median} tokens" if lengths else "of unknown length"
        decide(packing, False, f"packing: off (examples are {typical} against max_length {t.max_length})")
    else:
        per_sequence = max(1, t.max_length // max(lengths.median, 1))
        decide(
            packing,
            True,
            f"packing: on (examples are ~{lengths.median} tokens, so one {t.max_length}-token "
            f"sequence holds about {per_sequence}; best-fit packing keeps them from attending to each other)",
        )


def _decide_checkpointing(
    spec: JobSpec,
    config,
    device: DeviceInfo,
    lengths: ExampleLengths | None,
    budget: int | None,
    decisions: _Decisions,
) -> None:
    """Gradient checkpointing, when left empty: off whenever the job fits without it (it recomputes every layer's
    forward pass)."""
    if spec.training.gradient_checkpointing is not None:
        return
    without = _estimate(
        _apply(spec, {**decisions.changes, "training.gradient_checkpointing": False}), config, device, lengths
    )
    if budget is None or without.total_bytes <= budget:
        where = f" of the {format_bytes(budget)} it may use" if budget else ""
        decisions.decide(
            "training.gradient_checkpointing",
            False,
            "gradient checkpointing: off (the job fits without it: "
            f"{format_bytes(without.total_bytes)}{where}), which saves recomputing the forward pass",
        )
    else:
        decisions.decide(
            "training.gradient_checkpointing",
            True,
            "gradient checkpointing: on (without it the job needs "
            f"{format_bytes(without.total_bytes)}, more than the {format_bytes(budget)} it may use)",
        )


def _rebalance_batch(
    spec: JobSpec,
    config,
    device: DeviceInfo,
    lengths: ExampleLengths | None,
    budget: int | None,
    decisions: _Decisions,
) -> None:
    """On a GPU, more examples per device and fewer accumulation steps, the same effective batch, as far as the
    memory estimate allows."""
    t = spec.training
    if device.kind != "cuda" or t.gradient_accumulation_steps <= 1 or t.batch_size == "auto":
        return
    effective = t.batch_size * t.gradient_accumulation_steps
    for per_device in sorted((d for d in range(t.batch_size + 1, effective + 1) if effective % d == 0), reverse=True):
        trial = {
            **decisions.changes,
            "training.batch_size": per_device,
            "training.gradient_accumulation_steps": effective // per_device,
        }
        if budget is None or _estimate(_apply(spec, trial), config, device, lengths).total_bytes <= budget:
            decisions.changes.update(trial)
            decisions.choices.append(
                f"batch: {per_device} per device x {effective // per_device} accumulation steps "
                f"(was {t.batch_size} x {t.gradient_accumulation_steps}; the same {effective} examples "
                "per optimizer step, fewer and fuller passes)"
            )
            return


def _decide_batch(
    spec: JobSpec,
    config,
    device: DeviceInfo,
    lengths: ExampleLengths | None,
    budget: int | None,
    decisions: _Decisions,
) -> None:
    """training.batch_size: auto. GRPO: one generation group per step (rollouts, not memory, bound its batch).
    A CPU: a small batch. A GPU: the largest power of two that fits without gradient checkpointing when that is
    left to auto-tune (else with it), so the GPU is kept busy."""
    path = "training.batch_size"
    method = support(spec.method)
    if method.generation is not None:
        n = method.smallest_batch(spec)
        decisions.decide(
            path, n, f"batch: {n} per device (auto: one generation group of {method.spec_part}.num_generations)"
        )
        return
    if device.kind != "cuda":
        decisions.decide(
            path,
            AUTO_BATCH_CPU,
            f"batch: {AUTO_BATCH_CPU} per device (auto on a CPU, where bigger batches gain little speed)",
        )
        return
    checkpointing = (
        [False, True] if spec.training.gradient_checkpointing is None else [spec.training.gradient_checkpointing]
    )
    for recompute in checkpointing:
        size = AUTO_BATCH_GPU_MAX
        while size >= method.min_batch:
            trial = {**decisions.changes, path: size, "training.gradient_checkpointing": recompute}
            estimate = _estimate(_apply(spec, trial), config, device, lengths)
            if budget is None or estimate.total_bytes <= budget:
                where = f" of {format_bytes(budget)}" if budget else ""
                decisions.decide(
                    path,
                    size,
                    f"batch: {size} per device (auto: the largest power of two up to "
                    f"{AUTO_BATCH_GPU_MAX} that fits{' with' if recompute else ' without'} gradient "
                    f"checkpointing, {format_bytes(estimate.total_bytes)}{where})",
                )
                return
            size //= 2
    decisions.decide(
        path,
        method.min_batch,
        f"batch: {method.min_batch} per device (auto: not even the smallest batch fits the estimate; expect "
        "out-of-memory)",
    )


def measure_lengths(spec: JobSpec, tokenizer, data: JobData) -> ExampleLengths | None:
    """Token lengths of the first examples of the job's ``data``, rendered as the trainer will render them."""
    from backend.training.preview import preview_dataset

    preview = preview_dataset(spec, tokenizer, data, rows=LENGTH_SAMPLE_ROWS)
    lengths = sorted(row.longest for row in preview.rows)
    if not lengths:
        return None
    return ExampleLengths(longest=lengths[-1], median=lengths[len(lengths) // 2])


def plan(spec: JobSpec, models_dir: Path, data: JobData, tokenizer=None, device: DeviceInfo | None = None) -> Tuning:
    """Tune ``spec`` for this machine: measure its examples (``data``: the prepared job's rows), read the model config
    and the free memory."""
    from backend.models.loading import load_tokenizer, resolve_model
    from backend.platform.hardware import detect_device
    from backend.training.memory import load_model_config

    tokenizer = tokenizer or load_tokenizer(resolve_model(spec.model, models_dir), spec.model)
    device = device or detect_device()
    lengths = measure_lengths(spec, tokenizer, data)
    return tune(
        spec,
        load_model_config(spec, models_dir),
        device,
        lengths,
        total_ram=None if device.kind == "cuda" else read_total_ram(),
    )


def as_run(spec: JobSpec, artifacts: JobArtifacts) -> JobSpec:
    """The spec as the worker ran it: the user's, with auto-tune's choices (``artifacts.auto_tune``) applied."""
    return with_choices(spec, artifacts.auto_tune.settings if artifacts.auto_tune else {})


def with_choices(spec: JobSpec, settings: dict[str, Any]) -> JobSpec:
    """``spec`` with auto-tune's chosen ``settings`` (spec path -> value, ``Tuning.settings``) applied."""
    return _apply(spec, settings) if settings else spec


def record(tuning: Tuning) -> dict[str, Any]:
    """What a job keeps of its tuning (``artifacts.auto_tune``): the sentences, the settings and the estimate."""
    return {
        "choices": tuning.choices,
        "settings": tuning.settings,
        "estimate_bytes": tuning.estimate.total_bytes,
        "estimate_tensor_bytes": tuning.estimate.tensor_bytes,
        "budget_bytes": tuning.budget_bytes,
    }


def _estimate(spec: JobSpec, config, device: DeviceInfo, lengths: ExampleLengths | None) -> MemoryEstimate:
    longest = lengths.longest if lengths else None
    if support(spec.method).generation is not None:
        return estimate_memory(spec, config, device, prompt_tokens=longest)
    return estimate_memory(spec, config, device, sequence_tokens=longest)


def _get(spec: JobSpec, path: str) -> Any:
    part, name = path.split(".")
    return getattr(getattr(spec, part), name)


def _apply(spec: JobSpec, changes: dict[str, Any]) -> JobSpec:
    """``spec`` with ``changes`` (spec path -> value) applied, validated like any spec."""
    data = spec.model_dump()
    for path, value in changes.items():
        part, name = path.split(".")
        data[part][name] = value
    return JobSpec.model_validate(data)
