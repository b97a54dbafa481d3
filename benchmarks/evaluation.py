"""Times the SFT example's before/after evaluation (base and tuned on its 256 held-out rows) on
builtin:tiny-qwen3-arith, without training: the trainer is built as the worker builds it, then evaluated.

    python benchmarks/evaluation.py [--rows 256] [--repeat 1]

Prints the seconds of each part: the trainer's held-out loss, the per-token loss, the greedy exact match, and the
whole evaluation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def build(data_dir: Path, rows: int, steps: int):
    """(spec, trainer, held-out rows) of the SFT example with ``rows`` held out, as the worker builds them."""
    from backend.api import StudioAPI, load_spec_text
    from backend.training.callbacks import StoreReportingCallback
    from backend.worker import build_trainer

    path = ROOT / "examples" / "sft-demo.yaml"
    spec_dict = load_spec_text(path.read_text(), path.name)
    spec_dict.setdefault("eval", {})["holdout_rows"] = rows
    spec_dict["training"].update(max_steps=steps, save_steps=max(steps, 1))
    api = StudioAPI(data_dir, scheduler="none")
    job = api.submit(spec_dict).job
    spec = api.store.get(job.id).spec
    callback = StoreReportingCallback(api.store, job.id, threading.Event())
    trainer, held_out = build_trainer(spec, api.paths, job.id, [callback], None)
    return spec, trainer, held_out, api


def main(argv: list[str] | None = None) -> int:
    """Build the trainer once and time its evaluation's parts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2, help="training steps before the evaluation (as the worker)")
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    from backend.methods.sft import answer_pair, split_answer
    from backend.models.mixed_batch import BASE_ADAPTER
    from backend.models.scoring import answer_scores, token_nll
    from backend.training.evaluation import evaluate_before_after

    with tempfile.TemporaryDirectory() as tmp:
        spec, trainer, held_out, api = build(Path(tmp), args.rows, args.steps)
        try:
            trainer.train()
            model, tokenizer = trainer.model, trainer.processing_class
            model.eval()
            rows = [held_out[i] for i in range(len(held_out))]
            sides = [model.active_adapter, BASE_ADAPTER]
            pairs = [split_answer(r) for r in rows]
            answered = [answer_pair(p, c) for p, c in pairs]
            timings = {}
            started = time.perf_counter()
            trainer.evaluate()
            with model.disable_adapter():
                trainer.evaluate()
            timings["held-out loss (trainer.evaluate, both sides)"] = time.perf_counter() - started
            started = time.perf_counter()
            token_nll(model, tokenizer, pairs, sides)
            timings["per-token loss (both sides)"] = time.perf_counter() - started
            started = time.perf_counter()
            answer_scores(model, tokenizer, [a[0] for a in answered], [a[1] for a in answered], sides)
            timings["greedy exact match (both sides)"] = time.perf_counter() - started
            started = time.perf_counter()
            evaluate_before_after(trainer, spec, held_out)
            timings["whole evaluation"] = time.perf_counter() - started
        finally:
            api.close()
    print(f"SFT evaluation of {len(rows)} held-out rows on {spec.model.name_or_path}, {torch.get_num_threads()} threads")
    for name, seconds in timings.items():
        print(f"  {name:48s} {seconds:7.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
