"""The Jobs tab's answers to a forecast: "Train anyway" and "Clone with the suggested change", offered for a job its
learnability forecast stopped before training and for a forecast-only job (Check's).

Which of them a job offers is read off the picked job with the rest of its detail (``forecast_views``: no server
work of its own at a pick); a click asks the facade (``api.jobs.train_anyway``, ``api.jobs.suggested_spec``).
"""

from __future__ import annotations

from typing import Any

import gradio as gr

from backend.api import JobNotFound, JobRecord, SpecError, StudioAPI, User
from components.job_pickers import job_choice_id
from components.train.forecast_views import offers_forecast_actions, suggested_note
from components.train.form import spec_to_form
from components.train.recipes import FIELDS
from components.train.views import queued_markdown


def button_updates(job: JobRecord | None) -> list:
    """[Train anyway, Clone with the suggested change]: shown (and clickable) only where they apply."""
    return [gr.update(visible=offered, interactive=offered) for offered in offers_forecast_actions(job)]


def train_anyway(api: StudioAPI, user: User, selected) -> str:
    """Queue the picked job again, to train whatever its forecast says; answered with the new job's link."""
    try:
        submitted = api.jobs.train_anyway(job_choice_id(selected) or "", user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except SpecError as exc:
        raise gr.Error("; ".join(exc.problems)) from None
    return f"Training anyway, whatever the forecast says. {queued_markdown(submitted)}"


def clone_suggested(api: StudioAPI, note, train, user: User, selected) -> dict[Any, Any]:
    """The picked job's settings with its forecast's suggested change, copied into the Train tab's form (as Clone
    does); the note says the change in the form's words, or the step to take first."""
    job_id = job_choice_id(selected) or ""
    try:
        job = api.jobs.get_job(job_id, user)
        spec, _ = api.jobs.suggested_spec(job_id, user)
    except JobNotFound:
        raise gr.Error("Pick one of your jobs first.") from None
    except SpecError as exc:
        raise gr.Error("; ".join(exc.problems)) from None
    values = spec_to_form(spec)
    return {**{train.inputs[name]: values[name] for name in FIELDS}, note: suggested_note(job)}
