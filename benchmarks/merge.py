"""Merge and save of a Qwen3-0.6B-shaped model with a LoRA adapter on CPU: the merged export's cost (target <= 30 s).

    python benchmarks/merge.py            # prints the figures; about a minute on 2 cores, 1.2 GB in a temp folder
    python benchmarks/merge.py --record   # also appends a dated row to docs/benchmarks.md

The model has Qwen3-0.6B's sizes (hidden 1024, 28 layers, 16 heads, 8 KV heads, intermediate 3072, vocabulary 151,936,
tied embeddings) with random bf16 weights, built locally; the adapter is LoRA r=16 on every linear layer, its B
matrices made non-zero so the merge has work to do. Timed: peft's ``merge_and_unload`` and ``save_pretrained``
(safetensors), as ``backend/workflows/export.py`` runs them; building the model is not timed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
TARGET_S = 30.0


def qwen3_06b_shape():
    """A Qwen3-0.6B-shaped causal LM with random bf16 weights (no download)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        intermediate_size=3072,
        vocab_size=151936,
        max_position_embeddings=40960,
        tie_word_embeddings=True,
        dtype="bfloat16",
    )
    torch.manual_seed(0)
    return Qwen3ForCausalLM(config).to(torch.bfloat16)


def with_adapter(model):
    """The model with LoRA r=16 on every linear layer, B matrices random so the merged weights differ."""
    import torch
    from peft import LoraConfig, get_peft_model

    peft_model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.01)
    return peft_model


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true", help="append the figure to docs/benchmarks.md")
    args = parser.parse_args()

    started = time.monotonic()
    peft_model = with_adapter(qwen3_06b_shape())
    params = sum(p.numel() for p in peft_model.base_model.model.parameters() if p.requires_grad is False)
    print(f"built in {time.monotonic() - started:.1f} s ({params / 1e6:.0f} M base parameters, bf16)", flush=True)

    with tempfile.TemporaryDirectory(prefix="merge-bench-") as scratch:
        t0 = time.monotonic()
        merged = peft_model.merge_and_unload()
        t1 = time.monotonic()
        merged.save_pretrained(scratch, safe_serialization=True)
        t2 = time.monotonic()
        size = sum(f.stat().st_size for f in Path(scratch).iterdir())
    merge_s, save_s, total = t1 - t0, t2 - t1, t2 - t0
    verdict = "within" if total <= TARGET_S else "over"
    figure = (
        f"merge + save of a Qwen3-0.6B-shaped bf16 model with LoRA r=16 on all linear layers: {total:.1f} s "
        f"(merge {merge_s:.1f} s, save {save_s:.1f} s, {size / 2**30:.2f} GiB safetensors; {verdict} the "
        f"{TARGET_S:.0f} s target; `benchmarks/merge.py`)"
    )
    print(figure)
    if args.record:
        from benchmarks.record import record

        record([("merge + save, Qwen3-0.6B shape (`benchmarks/merge.py`)", figure)])
    return 0 if total <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
