"""The studio on a GPU: its old defaults, the auto-tuned studio and bare TRL with the same knobs, through the queue.

    python benchmarks/gpu.py --work /tmp/gpu-bench                 # on a lent GPU (the device tool), ~8 minutes
    python benchmarks/gpu.py --work /tmp/gpu-bench --smoke         # anywhere: a small shape, 2 steps (CPU ok)

For each model shape (randomly initialised from its config, no download; the demo tokenizer; chat-demo, ~30 tokens
a row) it runs SFT with LoRA r=16 on all linear layers:
- "defaults": the studio before auto-tune (auto_tune off: gradient checkpointing on, no packing), batch 8;
- "auto-tuned": the same job with training.auto_tune on (what a user gets today);
- "bare TRL": SFTTrainer with the settings auto-tune chose, no studio (the overhead baseline);
- "auto-tuned 4-bit": the auto-tuned job loaded in 4-bit;
- "auto-tuned, pooled worker" (first shape): the auto-tuned job forked from the pre-imported worker pool, which
  checks that CUDA works in a forked child (backend/worker_pool.py) and measures its submit -> first step.
It prints one table (tokens/s, s/step, peak memory, estimate vs measured, MFU, submit -> first step) and writes it,
with the calibration rows for benchmarks/memory_calibration.json, as JSON to --work/results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.peak_memory import CALIBRATION, GB, build_model  # noqa: E402

SHAPES = {"qwen3-0.6b": 30, "qwen3-4b": 30}  # shape -> optimizer steps
SMOKE_SHAPES = {"qwen3-cpu-probe": 2}


def studio_job(api, model_dir: Path, steps: int, auto_tune: bool, quantization: str = "none") -> dict:
    """Run one SFT job through the queue; its figures as the Jobs tab would show them."""
    from backend.jobs.records import JobStatus

    spec = {
        "method": "sft",
        "model": {"name_or_path": str(model_dir)},
        "dataset": {"source": "builtin", "name": "chat-demo"},
        "quantization": {"mode": quantization},
        "lora": {"r": 16},
        "eval": {"holdout_fraction": 0},
        "training": {
            "max_steps": steps,
            "batch_size": 8,
            "max_length": 1024,
            "save_steps": 10_000,
            "auto_tune": auto_tune,
        },
    }
    submitted = time.time()
    job = api.jobs.submit(spec).job
    while (job := api.core.store.get(job.id)).status not in {
        JobStatus.succeeded,
        JobStatus.failed,
        JobStatus.cancelled,
    }:
        time.sleep(0.5)
    if job.status is not JobStatus.succeeded:
        raise SystemExit(f"job {job.id} {job.status.value}: {job.error}")
    metrics = api.jobs.metrics(job.id)
    first = next((row["ts"] for row in metrics if "loss" in row), None)
    performance = job.artifacts.performance or {}
    tuned = job.artifacts.auto_tune
    return {
        "tokens_per_second": performance.get("tokens_per_second"),
        "step_seconds": performance.get("step_seconds"),
        "peak_memory_gb": performance.get("peak_memory_gb"),
        "peak_memory_kind": performance.get("peak_memory_kind"),
        "mfu": performance.get("mfu"),
        "device": performance.get("device"),
        "estimate_gb": (tuned and tuned.estimate_bytes or 0) / GB or None,
        "estimate_tensor_gb": (tuned and tuned.estimate_tensor_bytes or 0) / GB or None,
        "first_step_s": (first - submitted) if first else None,
        "wall_s": time.time() - submitted,
        "settings": tuned.settings if tuned else {},
        "choices": tuned.choices if tuned else [],
    }


def pooled_job(work: Path, model_dir: Path, steps: int) -> dict:
    """The auto-tuned job in a worker forked from the pre-imported pool (STUDIO_PREIMPORT_WORKERS=1): whether CUDA
    works in the forked child, and its submit -> first step against a fresh interpreter's."""
    import os

    from backend.api import StudioAPI
    from backend.jobs.launchers import PREIMPORT_VAR

    os.environ[PREIMPORT_VAR] = "1"
    api = StudioAPI(work / "data-pooled", scheduler="thread", poll_interval=0.2)
    try:
        launcher = api.core.scheduler.launcher
        deadline = time.time() + 120
        while not os.path.exists(launcher.socket_path) and time.time() < deadline:
            time.sleep(0.5)
        pool_log = work / "data-pooled" / "worker-pool.log"
        if not os.path.exists(launcher.socket_path):  # the row would time a fresh interpreter under the pool's name
            tail = pool_log.read_text(errors="replace")[-2000:] if pool_log.is_file() else "(no worker-pool.log)"
            return {"error": f"the worker pool did not serve within 120 s; its log ends: {tail}"}
        try:
            row = studio_job(api, model_dir, steps, auto_tune=True)
        except SystemExit as exc:  # CUDA failed in the forked child: a row that says so, the rest still runs
            return {"error": str(exc), "choices": [], "settings": {}}
        if getattr(launcher, "refusal", None):
            row["error"] = f"the job ran in a fresh interpreter, not a forked worker: {launcher.refusal}"
        return row
    finally:
        api.close()
        os.environ.pop(PREIMPORT_VAR, None)


def bare_trl(model_dir: Path, steps: int, settings: dict, out: Path) -> dict:
    """SFTTrainer with the knobs auto-tune chose, no studio in the loop."""
    import torch
    from datasets import load_dataset
    from peft import LoraConfig
    from trl import SFTConfig, SFTTrainer

    from backend.data.builtin import BUILTIN_DATASETS

    started = time.time()
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model_kwargs = {"dtype": torch.bfloat16 if cuda else torch.float32}
    if settings.get("training.attn_implementation"):
        model_kwargs["attn_implementation"] = settings["training.attn_implementation"]
    args = SFTConfig(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=settings.get("training.batch_size", 8),
        learning_rate=2e-4,
        logging_steps=1,
        save_steps=10_000,
        report_to="none",
        disable_tqdm=True,
        seed=42,
        bf16=cuda,
        max_length=1024,
        assistant_only_loss=True,
        model_init_kwargs=model_kwargs,
        gradient_checkpointing=bool(settings.get("training.gradient_checkpointing", True)),
        packing=bool(settings.get("sft.packing", False)),
        use_liger_kernel=bool(settings.get("training.use_liger_kernel", False)),
    )
    lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.05, target_modules="all-linear", task_type="CAUSAL_LM")
    trainer = SFTTrainer(
        model=str(model_dir),
        train_dataset=load_dataset("json", data_files=str(BUILTIN_DATASETS["chat-demo"].path), split="train"),
        peft_config=lora,
        args=args,
    )
    step_times: list[float] = []
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def on_step_begin(self, *_, **__):
            self.t = time.perf_counter()

        def on_step_end(self, *_, **__):
            step_times.append(time.perf_counter() - self.t)

    trainer.add_callback(Clock())
    first_step = time.time()
    trainer.train()
    tokens = max((row.get("num_tokens", 0) for row in trainer.state.log_history), default=0)
    row = {
        "tokens_per_second": tokens / sum(step_times) if step_times else None,
        "step_seconds": statistics.median(step_times) if step_times else None,
        "first_step_s": first_step - started,
        "wall_s": time.time() - started,
    }
    if cuda:
        row.update(peak_memory_gb=torch.cuda.max_memory_allocated() / GB, peak_memory_kind="GPU allocated")
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--smoke", action="store_true", help="a small shape and 2 steps: checks the script runs")
    parser.add_argument("--shapes", nargs="*", help="a subset of the shapes")
    parser.add_argument("--out", help="also write results.json here after every row (a run cut short keeps its rows)")
    args = parser.parse_args(argv)

    from backend.api import StudioAPI

    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    shapes = SMOKE_SHAPES if args.smoke else {s: n for s, n in SHAPES.items() if not args.shapes or s in args.shapes}
    table = json.loads(CALIBRATION.read_text())["shapes"]
    api = StudioAPI(work / "data", scheduler="thread", poll_interval=0.2)
    results = []
    try:
        for shape, steps in shapes.items():
            model_dir = build_model(table[shape], work / f"model-{shape}")
            runs = {
                "defaults": studio_job(api, model_dir, steps, auto_tune=False),
                "auto-tuned": studio_job(api, model_dir, steps, auto_tune=True),
            }
            runs["bare TRL"] = bare_trl(model_dir, steps, runs["auto-tuned"]["settings"], work / f"bare-{shape}")
            runs["auto-tuned 4-bit"] = studio_job(api, model_dir, steps, auto_tune=True, quantization="4bit")
            if shape == next(iter(shapes)):
                runs["auto-tuned, pooled worker"] = pooled_job(work, model_dir, steps)
            for name, row in runs.items():
                results.append({"shape": shape, "run": name, **row})
                print(json.dumps(results[-1]), flush=True)
                for folder in {work, Path(args.out or work)}:
                    (folder / "results.json").write_text(json.dumps(results, indent=2))
    finally:
        api.close()
    print(table_markdown(results))
    return 0


def table_markdown(results: list[dict]) -> str:
    def num(value, fmt):
        return format(value, fmt) if isinstance(value, (int, float)) else "-"

    lines = [
        "| shape | run | tokens/s | s/step | peak GB | estimate GB | MFU | submit -> 1st step s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        mfu = f"{r['mfu'] * 100:.1f}%" if isinstance(r.get("mfu"), (int, float)) else "-"
        flag = " (see its error in results.json)" if r.get("error") else ""
        lines.append(
            f"| {r['shape']} | {r['run']}{flag} | {num(r.get('tokens_per_second'), ',.0f')} | "
            f"{num(r.get('step_seconds'), '.3f')} | {num(r.get('peak_memory_gb'), '.2f')} | "
            f"{num(r.get('estimate_gb'), '.2f')} | {mfu} | {num(r.get('first_step_s'), '.1f')} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
