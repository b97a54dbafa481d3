"""Check's forecast never plays in the app's process: the Train tab's Check queues it (a forecast-only job) and
answers at once, and a worker of the scheduler's launcher plays the rollouts while the app goes on serving."""

from __future__ import annotations

import os
import time

import pytest

import backend.training.forecast as forecast_module
from backend.api import JobStatus, StudioAPI
from backend.core.users import local_user
from components.train import forecast_panel
from components.train.form import form_to_spec
from components.train.recipes import FIELDS, recipe_values
from components.train.views import FIELD_NAMES
from tests.helpers import wait_status

pytestmark = pytest.mark.slow

ANSWERS_WITHIN_S = 1.0  # Check's forecast only queues: the pre-flight's answer, then the job's row


def test_checks_forecast_is_queued_at_once_and_plays_in_a_worker_not_in_the_app(data_dir, monkeypatch):
    played_here: list = []
    monkeypatch.setattr(forecast_module, "run_forecast", lambda *a, **k: played_here.append(a))
    values = {**FIELDS, **recipe_values("builtin:tiny-qwen3-arith", "grpo"), "method": "grpo", "forecast_prompts": 2}
    form = [values[name] for name in FIELD_NAMES]
    user = local_user()
    api = StudioAPI(data_dir, scheduler="thread", poll_interval=0.05)
    try:
        api.jobs.check(form_to_spec(values), user=user)  # what Check does first (and its imports, paid once)
        started = time.monotonic()
        job_id, note, _, timer = forecast_panel.start(api, user, "✅ Pre-flight passed.", *form)
        took = time.monotonic() - started
        assert job_id and "🔮" in note and timer.active, note
        assert took < ANSWERS_WITHIN_S, f"Check's forecast answered after {took:.2f} s: it must only queue"
        assert not api.jobs.get_job(job_id, user).status.finished, "the forecast had ended before Check answered"

        job = wait_status(api.core.store, job_id, {JobStatus.succeeded, JobStatus.failed}, timeout=240)
        assert job.status is JobStatus.succeeded, job.error
        assert job.spec.forecast.only and job.artifacts.forecast is not None
        assert job.artifacts.forecast.prompts == 2
        assert job.pid is not None and job.pid != os.getpid(), f"the forecast ran in process {job.pid}"
        assert played_here == [], "the forecast's rollouts played in the app's process"
        assert any("Forecast:" in line for line in api.jobs.log_tail(job_id, 400, user=user)), "the worker's log"
        shown = forecast_panel.show(api, job_id, user)
        assert "**Forecast: " in shown[1] and job_id in shown[1], shown[1]
        assert shown[3].active is False, "the panel stops reading the job once its forecast is in"
    finally:
        api.close()
