"""The Jobs tab's "Evaluate" panel: pick lm-eval tasks and score them on the picked finished job (base, start, tuned)
or on a base model, as an eval-only job in the same queue; its scores show in the job's evaluation."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI, User, benchmark_choices
from components.job_pickers import job_choice_id
from components.session import as_user
from components.wiring import bind


@dataclass
class BenchmarkHandles:
    """The panel's widgets other parts may wire to."""

    tasks: gr.Dropdown
    limit: gr.Number
    model: gr.Textbox
    evaluate: gr.Button
    note: gr.Markdown


def evaluate_action(api: StudioAPI, user: User, selected, model: str, tasks, limit) -> str:
    """Queue the eval-only job (the typed model when there is one, else the picked job); the outcome as a sentence.
    ``limit`` empty or 0 (what the field shows when empty) is each task's default."""
    target = (model or "").strip() or (job_choice_id(selected) or "")
    try:
        submitted = api.benchmarks.evaluate(target, list(tasks or []), int(limit) if limit else None, user=user)
    except SpecError as exc:
        return " ".join(exc.problems)
    except JobNotFound:
        return "Pick one of your finished jobs, or name a base model."
    position = f" (#{submitted.queue_position} in the queue)" if submitted.queue_position else ""
    return f"Queued evaluation job {submitted.job.id}{position}: pick it above to follow it."


def build(api: StudioAPI, picker: gr.Dropdown) -> BenchmarkHandles:
    """The panel, its button wired to ``api.benchmarks.evaluate`` with the picked job of ``picker``."""
    with gr.Accordion("Evaluate: benchmarks (lm-evaluation-harness)", open=False, elem_id="benchmark-panel"):
        with gr.Row():
            tasks = gr.Dropdown(
                benchmark_choices(),
                multiselect=True,
                allow_custom_value=True,  # an upload id of the user's own rows (prompt + solution)
                label="Tasks",
                info="Presets for real models, the demo models' offline tasks, or an uploaded JSONL's id "
                "(prompts with a solution column)",
                elem_id="benchmark-tasks",
                scale=3,
            )
            limit = gr.Number(
                None,
                precision=0,
                minimum=0,  # the browser shows an empty field as 0: it must be a value Evaluate accepts
                label="Items per task",
                info="Empty or 0: each task's default",
                elem_id="benchmark-limit",
                scale=1,
            )
        model = gr.Textbox(
            label="Or a base model",
            placeholder="builtin:tiny-qwen3-arith (empty: the picked job)",
            elem_id="benchmark-model",
        )
        evaluate = gr.Button("Evaluate", elem_id="evaluate-button", size="sm")
        note = gr.Markdown(elem_id="benchmark-note")

    evaluate.click(as_user(bind(evaluate_action, api)), [picker, model, tasks, limit], note, api_name="evaluate")
    return BenchmarkHandles(tasks, limit, model, evaluate, note)
