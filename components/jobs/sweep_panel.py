"""The Jobs tab's sweep panel: when the picked job is a child of a sweep, the sweep's children as a table with the
best marked, their scores against the varied field, "Clone the best into Train" and "Cancel the sweep". It follows
the tab's timer, and sends anything only when what it shows changed. Shaping is in ``sweep_views.py``."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI, SweepReport, User
from components.job_pickers import job_choice_id
from components.jobs import sweep_views
from components.session import as_user
from components.wiring import bind

# Hidden by a class, never unmounted (visible=False): a plot unmounted while it draws threw "Cannot read properties
# of null (reading 'offsetWidth')" (issue 24).
HIDDEN = "sweep-hidden"
SWEEP_CSS = f"#sweep-box.{HIDDEN} {{ display: none !important; }}\n"
FOLLOW_S = 3.0  # how often a running sweep's panel is read again


@dataclass
class SweepHandles:
    """The panel's widgets, and the digest of what it shows (``shown``)."""

    box: gr.Column
    summary: gr.Markdown
    table: gr.Dataframe
    plot: gr.HTML  # the scored children against the varied field (sweep_views.plot_html)
    clone_best: gr.Button
    cancel: gr.Button
    note: gr.Markdown
    shown: gr.State
    timer: gr.Timer  # on while the sweep shown has children to wait for

    @property
    def outputs(self) -> list:
        """What ``show`` answers, in its order."""
        return [self.box, self.summary, self.table, self.plot, self.clone_best, self.cancel, self.shown, self.timer]


def lay_out() -> SweepHandles:
    """The panel, hidden until a sweep's child is picked."""
    with gr.Column(elem_id="sweep-box", elem_classes=[HIDDEN]) as box:
        summary = gr.Markdown(elem_id="sweep-summary")
        table = gr.Dataframe(value=None, interactive=False, label="The sweep's children", elem_id="sweep-table")
        plot = gr.HTML(elem_id="sweep-plot")
        with gr.Row():
            clone_best = gr.Button(
                "Clone the best into Train", elem_id="clone-best-button", size="sm", interactive=False
            )
            cancel = gr.Button("Cancel the sweep", elem_id="cancel-sweep-button", size="sm", interactive=False)
        note = gr.Markdown(elem_id="sweep-action-note")
    return SweepHandles(
        box, summary, table, plot, clone_best, cancel, note, gr.State(""), gr.Timer(FOLLOW_S, active=False)
    )


def picked_sweep(api: StudioAPI, selected, user: User | None) -> SweepReport | None:
    """The sweep the picked job is a child of, read now (None: not a child, or not the user's)."""
    job_id = job_choice_id(selected)
    if user is None or not job_id:
        return None
    try:
        sweep_id = api.sweeps.sweep_of(job_id, user)
        return api.sweeps.get(sweep_id, user) if sweep_id else None
    except JobNotFound:
        return None


def show(api: StudioAPI, user: User | None, selected, seen) -> list:
    """The panel for the picked job's sweep (hidden when it has none); nothing sent when it shows that already."""
    report = picked_sweep(api, selected, user)
    now = sweep_views.digest(report)
    follow = gr.Timer(active=report is not None and not report.finished)
    if now == seen:
        return [gr.skip()] * 6 + [seen, follow]
    if report is None:
        hidden = [
            gr.update(elem_classes=[HIDDEN]),
            "",
            None,
            "",
            gr.update(interactive=False),
            gr.update(interactive=False),
        ]
        return [*hidden, now, follow]
    return [
        gr.update(elem_classes=[]),
        sweep_views.sweep_markdown(report),
        sweep_views.sweep_table(report),
        sweep_views.plot_html(report),
        gr.update(interactive=report.best is not None),
        gr.update(interactive=not report.finished),
        now,
        follow,
    ]


def best_job_id(api: StudioAPI, selected, user: User) -> str:
    """The best child's job id of the picked job's sweep; gr.Error with a sentence when there is none."""
    report = picked_sweep(api, selected, user)
    if report is None:
        raise gr.Error("Pick a job of one of your sweeps first.")
    if report.best is None:
        raise gr.Error("No child of this sweep has succeeded with a score yet, so none is the best.")
    return report.best.child.job_id


def cancel(api: StudioAPI, user: User, selected) -> tuple[str, str]:
    """Cancel the picked job's sweep: its queued children at once, its running ones at their next step."""
    report = picked_sweep(api, selected, user)
    if report is None:
        raise gr.Error("Pick a job of one of your sweeps first.")
    try:
        api.sweeps.cancel(report.sweep.id, user)
    except (JobNotFound, SpecError) as exc:
        raise gr.Error(str(exc)) from None
    return f"Sweep {report.sweep.id} cancelled: no child starts any more, running ones stop at their next step.", ""


def wire(api: StudioAPI, panel: SweepHandles, picker: gr.Dropdown) -> None:
    """Followed on its own timer while it runs; Cancel the sweep. (A pick shows it in the tab's own answer, and Clone
    the best is wired by the tab's handlers, which own Clone.)"""
    quiet = {"api_visibility": "private", "queue": False, "show_progress": "hidden"}
    shown = as_user(bind(show, api), signed_in=False)
    panel.timer.tick(shown, [picker, panel.shown], panel.outputs, **quiet)
    panel.cancel.click(as_user(bind(cancel, api)), picker, [panel.note, panel.shown], api_name="cancel_sweep").then(
        shown, [picker, panel.shown], panel.outputs, **quiet
    )
