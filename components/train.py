"""Train tab (first version): queue an SFT job on a model and dataset, and see the queue."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import StudioAPI
from backend.builtin_datasets import BUILTIN_DATASETS
from backend.demo_model import DEMO_MODEL_ID
from backend.spec import SpecError, default_model, field_help

JOB_COLUMNS = ["id", "status", "method", "model", "progress", "error"]


@dataclass
class TrainHandles:
    jobs_table: gr.Dataframe
    status: gr.Markdown


def _jobs_rows(api: StudioAPI) -> list[list[str]]:
    rows = []
    for job in reversed(api.list_jobs()):
        p = job.progress
        progress = f"{p['step']}/{p['total_steps']}" if p.get("total_steps") else ""
        rows.append([job.id, job.status.value, job.spec.method.value, job.spec.model.name_or_path, progress,
                     (job.error or "").splitlines()[0] if job.error else ""])
    return rows


def build(api: StudioAPI) -> TrainHandles:
    with gr.Row():
        model = gr.Dropdown(
            choices=[DEMO_MODEL_ID, "Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen3-0.6B"],
            value=default_model(),
            allow_custom_value=True,
            label="Base model",
            info=field_help("model.name_or_path"),
        )
        dataset = gr.Dropdown(
            choices=list(BUILTIN_DATASETS), value="chat-demo", label="Built-in dataset", info=field_help("dataset.name")
        )
    with gr.Row():
        max_steps = gr.Number(value=30, precision=0, label="Max steps", info=field_help("training.max_steps"))
        learning_rate = gr.Number(value=5e-4, label="Learning rate", info=field_help("training.learning_rate"))
        quant = gr.Radio(["none", "4bit", "8bit"], value="none", label="Quantization", info=field_help("quantization.mode"))
    queue = gr.Button("Queue SFT job", variant="primary")
    status = gr.Markdown()
    jobs_table = gr.Dataframe(headers=JOB_COLUMNS, value=lambda: _jobs_rows(api), interactive=False, label="Jobs")

    def submit(model_name, dataset_name, steps, lr, quant_mode):
        spec = {
            "method": "sft",
            "model": {"name_or_path": model_name},
            "dataset": {"source": "builtin", "name": dataset_name},
            "training": {"max_steps": int(steps) if steps else None, "learning_rate": lr},
            "quantization": {"mode": quant_mode},
        }
        try:
            submitted = api.submit(spec)
        except SpecError as exc:
            return "**Not queued:**\n" + "\n".join(f"- {p}" for p in exc.problems), _jobs_rows(api)
        return f"Queued **{submitted.job.id}** (#{submitted.queue_position} in queue)", _jobs_rows(api)

    queue.click(submit, [model, dataset, max_steps, learning_rate, quant], [status, jobs_table], api_name="submit_job")
    timer = gr.Timer(2.0)
    timer.tick(lambda: _jobs_rows(api), None, jobs_table, api_name="list_jobs")
    return TrainHandles(jobs_table=jobs_table, status=status)
