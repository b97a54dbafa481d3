"""The Jobs tab's export panel: "Use this model" snippets for the picked job, and Export (merged, GGUF, adapter) as an
export job of the queue, followed until its download is ready.

What the panel shows is read from the picked job's last export each time (``api.export.latest``), never kept in the
page: a live refresh or a pick that redraws the panel shows the same progress, sentence and download. The export
runs in its own job (one per user at once, refused at once otherwise), so a request never waits for a merge.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from backend.api import GGUF_TYPES, JobNotFound, JobStatus, SpecError, StudioAPI, User
from components.job_pickers import job_choice_id
from components.session import as_user
from components.wiring import bind

NO_SNIPPETS = "Snippets appear here once the job has succeeded with an adapter."
FOLLOW_S = 1.0  # how often the panel reads a running export
# The panel's choices of format: label -> (export format, GGUF type).
FORMATS: dict[str, tuple[str, str]] = {
    "Merged model (safetensors)": ("merged", "q8_0"),
    **{f"GGUF {kind} (llama.cpp, LM Studio, Ollama)": ("gguf", kind) for kind in reversed(GGUF_TYPES)},
    "Adapter (zip)": ("adapter", "q8_0"),
}


@dataclass
class ExportHandles:
    """The panel's widgets other code may need: the snippets and the export button, and what ``show`` answers."""

    use_this_model: gr.Markdown
    export_button: gr.Button
    shown: list  # ``show``'s outputs: snippets, note, download, button, timer (the tab's pick fills them)


def use_markdown(api: StudioAPI, job_id: str | None, user) -> str:
    """The picked job's "Use this model" snippets as Markdown (exact to its pushed repos or local folders)."""
    from backend.api import snippets_markdown

    if not job_id:
        return ""
    try:
        snippets = api.export.use_snippets(job_id, user)
    except JobNotFound:
        return ""
    return snippets_markdown(snippets) if snippets else NO_SNIPPETS


def _state(api: StudioAPI, job_id: str | None, user) -> list[Any]:
    """[note, download, export button, timer] for the picked job's last export, read from the backend."""
    job = None
    try:
        job = api.jobs.get_job(job_id, user) if job_id and user is not None else None
        last = api.export.latest(job_id, user) if job is not None and job_id else None
    except JobNotFound:
        job, last = None, None
    exportable = job is not None and job.status is JobStatus.succeeded and bool(job.artifacts.adapter_dir)
    if last is None:
        note, download, active = "", gr.update(value=None, visible=False), False
    else:
        note, active = last.sentence, last.active
        if last.modelfile and not active:  # Ollama: the Modelfile, to save beside the downloaded .gguf
            note += (
                "\n\nFor Ollama, save this as `Modelfile` beside the file, then `ollama create NAME -f Modelfile`:"
                f"\n\n```\n{last.modelfile.strip()}\n```"
            )
        shown = last.download is not None and last.status is JobStatus.succeeded
        download = gr.update(
            value=str(last.download) if shown else None,
            visible=shown,
            label=f"Download {last.download.name}" if shown and last.download else "Download",
        )
    button = gr.update(interactive=exportable and not active, value="Exporting…" if active else "Export")
    return [note, download, button, gr.Timer(active=active)]


def show(api: StudioAPI, user: User | None, selected):
    """The picked job's snippets and its last export (progress, sentence, download), as the backend has them."""
    job_id = job_choice_id(selected)
    shown = use_markdown(api, job_id, user) if user is not None else ""
    return [shown, *_state(api, job_id, user)]


def follow(api: StudioAPI, user: User | None, selected):
    """The timer's tick while an export runs: its progress, then its result and download; the snippets at its end."""
    return show(api, user, selected)


def export(api: StudioAPI, user: User, selected, chosen, to_hub, repo_id, is_private):
    """Queue an export of the picked job in the chosen format (pushed too when asked); the panel follows it."""
    job_id = job_choice_id(selected) or ""
    format, gguf_type = FORMATS.get(chosen, ("merged", "q8_0"))
    try:
        api.export.submit(
            job_id,
            user,
            format=format,
            gguf_type=gguf_type,
            push=bool(to_hub),
            repo_id=(repo_id or "").strip() or None,
            private=bool(is_private),
        )
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except SpecError as exc:  # a bad field, or ExportBusy: another export of yours is running
        raise gr.Error(" ".join(exc.problems)) from None
    return show(api, user, selected)


def archived(archive: Callable[[str, Any], Path], selected, user: User) -> Path:
    """``archive(job id, user)`` (a zip of the picked job's adapter) for the signed-in user, its refusals said as the
    sentence under the button."""
    try:
        return archive(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except ValueError as exc:
        raise gr.Error(str(exc)) from None


def build(api: StudioAPI, picker: gr.Dropdown) -> ExportHandles:
    """The panel under the job's actions, following ``picker``."""
    with gr.Accordion("Use this model · Export", open=False, elem_id="export-panel") as panel:
        use_this_model = gr.Markdown(elem_id="use-this-model")
        with gr.Row():
            chosen = gr.Radio(list(FORMATS), value=next(iter(FORMATS)), label="Format", elem_id="export-format")
            push = gr.Checkbox(False, label="Also push to the Hub", scale=1)
        with gr.Row():
            repo = gr.Textbox(label="Repo (empty: you/<run name>-merged or -GGUF)", scale=3)
            private = gr.Checkbox(True, label="Private", scale=1)
        with gr.Row():
            export_button = gr.Button("Export", elem_id="export-button", size="sm", interactive=False)
            download = gr.DownloadButton("Download", visible=False, elem_id="download-export", size="sm")
        note = gr.Markdown(elem_id="export-note")
        timer = gr.Timer(FOLLOW_S, active=False)

    outputs = [use_this_model, note, download, export_button, timer]
    # On open: a job followed live may have finished since. (A pick fills the panel in the tab's own answer: one
    # event a pick, not one a panel; components/jobs/handlers.py, ``pick``.)
    panel.expand(
        as_user(bind(show, api), signed_in=False), picker, outputs, api_visibility="private", show_progress="hidden"
    )
    timer.tick(
        as_user(bind(follow, api), signed_in=False), picker, outputs, api_visibility="private", show_progress="hidden"
    )
    export_button.click(
        as_user(bind(export, api)),
        [picker, chosen, push, repo, private],
        outputs,
        api_name="export",
        concurrency_limit=None,  # it only queues: the export job does the work, one per user at once
    )
    return ExportHandles(use_this_model, export_button, outputs)
