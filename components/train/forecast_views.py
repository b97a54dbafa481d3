"""What the learnability forecast says, in the Train form's words: the progress line while a forecast job plays, its
word, cause and first change (the field by its label in the form), its figures, its sample completions, and the
Jobs tab's forecast line. No Gradio here: plain functions of a job record, tested without a browser.

The forecast itself (``job.artifacts.forecast``: its word, cause, change and figures) is the backend's; this module
only says it.
"""

from __future__ import annotations

import html
from typing import Any

from backend.api import JobRecord, JobStatus, generates
from components.train.fields import FORM_FIELDS
from components.train.form import queue_place, queued_link, short_label

FORECASTING = "forecasting"  # the progress row's phase while the forecast plays
SAMPLE_HEADERS = ["prompt", "completion", "reward"]
SAMPLE_CHARS = 200  # of a prompt or completion, in the Train tab's small table
MARKS = {"learnable": "🟢", "weak": "🟡", "no_signal": "🔴"}
WARM_UP_BUTTON = "Warm up on this environment"  # the Train tab's button (components/train/layout.py)
TRAIN_ANYWAY_LABEL = FORM_FIELDS["forecast_train_anyway"].label


def field_label(path: str | None) -> str | None:
    """The Train form's label of the field at spec ``path`` (without its parenthetical help), None for none.

    >>> field_label("rollout.max_completion_length"), field_label("rollout.rewards"), field_label(None)
    ('Max completion length', 'Rewards', None)
    """
    if path is None:
        return None
    named = [f for f in FORM_FIELDS.values() if f.path == path and f.label]
    return short_label(named[0]) if named else None


def change_words(forecast) -> str:
    """The forecast's first thing to change, the field by its label in the form ("" when there is none).

    >>> from backend.core.forecasts import ForecastChange
    >>> from types import SimpleNamespace as F
    >>> change_words(F(change=ForecastChange(path="rollout.max_completion_length", value=96, action="raise")))
    'raise Max completion length to 96'
    """
    change = forecast.change
    return "" if change is None else change.says(field_label(change.path))


def advice(forecast) -> str:
    """The forecast's cause and its first change, in the form's words."""
    return forecast.advice(field_label(forecast.change.path) if forecast.change is not None else None)


def headline(forecast) -> str:
    """The forecast's word with its mark, its cause and change: "🔴 **Forecast: no signal**: ...; raise ..."."""
    mark = MARKS.get(forecast.forecast, "")
    return f"{mark} **Forecast: {forecast.word}**: {html.escape(advice(forecast), quote=False)}".strip()


def figures_line(forecast) -> str:
    """The numbers behind the forecast and how long it took."""
    return f"{html.escape(forecast.figures(), quote=False)}; {forecast.seconds:.0f} s"


def forecast_line(job: JobRecord) -> str:
    """The Jobs tab's forecast line beside the verdict ("" for a job without a forecast): a job its forecast stopped
    says so plainly, one that trained anyway says that too."""
    forecast = job.artifacts.forecast
    if forecast is None:
        return ""
    said = f"{headline(forecast)} ({figures_line(forecast)})"
    if forecast.stopped:
        return f"🛑 **Stopped before training: the forecast found no signal.** {said}"
    if forecast.overridden:
        return f"{said}. Trained anyway, as *{TRAIN_ANYWAY_LABEL}* asked."
    if job.spec.forecast.only:
        return f"{said}. A forecast only: nothing was trained."
    return said


def offers_forecast_actions(job: JobRecord | None) -> tuple[bool, bool]:
    """(Train anyway, Clone with the suggested change): offered for a job its forecast stopped and for a
    forecast-only job, once it has its forecast; the clone only when the forecast suggests a change."""
    forecast = job.artifacts.forecast if job is not None else None
    if job is None or forecast is None or not (forecast.stopped or job.spec.forecast.only):
        return False, False
    return True, forecast.change is not None


def suggested_note(job: JobRecord) -> str:
    """What "Clone with the suggested change" says it did: the change in the form's words, or, for a step (a
    warm-up), that the form is the job's own and what to do first."""
    change = job.artifacts.forecast.change if job.artifacts.forecast is not None else None
    copied = f"Settings of {job.id} copied into the Train tab"
    if change is None:
        return f"{copied}."
    if change.path is None:
        step = f"{copied} unchanged: the forecast says to {change.action} before this job."
        if job.spec.environment.name and "warm" in change.action:
            step += f' Use "{WARM_UP_BUTTON}" in the Train tab, then queue.'
        return step
    return f"{copied} with the forecast's suggested change: {change_words(job.artifacts.forecast)}."


def forecasts(method: str | None) -> bool:
    """Whether Check forecasts a job of ``method``: a rollout method (GRPO, RLOO, in an environment or not)."""
    return bool(method) and generates(method)


def progress_line(job: JobRecord, place: int | None = None) -> str:
    """Where a forecast job stands while it is not done: queued (its place), loading, or "Forecasting… k of n
    prompts" from its progress row."""
    link = queued_link(job.id)
    if job.status is JobStatus.queued:
        return f"🔮 Forecast {link} queued ({queue_place(place, 0)})."
    progress: dict[str, Any] = job.progress or {}
    if progress.get("phase") == FORECASTING and progress.get("forecast_of"):
        done, of = progress.get("forecast_prompts", 0), progress["forecast_of"]
        return f"🔮 Forecasting… {done} of {of} prompts ({link})."
    return f"🔮 Forecasting… loading the model and its rollout ({link})."


def panel_markdown(job: JobRecord | None, place: int | None = None) -> str:
    """The Train tab's forecast under Check's answer: its progress while it runs, then its word, cause and change in
    the form's words and its figures; a forecast that failed or was cancelled says so."""
    if job is None:
        return ""
    forecast = job.artifacts.forecast
    if forecast is not None:
        return f"{headline(forecast)}\n\n{figures_line(forecast)} (forecast {queued_link(job.id)})"
    if job.status in (JobStatus.queued, JobStatus.running):
        return progress_line(job, place)
    if job.status is JobStatus.cancelled:
        return f"The forecast {queued_link(job.id)} was cancelled."
    reason = (job.error or "it recorded no forecast").splitlines()[0]
    return f"⚠️ The forecast {queued_link(job.id)} did not finish: {html.escape(reason, quote=False)}"


def samples_table(job: JobRecord | None) -> dict[str, list] | None:
    """A handful of the forecast's sample completions (prompt, completion, reward), None before there are any."""
    forecast = job.artifacts.forecast if job is not None else None
    if forecast is None or not forecast.samples:
        return None

    def cut(text: str) -> str:
        text = " ".join(text.split())
        return text if len(text) <= SAMPLE_CHARS else text[: SAMPLE_CHARS - 1] + "…"

    rows = [
        [cut(s.prompt), cut(s.completion), "-" if s.reward is None else f"{s.reward:.3g}"] for s in forecast.samples
    ]
    return {"headers": SAMPLE_HEADERS, "data": rows}


def running(job: JobRecord | None) -> bool:
    """Whether the panel should keep reading the job: it is queued or running."""
    return job is not None and job.status in (JobStatus.queued, JobStatus.running)
