"""The Train tab's "Your uploads" panel: the signed-in user's kept uploads with their sizes and the quota, and a
Delete button that frees the room."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import gradio as gr

from backend.api import SpecError, StudioAPI, User
from components.session import SIGN_IN_FIRST, as_user
from components.wiring import bind


@dataclass
class UploadsHandles:
    """The panel's widgets."""

    accordion: gr.Accordion
    summary: gr.Markdown
    pick: gr.Dropdown
    refresh: gr.Button
    delete: gr.Button
    note: gr.Markdown


def upload_choices(shelf) -> list[tuple[str, str]]:
    """(label, upload id) for each kept upload: its name, size and when it was kept.

    >>> from backend.api import StoredUpload, UploadShelf
    >>> upload_choices(UploadShelf([StoredUpload("0123456789ab-a.jsonl", "a.jsonl", 3 * 2**20, 0.0)], None))[0][1]
    '0123456789ab-a.jsonl'
    """
    return [
        (
            f"{u.name} ({u.size_text}, kept {datetime.fromtimestamp(u.kept_at):%Y-%m-%d %H:%M}) [{u.upload_id[:6]}]",
            u.upload_id,
        )
        for u in shelf.uploads
    ]


def lay_out() -> UploadsHandles:
    """The panel's widgets, closed until opened (its list is read when it opens)."""
    with gr.Accordion("Your uploads", open=False, elem_id="uploads-panel") as accordion:
        summary = gr.Markdown(elem_id="uploads-summary")
        pick = gr.Dropdown([], label="Upload", elem_id="uploads-pick", interactive=True)
        with gr.Row():
            refresh = gr.Button("Refresh", size="sm", elem_id="uploads-refresh")
            delete = gr.Button("Delete", size="sm", variant="stop", elem_id="uploads-delete")
        note = gr.Markdown(elem_id="uploads-note")
    return UploadsHandles(accordion, summary, pick, refresh, delete, note)


def listing(api: StudioAPI, ui: UploadsHandles, user: User | None, note: str = "") -> dict:
    """The panel's list, summary and note for ``user`` (a sentence to sign in for a visitor)."""
    if user is None:
        return {ui.summary: SIGN_IN_FIRST, ui.pick: gr.update(choices=[], value=None), ui.note: note}
    shelf = api.datasets.list_uploads(user)
    choices = upload_choices(shelf)
    return {ui.summary: shelf.describe(), ui.pick: gr.update(choices=choices, value=None), ui.note: note}


def show(api: StudioAPI, ui: UploadsHandles, user: User | None) -> dict:
    """The user's kept uploads, their sizes and the quota."""
    return listing(api, ui, user)


def relist(api: StudioAPI, ui: UploadsHandles, user: User | None) -> dict:
    """``show`` without the note: the list after the form's upload changed, which a Delete's answer does when it
    forgets the form's dataset (the note saying what was deleted stays)."""
    shown = listing(api, ui, user)
    return {ui.summary: shown[ui.summary], ui.pick: shown[ui.pick]}


def delete(
    api: StudioAPI, ui: UploadsHandles, upload_id: gr.Textbox, user: User, picked: str | None, current: str | None
) -> dict:
    """Delete the picked upload of the user's own (forgotten in the form's ``upload_id`` if it was its dataset)."""
    if not picked:
        return {**listing(api, ui, user, "Pick an upload to delete."), upload_id: gr.update()}
    try:
        gone = api.datasets.delete_upload(picked, user)
    except SpecError as exc:
        return {**listing(api, ui, user, " ".join(exc.problems)), upload_id: gr.update()}
    return {
        **listing(api, ui, user, f"Deleted {gone.name} ({gone.size_text})."),
        upload_id: "" if current == picked else gr.update(),
    }


def wire(api: StudioAPI, ui: UploadsHandles, upload_id: gr.Textbox) -> None:
    """List on opening, on Refresh and after each upload; Delete removes the picked upload (and forgets it in the
    form if it was the form's dataset)."""
    shown = [ui.summary, ui.pick, ui.note]
    listed = as_user(bind(show, api, ui), signed_in=False)
    ui.accordion.expand(listed, None, shown, api_name=False)
    ui.refresh.click(listed, None, shown, api_name="list_uploads")
    upload_id.change(as_user(bind(relist, api, ui), signed_in=False), None, [ui.summary, ui.pick], api_name=False)
    removed = as_user(bind(delete, api, ui, upload_id))
    ui.delete.click(removed, [ui.pick, upload_id], [*shown, upload_id], api_name="delete_upload")
