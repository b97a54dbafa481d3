"""The meter that times a trainer's optimizer steps and reads its token count and peak memory while it trains."""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import Callable
from typing import Any

from backend.training.flops import TOKENS_COUNTED, flops_per_token, model_flops_utilization, peak_bf16_flops
from backend.training.memory import GB, parameter_breakdown

log = logging.getLogger(__name__)

# The ETA reads the mean time of this many latest steps: recent enough to follow a run whose steps slow down (GRPO's
# completions grow), long enough to smooth one slow step (a checkpoint save).
ETA_STEPS = 5


def speed(seconds: float, steps: int, tokens: float | None = None, token_seconds: float | None = None) -> dict:
    """A run's speed, the one formula every view reads: s/step is its training time over its steps, tokens/s the
    tokens counted over the training time up to the step they were counted at (``token_seconds``; by default all).

    >>> speed(12.0, 10, 3000, 10.0)
    {'step_seconds': 1.2, 'tokens_per_second': 300.0}
    >>> speed(0.0, 0)
    {'step_seconds': None, 'tokens_per_second': None}
    """
    token_seconds = seconds if token_seconds is None else token_seconds
    return {
        "step_seconds": seconds / steps if steps > 0 else None,
        "tokens_per_second": tokens / token_seconds if tokens and token_seconds > 0 else None,
    }


def extra_forwards(spec) -> int:
    """Forward passes without gradients a method adds per training token (see ``flops_per_token``); 0 without a
    spec."""
    if spec is None:
        return 0
    from backend.methods.table import support

    return support(spec.method).extra_forwards(spec)


def peak_memory() -> dict[str, Any]:
    """The process's peak memory so far: allocated and reserved on CUDA, the peak RSS on a CPU (GiB, as "GB")."""
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return {
            "peak_memory_gb": torch.cuda.max_memory_allocated() / GB,
            "peak_memory_reserved_gb": torch.cuda.max_memory_reserved() / GB,
            "peak_memory_kind": "GPU allocated",
        }
    # ru_maxrss is in KiB on Linux. It is the whole process's peak: model loading and data included.
    return {
        "peak_memory_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB,
        "peak_memory_kind": "CPU RSS",
    }


class PerformanceMeter:
    """Step time, tokens/s, peak memory and MFU of one training run, fed by a TrainerCallback's events.

    Every figure comes from one clock: the time from the start of training to the end of each optimizer step. A
    step's time is the wall-clock time since the previous step ended (the first: since training began), so it holds
    everything the run spent on it: loading the batch, the forward and backward passes of every accumulated
    micro-batch (and GRPO's generation), the optimizer step, logging, reporting and checkpoint saves. The run's
    s/step and tokens/s (:func:`speed`) are its training time over its steps and its tokens over the same time: the
    ``perf/*`` row of a running job, the summary of a finished or cancelled one and the model card say the same
    figure, and it agrees with the wall clock. The ETA (:meth:`eta_seconds`) reads only the recent steps.
    Tokens are :data:`backend.training.flops.TOKENS_COUNTED`: the trainers log a running total (``num_tokens``).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter):
        self.clock = clock
        self.step_seconds: list[float] = []  # each step's own time, in order
        self.tokens = 0  # counted since training began (this attempt)
        self.seconds = 0.0  # training time so far: from its start to the end of the latest step
        self._last_step_end = clock()  # begin() restarts it when training begins
        self._token_seconds = 0.0  # training time up to the step of the latest token count
        self._last_tokens: float | None = None
        self.device = "CPU"
        self.devices = 1
        self.flops_per_token: float | None = None
        self.peak_flops: float | None = None

    def start(self, args, state, model, spec) -> None:
        """Read the device and the model's FLOPs per token once training begins, and start the clock."""
        self.devices = max(1, int(getattr(args, "world_size", 1) or 1))
        try:
            import torch

            on_gpu = model is not None and next(model.parameters()).device.type == "cuda"
            if on_gpu:
                self.device = torch.cuda.get_device_name(torch.cuda.current_device())
            # The peak is a bf16 figure: a run in fp32 or fp16 has no MFU against it.
            self.peak_flops = peak_bf16_flops(self.device) if on_gpu and getattr(args, "bf16", False) else None
            self.flops_per_token = flops_per_token(
                parameter_breakdown(model.config),
                trains_base_weights=not hasattr(model, "peft_config"),  # a PeftModel's base weights are frozen
                recomputes_forward=bool(getattr(args, "gradient_checkpointing", False)),
                extra_forwards=extra_forwards(spec),
            )
        except Exception as exc:  # noqa: BLE001 - the figures must never fail a job
            log.warning("no MFU for this run: %s", exc)
            self.flops_per_token = None
        self.begin(state.num_input_tokens_seen or 0)  # GRPO's running total resumes from a checkpoint

    def begin(self, tokens_seen: float = 0) -> None:
        """Training begins now, with ``tokens_seen`` already counted (a resumed run's total)."""
        self._last_step_end = self.clock()
        self._last_tokens = float(tokens_seen)

    def step_end(self) -> None:
        """An optimizer step just ended: its time runs from the previous step's end."""
        now = self.clock()
        self.step_seconds.append(now - self._last_step_end)
        self.seconds += now - self._last_step_end
        self._last_step_end = now

    def count_tokens(self, total: Any) -> None:
        """Read a logged running total of tokens (``num_tokens``), counted up to the step that just ended."""
        if not isinstance(total, (int, float)) or self._last_tokens is None or total < self._last_tokens:
            return
        self.tokens += int(total - self._last_tokens)
        self._last_tokens = float(total)
        self._token_seconds = self.seconds

    def speed(self) -> dict[str, float | None]:
        """The run's s/step and tokens/s so far (:func:`speed`): one formula for every view."""
        return speed(self.seconds, len(self.step_seconds), self.tokens, self._token_seconds)

    def eta_seconds(self, steps_left: int) -> float | None:
        """Time for ``steps_left`` more steps at the recent rate: the mean of the last :data:`ETA_STEPS` steps'
        times, so a slow start (loading, warm-up) fades and a run whose steps grow (GRPO's completions) is
        followed. None before the first step."""
        recent = self.step_seconds[-ETA_STEPS:]
        if not recent:
            return None
        return max(steps_left, 0) * sum(recent) / len(recent)

    def figures(self, logs: dict[str, Any]) -> dict[str, Any]:
        """The ``perf/*`` metrics of a training log row (one with a ``loss``); {} for any other row."""
        if "loss" not in logs or "train_runtime" in logs or not self.step_seconds:
            return {}
        self.count_tokens(logs.get("num_tokens"))
        figures = self.speed()
        row: dict[str, Any] = {
            "perf/step_seconds": figures["step_seconds"],
            "perf/tokens_per_second": figures["tokens_per_second"],
        }
        memory = peak_memory()
        row.update({f"perf/{key}": value for key, value in memory.items()})
        row["perf/mfu"] = model_flops_utilization(
            figures["tokens_per_second"], self.flops_per_token, self.peak_flops, self.devices
        )
        row["perf/device"] = self.device
        return row

    def summary(self) -> dict[str, Any] | None:
        """The run's figures for ``artifacts.performance``; None when no step finished."""
        if not self.step_seconds:
            return None
        figures = self.speed()
        return {
            **figures,
            "steps": len(self.step_seconds),
            "seconds": self.seconds,
            "tokens": self.tokens,
            "tokens_counted": TOKENS_COUNTED,
            **peak_memory(),
            "mfu": model_flops_utilization(
                figures["tokens_per_second"], self.flops_per_token, self.peak_flops, self.devices
            ),
            "flops_per_token": self.flops_per_token,
            "peak_flops_per_device": self.peak_flops,
            "device": self.device,
            "devices": self.devices,
        }
