"""A training job's speed figures: FLOPs per token, the device's peak, MFU, and the one line that shows them.

Pure functions (no torch): the worker's meter (``backend/training/meter.py``) computes the figures, the Jobs
tab and the model card format them with :func:`performance_line`.
"""

from __future__ import annotations

import math
import re
from typing import Any

from backend.training.memory import ParameterCount

# Peak dense bf16 tensor-core FLOP/s (TFLOP/s) by GPU, from NVIDIA's datasheets, which print the figure "with
# sparsity": the dense figure is half of it. Matched on torch.cuda.get_device_name() with "NVIDIA "/"Tesla " cut
# off; first match wins, so a variant listed before its family is never read as the family. A GPU not listed
# (or listed with None) gets no MFU: a made-up denominator would be worse than none.
PEAK_BF16_TFLOPS: list[tuple[str, float | None]] = [
    (r"H200 NVL", None),  # a different power envelope than the SXM part; not in this table
    (r"H200\b", 989.5),  # H200 SXM datasheet: BF16 Tensor Core 1,979 TFLOPS with sparsity
    (r"H100 NVL", None),
    (r"H100 PCIe", 756.5),  # H100 datasheet, PCIe column: 1,513 with sparsity
    (r"H100\b.*\b(SXM|HBM3)", 989.5),  # H100 SXM ("NVIDIA H100 80GB HBM3"): 1,979 with sparsity
    (r"A100\b", 312.0),  # A100 datasheet (SXM and PCIe): BF16 Tensor Core 312, 624 with sparsity
    (r"L40S\b", 362.05),  # L40S datasheet: 362.05, 733 with sparsity
    (r"L4\b", 121.0),  # L4 datasheet: 242 with sparsity
    (r"A10\b", 125.0),  # A10 datasheet: 125, 250 with sparsity. Not the A10G (AWS's variant, no public datasheet)
    (r"T4\b", None),  # Turing has no bf16 (its 65 TFLOP/s is fp16); the studio trains in fp32 there
]

TOKENS_COUNTED = "non-padding training tokens (prompt + completion for GRPO), as TRL counts them in num_tokens"


def peak_bf16_flops(device_name: str | None) -> float | None:
    """The device's peak dense bf16 FLOP/s, or None when it is a CPU or a GPU this table does not know.

    >>> peak_bf16_flops("NVIDIA H100 PCIe"), peak_bf16_flops("NVIDIA A10G"), peak_bf16_flops("CPU")
    (756500000000000.0, None, None)
    """
    if not device_name:
        return None
    name = re.sub(r"^(NVIDIA|Tesla)\s+", "", device_name.strip(), flags=re.IGNORECASE)
    for pattern, tflops in PEAK_BF16_TFLOPS:
        if re.match(pattern, name, flags=re.IGNORECASE):
            return tflops * 1e12 if tflops else None
    return None


def matmul_parameters(params: ParameterCount) -> int:
    """The weights every token is multiplied by: the decoder layers' projections and the LM head (also when tied).

    The embedding lookup multiplies nothing, so the input embeddings are not counted; norms are negligible.
    """
    return params.linear + (params.lm_head or params.embeddings)


def flops_per_token(
    params: ParameterCount, *, trains_base_weights: bool, recomputes_forward: bool, extra_forwards: int = 0
) -> float:
    """Training FLOPs per token from the model's parameter count N (:func:`matmul_parameters`).

    A matrix multiply costs 2 FLOPs per weight per token, so each pass over the weights is 2N:
    - the forward pass: 2N;
    - the backward pass's gradients for the activations: 2N;
    - the backward pass's gradients for the weights: 2N, only when the base weights train (full fine-tuning).
      LoRA freezes the base, so there are none (the adapters' own FLOPs, r << hidden, are left out);
    - gradient checkpointing recomputes the forward during the backward: another 2N;
    - ``extra_forwards`` passes without gradients: DPO's reference model, GRPO's generation (prefill and decoding
      cost about 2N per prompt or completion token) and its reference model when the KL beta is above 0.
    So full fine-tuning is 6N (8N with checkpointing) and LoRA 4N (6N with checkpointing), plus 2N per extra
    forward. The attention's sequence-length term (about 12 x layers x hidden x context per token) is left out:
    small at the short contexts fine-tuning uses, so the MFU slightly understates long-context runs.
    """
    passes = 2 + (1 if trains_base_weights else 0) + (1 if recomputes_forward else 0) + extra_forwards
    return 2.0 * matmul_parameters(params) * passes


def model_flops_utilization(
    tokens_per_second: float | None, flops_per_token_: float | None, peak_flops: float | None, devices: int = 1
) -> float | None:
    """Achieved FLOP/s over the devices' peak (a fraction); None when any figure is unknown."""
    if not tokens_per_second or not flops_per_token_ or not peak_flops or devices < 1:
        return None
    return tokens_per_second * flops_per_token_ / (peak_flops * devices)


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def performance_line(figures: dict[str, Any] | None) -> str:
    """One line for a job's figures (the summary in ``artifacts.performance`` or :func:`live_figures`).

    >>> performance_line({"tokens_per_second": 1234.4, "step_seconds": 0.523, "peak_memory_gb": 2.14,
    ...                   "peak_memory_kind": "GPU allocated", "mfu": 0.0342, "device": "NVIDIA H200"})
    '1,234 tokens/s · 0.52 s/step · peak 2.1 GB GPU allocated · MFU 3.4% · NVIDIA H200'
    """
    if not figures:
        return ""
    parts = []
    tokens = _finite(figures.get("tokens_per_second"))
    if tokens is not None:
        parts.append(f"{tokens:,.0f} tokens/s")
    step = _finite(figures.get("step_seconds"))
    if step is not None:
        parts.append(f"{step:.2f} s/step" if step < 100 else f"{step:,.0f} s/step")
    memory = _finite(figures.get("peak_memory_gb"))
    if memory is not None:
        parts.append(f"peak {memory:.1f} GB {figures.get('peak_memory_kind') or ''}".rstrip())
    mfu = _finite(figures.get("mfu"))
    if mfu is not None:
        parts.append(f"MFU {mfu * 100:.1f}%" if mfu >= 0.001 else f"MFU {mfu * 100:.2g}%")
    if parts and figures.get("device"):
        parts.append(str(figures["device"]))
    return " · ".join(parts)


def live_figures(metrics: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The newest logged ``perf/*`` figures of a running job, in the shape :func:`performance_line` reads."""
    for row in reversed(metrics):
        if "perf/step_seconds" in row:
            return {
                "tokens_per_second": row.get("perf/tokens_per_second"),
                "step_seconds": row.get("perf/step_seconds"),
                "peak_memory_gb": row.get("perf/peak_memory_gb"),
                "peak_memory_kind": row.get("perf/peak_memory_kind"),
                "mfu": row.get("perf/mfu"),
                "device": row.get("perf/device"),
            }
    return None
