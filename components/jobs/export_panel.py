"""The Jobs tab's export panel: "Use this model" snippets for the picked job, and Export merged (a download, a push).

A user's merged export goes into the job's own folder under the data dir (never a path they name), then is offered
as a zip download or pushed as a model repository. The merge runs in Gradio's worker thread, one at a time per user
and Space-wide (the facade's limit), so the page and other users' requests stay answered meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI
from components.job_pickers import job_choice_id
from components.session import require_user, user_from
from components.wiring import bind

NO_SNIPPETS = "Snippets appear here once the job has succeeded with an adapter."


@dataclass
class ExportHandles:
    """The panel's widgets other code may need: the snippets and the export button, and what ``show`` answers."""

    use_this_model: gr.Markdown
    export_button: gr.Button
    shown: list  # [use_this_model, note, download]: ``show``'s outputs, which the tab's pick fills in its answer


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


def show(api: StudioAPI, selected, profile: gr.OAuthProfile | None = None):
    """The picked job's snippets; the last export's note and download gone."""
    user = user_from(profile)
    shown = use_markdown(api, job_choice_id(selected), user) if user is not None else ""
    return shown, "", gr.update(value=None, visible=False)


def export(
    api: StudioAPI,
    selected,
    to_hub,
    repo_id,
    is_private,
    profile: gr.OAuthProfile | None,
    token: gr.OAuthToken | None,
):
    """Merge the picked job's adapter into its base model, in the job's folder; pushed too when asked."""
    from backend.api import ExportError

    user = require_user(profile, token)
    job_id = job_choice_id(selected) or ""
    try:
        result = api.export.export_merged(
            job_id, user, push=bool(to_hub), push_repo=(repo_id or "").strip() or None, private=bool(is_private)
        )
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except (ExportError, SpecError) as exc:  # SpecError: Busy, another export is running
        raise gr.Error(str(exc)) from None
    sentence = result.sentence if result.push_error is None else f"⚠️ {result.sentence}"
    return use_markdown(api, job_id, user), sentence


def archived(archive: Callable[[str, Any], Path], selected, profile: gr.OAuthProfile | None) -> Path:
    """``archive(job id, user)`` (a zip of the picked job's adapter or merged model) for the signed-in user, its
    refusals said as the sentence under the button."""
    user = require_user(profile)
    try:
        return archive(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except ValueError as exc:
        raise gr.Error(str(exc)) from None


def prepare_zip(api: StudioAPI, selected, profile: gr.OAuthProfile | None = None):
    """The picked job's merged model as a zip to download."""
    path = archived(api.export.merged_archive, selected, profile)
    return gr.update(value=str(path), visible=True), f"Merged zip ready ({path.stat().st_size / 1e6:.1f} MB)."


def build(api: StudioAPI, picker: gr.Dropdown) -> ExportHandles:
    """The panel under the job's actions, following ``picker``."""
    with gr.Accordion("Use this model · Export merged", open=False, elem_id="export-panel") as panel:
        use_this_model = gr.Markdown(elem_id="use-this-model")
        with gr.Row():
            push = gr.Checkbox(False, label="Also push to the Hub", scale=1)
            repo = gr.Textbox(label="Merged repo (empty: you/<run name>-merged)", scale=3)
            private = gr.Checkbox(True, label="Private", scale=1)
        with gr.Row():
            export_button = gr.Button("Export merged model", elem_id="export-merged-button", size="sm")
            zip_button = gr.Button("Prepare merged zip", elem_id="prepare-merged-zip", size="sm")
            download = gr.DownloadButton("Download merged model", visible=False, elem_id="download-merged", size="sm")
        note = gr.Markdown(elem_id="export-note")

    # On open: a job followed live may have finished since. (A pick fills the panel in the tab's own answer: one
    # event a pick, not one a panel; components/jobs/handlers.py, ``pick``.)
    panel.expand(
        bind(show, api), picker, [use_this_model, note, download], api_visibility="private", show_progress="hidden"
    )
    export_button.click(
        bind(export, api),
        [picker, push, repo, private],
        [use_this_model, note],
        api_name="export_merged",
        concurrency_limit=1,
    )
    zip_button.click(bind(prepare_zip, api), picker, [download, note], api_name="prepare_merged_download")
    return ExportHandles(use_this_model, export_button, [use_this_model, note, download])
