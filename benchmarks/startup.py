"""Where a short job's wall time goes: submit -> worker start, imports, dataset, model + data preparation, first step,
training, save and the before/after evaluation, read from the job's own records (store timestamps, metrics, log).

    python benchmarks/startup.py [--methods sft dpo grpo] [--steps 4] [--holdout 8] [--repeats 1]

Runs each job through the real queue (a scheduler thread spawning ``python -m backend.worker``) on the demo model,
offline. Each phase ends at the worker's log line (or metric row) that marks it:

    queue      submit -> the scheduler claims the job (started_at)
    spawn      claim -> "worker started" (process start, interpreter, backend modules)
    imports    -> "job ...: METHOD of ..." (torch / transformers / the TrainerCallback)
    dataset    -> "dataset ready" (load, map, hold-out split)
    trainer    -> "trainer ready" (model load, tokenization, TRL set-up)
    1st step   -> the metric row of step 1 (the first optimizer step, logged)
    training   -> the row with train_runtime (the remaining steps)
    save       -> "saved the adapter"
    evaluation -> "evaluation: ..." (base and tuned on the held-out rows)
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from backend.api import StudioAPI  # noqa: E402 - after the path, so it runs from anywhere
from backend.jobs.records import JobStatus  # noqa: E402
from backend.models.demo import ensure_demo_model  # noqa: E402

DATASETS = {"sft": "chat-demo", "dpo": "preferences-demo", "grpo": "math-demo"}
LOG_MARKS = {  # phase -> the start of the worker log message that ends it
    "spawn": "worker started",
    "imports": "job ",
    "dataset": "dataset ready",
    "trainer": "trainer ready",
    "save": "saved the adapter",
    "evaluation": "evaluation: ",
}
PHASES = ["queue", "spawn", "imports", "dataset", "trainer", "1st step", "training", "save", "evaluation"]
LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO studio\.worker: (.*)$")


def _log_marks(log_file: Path) -> dict[str, float]:
    marks: dict[str, float] = {}
    for line in log_file.read_text(errors="replace").splitlines():
        match = LINE.match(line)
        if not match:
            continue
        ts = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        for phase, prefix in LOG_MARKS.items():
            if phase not in marks and match.group(2).startswith(prefix):
                marks[phase] = ts
    return marks


def run(api: StudioAPI, method: str, steps: int, holdout: int) -> dict[str, float]:
    spec = {
        "method": method,
        "model": {"name_or_path": "builtin:tiny-qwen3"},
        "dataset": {"source": "builtin", "name": DATASETS[method]},
        "training": {"max_steps": steps, "batch_size": 4, "max_length": 256, "save_steps": 10_000, "seed": 42},
        "grpo": {"num_generations": 4, "max_completion_length": 32, "rewards": [{"name": "accuracy"}]},
        "eval": {"holdout_rows": holdout},
    }
    submitted = time.time()
    job_id = api.jobs.submit(spec).job.id
    while not (job := api.jobs.get_job(job_id)).status.finished:
        time.sleep(0.25)  # gently: this process shares the cores with the worker
    assert job.status is JobStatus.succeeded, job.error
    assert "error" not in job.artifacts.evaluation, job.artifacts.evaluation
    metrics = api.jobs.metrics(job_id)
    marks = _log_marks(Path(job.artifacts.log_file))
    ends = {
        "queue": job.started_at,
        "spawn": marks["spawn"],
        "imports": marks["imports"],
        "dataset": marks["dataset"],
        "trainer": marks["trainer"],
        "1st step": next(m["ts"] for m in metrics if m.get("step") == 1),
        "training": next(m["ts"] for m in metrics if "train_runtime" in m),
        "save": marks["save"],
        "evaluation": marks["evaluation"],
    }
    phases, start = {}, submitted
    for phase in PHASES:
        phases[phase] = ends[phase] - start
        start = ends[phase]
    phases["submit -> 1st step"] = ends["1st step"] - submitted
    phases["whole job"] = job.finished_at - submitted
    return phases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", choices=list(DATASETS), default=["sft", "grpo"])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--holdout", type=int, default=8, help="held-out rows for the before/after evaluation")
    parser.add_argument("--repeats", type=int, default=1)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        ensure_demo_model(data_dir / "models")
        api = StudioAPI(data_dir, scheduler="thread")
        try:
            results = {m: [run(api, m, args.steps, args.holdout) for _ in range(args.repeats)] for m in args.methods}
        finally:
            api.close()
    print(
        f"\nseconds per phase, demo model, {args.steps} steps x batch 4, {args.holdout} held-out rows, "
        f"median of {args.repeats}, {os.cpu_count()} CPU cores"
    )
    print(f"{'phase':<20}" + "".join(f"{m:>9}" for m in results))
    for phase in PHASES + ["submit -> 1st step", "whole job"]:
        medians = (statistics.median(r[phase] for r in rows) for rows in results.values())
        print(f"{phase:<20}" + "".join(f"{m:9.2f}" for m in medians))


if __name__ == "__main__":
    main()
