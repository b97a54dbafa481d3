"""The meter that times a trainer's optimizer steps and reads its token count and peak memory while it trains."""

from __future__ import annotations

import logging
import resource
import statistics
import time
from typing import Any

from backend.training.flops import TOKENS_COUNTED, flops_per_token, model_flops_utilization, peak_bf16_flops
from backend.training.memory import GB, parameter_breakdown

log = logging.getLogger(__name__)


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

    A step's time runs from the end of the previous step's bookkeeping (its logging, evaluation or checkpoint save,
    which are not training) to the end of its optimizer step: it includes loading the batch, the forward and
    backward passes of every accumulated micro-batch (and GRPO's generation) and the optimizer step.
    Tokens are :data:`backend.training.flops.TOKENS_COUNTED`: the trainers log a running total (``num_tokens``),
    whose growth over a logging interval divided by the steps' time gives tokens/s.
    """

    def __init__(self):
        self.step_seconds: list[float] = []
        self.tokens = 0
        self._mark = time.perf_counter()
        self._interval: list[float] = []
        self._last_tokens: float | None = None
        self.device = "CPU"
        self.devices = 1
        self.flops_per_token: float | None = None
        self.peak_flops: float | None = None

    def start(self, args, state, model, spec) -> None:
        """Read the device and the model's FLOPs per token once training begins."""
        self._last_tokens = float(state.num_input_tokens_seen or 0)  # GRPO's running total resumes from a checkpoint
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
        self.mark()

    def mark(self) -> None:
        """The end of a step's bookkeeping: the next step's clock starts here."""
        self._mark = time.perf_counter()

    def step_end(self) -> None:
        """Record the time of the step that just ended."""
        seconds = time.perf_counter() - self._mark
        self.step_seconds.append(seconds)
        self._interval.append(seconds)

    def figures(self, logs: dict[str, Any]) -> dict[str, Any]:
        """The ``perf/*`` metrics of a training log row (one with a ``loss``); {} for any other row."""
        if "loss" not in logs or "train_runtime" in logs or not self._interval:
            return {}
        seconds, steps = sum(self._interval), len(self._interval)
        self._interval = []
        row: dict[str, Any] = {"perf/step_seconds": seconds / steps}
        total = logs.get("num_tokens")
        if isinstance(total, (int, float)) and self._last_tokens is not None and total >= self._last_tokens:
            grown, self._last_tokens = total - self._last_tokens, float(total)
            self.tokens += int(grown)
            if seconds > 0:
                row["perf/tokens_per_second"] = grown / seconds
        mfu = model_flops_utilization(
            row.get("perf/tokens_per_second"), self.flops_per_token, self.peak_flops, self.devices
        )
        memory = peak_memory()
        row.update({f"perf/{key}": value for key, value in memory.items()})
        row["perf/mfu"] = mfu
        row["perf/device"] = self.device
        return row

    def summary(self) -> dict[str, Any] | None:
        """The run's figures for ``artifacts.performance``; None when no step finished."""
        if not self.step_seconds:
            return None
        trained = sum(self.step_seconds)
        tokens_per_second = self.tokens / trained if self.tokens and trained > 0 else None
        return {
            "tokens_per_second": tokens_per_second,
            "step_seconds": statistics.median(self.step_seconds),
            "steps": len(self.step_seconds),
            "tokens": self.tokens,
            "tokens_counted": TOKENS_COUNTED,
            **peak_memory(),
            "mfu": model_flops_utilization(tokens_per_second, self.flops_per_token, self.peak_flops, self.devices),
            "flops_per_token": self.flops_per_token,
            "peak_flops_per_device": self.peak_flops,
            "device": self.device,
            "devices": self.devices,
        }
