"""The learnability forecast in the UI: the Train tab's panel under Check (progress, word, cause and change in the
form's labels, figures, samples), the form's forecast fields, and the Jobs tab's forecast line with its two actions
(Train anyway, Clone with the suggested change), shown only where they apply."""

from __future__ import annotations

import dataclasses
import doctest
from types import SimpleNamespace

import gradio as gr
import pytest

from backend.api import JobStatus, StudioAPI, local_user
from backend.core.artifacts import JobArtifacts
from backend.core.forecasts import Forecast, ForecastChange, ForecastSample
from backend.core.spec import parse_spec
from components.jobs import forecast_actions
from components.jobs import views as job_views
from components.train import forecast_panel, forecast_views
from components.train.fields import FORM_FIELDS
from components.train.form import form_to_spec, spec_to_form
from components.train.recipes import FIELDS
from components.train.views import FIELD_NAMES
from tests.helpers import tiny_spec

CUT = Forecast(
    forecast="no_signal",
    cause="every group scored the same: 100% of the answers were cut at 4 tokens",
    change=ForecastChange(path="rollout.max_completion_length", value=96, action="raise"),
    prompts=4,
    completions=32,
    groups_with_spread=0,
    spread=0.0,
    reward_floor=0.0,
    reward_ceiling=0.0,
    clipped=1.0,
    max_completion_length=4,
    samples=[ForecastSample(prompt="What is 2 + 2?", completion="assistant: 2 +", reward=0.0)],
    seconds=3.2,
)
LEARNABLE = CUT.model_copy(
    update={
        "forecast": "learnable",
        "cause": "enough groups scored differently to learn from",
        "change": None,
        "groups_with_spread": 3,
        "spread": 0.75,
        "reward_ceiling": 1.0,
        "clipped": 0.0,
        "max_completion_length": 24,
    }
)
NEVER_CALLED = CUT.model_copy(
    update={"cause": "the model never called a tool", "change": ForecastChange(action="warm up first")}
)
GRPO = {
    "method": "grpo",
    "model": {"name_or_path": "builtin:tiny-qwen3-arith"},
    "dataset": {"source": "builtin", "name": "arith-prompts"},
    "rollout": {"num_generations": 8, "max_completion_length": 4, "rewards": [{"name": "accuracy"}]},
    "training": {"batch_size": 16, "max_steps": 300},
}


def _job(api: StudioAPI, status=JobStatus.succeeded, made: Forecast | None = None, **overrides):
    """A GRPO job (``overrides`` of its spec) in ``status`` with the forecast it ``made``."""
    job = api.core.store.add(parse_spec(tiny_spec(**{**GRPO, **overrides})))
    return dataclasses.replace(job, status=status, artifacts=JobArtifacts(forecast=made))


def test_the_doctests_hold():
    assert doctest.testmod(forecast_views).failed == 0


def test_the_form_has_the_forecast_fields_with_the_rollout_settings_and_sends_them_for_rollout_methods_only():
    assert FORM_FIELDS["forecast_prompts"].label == "Forecast prompts"
    assert FORM_FIELDS["forecast_train_anyway"].label == "Train even with no signal"
    grpo = form_to_spec({**FIELDS, "method": "grpo", "forecast_prompts": 4, "forecast_train_anyway": True})
    assert grpo["forecast"] == {"prompts": 4, "train_anyway": True}
    assert "forecast" not in form_to_spec({**FIELDS, "method": "sft"})
    back = spec_to_form(parse_spec(tiny_spec(**GRPO, forecast={"prompts": 6, "train_anyway": True})))
    assert back["forecast_prompts"] == 6 and back["forecast_train_anyway"] is True
    names = list(FORM_FIELDS)
    assert names.index("rollout_temperature") < names.index("forecast_prompts") < names.index("rollout_rewards")


def test_a_no_signal_forecast_names_its_cause_and_change_in_the_forms_labels_with_its_figures_and_samples(api):
    job = _job(api, made=CUT, forecast={"only": True})
    said = forecast_views.panel_markdown(job)
    assert said.startswith("🔴 **Forecast: no signal**: every group scored the same: 100% of the answers were cut")
    assert "; raise Max completion length to 96" in said and "rollout.max_completion_length" not in said
    assert "0 of 4 groups scored differently" in said and "100% cut at 4 tokens" in said
    assert job.id in said  # the forecast job's link, to follow it in the Jobs tab
    table = forecast_views.samples_table(job)
    assert table == {"headers": ["prompt", "completion", "reward"], "data": [["What is 2 + 2?", "assistant: 2 +", "0"]]}
    learnable = forecast_views.panel_markdown(_job(api, made=LEARNABLE, forecast={"only": True}))
    assert learnable.startswith("🟢 **Forecast: learnable**: enough groups scored differently to learn from")


def test_the_panel_says_where_a_forecast_stands_while_it_is_queued_or_plays(api):
    queued = _job(api, status=JobStatus.queued)
    assert forecast_views.panel_markdown(queued, place=2).startswith(f"🔮 Forecast [**{queued.id}**]")
    assert "place 2 in the queue" in forecast_views.panel_markdown(queued, place=2)
    loading = dataclasses.replace(queued, status=JobStatus.running, progress={"step": 0, "phase": "training"})
    assert "loading the model" in forecast_views.panel_markdown(loading)
    playing = dataclasses.replace(
        loading, progress={"step": 0, "phase": "forecasting", "forecast_prompts": 2, "forecast_of": 4}
    )
    assert forecast_views.panel_markdown(playing).startswith("🔮 Forecasting… 2 of 4 prompts")
    assert forecast_views.running(playing) and forecast_views.samples_table(playing) is None
    failed = dataclasses.replace(queued, status=JobStatus.failed, error="the model could not load\nTraceback")
    assert forecast_views.panel_markdown(failed).endswith("did not finish: the model could not load")
    assert not forecast_views.running(failed)
    shown = forecast_panel.drawn(playing.id, playing)
    assert shown[0] == playing.id and shown[3].active is True and shown[2]["visible"] is False


def test_check_forecasts_only_a_rollout_job_whose_pre_flight_passed(api):
    def started(checked, **values):
        return forecast_panel.start(api, None, checked, *[{**FIELDS, **values}[n] for n in FIELD_NAMES])

    for refused in (started("✅ Pre-flight passed.", method="sft"), started("⚠️ Not queued.", method="grpo")):
        assert refused[0] == "" and refused[1] == "" and refused[3].active is False
    none = started("✅ Pre-flight passed.", method="grpo", forecast_prompts=0)
    assert none[0] == "" and none[1].startswith("Forecast prompts is 0: no forecast")
    assert api.core.store.list() == [], "nothing was queued"


def test_the_jobs_tab_says_a_stopped_jobs_forecast_plainly_and_offers_its_two_actions(api):
    stopped = _job(api, made=CUT.model_copy(update={"stopped": True}))
    line = forecast_views.forecast_line(stopped)
    assert line.startswith("🛑 **Stopped before training: the forecast found no signal.** 🔴 **Forecast: no signal**")
    assert "raise Max completion length to 96" in line and "0 of 4 groups scored differently" in line
    assert line in job_views.summary_markdown(api, stopped).split("\n\n")
    assert forecast_views.offers_forecast_actions(stopped) == (True, True)
    assert [u["visible"] for u in forecast_actions.button_updates(stopped)] == [True, True]

    trained = _job(api, made=LEARNABLE)  # a job that trained after its forecast: the line, no actions
    assert forecast_views.forecast_line(trained).startswith("🟢 **Forecast: learnable**")
    assert forecast_views.offers_forecast_actions(trained) == (False, False)
    overridden = _job(api, made=CUT.model_copy(update={"overridden": True}))
    assert forecast_views.forecast_line(overridden).endswith("Trained anyway, as *Train even with no signal* asked.")
    only = _job(api, made=NEVER_CALLED, forecast={"only": True})
    assert forecast_views.forecast_line(only).endswith("A forecast only: nothing was trained.")
    assert forecast_views.offers_forecast_actions(only) == (True, True)
    assert forecast_views.offers_forecast_actions(_job(api, made=LEARNABLE, forecast={"only": True})) == (
        True,
        False,
    )
    assert [u["visible"] for u in forecast_actions.button_updates(None)] == [False, False]
    assert forecast_views.forecast_line(_job(api)) == "" and forecast_views.offers_forecast_actions(_job(api)) == (
        False,
        False,
    )


def _stored(api: StudioAPI, made: Forecast, **overrides) -> str:
    """A GRPO job (``overrides`` of its spec) that ended with the forecast it ``made``: its id."""
    job = api.core.store.add(parse_spec(tiny_spec(**{**GRPO, **overrides})))
    assert api.core.store.claim_next().id == job.id
    api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"forecast": made})
    return job.id


def test_clone_with_the_suggested_change_fills_the_form_with_it_and_says_it_in_the_forms_words(api):
    train = SimpleNamespace(inputs={name: name for name in FIELDS})  # each input by its field name
    job_id = _stored(api, CUT.model_copy(update={"stopped": True}))
    filled = forecast_actions.clone_suggested(api, "note", train, local_user(), job_id)
    assert filled["rollout_max_completion_length"] == 96 and filled["method"] == "grpo"
    assert filled["note"] == (
        f"Settings of {job_id} copied into the Train tab with the forecast's suggested change: raise Max completion "
        "length to 96."
    )
    env = {"environment": {"name": "builtin:arithmetic"}, "rollout": {"num_generations": 8, "rewards": []}}
    warm = _stored(api, NEVER_CALLED, forecast={"only": True}, **env)
    filled = forecast_actions.clone_suggested(api, "note", train, local_user(), warm)
    assert filled["env_name"] == "builtin:arithmetic"
    assert filled["rollout_max_completion_length"] == api.jobs.get_job(warm).spec.rollout.max_completion_length
    assert "copied into the Train tab unchanged: the forecast says to warm up first" in filled["note"]
    assert 'Use "Warm up on this environment" in the Train tab' in filled["note"]
    learnable = _stored(api, LEARNABLE, forecast={"only": True})
    with pytest.raises(gr.Error):  # nothing to change: the button is not offered, and a script is told so
        forecast_actions.clone_suggested(api, "note", train, local_user(), learnable)
