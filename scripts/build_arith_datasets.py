"""Writes the arithmetic datasets (backend/assets/datasets/arith-*.jsonl) from the recipe in backend/arith_data.py.

    python scripts/build_arith_datasets.py

Deterministic: the same recipe and seeds give the same files (tests/test_arith_model.py checks they are current).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend import arith_data  # noqa: E402
from backend.builtin_datasets import BUILTIN_DATASETS_DIR  # noqa: E402


def render(name: str) -> str:
    """One dataset's JSONL text."""
    build, count, seed = arith_data.DATASETS[name]
    return "".join(json.dumps(row) + "\n" for row in build(count, seed))


def main() -> int:
    """Write every arithmetic dataset."""
    for name in arith_data.DATASETS:
        (BUILTIN_DATASETS_DIR / f"{name}.jsonl").write_text(render(name), encoding="utf-8")
        print(f"wrote {name}.jsonl")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
