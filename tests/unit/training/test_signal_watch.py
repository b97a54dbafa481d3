"""GRPO's signal watch: the monitor fed logged rows, and a real run on a constant reward stopped early."""

import logging
import threading
from types import SimpleNamespace

import pytest
from transformers import TrainerControl, TrainerState

from backend.core.artifacts import SignalWatch
from backend.core.spec import parse_spec
from backend.jobs.records import JobStatus
from backend.training.callbacks import StoreReportingCallback
from backend.training.signal import (
    ALL_CLIPPED,
    GROUPS_SCORED_SAME,
    PATIENCE,
    REWARD_CONSTANT,
    SignalMonitor,
    no_signal_reason,
)
from backend.worker import run_job
from tests.helpers import tiny_spec

FLAT = {"loss": 0.0, "reward": 0.0, "reward_std": 0.0, "frac_reward_zero_std": 1.0, "completions/clipped_ratio": 0.5}
SIGNAL = {"loss": 0.1, "reward": 0.4, "reward_std": 0.3, "frac_reward_zero_std": 0.5, "completions/clipped_ratio": 0.5}
CLIPPED = {**SIGNAL, "completions/clipped_ratio": 1.0}


def _fed(*rows) -> SignalMonitor:
    monitor = SignalMonitor()
    for step, row in enumerate(rows, start=1):
        monitor.observe(row, step)
    return monitor


def test_no_warning_after_two_flat_steps_but_after_three():
    monitor = _fed(SIGNAL, FLAT, FLAT)
    assert monitor.warning is None and monitor.consecutive == 2 and monitor.since_step == 2
    assert monitor.observe(FLAT, 4) and monitor.warned
    watch = monitor.snapshot()
    assert isinstance(watch, SignalWatch)
    assert watch.conditions == [GROUPS_SCORED_SAME, REWARD_CONSTANT]
    assert (watch.since_step, watch.consecutive, watch.steps_logged, watch.steps_with_signal) == (2, 3, 4, 1)
    for hint in ("frac_reward_zero_std", "reward_std", "reward bench", "SFT", "rollout.temperature"):
        assert hint in watch.warning
    assert "max_completion_length" not in watch.warning  # nothing was clipped
    assert not monitor.observe(FLAT, 5) and not monitor.warned, "the warning holds: no change, no second warning"
    assert monitor.consecutive == 4 and monitor.warning == watch.warning


def test_a_step_with_signal_clears_the_warning_and_keeps_the_count():
    monitor = _fed(FLAT, FLAT, FLAT)
    assert monitor.warning is not None and monitor.steps_with_signal == 0
    assert monitor.observe(SIGNAL, 4) and not monitor.warned
    watch = monitor.snapshot()
    assert watch.warning is None and watch.conditions == [] and watch.since_step is None and watch.consecutive == 0
    assert (watch.steps_logged, watch.steps_with_signal) == (4, 1)


def test_every_completion_clipped_is_a_condition_of_its_own():
    monitor = _fed(*[CLIPPED] * PATIENCE)
    watch = monitor.snapshot()
    assert watch.conditions == [ALL_CLIPPED]
    assert "rollout.max_completion_length" in watch.warning and "completions/clipped_ratio" in watch.warning
    assert watch.steps_with_signal == PATIENCE, "the groups still scored differently"
    assert no_signal_reason(watch) is None


def test_no_signal_reason_only_for_a_run_that_never_had_any():
    never = _fed(FLAT, FLAT, FLAT, FLAT).snapshot()
    reason = no_signal_reason(never)
    assert reason and "4 logged steps" in reason
    assert no_signal_reason(never.model_dump()) == reason  # the stored artifact, as a dict
    assert no_signal_reason(_fed(FLAT, SIGNAL, FLAT, FLAT).snapshot()) is None  # one step with signal
    assert no_signal_reason(None) is None and no_signal_reason(SignalWatch()) is None  # nothing logged
    # The verdict's sentence says it once: "... The run learned nothing: on all 4 logged steps every group's ..."
    from backend.core.learning import LearningMetric, verdict

    said = verdict(LearningMetric("reward/total", "held-out reward"), [0.0] * 4, [0.0] * 4, no_signal=reason).sentence
    assert said.count("nothing") == 1 and "The run learned nothing: on all 4 logged steps" in said, said


def test_rows_that_are_not_grpo_training_rows_are_ignored():
    monitor = SignalMonitor()
    for row in (
        {"loss": 1.2, "grad_norm": 0.3, "learning_rate": 1e-3},  # SFT
        {"loss": 0.6, "rewards/margins": 0.1},  # DPO
        {"eval_frac_reward_zero_std": 1.0, "eval_reward_std": 0.0},  # a GRPO eval row
        {**FLAT, "train_runtime": 3.2, "train_loss": 0.0},
    ):  # the final summary row
        assert not monitor.observe(row, 1)
    watch = monitor.snapshot()
    assert watch == SignalWatch() and no_signal_reason(watch) is None


def test_the_callback_records_the_warning_once_and_its_clearing_without_stopping(store, caplog):
    job = store.add(
        parse_spec(
            tiny_spec(method="grpo", dataset={"source": "builtin", "name": "math-demo"}, training={"batch_size": 4})
        )
    )  # stop_when_no_signal is off
    callback = StoreReportingCallback(store, job.id, threading.Event())
    state, args = TrainerState(), SimpleNamespace(world_size=1)
    callback.on_train_begin(args, state, TrainerControl())
    callback.on_log(args, state, TrainerControl(), logs={"loss": 1.0, "grad_norm": 0.1})  # not a GRPO row
    assert store.get(job.id).artifacts.signal is None
    with caplog.at_level(logging.INFO, logger="studio.signal"):
        for step, row in enumerate([FLAT] * (PATIENCE + 1) + [SIGNAL], start=1):
            state.global_step = step
            control = TrainerControl()
            callback.on_log(args, state, control, logs=row)
            assert not control.should_training_stop
            signal = store.get(job.id).artifacts.signal
            if step == PATIENCE:
                assert signal.warning and signal.consecutive == PATIENCE and not signal.stopped_early
        callback.on_train_end(args, state, TrainerControl())
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "studio.signal"]
    assert len(warnings) == 1 and "step 3" in warnings[0].getMessage()
    assert any("signal is back" in r.getMessage() for r in caplog.records)
    signal = store.get(job.id).artifacts.signal
    assert signal.warning is None and (signal.steps_logged, signal.steps_with_signal) == (PATIENCE + 2, 1)
    assert no_signal_reason(signal) is None


@pytest.mark.slow
def test_grpo_on_a_constant_reward_stops_early_and_still_succeeds(paths, store):
    max_steps = 8
    spec = parse_spec(
        tiny_spec(
            method="grpo",
            dataset={"source": "builtin", "name": "math-demo"},
            grpo={
                "num_generations": 2,
                "max_completion_length": 8,
                "use_vllm": "off",
                "rewards": [{"name": "regex", "pattern": "^NEVER-MATCHES$"}],
            },
            training={
                "max_steps": max_steps,
                "batch_size": 2,
                "learning_rate": 1e-3,
                "max_length": 128,
                "save_steps": 100,
                "stop_when_no_signal": True,
            },
            # The forecast would stop it before the first step: trained anyway, the live watch is what is tested.
            forecast={"train_anyway": True},
        )
    )
    job = store.add(spec)
    assert store.claim_next().id == job.id  # what the scheduler does before it starts the worker
    assert run_job(job.id, paths, threading.Event()) == 0
    done = store.get(job.id)
    assert done.status is JobStatus.succeeded, done.error
    assert done.artifacts.global_step == PATIENCE < max_steps, "stopped at the PATIENCE-th logged step"
    assert (paths.job_adapter(job.id) / "adapter_config.json").is_file(), "an early stop still saves the adapter"
    signal = done.artifacts.signal
    assert signal is not None and signal.stopped_early
    assert signal.warning and "reward bench" in signal.warning
    assert GROUPS_SCORED_SAME in signal.conditions
    assert (signal.since_step, signal.consecutive, signal.steps_logged, signal.steps_with_signal) == (1, 3, 3, 0)
    assert no_signal_reason(signal) is not None
    forecast = done.artifacts.forecast
    assert forecast.forecast == "no_signal" and forecast.overridden and "cut at 8 tokens" in forecast.cause
    # The verdict says it too, whether or not held-out rows were scored (it once ended with none: "succeeded").
    learning = done.artifacts.learning
    assert learning is not None and learning.verdict == "no_signal", learning
    assert "The run learned nothing: " in learning.sentence
    trained = [m for m in store.metrics(job.id) if "frac_reward_zero_std" in m and "train_runtime" not in m]
    assert len(trained) == PATIENCE and all(m["frac_reward_zero_std"] == 1 for m in trained)
