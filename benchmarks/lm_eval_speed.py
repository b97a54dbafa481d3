"""lm-eval benchmarks on the demo model: 200 items (100 of studio_arith, greedy answers; 100 of studio_choice, four
log-likelihoods each), base and tuned together: one model in memory, the adapter switched between the sides.

    OMP_NUM_THREADS=2 python benchmarks/lm_eval_speed.py [--record]

The target (issue 35) is at most 60 s on 2 CPU cores. The "tuned" side is a LoRA adapter with random weights
(``init_lora_weights=False``): the same work as a trained one. Prints the wall time of the whole run (lm-eval's task
set-up included, model loading not) and the seconds per 100 items of each task on each side; ``--record`` appends
the dated rows to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

ITEMS_PER_TASK = 100
TASKS = ["studio_arith", "studio_choice"]


def main(argv: list[str] | None = None) -> int:
    """Run once, print, and with --record append to docs/benchmarks.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record", action="store_true")
    args = parser.parse_args(argv)
    from peft import LoraConfig, get_peft_model

    from backend.core.spec import ModelSpec, QuantizationSpec
    from backend.models.demo import ARITH_MODEL_ID
    from backend.models.inference import load_for_inference
    from backend.training.benchmarks import run_benchmarks

    model, tokenizer = load_for_inference(ModelSpec(name_or_path=ARITH_MODEL_ID), QuantizationSpec(), ROOT / "data")
    model = get_peft_model(model, LoraConfig(r=16, target_modules="all-linear", init_lora_weights=False))
    steps: list[tuple[float, str]] = []
    started = time.monotonic()
    report = run_benchmarks(
        model,
        tokenizer,
        TASKS,
        ITEMS_PER_TASK,
        {"tuned": "default", "base": "__base__"},
        progress=lambda done, total, text: steps.append((time.monotonic(), text)),
    )
    total = time.monotonic() - started
    items = ITEMS_PER_TASK * len(TASKS)
    rows = [(f"{items} lm-eval items on {ARITH_MODEL_ID}, base and tuned (adapter switched)", f"{total:.1f} s")]
    for i, ((begun, text), (ended, _)) in enumerate(zip(steps, steps[1:])):
        # The first side pays lm-eval's one-time work (task and dataset set-up, first calls); the second is steady.
        first = " (first side: with lm-eval's set-up)" if i < len(TASKS) else ""
        rows.append((f"{text.removeprefix('benchmarks: ')}, per 100 items{first}", f"{(ended - begun):.1f} s"))
    for name, score in report.tasks.items():
        print(f"{name}: base {score.base:.2f}, tuned {score.tuned:.2f} on {score.n} items")
    from benchmarks.record import report

    report(rows, args.record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
