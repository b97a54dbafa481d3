"""The Train tab's sweep panel and the Jobs tab's sweep view as pure functions: which fields may be varied, a refusal
in the field's words, the children's table with the best marked, the plot's points and the summary line."""

from __future__ import annotations

import math

import pytest

from backend.jobs.records import JobStatus
from components.jobs import sweep_views
from components.train import sweep_views as train_sweep
from tests.unit.jobs.test_sweeps import LR, SPEC, _finish, _learning


def _rated(after: float, verdict: str = "improved") -> dict:
    artifacts = _learning(after, verdict=verdict)
    artifacts["learning"]["rate"] = True
    return artifacts


def test_the_train_tab_offers_numbers_and_closed_choices_never_open_catalogues():
    names = {name for _, name in train_sweep.vary_choices()}
    assert {"learning_rate", "max_steps", "lora_r", "quant_mode", "dpo_loss_type"} <= names
    assert not {"base_model", "parent_job", "method", "run_name", "lora_enabled", "hub_repo_id"} & names


def test_a_refused_value_is_said_in_the_fields_words():
    text = train_sweep.refusal_text("learning_rate", [f'--vary {LR}: "abc" does not fit the field (not a number)'])
    assert text == '⚠️ Not queued: Learning rate: "abc" does not fit the field (not a number)'


def test_the_queued_answer_lists_each_child_with_its_value(api):
    submitted = api.sweeps.submit(SPEC, [train_sweep.vary_setting("learning_rate", "1e-4, 1e-3")])
    text = train_sweep.sweep_queued_markdown(submitted)
    assert text.startswith(f"Queued sweep **{submitted.report.sweep.id}**: 2 jobs, one per value.")
    assert "learning_rate = 0.0001" in text and "learning_rate = 0.001" in text
    assert all(c.child.job_id in text for c in submitted.report.children)


def test_the_table_marks_the_best_and_the_plot_puts_the_score_against_the_log_of_the_value(api, store):
    report = api.sweeps.submit(SPEC, [f"{LR}=1e-6,1e-3,5e-3"]).report
    a, b, c = (child.child.job_id for child in report.children)
    _finish(store, a, JobStatus.succeeded, _rated(0.40, "no_change"))
    _finish(store, b, JobStatus.succeeded, _rated(0.80))
    running = api.sweeps.get(report.sweep.id)
    assert sweep_views.sweep_markdown(running).startswith(f"**Sweep {report.sweep.id}**: running, 2 of 3 children")
    _finish(store, c, JobStatus.failed, error="diverged")
    done = api.sweeps.get(report.sweep.id)

    table = sweep_views.sweep_table(done)
    assert list(table.columns) == ["", "job", "learning_rate", "status", "verdict", "held-out accuracy"]
    assert table.values.tolist() == [
        ["", a, "1e-06", "succeeded", "no change", "40.0%"],
        [sweep_views.BEST_MARK, b, "0.001", "succeeded", "improved", "80.0%"],
        ["", c, "0.005", "failed", "", ""],
    ]
    frame, x_title, y_title = sweep_views.plot_frame(done)
    assert x_title == "log10(learning_rate)" and y_title == "held-out accuracy (%)"
    assert frame["x"].tolist() == pytest.approx([-6.0, -3.0])
    assert frame["score"].tolist() == pytest.approx([40.0, 80.0])
    assert frame["child"].tolist() == ["other", "best"]
    summary = sweep_views.sweep_markdown(done)
    assert "succeeded, 3 of 3 children ended" in summary and f"Best so far: **{b}** (learning_rate = 0.001)" in summary
    assert sweep_views.digest(done) != sweep_views.digest(running) and sweep_views.digest(None) == ""


def test_a_sweep_without_scores_has_no_points_and_a_linear_axis_for_close_values(api):
    report = api.sweeps.submit(SPEC, ["lora.r=8,16"]).report
    frame, x_title, _ = sweep_views.plot_frame(report)
    assert frame is None and x_title == "r"
    assert "No child has a score yet." in sweep_views.sweep_markdown(report)
    assert not sweep_views.log_scaled([8, 16]) and sweep_views.log_scaled([1e-5, 1e-2])
    assert math.isclose(float(sweep_views.score_text(0.5, False)), 0.5)


def test_a_sweep_whose_scored_children_all_got_worse_says_so_and_has_no_best(api, store):
    report = api.sweeps.submit(SPEC, [f"{LR}=1e-4,1e-3"]).report
    for child, verdict in zip(report.children, ("worse", "regressed")):
        _finish(store, child.child.job_id, JobStatus.succeeded, _rated(0.5, verdict))
    done = api.sweeps.get(report.sweep.id)
    summary = sweep_views.sweep_markdown(done)
    assert "No best yet: every child with a score got worse, or lost something a guard checks" in summary
    assert "Best so far" not in summary
    assert list(sweep_views.sweep_table(done).iloc[:, 0]) == ["", ""]  # no child marked best


def test_the_train_tab_offers_the_picked_methods_fields_each_by_its_form_label():
    """Issue 47: the list mixed "beta (dpo.beta)" with "Beta (grpo.beta)" and offered every method's fields on an SFT
    form."""
    from components.train.fields import FORM_FIELDS
    from components.train.form import short_label
    from components.train.sweep_panel import on_method

    everything = train_sweep.vary_choices()
    assert all(label == f"{short_label(FORM_FIELDS[name])} ({FORM_FIELDS[name].path})" for label, name in everything)
    assert all(label[0].isupper() for label, _ in everything), [label for label, _ in everything]
    sft = {name for _, name in train_sweep.vary_choices("sft")}
    assert {"learning_rate", "max_steps", "lora_r"} <= sft
    assert not {n for n in sft if n.startswith(("dpo_", "grpo_", "kto_", "rloo_", "rollout_", "env_", "reward_"))}
    assert {"dpo_beta", "learning_rate"} <= {name for _, name in train_sweep.vary_choices("dpo")}
    grpo = {name for _, name in train_sweep.vary_choices("grpo")}
    assert {"grpo_beta", "rollout_temperature", "env_max_iterations"} <= grpo and "dpo_beta" not in grpo
    # The list follows the method: a field the new method lacks falls back to the learning rate.
    update = on_method("sft", "dpo_beta")
    assert update["value"] == "learning_rate" and update["choices"] == train_sweep.vary_choices("sft")
    assert on_method("dpo", "dpo_beta")["value"] == "dpo_beta"
    # A script that names another method's field is told so, and nothing is queued.
    assert train_sweep.off_method_text("dpo_beta", "sft").startswith("⚠️ Not queued: Beta (dpo.beta) is not a")
