"""A recipe never contradicts itself (issue 47): the warnings Check, the Queue answer and the finished job give are
judged against the measured recipe the form filled in, and against what the job did."""

from __future__ import annotations

from backend.api import ARITH_MODEL_ID, JobStatus, LearningVerdict
from backend.core.spec import parse_spec
from backend.core.users import User
from backend.models.demo import environment_recipe
from components.jobs.views import summary_markdown
from components.train.form import FIELDS, form_to_spec
from components.train.recipes import recipe_updates

ENV = "builtin:arithmetic"
LENGTH = "rollout.max_completion_length ("
SFT_FIRST = "first run SFT on a few tool-call demonstrations"


def _arithmetic_form() -> dict:
    """The Train form after picking GRPO and then builtin:arithmetic on the arith model, as a user clicks it."""
    grpo = {**FIELDS, "method": "grpo"}
    grpo.update(recipe_updates(FIELDS, (ARITH_MODEL_ID, "sft", ""), (ARITH_MODEL_ID, "grpo", "")))
    picked = {**grpo, "env_name": ENV}
    picked.update(recipe_updates(picked, (ARITH_MODEL_ID, "grpo", ""), (ARITH_MODEL_ID, "grpo", ENV)))
    return picked


def test_check_of_the_arithmetic_recipe_as_the_form_fills_it_warns_of_neither_length_nor_warm_up(api):
    form = _arithmetic_form()
    assert (
        form["rollout_max_completion_length"]
        == environment_recipe(ARITH_MODEL_ID, "grpo", ENV)["rollout.max_completion_length"]
    )
    warnings, _ = api.jobs.check(form_to_spec(form), user=User("local"))
    assert not [w for w in warnings if w.startswith(LENGTH) or "256" in w], warnings
    assert not [w for w in warnings if SFT_FIRST in w], "its measured recipe learns tool calls without a warm-up"
    # More than the recipe is no less enough.
    warnings, _ = api.jobs.check(form_to_spec({**form, "rollout_max_completion_length": 300}), user=User("local"))
    assert not [w for w in warnings if w.startswith(LENGTH)], warnings


def test_a_genuinely_short_budget_still_warns_and_names_the_measured_length(api):
    form = {**_arithmetic_form(), "rollout_max_completion_length": 24}
    warnings, _ = api.jobs.check(form_to_spec(form), user=User("local"))
    [said] = [w for w in warnings if w.startswith(LENGTH)]
    assert said.startswith("rollout.max_completion_length (24) is below the 96 tokens"), said
    assert said.endswith("raise it to at least 96"), said


def test_a_model_without_a_measured_recipe_keeps_both_warnings():
    from backend.training.preflight import episode_budget_warnings

    spec = parse_spec(
        {
            "method": "grpo",
            "model": {"name_or_path": "builtin:tiny-qwen3"},
            "environment": {"name": ENV},
            "rollout": {"max_completion_length": 96},
            "training": {"batch_size": 16},
        }
    )
    length, warm_up = episode_budget_warnings(spec)
    assert length.startswith(LENGTH) and length.endswith("raise it to at least 256"), length
    assert SFT_FIRST in warm_up


STORED = [
    "rollout.max_completion_length (96) is below a typical arithmetic episode (~256 tokens of model turns and tool "
    "results together); episodes cut off early score 0, so raise it to at least 256",
    "GRPO learns only from groups where some episodes earn a reward: if the model does not call the environment's "
    "tools yet, first run SFT on a few tool-call demonstrations and continue from that job (model.parent_job_id); "
    "try a dry run to see what it does now",
    "memory is tight",
]


def _finished_grpo(api, rows, learning=None):
    spec = form_to_spec(_arithmetic_form())
    job = api.core.store.add(parse_spec(spec))
    api.core.store.merge_artifacts(job.id, preflight_warnings=STORED)
    assert api.core.store.claim_next().id == job.id
    api.core.store.report(job.id, [(step, float(step), data) for step, data in rows], None)
    api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"learning": learning})
    return api.jobs.get_job(job.id)


def test_a_finished_job_that_called_the_tool_drops_the_warm_up_warning_and_says_it_was_settled(api):
    rows = [
        (1, {"tools/call_frequency": 0.0, "completions/clipped_ratio": 0.5}),
        (40, {"tools/call_frequency": 0.98, "completions/clipped_ratio": 0.0}),
    ]
    stuck = LearningVerdict(metric="success", label="success rate", verdict="no_change", sentence="No change.")
    job = _finished_grpo(api, rows, stuck)  # not improved: the tool calls alone settle the warm-up
    summary = summary_markdown(api, job, api.jobs.metrics(job.id))
    assert SFT_FIRST not in summary and "raise it to at least 256" not in summary, summary
    assert "⚠️ memory is tight" in summary
    [settled] = [line for line in summary.split("\n\n") if line.startswith("✔️ Settled by this run: ")]
    assert "the model called the tool in 98% of completions by the end of training (0% at the start)" in settled
    assert "no completion ran out of tokens" in settled


def test_a_job_that_never_called_the_tool_keeps_its_warnings(api):
    rows = [(1, {"tools/call_frequency": 0.0, "completions/clipped_ratio": 0.6}), (40, {"tools/call_frequency": 0.0})]
    job = _finished_grpo(api, rows)
    summary = summary_markdown(api, job, api.jobs.metrics(job.id))
    assert SFT_FIRST in summary and "raise it to at least 256" in summary and "Settled" not in summary, summary
