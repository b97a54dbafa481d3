"""Writes the arithmetic datasets (backend/assets/datasets/arith-*.jsonl) from the recipe in backend/data/arith.py.

    python scripts/build_arith_datasets.py

The preference (DPO) and feedback (KTO) sets reject the shipped builtin:tiny-qwen3-arith's own wrong answers: its
greedy answer where that is wrong, else the first wrong one of a few samples, else a near miss. Real preference data
is made this way (a model's own answers, judged), and it is what the model needs to unlearn. Deterministic on one
machine: the same recipe, seeds and model give the same files (tests/unit/models/test_arith_model.py checks the others).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.data import arith as arith_data  # noqa: E402
from backend.data.builtin import BUILTIN_DATASETS_DIR  # noqa: E402

ON_POLICY = ("arith-preferences", "arith-feedback")
SAMPLES = 4


def model_mistakes(problems: list[arith_data.Problem]) -> dict[tuple[int, str, int], int]:
    """(a, op, b) -> a wrong result the shipped model gives: greedy first, then up to SAMPLES samples at T=1."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from backend.models.demo import ARITH_MODEL_DIR

    model = AutoModelForCausalLM.from_pretrained(ARITH_MODEL_DIR).eval()
    tokenizer = AutoTokenizer.from_pretrained(ARITH_MODEL_DIR)
    torch.manual_seed(0)
    found: dict[tuple[int, str, int], int] = {}
    for attempt in range(1 + SAMPLES):
        todo = [p for p in problems if (p.a, p.op, p.b) not in found]
        for p, answer in zip(todo, arith_data.model_answers(model, tokenizer, todo, sample=attempt > 0)):
            if answer is not None and answer != p.answer:
                found[(p.a, p.op, p.b)] = answer
    return found


def render(name: str, mistakes: dict | None = None) -> str:
    """One dataset's JSONL text."""
    build, count, seed = arith_data.DATASETS[name]
    rows = build(count, seed, mistakes) if name in ON_POLICY else build(count, seed)
    return "".join(json.dumps(row) + "\n" for row in rows)


def main() -> int:
    """Write every arithmetic dataset."""
    for name in arith_data.DATASETS:
        mistakes = None
        if name in ON_POLICY:
            _, count, seed = arith_data.DATASETS[name]
            mistakes = model_mistakes(arith_data.sample("studio", count, seed))
        (BUILTIN_DATASETS_DIR / f"{name}.jsonl").write_text(render(name, mistakes), encoding="utf-8")
        print(f"wrote {name}.jsonl" + (f" ({len(mistakes)} of the model's own mistakes)" if mistakes else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
