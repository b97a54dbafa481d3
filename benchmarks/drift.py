"""Drift from the base of the healthy examples, and of the gamed KTO recipe, for the verdict's threshold.

    python benchmarks/drift.py [sft-demo dpo-demo ... gamed-kto] [--seeds 0,1,2] [--record]
    python benchmarks/drift.py --batching [--record]

Each example runs in-process (benchmarks/learning.py) and prints its verdict's drift: the mean per-token KL of the
tuned model from the base on its own greedy answers to held-out prompts, its interval, and the seconds the
measurement took. ``gamed-kto`` is the KTO recipe that games its gap (beta 0.1, lr 2e-3, 300 steps): its drift must
be far beyond every healthy example's. The threshold (backend/core/learning.py HEALTHY_DRIFT) is set from these rows.

``--batching`` times the measurement alone on the demo model (a LoRA of random B, so every answer runs its whole 96
tokens) for 64 prompts that offer a tool, as an environment job's are: in batches of 8 prompts (the fixed size
before 2026-12-07) and in the batch its vocabulary allows (``backend.training.drift.prompts_per_batch``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.learning import run_example  # noqa: E402

HEALTHY = ("sft-demo", "dpo-demo", "kto-demo", "grpo-demo", "rloo-demo", "grpo-env-demo")
# The recipe of turn four that made KTO's right answers e^8 times less likely (examples/kto-demo.yaml's comment).
GAMED = {
    "gamed-kto": (
        "kto-demo",
        {
            "kto": {"beta": 0.1, "desirable_weight": 1.0, "undesirable_weight": 1.0},
            "training": {"max_steps": 300, "learning_rate": 2e-3, "save_steps": 300},
        },
    )
}


def drift_row(name: str, seed: int) -> tuple[str, str]:
    """Run one example (or the gamed recipe) with ``seed``; (what, figure) of its drift and verdict."""
    example, overrides = GAMED.get(name, (name, None))
    with tempfile.TemporaryDirectory() as tmp:
        job, seconds = run_example(example, Path(tmp), seed, overrides)
    learning = job.artifacts.learning
    drift = learning.drift if learning is not None else None
    if drift is None or drift.mean is None:
        figure = f"no drift: {drift.skipped if drift else job.error or 'no verdict'}"
    else:
        figure = (
            f"KL {drift.mean:.4f} nats/token (±{drift.ci95:.2g}) on {drift.rows} answers, {drift.tokens} tokens, "
            f"measured in {drift.seconds:.1f} s; verdict {learning.verdict}"  # type: ignore[union-attr]
        )
    return f"{name} drift from the base, seed {seed}", f"{figure} (job {seconds:.0f} s)"


def batching_rows() -> list[tuple[str, str]]:
    """Seconds of one drift measurement of 64 tool-offering prompts, batched by 8 and by the vocabulary's rule."""
    import time

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.models.demo import ensure_demo_model
    from backend.training import drift

    with tempfile.TemporaryDirectory() as tmp:
        path = ensure_demo_model(Path(tmp))
        model = get_peft_model(
            AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
            LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", lora_dropout=0.0),
        )
        tokenizer = AutoTokenizer.from_pretrained(path)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    answer = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    tool = {"type": "function", "function": {"name": "submit_answer", "description": "Submit.", "parameters": answer}}
    prompts = [([{"role": "user", "content": f"What is {a} + {a * 7 % 50}?"}], [tool]) for a in range(64)]
    vocab = model.get_output_embeddings().weight.shape[0]
    rows = []
    eight = 8 * 2 * (drift.DRIFT_ANSWER_TOKENS + 1) * vocab * 4  # prompts_per_batch's weight of 8 prompts
    for label, budget in (("batches of 8 prompts", eight), ("one batch", drift.DRIFT_LOGITS_BYTES)):
        drift.DRIFT_LOGITS_BYTES = budget
        began = time.monotonic()
        values, tokens = drift.measure_drift(model, tokenizer, prompts)
        figure = f"{time.monotonic() - began:.1f} s, {tokens} answer tokens, mean KL {sum(values) / len(values):.5f}"
        rows.append((f"drift measurement, demo model, 64 tool prompts, {label}", figure))
    return rows


def main(argv: list[str] | None = None) -> int:
    """Run the named examples (the healthy ones and the gamed recipe by default), print and optionally record."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("examples", nargs="*", default=[*HEALTHY, *GAMED])
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, each example run once per seed")
    parser.add_argument("--record", action="store_true", help="append the rows to docs/benchmarks.md")
    parser.add_argument("--batching", action="store_true", help="time the measurement alone, by batch size")
    args = parser.parse_args(argv)
    from benchmarks.record import record, report

    if args.batching:
        report(batching_rows(), args.record)
        return 0

    for name in args.examples:
        for seed in (int(s) for s in args.seeds.split(",")):
            row = drift_row(name, seed)
            print(f"{row[0]}: {row[1]}", flush=True)
            if args.record:  # row by row: a long run cut short keeps what it measured
                record([row])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
