"""Measure one SFT job's peak memory with the studio's own trainer, on a randomly initialised model of a given shape.

    python benchmarks/peak_memory.py --shape qwen3-0.6b --batch-size 8 --gradient-checkpointing off --work /tmp/pm

Prints one JSON row in the form of benchmarks/memory_calibration.json: the configuration, the measured peak
(torch.cuda.max_memory_allocated on a GPU, the process's peak RSS on a CPU) and the estimate for it. Used by
tests/unit/training/test_memory_calibration.py on CPU and by benchmarks/gpu.py on a lent GPU. Nothing is downloaded: the
model is built from its config, and the tokenizer and data are the demo model's and chat-demo.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CALIBRATION = ROOT / "benchmarks" / "memory_calibration.json"
GB = 2**30


def build_model(shape: dict, target: Path) -> Path:
    """A randomly initialised model of ``shape`` with the demo tokenizer, saved once under ``target``."""
    if (target / "config.json").is_file():
        return target
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from backend.models.demo import ensure_demo_model

    demo = ensure_demo_model(target.parent / "demo")
    fields = {k: v for k, v in shape.items() if k != "model_type"}
    config = AutoConfig.for_model(shape["model_type"], **fields)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):  # a 4B init takes minutes on a CPU
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(target)
    del model
    AutoTokenizer.from_pretrained(demo).save_pretrained(target)
    return target


def measure(args) -> dict:
    import torch

    from backend.core.spec import parse_spec
    from backend.data.loading import load_training_dataset
    from backend.jobs.store import JobStore
    from backend.methods.sft import build_sft_trainer
    from backend.platform.hardware import detect_device
    from backend.training.callbacks import StoreReportingCallback
    from backend.training.memory import estimate_memory, load_model_config

    shape = json.loads(CALIBRATION.read_text())["shapes"][args.shape]
    work = Path(args.work)
    model_dir = build_model(shape, work / f"model-{args.shape}")
    spec = parse_spec(
        {
            "method": "sft",
            "model": {"name_or_path": str(model_dir)},
            "dataset": {"source": "builtin", "name": "chat-demo"},
            "quantization": {"mode": args.quantization},
            "lora": {"r": 16},
            "training": {
                "max_steps": args.steps,
                "batch_size": args.batch_size,
                "max_length": 512,
                "save_steps": 1000,
                "gradient_checkpointing": args.gradient_checkpointing == "on",
                "auto_tune": False,
            },
        }
    )
    store = JobStore(work / "db.sqlite3")
    job = store.add(spec)
    dataset, fmt = load_training_dataset(spec.dataset, spec.method)
    lengths: list[int] = []
    trainer = build_sft_trainer(
        spec, work / "out", work, [StoreReportingCallback(store, job.id, threading.Event())], dataset, fmt
    )
    collate = trainer.data_collator

    def counting(batch):
        out = collate(batch)
        lengths.append(int(out["input_ids"].shape[-1]))
        return out

    trainer.data_collator = counting
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    trainer.train()
    device = detect_device()
    sequence_tokens = round(sum(lengths) / len(lengths)) if lengths else None
    estimate = estimate_memory(spec, load_model_config(spec, work), device, sequence_tokens=sequence_tokens)
    row = {
        "source": f"{device.describe()}, the studio's trainer, torch {torch.__version__}",
        "shape": args.shape,
        "method": "sft",
        "quantization": args.quantization,
        "lora_r": 16,
        "gradient_checkpointing": args.gradient_checkpointing == "on",
        "batch_size": args.batch_size,
        "sequence_tokens": sequence_tokens,
        "estimate_tensor_gb": round(estimate.tensor_bytes / GB, 3),
        "estimate_total_gb": round(estimate.total_bytes / GB, 3),
    }
    if cuda:
        row["peak_allocated_gb"] = round(torch.cuda.max_memory_allocated() / GB, 3)
    else:
        row["peak_rss_gb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", required=True, help="a shape of benchmarks/memory_calibration.json")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--gradient-checkpointing", choices=["on", "off"], default="on")
    parser.add_argument("--quantization", choices=["none", "4bit"], default="none")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--work", required=True, help="a folder for the model, the store and the outputs")
    args = parser.parse_args(argv)
    print(json.dumps(measure(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
