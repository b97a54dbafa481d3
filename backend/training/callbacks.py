"""The TrainerCallback that reports a worker's metrics and progress to the store and honours cancel requests."""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Any

from transformers import TrainerCallback

from backend.core.wording import EVALUATING
from backend.jobs.reporter import JobReporter
from backend.training.distributed import agree_to_stop
from backend.training.eta import evaluating_eta, evaluation_seconds, smoothed_step_seconds, training_eta
from backend.training.meter import PerformanceMeter
from backend.training.signal import ZERO_STD_KEY, SignalMonitor

log = logging.getLogger("studio.signal")

# Reports (metrics + progress, one transaction) and cancel checks touch the database; doing each at most this
# often keeps the per-step cost negligible while live views still update twice a second.
REPORT_EVERY_S = 0.5
CANCEL_POLL_EVERY_S = 0.5


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class StoreReportingCallback(TrainerCallback):
    """Buffers every ``on_log`` into the job's metrics, keeps its progress fresh and stops on cancel.

    Each training log row also carries the run's ``perf/*`` figures (step time, tokens/s, peak memory, MFU) from
    ``performance``, whose ``summary()`` the worker keeps as the job's ``performance`` artifact.
    GRPO rows also feed ``signal`` (a SignalMonitor), kept as the ``signal`` artifact; with
    ``training.stop_when_no_signal`` its warning ends training (as a success: only ``cancelled`` is a cancel).
    ``overhead_s`` is the time spent inside this callback, so the cost of reporting can be measured.
    """

    def __init__(self, store: JobReporter, job_id: str, stop_event: threading.Event):
        self.store = store
        self.job_id = job_id
        self.stop_event = stop_event
        self.cancelled = False
        self.overhead_s = 0.0
        self._pending: list[tuple[int | None, float, dict[str, Any]]] = []
        self._pending_samples: list[tuple[int | None, dict[str, Any]]] = []
        self._sample_source = None
        self._last_report = 0.0
        self._last_cancel_poll = 0.0
        self._last_loss: float | None = None
        self.performance = PerformanceMeter()
        self.signal = SignalMonitor()
        self._stop_when_no_signal = False
        self._signal_recorded = None
        self._last_signal_write = 0.0
        # The evaluations after training, which the ETA counts: rows (or episodes) times sides, rows per training batch.
        self.evaluation_rows = 0
        self._batch_rows = 1
        self._evaluation: dict[str, Any] | None = None

    def expect_evaluation(self, rows: int, sides: int = 2) -> None:
        """The ETA counts an evaluation of ``rows`` held-out rows (or environment episodes) on ``sides`` sides after
        the last step, beside any expected before."""
        self.evaluation_rows += rows * sides

    def _progress(self, state) -> dict[str, Any]:
        step, total = state.global_step, state.max_steps or 0
        eta = (
            training_eta(
                self.performance.step_seconds,
                total - step,
                self.evaluation_rows,
                1,
                self._batch_rows,
            )
            if total
            else None
        )
        return {
            "step": step,
            "total_steps": total,
            "epoch": state.epoch,
            "loss": self._last_loss,
            "eta_seconds": eta,
            "updated_at": time.time(),
        }

    def _flush(self, state, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        rows, self._pending = self._pending, []
        samples, self._pending_samples = self._pending_samples, []
        self.store.report(self.job_id, rows, self._progress(state), samples)

    def evaluation_progress(self, state, done: int, total: int, sides: str, unit: str = "rows") -> None:
        """Report the evaluation's phase: ``done`` of ``total`` held-out rows (or environment ``episodes``) scored on
        ``sides`` ("base and tuned"), with the time left at the per-row cost measured so far (at most every
        :data:`REPORT_EVERY_S`, and always at its start and end)."""
        now = time.monotonic()
        if self._evaluation is None or done < self._evaluation["done"]:  # the evaluation, or a new pass, begins
            step = smoothed_step_seconds(self.performance.step_seconds)
            first = self._evaluation is None
            estimate = None  # a later pass is timed by its own rows
            if first and step is not None:
                estimate = evaluation_seconds(self.evaluation_rows, 1, self._batch_rows, step)
            self._evaluation = {"started": now, "estimate": estimate, "done": done}
        self._evaluation["done"] = done
        if 0 < done < total and now - self._last_report < REPORT_EVERY_S:
            return
        self._last_report = now
        evaluation = self._evaluation
        progress = {
            **self._progress(state),
            "phase": EVALUATING,
            "eval_done": done,
            "eval_rows": total,
            "eval_sides": sides,
            "eval_unit": unit,
            "eta_seconds": evaluating_eta(now - evaluation["started"], done, total, evaluation["estimate"]),
        }
        rows, self._pending = self._pending, []
        self.store.report(self.job_id, rows, progress)

    def watch_completions(self, trainer) -> None:
        """Keep the completions a GRPO trainer samples (TRL holds the last generation batch in ``_logs``)."""
        self._sample_source = trainer

    def _capture_samples(self, step: int) -> None:
        logs = getattr(self._sample_source, "_logs", None)
        if not logs or not logs.get("completion"):
            return
        rewards = {name: list(values) for name, values in logs["rewards"].items()}
        advantages = list(logs["advantages"])
        for i, (prompt, completion) in enumerate(zip(logs["prompt"], logs["completion"])):
            self._pending_samples.append(
                (
                    step,
                    {
                        "prompt": prompt,
                        "completion": completion,
                        "rewards": {
                            name: _jsonable(values[i]) if i < len(values) else None for name, values in rewards.items()
                        },
                        "advantage": _jsonable(advantages[i]) if i < len(advantages) else None,
                    },
                )
            )

    def _should_stop(self) -> bool:
        now = time.monotonic()
        if not self.stop_event.is_set() and now - self._last_cancel_poll >= CANCEL_POLL_EVERY_S:
            self._last_cancel_poll = now
            if self.store.cancel_requested(self.job_id):
                self.stop_event.set()
        return self.stop_event.is_set()

    def _job(self):
        try:
            return self.store.get(self.job_id)
        except Exception:  # noqa: BLE001 - without the spec the figures only leave out the method's extra passes
            return None

    def _record_signal(self) -> None:
        self._last_signal_write = time.monotonic()
        self._signal_recorded = self.signal.snapshot()
        self.store.merge_artifacts(self.job_id, signal=self._signal_recorded.model_dump())

    def _watch_signal(self, state, control, data: dict[str, Any]) -> None:
        """Feed a GRPO row to the monitor; say (and record) a warning as it appears, stopping if the spec asks."""
        warning_before, signal_before = self.signal.warning, self.signal.steps_with_signal
        if not self.signal.observe(data, state.global_step):
            return
        if self.signal.warned:
            if self._stop_when_no_signal:
                control.should_training_stop = True
                self.signal.stopped_early = True
                if state.is_world_process_zero:
                    log.warning(
                        "stopping early at step %d: %s (training.stop_when_no_signal)",
                        state.global_step,
                        self.signal.warning,
                    )
            elif state.is_world_process_zero:
                log.warning("step %d: %s", state.global_step, self.signal.warning)
        elif warning_before is not None and self.signal.warning is None and state.is_world_process_zero:
            log.info(
                "step %d: the learning signal is back (some group's completions scored differently)", state.global_step
            )
        # A warning appearing or clearing, and the first step with signal, are recorded at once; the count of steps
        # with signal at most every REPORT_EVERY_S (on_train_end records the last state).
        if (
            self.signal.warning != warning_before
            or not signal_before
            or time.monotonic() - self._last_signal_write >= REPORT_EVERY_S
        ):
            self._record_signal()

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Report the starting step (a resumed job starts mid-way) and start the performance meter."""
        t0 = time.perf_counter()
        self._flush(state, force=True)
        job = self._job()
        spec = job.spec if job is not None else None
        self._stop_when_no_signal = bool(spec is not None and spec.training.stop_when_no_signal)
        if job is not None and state.global_step > 0:  # a resumed attempt: the steps before still count
            self.signal.carry_over(job.artifacts.signal)
        self.performance.start(args, state, model, spec)
        per_device = getattr(args, "per_device_train_batch_size", 0)  # a test's bare args may not have it
        self._batch_rows = max(1, int(getattr(state, "train_batch_size", 0) or per_device or 1))
        self.overhead_s += time.perf_counter() - t0

    def on_step_end(self, args, state, control, **kwargs):
        """Flush progress and metrics to the store, and stop (without saving) when a cancel was asked."""
        self.performance.step_end()
        t0 = time.perf_counter()
        self._flush(state)
        if agree_to_stop(self._should_stop()):  # every rank leaves at the same step
            self.cancelled = True
            control.should_training_stop = True
            control.should_save = False
        self.overhead_s += time.perf_counter() - t0

    def on_log(self, args, state, control, logs=None, **kwargs):
        """Queue the logged metrics (with speed figures) for the store, and sample completions if asked."""
        t0 = time.perf_counter()
        if logs:
            data = {k: _jsonable(v) for k, v in logs.items()}
            data.setdefault("epoch", state.epoch)
            if data.get("loss") is not None:
                self._last_loss = data["loss"]
            data.update(self.performance.figures(data))
            self._pending.append((state.global_step, time.time(), data))
            if ZERO_STD_KEY in data:
                self._watch_signal(state, control, data)
            if self._sample_source is not None and "train_runtime" not in data:
                self._capture_samples(state.global_step)
        if control.should_save:  # a checkpoint follows: the store holds every step up to it first, so a resume
            self._flush(state, force=True)  # from that checkpoint never leaves steps missing from the plots
        self.overhead_s += time.perf_counter() - t0

    def on_train_end(self, args, state, control, **kwargs):
        """Flush the last metrics and progress to the store, and the signal watch's last state (GRPO)."""
        t0 = time.perf_counter()
        self._flush(state, force=True)
        if self.signal.steps_logged and self.signal.snapshot() != self._signal_recorded:
            self._record_signal()
        self.overhead_s += time.perf_counter() - t0
