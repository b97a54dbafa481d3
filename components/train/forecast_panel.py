"""The Train tab's forecast, under Check's answer: Check queues the form's learnability forecast (a forecast-only job,
for a rollout method) and this panel follows it until its answer is in.

Nothing is kept in the page but the forecast job's id: each tick of the panel's own timer (on only while the
forecast is queued or running) reads the job (``api.jobs.get_job``) and draws its progress, then its forecast and
samples, as ``components/jobs/export_panel.py`` follows an export. The forecast plays in a worker, never in the app's
process: Check answers at once, and the job shows in the Jobs tab like any other.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import JobNotFound, JobRecord, SpecError, StudioAPI
from components.session import as_user
from components.train import forecast_views
from components.train.fields import FormError
from components.train.form import form_to_spec
from components.train.views import form_values
from components.wiring import bind

FOLLOW_S = 1.0  # how often the panel reads a forecast that is queued or running
CHECK_PASSED = "✅"  # how Check's answer starts when the pre-flight passed (views.check_markdown)


@dataclass
class ForecastHandles:
    """The panel's widgets: the forecast job's id (hidden), its sentence, its samples and the timer that follows it."""

    job: gr.Textbox
    note: gr.Markdown
    samples: gr.Dataframe
    timer: gr.Timer

    @property
    def outputs(self) -> list:
        """What the panel's handlers answer, in this order."""
        return [self.job, self.note, self.samples, self.timer]


def lay_out() -> ForecastHandles:
    """The forecast's widgets, placed where they are called (under Check's answer)."""
    job = gr.Textbox(visible=False, elem_id="forecast-job")
    note = gr.Markdown(elem_id="forecast-note")
    samples = gr.Dataframe(
        value=None,
        headers=forecast_views.SAMPLE_HEADERS,
        interactive=False,
        label="Sample completions of the starting model (the forecast's rollouts)",
        elem_id="forecast-samples",
        visible=False,
        wrap=True,
    )
    timer = gr.Timer(FOLLOW_S, active=False)
    return ForecastHandles(job, note, samples, timer)


def drawn(job_id: str, job: JobRecord | None, place: int | None = None) -> list:
    """The panel for ``job`` (None: empty), in the order of ``ForecastHandles.outputs``."""
    table = forecast_views.samples_table(job)
    return [
        job_id,
        forecast_views.panel_markdown(job, place),
        gr.update(value=table, visible=table is not None),
        gr.Timer(active=forecast_views.running(job)),
    ]


def show(api: StudioAPI, job_id: str | None, user) -> list:
    """The panel as the backend has the forecast job now (one read of it; its place while queued)."""
    job_id = (job_id or "").strip()
    if not job_id or user is None:
        return drawn("", None)
    try:
        job = api.jobs.get_job(job_id, user)
    except JobNotFound:
        return drawn("", None)
    place = api.jobs.queue_position(job.id) if forecast_views.running(job) else None
    return drawn(job_id, job, place)


def follow(api: StudioAPI, user, job_id):
    """The timer's tick while the forecast is queued or running: its progress, then its answer."""
    return show(api, job_id, user)


def start(api: StudioAPI, user, checked, *args):
    """After Check's answer: queue the form's forecast when the pre-flight passed and the method plays rollouts,
    and show it; otherwise clear the panel. A refusal of the forecast alone (a full queue) is said in the panel."""
    values = form_values(args)
    if not (checked or "").startswith(CHECK_PASSED) or not forecast_views.forecasts(values.get("method")):
        return drawn("", None)
    if values.get("forecast_prompts") == 0:
        return saying(
            "Forecast prompts is 0: no forecast. Give it a few (e.g. 16) for Check to forecast whether this "
            "job can learn."
        )
    try:
        submitted = api.jobs.forecast(form_to_spec(values), user=user)
    except (SpecError, FormError) as exc:
        said = "; ".join(exc.problems) if isinstance(exc, SpecError) else str(exc)
        return saying(f"⚠️ The forecast was not queued: {said}")
    return drawn(submitted.job.id, submitted.job, submitted.queue_position)


def saying(note: str) -> list:
    """The panel with no forecast job, saying ``note``."""
    return ["", note, gr.update(value=None, visible=False), gr.Timer(active=False)]


def wire(api: StudioAPI, panel: ForecastHandles, checked_event, result: gr.Markdown, form: list) -> None:
    """Check's answer is followed by the forecast (``checked_event``: Check's event; ``result``: its answer), and the
    panel's timer follows the forecast job while it runs."""
    checked_event.success(  # not after a refusal (a visitor's Check): that said all there was to say
        as_user(bind(start, api)),
        [result, *form],
        panel.outputs,
        api_visibility="private",
        show_progress="hidden",
    )
    panel.timer.tick(
        as_user(bind(follow, api), signed_in=False),
        panel.job,
        panel.outputs,
        api_visibility="private",
        show_progress="hidden",
        queue=False,
    )
