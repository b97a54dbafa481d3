"""The Jobs tab's views as plain functions (no Gradio, no browser): plots per metric family, log rows, samples, the
compare frame, button states, the cancelled wording, the environment line and the adapter zip."""

from __future__ import annotations

import dataclasses
import doctest
import os
import time
import zipfile

import pytest

from backend.api import StudioAPI
from backend.core.artifacts import JobArtifacts
from backend.core.spec import parse_spec
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import JobNotFound
from components.jobs import monitor as job_monitor
from components.jobs import views as job_views
from tests.helpers import tiny_spec


def _job(api: StudioAPI, **overrides):
    return api.core.store.add(parse_spec(tiny_spec(**overrides)))


def test_the_doctests_hold():
    assert doctest.testmod(job_monitor).failed == 0
    assert doctest.testmod(job_views).failed == 0


SFT_ROWS = [
    {
        "step": s,
        "ts": 1_700_000_000 + s,
        "loss": 3.0 - 0.2 * s,
        "learning_rate": 1e-3 * (7 - s) / 6,
        "grad_norm": 1.5,
        "mean_token_accuracy": 0.1 * s,
    }
    for s in range(1, 7)
]


def test_each_metric_family_gets_its_own_plot_with_units_integer_steps_and_a_faint_raw_line():
    views = job_monitor.plot_views("sft", SFT_ROWS, total_steps=6)
    shown = {key for key, view in views.items() if view is not None}
    assert shown == {"loss", "lr", "grad_norm", "token_accuracy"}  # loss and lr never share a scale
    loss = views["loss"]
    assert set(loss.frame["series"]) == {"loss", "loss (raw)"}
    assert loss.y_title == "cross-entropy (nats/token)" and views["token_accuracy"].y_title.startswith("fraction")
    # The smoothed line is strong, the raw one a faint tint; both named in the legend.
    assert loss.color_map["loss"] == job_monitor.PALETTE[0][0]
    assert loss.color_map["loss (raw)"] == job_monitor.PALETTE[0][1]
    raw = loss.frame[loss.frame["series"] == "loss (raw)"]["value"].tolist()
    smooth = loss.frame[loss.frame["series"] == "loss"]["value"].tolist()
    assert raw == pytest.approx([2.8, 2.6, 2.4, 2.2, 2.0, 1.8])
    assert smooth[0] == pytest.approx(raw[0]) and smooth[-1] > raw[-1]  # the average lags the falling raw loss
    assert loss.frame["step"].dtype.kind == "i"
    # A 6-step job gets a longer axis: whole-number ticks.
    assert loss.x_lim == [0, job_monitor.MIN_X_SPAN]
    # The learning rate is a schedule, not noise: drawn once, unsmoothed.
    assert set(views["lr"].frame["series"]) == {"learning rate"}
    assert job_monitor.plot_views("sft", [])["loss"] is None


def _lines(view) -> set[str]:
    """The metrics a plot draws, by their legend names (a raw line is only ever one of theirs)."""
    series = set(view.frame["series"])
    smoothed = {name for name in series if not name.endswith(job_monitor.RAW_SUFFIX)}
    assert series <= smoothed | {name + job_monitor.RAW_SUFFIX for name in smoothed}, series
    return smoothed


def test_dpo_and_grpo_families():
    dpo = job_monitor.plot_views(
        "dpo",
        [
            {
                "step": 1,
                "loss": 0.69,
                "rewards/margins": 0.1,
                "rewards/accuracies": 0.5,
                "rewards/chosen": 0.2,
                "rewards/rejected": 0.1,
            }
        ],
    )
    assert _lines(dpo["margins"]) == {"margin"}
    assert _lines(dpo["preference_accuracy"]) == {"accuracy"}
    assert _lines(dpo["chosen_rejected"]) == {"chosen", "rejected"}
    grpo = job_monitor.plot_views(
        "grpo",
        [
            {
                "step": s,
                "reward": 0.5,
                "rewards/accuracy/mean": 0.5,
                "kl": 0.01,
                "completions/mean_length": 20.0,
                "completions/clipped_ratio": 0.25,
                "frac_reward_zero_std": 1.0,
            }
            for s in (1, 2)
        ],
    )
    assert _lines(grpo["reward"]) == {"reward (mean)", "accuracy"}
    assert grpo["length"].y_title == "tokens" and grpo["kl"].y_title == "nats"
    assert _lines(grpo["fractions"]) == {"no-signal groups", "cut short"}
    assert grpo["token_accuracy"] is None and dpo["reward"] is None


def test_a_kto_job_plots_its_loss_margin_good_and_bad_rewards_and_kl():
    rows = [
        {"step": s, "loss": 0.5, "rewards/margins": 0.1, "rewards/chosen": 0.2, "rewards/rejected": 0.1, "kl": 0.0}
        for s in (1, 2)
    ]
    kto = job_monitor.plot_views("kto", rows)
    assert _lines(kto["loss"]) == {"loss"} and kto["loss"].y_title == "KTO loss (nats)"
    assert _lines(kto["margins"]) == {"margin"}
    assert _lines(kto["chosen_rejected"]) == {"chosen", "rejected"} and _lines(kto["kl"]) == {"KL"}
    assert kto["reward"] is None and kto["preference_accuracy"] is None
    assert list(job_monitor.log_rows("kto", rows).columns)[2:5] == ["loss", "margin", "good"]


def test_the_step_axis_grows_in_few_nice_steps_and_stops_at_the_planned_total():
    assert job_monitor.step_axis([{"step": 13}], 1000) == [0, 24]
    assert job_monitor.step_axis([{"step": 21}], 1000) == [0, 50]
    assert job_monitor.step_axis([{"step": 21}], 30) == [0, 30]
    assert job_monitor.step_axis([{"step": 51}], 1000) == [0, 100]
    assert job_monitor.step_axis([], None) == [0, job_monitor.MIN_X_SPAN]


def test_log_rows_show_time_step_and_the_methods_metrics_newest_first():
    rows = job_monitor.log_rows("sft", [*SFT_ROWS, {"step": 6, "ts": 1_700_000_010, "train_runtime": 12.0}])
    assert list(rows.columns) == ["time", "step", "loss", "eval loss", "token acc", "lr", "grad norm"]
    assert rows.iloc[0]["step"] == 6 and rows.iloc[-1]["step"] == 1 and len(rows) == 6  # summary row left out
    assert rows.iloc[0]["loss"] == "1.8" and rows.iloc[0]["lr"] == "1.67e-04" and ":" in rows.iloc[0]["time"]
    grpo = job_monitor.log_rows(
        "grpo", [{"step": 1, "ts": 1.0, "reward": 0.5, "kl": 0.0, "reward_std": 0.1, "completions/mean_length": 12.5}]
    )
    assert list(grpo.columns)[:6] == ["time", "step", "reward", "reward std", "kl", "length (tokens)"]
    dpo = job_monitor.log_rows("dpo", [{"step": 1, "ts": 1.0, "rewards/margins": 0.25}])
    assert "margin" in dpo.columns and dpo.iloc[0]["margin"] == "0.25"


def _sample(step, completion, **rewards):
    return {
        "step": step,
        "prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}],
        "completion": [{"role": "assistant", "content": completion}],
        "rewards": rewards,
        "advantage": 0.0,
    }


def test_samples_table_has_a_column_per_reward_and_a_weighted_total_and_names_the_best_and_worst():
    samples = [
        _sample(1, "old", accuracy=1.0, length=1.0),
        _sample(2, "five", accuracy=0.0, length=0.5),
        _sample(2, "4", accuracy=1.0, length=0.25),
        _sample(2, "four", accuracy=0.0, length=None),
    ]
    table = job_monitor.samples_table(samples, {"accuracy": 2.0})
    assert list(table.columns) == ["step", "prompt", "completion", "accuracy", "length", "total", "advantage"]
    assert table["completion"].tolist() == ["assistant: 4", "assistant: five", "assistant: four", "assistant: old"]
    assert table.iloc[0][["prompt", "accuracy", "length", "total"]].tolist() == ["2+2?", "1", "0.25", "2.25"]
    assert table.iloc[2]["length"] == ""
    note = job_monitor.best_and_worst(samples, {"accuracy": 2.0})
    assert "Step 2: 3 completions" in note
    assert "**Best** (total 2.25): assistant: 4" in note and "**Worst** (total 0): assistant: four" in note
    assert job_monitor.best_and_worst([]) == ""


def test_compare_overlays_one_metric_of_several_jobs():
    frame = job_monitor.compare_frame(
        [("a · lr 1e-3", SFT_ROWS), ("b · lr 1e-4", SFT_ROWS[:2]), ("c · dpo", [{"step": 1, "rewards/margins": 0.1}])],
        "loss",
    )
    assert list(dict.fromkeys(frame["job"])) == ["a · lr 1e-3", "b · lr 1e-4"]
    assert len(frame) == 8
    assert job_monitor.compare_frame([("c", [{"step": 1, "kl": 0.1}])], "loss") is None


def test_run_name_column_and_choice(api):
    job = _job(api, output={"run_name": "sweep-lr-1e-3"})
    row = job_views.table_rows(api, [job])[0]
    assert dict(zip(job_views.TABLE_COLUMNS, row))["run name"] == "sweep-lr-1e-3"
    assert job_views.choice(job) == f"{job.id} · sft · sweep-lr-1e-3 · queued"


def test_buttons_follow_the_jobs_state(api):
    job = _job(api)
    queued = job_views.job_actions(api, job)
    assert (queued.cancel, queued.resume, queued.push, queued.download) == (True, False, False, False)
    running = job_views.job_actions(api, dataclasses.replace(job, status=JobStatus.running))
    assert running.cancel and not running.resume
    stopping = job_views.job_actions(api, dataclasses.replace(job, status=JobStatus.running, cancel_requested=True))
    assert not stopping.cancel
    assert job_views.job_actions(api, dataclasses.replace(job, status=JobStatus.interrupted)).resume
    cancelled = dataclasses.replace(job, status=JobStatus.cancelled, artifacts=JobArtifacts(cancelled_at_step=2))
    assert not job_views.job_actions(api, cancelled).resume and not job_views.job_actions(api, cancelled).cancel
    checkpoint = api.core.paths.job_output(job.id) / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    assert not job_views.job_actions(api, cancelled).resume, "a checkpoint folder TRL did not finish is not one"
    (checkpoint / "trainer_state.json").write_text("{}")
    assert job_views.job_actions(api, cancelled).resume
    assert job_views.job_actions(api, dataclasses.replace(cancelled, status=JobStatus.failed)).resume
    adapter = api.core.paths.job_adapter(job.id)
    adapter.mkdir(parents=True)
    done = dataclasses.replace(job, status=JobStatus.succeeded, artifacts=JobArtifacts(adapter_dir=str(adapter)))
    actions = job_views.job_actions(api, done)
    assert (actions.cancel, actions.resume, actions.push, actions.download) == (False, False, True, True)
    assert job_views.job_actions(api, None) == job_views.JobActions(False, False, False, False)


def test_a_cancelled_job_reads_cancelled_at_step_n_not_an_error(api):
    # As the store records a cancel (backend/jobs/scheduler.py, worker.py): no error, the step it reached beside it.
    job = dataclasses.replace(
        _job(api),
        status=JobStatus.cancelled,
        error=None,
        artifacts=JobArtifacts(cancelled_at_step=1218),
        progress={"step": 1220, "total_steps": 2000},
    )
    summary = job_views.summary_markdown(api, job)
    assert "**Cancelled at step 1218**" in summary and "Error" not in summary and "stopped by request" not in summary
    (api.core.paths.job_output(job.id) / "checkpoint-1200").mkdir(parents=True)
    (api.core.paths.job_output(job.id) / "checkpoint-1200" / "trainer_state.json").write_text("{}")
    assert "it can resume from its last checkpoint" in job_views.summary_markdown(api, job)
    killed = dataclasses.replace(
        job,
        artifacts=JobArtifacts(
            cancelled_at_step=1218, cancel_note="stopped by request (the worker was killed after the grace period)"
        ),
    )
    assert job_views.cancelled_sentence(killed).startswith("Cancelled at step 1218 (the worker did not stop")
    queued = dataclasses.replace(job, artifacts=JobArtifacts(), progress={})
    assert job_views.cancelled_sentence(queued) == "Cancelled before it started"


def test_a_finished_jobs_builtin_environment_shows_no_dead_localhost_link(api):
    described = "echo_env (mcp environment at http://127.0.0.1:41234; tools: echo)"
    job = dataclasses.replace(
        _job(
            api,
            method="grpo",
            environment={"name": "builtin:echo"},
            dataset={"source": "builtin", "name": "math-demo"},
            grpo={"num_generations": 2},
        ),
        artifacts=JobArtifacts(environment=described),
    )
    running = job_views.environment_text(dataclasses.replace(job, status=JobStatus.running))
    assert "http://127.0.0.1:41234" in running
    done = job_views.environment_text(dataclasses.replace(job, status=JobStatus.succeeded))
    assert "127.0.0.1" not in done and "builtin:echo" in done and "echo_env (mcp environment; tools: echo)" in done
    wordle = "wordle (typed environment at https://u-w.hf.space; tools: guess)"
    remote = dataclasses.replace(job, status=JobStatus.succeeded, artifacts=JobArtifacts(environment=wordle))
    assert "https://u-w.hf.space" in job_views.environment_text(remote)
    assert "127.0.0.1" not in job_views.summary_markdown(api, dataclasses.replace(job, status=JobStatus.failed))


def test_the_adapter_zip_is_built_on_request_once_per_job_in_a_downloads_path(api):
    job = _job(api)
    with pytest.raises(ValueError, match="no saved adapter"):
        api.jobs.adapter_archive(job.id)
    adapter = api.core.paths.job_adapter(job.id)
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text("{}")
    assert api.core.store.claim_next().id == job.id
    api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"adapter_dir": str(adapter)})
    first, second = api.jobs.adapter_archive(job.id), api.jobs.adapter_archive(job.id)
    assert first == second, "a click again hands out the job's one adapter zip (issue 49), not another copy"
    os.utime(adapter / "adapter_config.json", (time.time() + 5, time.time() + 5))  # the adapter changed since
    third = api.jobs.adapter_archive(job.id)
    assert third.parent != first.parent and not first.parent.exists(), "the stale zip is replaced, not kept"
    assert [p.parent for p in api.core.paths.downloads.rglob("*.zip")] == [third.parent]
    for path in (third,):
        assert path.parent.parent == api.core.paths.downloads and path.name == f"adapter-{job.id}.zip"
        assert "adapter_config.json" in zipfile.ZipFile(path).namelist()
        assert [p.name for p in path.parent.iterdir()] == [path.name]  # no partial file left beside it
    assert not list(api.core.paths.job_dir(job.id).glob("*.zip")), "nothing is written into the job folder"
    with pytest.raises(JobNotFound):  # another user's adapter is not theirs to download
        api.jobs.adapter_archive(job.id, User("someone-else"))
    assert [j.id for j in api.jobs.finished_jobs()] == [job.id]
    assert api.jobs.finished_jobs(User("someone-else")) == []


def test_a_tracked_job_says_how_to_open_its_trackio_dashboard(api):
    plain = _job(api)
    assert "trackio" not in job_views.summary_markdown(api, plain)
    tracked = _job(api, output={"trackio": True})
    summary = job_views.summary_markdown(api, tracked)
    assert "Tracked with trackio" in summary and "trackio show --project studio-local" in summary
    assert str(api.core.paths.root / "trackio") in summary


def test_a_job_of_several_processes_says_how_it_was_launched(api):
    job = _job(api, training={"num_processes": 2})
    assert "Launched:" not in job_views.summary_markdown(api, job)
    run = {"processes": 2, "backend": "gloo", "launch": "accelerate launch --multi_gpu", "per_process_batch": 1}
    api.core.store.merge_artifacts(job.id, distributed=run)
    summary = job_views.summary_markdown(api, api.core.store.get(job.id))
    assert "Launched: 2 processes, ddp over gloo, 1 example per process (`accelerate launch --multi_gpu`)" in summary


def test_metrics_come_incrementally_with_a_cursor(api):
    job = _job(api)
    api.core.store.report(job.id, [(1, 0.0, {"loss": 1.0}), (2, 0.0, {"loss": 0.9})], None, [])
    first = api.jobs.metrics_since(job.id)
    assert [r["loss"] for r in first.rows] == [1.0, 0.9]
    assert api.jobs.metrics_since(job.id, first.cursor).rows == []  # nothing new: the cursor stays
    assert api.jobs.metrics_since(job.id, first.cursor).cursor == first.cursor
    api.core.store.report(job.id, [(3, 0.0, {"loss": 0.8})], None, [])
    later = api.jobs.metrics_since(job.id, first.cursor)
    assert [r["step"] for r in later.rows] == [3] and later.cursor > first.cursor
    with pytest.raises(JobNotFound):
        api.jobs.metrics_since(job.id, 0, User("someone-else"))


def test_every_metric_the_method_table_monitors_has_a_plot_and_every_method_a_loss_unit():
    from backend.api import methods, monitoring

    drawn = {m for family in job_monitor.FAMILIES if not family.shared for m in family.metrics}
    for method in methods():
        seen = monitoring(method)
        assert set(seen.metrics) <= drawn, (method, set(seen.metrics) - drawn)
        assert seen.loss_unit != "loss" and seen.log_columns[0][0] in ("loss", "reward"), method


NO_SIGNAL_WARNING = (
    "Every group of completions scored the same on the last 3 logged steps, so GRPO had nothing to "
    "learn from: try a reward that tells completions apart, or more generations per prompt."
)
NO_SIGNAL = {
    "verdict": "no_signal",
    "metric": "reward/total",
    "label": "held-out reward",
    "before": 0.0,
    "after": 0.0,
    "delta": 0.0,
    "ci95": 0.0,
    "rows": 4,
    "sentence": "Held-out reward 0 -> 0 (+0, ±0) on 4 rows. The run learned nothing: every group scored the same.",
}


def _grpo_job(api: StudioAPI):
    return _job(
        api,
        method="grpo",
        dataset={"source": "builtin", "name": "math-demo"},
        grpo={"num_generations": 2, "rewards": [{"name": "regex", "pattern": "^NEVER$"}]},
    )


def test_a_success_that_learned_nothing_says_so_in_the_heading_the_table_and_the_picker(api):
    job = _grpo_job(api)
    assert api.core.store.claim_next().id == job.id
    api.core.store.merge_artifacts(
        job.id,
        signal={
            "warning": NO_SIGNAL_WARNING,
            "since_step": 1,
            "consecutive": 8,
            "steps_logged": 8,
            "steps_with_signal": 0,
        },
    )
    api.core.store.finish(job.id, JobStatus.succeeded, artifacts={"learning": NO_SIGNAL})
    job = api.jobs.get_job(job.id)
    summary = job_views.summary_markdown(api, job)
    heading, verdict, warning, *_ = summary.split("\n\n")
    assert f"**{job.id}** · succeeded - learned nothing · GRPO of" in heading
    assert verdict == f"🚫 **Learned nothing**: {NO_SIGNAL['sentence']}"  # at the top, right under the job's line
    assert warning == (f"> ⚠️ **No learning signal** (since step 1, 8 logged steps in a row): {NO_SIGNAL_WARNING}")
    row = dict(zip(job_views.TABLE_COLUMNS, job_views.table_rows(api, [job])[0]))
    assert row["status"] == "succeeded - learned nothing"
    assert job_views.choice(job).endswith(" · grpo · math-demo · succeeded - learned nothing")


@pytest.mark.parametrize(
    "verdict,mark,word,status",
    [
        ("improved", "✅", "Improved", "succeeded"),
        ("no_change", "➖", "No change", "succeeded"),
        ("worse", "⚠️", "Worse", "succeeded - got worse"),
        ("regressed", "❌", "Got worse", "succeeded - got worse"),
    ],
)
def test_the_verdict_leads_the_summary_with_its_mark_and_the_status_says_the_same(api, verdict, mark, word, status):
    job = _job(api)
    sentence = "Held-out loss 2.1 -> 1.7 (-0.4, ±0.1) on 8 rows."
    learning = {"verdict": verdict, "metric": "eval_loss", "label": "held-out loss", "sentence": sentence, "rows": 8}
    done = dataclasses.replace(job, status=JobStatus.succeeded, artifacts=JobArtifacts(learning=learning))
    lines = job_views.summary_markdown(api, done).split("\n\n")
    assert lines[1] == f"{mark} **{word}**: {sentence}"
    assert f"· {status} · SFT of" in lines[0] and job_views.choice(done).endswith(f" · {status}")
    assert "learned nothing" not in job_views.summary_markdown(api, done)


def test_the_drift_from_the_start_sits_under_the_verdict(api):
    drift = {"mean": 0.031, "ci95": 0.004, "rows": 64, "threshold": 0.5}
    learning = {"verdict": "improved", "metric": "m", "label": "m", "sentence": "S.", "rows": 8, "drift": drift}
    done = dataclasses.replace(_job(api), status=JobStatus.succeeded, artifacts=JobArtifacts(learning=learning))
    lines = job_views.summary_markdown(api, done).split("\n\n")
    assert lines[2] == (
        "Drift from the start: KL from the base 0.031 nats/token (±0.004) on the tuned model's answers to 64 "
        "held-out prompts (healthy: ≤ 0.5)"
    )


def test_a_running_grpo_jobs_no_signal_warning_shows_prominently_and_says_when_it_stopped_the_run(api):
    job = dataclasses.replace(_grpo_job(api), status=JobStatus.running)
    assert job_views.signal_line(job) == "" and "No learning signal" not in job_views.summary_markdown(api, job)
    holding = dataclasses.replace(
        job,
        artifacts=JobArtifacts(
            signal={
                "warning": NO_SIGNAL_WARNING,
                "since_step": 2,
                "consecutive": 3,
                "steps_logged": 4,
                "steps_with_signal": 1,
            }
        ),
    )
    lines = job_views.summary_markdown(api, holding).split("\n\n")
    assert lines[1] == f"> ⚠️ **No learning signal** (since step 2, 3 logged steps in a row): {NO_SIGNAL_WARNING}"
    assert "· running ·" in lines[0] and "Stopped early" not in lines[1]
    recovered = dataclasses.replace(
        job, artifacts=JobArtifacts(signal={"warning": None, "steps_logged": 9, "steps_with_signal": 6})
    )
    assert "No learning signal" not in job_views.summary_markdown(api, recovered)
    stopped = dataclasses.replace(
        job,
        status=JobStatus.succeeded,
        artifacts=JobArtifacts(
            signal={
                "warning": NO_SIGNAL_WARNING,
                "since_step": 1,
                "consecutive": 5,
                "steps_logged": 5,
                "stopped_early": True,
            }
        ),
    )
    assert job_views.summary_markdown(api, stopped).split("\n\n")[1] == (
        f"> 🛑 **Stopped early: no learning signal** (since step 1, 5 logged steps in a row): {NO_SIGNAL_WARNING}"
    )
