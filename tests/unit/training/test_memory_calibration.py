"""The memory estimate against measured peaks (benchmarks/memory_calibration.json): within 25% of every row.

GPU rows compare the estimate's tensors with torch's peak allocated and the whole estimate (CUDA context and
allocator reserve included) with nvidia-smi; CPU rows compare the whole estimate with the peak RSS. New rows come
from benchmarks/peak_memory.py (and benchmarks/gpu.py on a lent GPU).
"""

import json

import pytest

from backend.core.spec import parse_spec
from backend.platform.hardware import DeviceInfo
from backend.training.memory import GB, estimate_memory
from tests.helpers import ROOT

TABLE = json.loads((ROOT / "benchmarks" / "memory_calibration.json").read_text())
TOLERANCE = 0.25
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", count=1, total_memory_gb=139.8, free_memory_gb=139.0, bf16=True)
CPU = DeviceInfo(kind="cpu", name="CPU", count=0, total_memory_gb=None, free_memory_gb=None, bf16=False)


def _config(shape: str):
    from transformers import AutoConfig

    fields = dict(TABLE["shapes"][shape])
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def _estimate(row: dict):
    spec = parse_spec(
        {
            "method": row["method"],
            "dataset": {"source": "builtin", "name": "chat-demo"},
            "quantization": {"mode": row["quantization"]},
            "lora": {"r": row["lora_r"]},
            "training": {
                "batch_size": row["batch_size"],
                "max_length": 512,
                "gradient_checkpointing": row["gradient_checkpointing"],
            },
        }
    )
    device = CPU if "peak_rss_gb" in row else H200
    return estimate_memory(spec, _config(row["shape"]), device, sequence_tokens=row["sequence_tokens"])


@pytest.mark.parametrize(
    "row",
    TABLE["rows"],
    ids=lambda r: f"{r['shape']}-{r['quantization']}-gc{int(r['gradient_checkpointing'])}-b{r['batch_size']}",
)
def test_the_estimate_is_within_25_percent_of_the_measured_peak(row):
    estimate = _estimate(row)
    pairs = [
        (estimate.tensor_bytes, row.get("peak_allocated_gb")),
        (estimate.total_bytes, row.get("nvidia_smi_gb")),
        (estimate.total_bytes, row.get("peak_rss_gb")),
    ]
    checked = [(got / GB, measured) for got, measured in pairs if measured is not None]
    assert checked, "a row measures something"
    for got, measured in checked:
        assert abs(got / measured - 1) <= TOLERANCE, (
            f"estimate {got:.2f} GB vs measured {measured} GB ({row['source']})"
        )


def test_the_cuda_context_is_counted_apart_from_the_tensors():
    estimate = _estimate(TABLE["rows"][0])
    labels = [label for label, _ in estimate.breakdown]
    assert "CUDA context and cuBLAS workspaces" in labels
    assert estimate.total_bytes - estimate.tensor_bytes == estimate.runtime_bytes > 0.5 * GB


def test_assuming_every_example_is_max_length_long_overestimates_short_data():
    """What the pre-flight did before: 8 x 512 tokens where chat-demo's batches hold 8 x 37, about twice the peak."""
    row = TABLE["rows"][0]
    short = _estimate(row)
    spec = parse_spec(
        {
            "method": "sft",
            "dataset": {"source": "builtin", "name": "chat-demo"},
            "training": {"batch_size": 8, "max_length": 512, "gradient_checkpointing": True},
        }
    )
    padded = estimate_memory(spec, _config(row["shape"]), H200)
    assert padded.tensor_bytes > 2 * short.tensor_bytes
