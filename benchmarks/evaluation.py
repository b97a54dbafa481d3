"""Times the SFT example's before/after evaluation (base and tuned on its 256 held-out rows) on
builtin:tiny-qwen3-arith, without training: the trainer is built as the worker builds it, then evaluated.

    python benchmarks/evaluation.py [--rows 256] [--steps 2] [--record]

Prints, before (16 sequences per generate call) and after (batched greedy generation), the seconds (wall and CPU)
of the greedy exact match and of the whole evaluation, with the scores (the same both times). ``--record`` appends
the wall times to docs/benchmarks.md (benchmarks/record.py).
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
    from backend.data.loading import load_job_data
    from backend.training.callbacks import StoreReportingCallback
    from backend.worker import build_trainer

    path = ROOT / "examples" / "sft-demo.yaml"
    spec_dict = load_spec_text(path.read_text(), path.name)
    spec_dict.setdefault("eval", {})["holdout_rows"] = rows
    spec_dict["training"].update(max_steps=steps, save_steps=max(steps, 1))
    api = StudioAPI(data_dir, scheduler="none")
    job = api.jobs.submit(spec_dict).job
    spec = api.core.store.get(job.id).spec
    callback = StoreReportingCallback(api.core.store, job.id, threading.Event())
    data = load_job_data(spec, api.core.paths.uploads(spec.owner))
    trainer, held_out = build_trainer(spec, api.core.paths, job.id, [callback], None, data)
    return spec, trainer, held_out, api


def main(argv: list[str] | None = None) -> int:
    """Build the trainer once, train a few steps, and time the greedy exact match and the whole evaluation with
    the old 16 sequences per generate call ("before") and the batched generation ("after")."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--steps", type=int, default=2, help="training steps before the evaluation (as the worker)")
    parser.add_argument("--record", action="store_true", help="append the wall times to docs/benchmarks.md")
    args = parser.parse_args(argv)
    import torch

    torch.manual_seed(0)
    from backend.methods.sft import answer_pair, split_answer
    from backend.models import scoring
    from backend.models.mixed_batch import BASE_ADAPTER
    from backend.training.evaluation import evaluate_before_after

    batched = scoring.GENERATION_ROWS
    lines, rows = [], []
    with tempfile.TemporaryDirectory() as tmp:
        spec, trainer, held_out, api = build(Path(tmp), args.rows, args.steps)
        try:
            trainer.train()
            model, tokenizer = trainer.model, trainer.processing_class
            model.eval()
            answered = [answer_pair(*split_answer(held_out[i])) for i in range(len(held_out))]
            prompts, references = [a[0] for a in answered], [a[1] for a in answered]
            sides = [model.active_adapter, BASE_ADAPTER]
            for name, rows_per_call in (("before", scoring.BATCH_ROWS), ("after", batched)):
                scoring.GENERATION_ROWS = rows_per_call
                wall, cpu = time.perf_counter(), time.process_time()
                scores = scoring.answer_scores(model, tokenizer, prompts, references, sides)
                answers = (time.perf_counter() - wall, time.process_time() - cpu)
                wall, cpu = time.perf_counter(), time.process_time()
                evaluate_before_after(trainer, spec, held_out)
                whole = (time.perf_counter() - wall, time.process_time() - cpu)
                rows.append(
                    (
                        f"SFT example's evaluation, {args.rows} held-out rows, base and tuned, {rows_per_call} "
                        f"sequences per generate call ({name}: the call size only, on this code; "
                        "`benchmarks/evaluation.py`)",
                        f"greedy exact match {answers[0]:.1f} s wall, whole evaluation {whole[0]:.1f} s wall",
                    )
                )
                lines.append(
                    f"  {name:6s} ({rows_per_call:3d} sequences per generate call): greedy exact match "
                    f"{answers[0]:6.1f} s wall, {answers[1]:6.1f} s CPU; whole evaluation {whole[0]:6.1f} s wall, "
                    f"{whole[1]:6.1f} s CPU; exact match base {scores[BASE_ADAPTER]['exact_match']:.3f}, "
                    f"tuned {scores[sides[0]]['exact_match']:.3f}"
                )
        finally:
            scoring.GENERATION_ROWS = batched
            api.close()
    print(
        f"SFT evaluation of {len(held_out)} held-out rows on {spec.model.name_or_path}, "
        f"{torch.get_num_threads()} threads"
    )
    print("\n".join(lines))
    if args.record:
        from benchmarks.record import record

        record(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
