"""The Train tab's sweep panel: the form's job queued once per value of one field (a number or a choice), each an
ordinary job in the queue; the Jobs tab shows the sweep's table, plot and best. Thin over ``api.sweeps``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend.api import SpecError, StudioAPI
from components.session import as_user
from components.train import sweep_views
from components.train.handlers import error_boxes, refused, with_spec, with_warnings
from components.train.layout import TrainLayout
from components.train.views import FIELD_NAMES, form_values
from components.wiring import bind


@dataclass
class SweepPanel:
    """The panel's widgets."""

    field: gr.Dropdown
    values: gr.Textbox
    button: gr.Button
    note: gr.Markdown


def lay_out() -> SweepPanel:
    """The panel, folded, under the form's Queue."""
    with gr.Accordion("Sweep: queue this job once per value of a field", open=False, elem_id="sweep-panel"):
        with gr.Row():
            # Every method's fields, so an API call may name any; a page narrows them to its method as it loads.
            field = gr.Dropdown(
                sweep_views.vary_choices(),
                value=sweep_views.DEFAULT_VARY,
                label="Field to vary",
                info="A number or a choice of the form; the others keep the form's values",
                elem_id="sweep-field",
                scale=2,
            )
            values = gr.Textbox(
                label="Values",
                placeholder="1e-4, 5e-4, 1e-3",
                info="Comma-separated: one job per value",
                elem_id="sweep-values",
                scale=3,
            )
        button = gr.Button("Queue sweep", elem_id="sweep-button", size="sm")
        note = gr.Markdown(elem_id="sweep-note")
    return SweepPanel(field, values, button, note)


def on_sweep(api: StudioAPI, ui: TrainLayout, panel: SweepPanel, user, *args) -> dict:
    """The form's job queued once per listed value of the picked field; a value that does not fit is said at the
    values, a problem of the form itself at its field."""
    *form_args, name, values = args
    if not name:
        return {panel.note: "⚠️ Not queued: pick the field to vary."}
    off_method = sweep_views.off_method_text(name, form_values(tuple(form_args))["method"])
    if off_method:
        return {panel.note: off_method}
    refusal: list[str] = []

    def submit(spec: dict[str, Any]):
        try:
            return api.sweeps.submit(spec, [sweep_views.vary_setting(name, values)], user=user)
        except SpecError as exc:
            if not all(p.startswith("--") for p in exc.problems):  # the form's own problems go to its fields
                raise
            refusal.extend(exc.problems)
            return None

    submitted, boxes = with_spec(ui, submit, tuple(form_args))
    if refusal:
        return {panel.note: sweep_views.refusal_text(name, refusal), ui.result: "", **boxes}
    if submitted is None:
        return {panel.note: refused(ui, "Not queued", boxes), ui.result: "", **boxes}
    return {
        panel.note: sweep_views.sweep_queued_markdown(submitted),
        ui.result: "",
        **with_warnings(ui, boxes, submitted.warnings),
    }


def on_method(method, current):
    """The fields a sweep may vary for the form's method (its own and the shared ones), the picked one kept while the
    method has it."""
    return gr.update(choices=sweep_views.vary_choices(method), value=sweep_views.picked_field(method, current))


def wire(api: StudioAPI, ui: TrainLayout, panel: SweepPanel) -> None:
    """Queue sweep reads the whole form, the field and its values; the field list follows the method (a clone's
    too), from the page's load on."""
    method, field = ui.inputs["method"], panel.field
    gr.on(None, on_method, [method, field], field, api_name=False, queue=False)  # as the page loads
    method.change(on_method, [method, field], field, api_name=False, queue=False)
    form = [ui.inputs[name] for name in FIELD_NAMES]
    panel.button.click(
        as_user(bind(on_sweep, api, ui, panel)),
        [*form, panel.field, panel.values],
        [panel.note, ui.result, *error_boxes(ui)],
        api_name="submit_sweep",
    )
