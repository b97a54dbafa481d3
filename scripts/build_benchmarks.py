"""Writes the demo models' offline benchmark tasks into backend/assets/benchmarks/ (lm-eval reads them as JSON files).

    python scripts/build_benchmarks.py [--out backend/assets/benchmarks]

- ``studio_arith.jsonl``: 200 problems of the arithmetic recipe's ``pretrain`` part (backend/data/arith.py), the part
  builtin:tiny-qwen3-arith learnt and no shipped dataset holds, as ``prompt`` + ``solution`` rows: the same layout as
  a user's own held-out rows, scored by GRPO's accuracy checker.
- ``studio_choice.jsonl``: 200 other problems of the ``pretrain`` part as multiple choice: the right answer among three
  near misses (lm-eval ranks the four by log-likelihood; chance is 25%). No demo recipe trains this: they train greedy
  answers on the ``studio`` part. Probed on the arith model (measured 2026-12-05, 300 items each): 49% here; "which is
  larger, a or b" 55% and "which is smaller" 50%, i.e. no skill beyond arithmetic, so this is the one kept as the
  skill that no recipe trains.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.core.benchmarks import BENCHMARK_ASSETS  # noqa: E402
from backend.data import arith  # noqa: E402

ITEMS = 200


def arith_rows(seed: int = 7) -> list[dict]:
    """Pre-training-part problems with their solution as TRL's accuracy reward reads it."""
    return [{"prompt": arith.prompt_of(p), "solution": f"${p.answer}$"} for p in arith.sample("pretrain", ITEMS, seed)]


def choice_rows(seed: int = 11) -> list[dict]:
    """Four answers in the fixed format, one right; the near misses a weak model makes (one, two or ten off)."""
    rng = random.Random(seed)
    rows = []
    taken = {(p.a, p.op, p.b) for p in arith.sample("pretrain", ITEMS, 7)}  # studio_arith's items stay apart
    pool = [p for p in arith.sample("pretrain", 3 * ITEMS, seed) if (p.a, p.op, p.b) not in taken][:ITEMS]
    for p in pool:
        wrong: set[int] = set()
        while len(wrong) < 3:
            wrong.add(p.answer + rng.choice([-10, -2, -1, 1, 2, 10]))
        results = [p.answer, *sorted(wrong)]
        rng.shuffle(results)
        choices = [arith.answer_text(p.a, p.op, p.b, r) for r in results]
        rows.append({"question": p.question, "choices": choices, "label": results.index(p.answer)})
    return rows


def main(argv: list[str] | None = None) -> int:
    """Write both files."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BENCHMARK_ASSETS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, rows in (("studio_arith", arith_rows()), ("studio_choice", choice_rows())):
        (args.out / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"wrote {len(rows)} rows to {args.out / name}.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
