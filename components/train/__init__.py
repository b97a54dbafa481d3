"""Train tab: base model, dataset (built-in / Hub / upload, preview, column mapping), method with only its settings,
rewards with their test bench, an environment with a dry run, LoRA and 4-bit, the pre-flight check, Queue, and a
sweep (the job queued once per value of one field, ``sweep_panel.py``).

``fields.py`` declares the form once (bound to spec paths), ``recipes.py`` and ``form.py`` map it to and from a spec
and say its problems in its words (no Gradio there); ``layout.py`` lays it out, ``handlers.py`` wires it, and
``views.py`` says the facade's answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend.api import StudioAPI
from components.train import handlers, layout, sweep_panel
from components.train.layout import FIELD_MARK_CSS, FREE_TEXT_JS
from components.train.views import FIELD_NAMES

__all__ = ["FIELD_MARK_CSS", "FREE_TEXT_JS", "TrainHandles", "build"]


@dataclass
class TrainHandles:
    """The Train tab's handles other tabs need: its inputs (Clone fills them), error boxes and result."""

    inputs: dict[str, Any]  # form field name -> component, in FIELDS order
    errors: dict[str, gr.Markdown]  # section -> the box under it
    result: gr.Markdown

    def input_list(self) -> list:
        """The form's components in FIELDS order (the order of the API's parameters)."""
        return [self.inputs[name] for name in FIELD_NAMES]


def build(api: StudioAPI) -> TrainHandles:
    """Lay the Train tab out and wire it to the facade."""
    ui = layout.lay_out()
    if api.storage_status()["mode"] == "none":  # nothing survives a restart here: the Hub keeps the adapter
        ui.inputs["push_to_hub"].value = True
    handlers.wire(api, ui)
    sweep_panel.wire(api, ui, sweep_panel.lay_out())  # under the tab's other parts
    return TrainHandles(inputs=ui.inputs, errors=ui.errors, result=ui.result)
