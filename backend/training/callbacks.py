"""The TrainerCallback that reports a worker's metrics and progress to the store and honours cancel requests."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from transformers import TrainerCallback

from backend.reporter import JobReporter
from backend.training.performance import PerformanceMeter

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
        self._started = time.monotonic()
        self._first_step = 0
        self._last_report = 0.0
        self._last_cancel_poll = 0.0
        self._last_loss: float | None = None
        self.performance = PerformanceMeter()

    def _progress(self, state) -> dict[str, Any]:
        step, total = state.global_step, state.max_steps or 0
        done_here = step - self._first_step
        eta = (time.monotonic() - self._started) / done_here * (total - step) if done_here > 0 and total else None
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
            self._pending_samples.append((step, {
                "prompt": prompt,
                "completion": completion,
                "rewards": {
                    name: _jsonable(values[i]) if i < len(values) else None for name, values in rewards.items()
                },
                "advantage": _jsonable(advantages[i]) if i < len(advantages) else None,
            }))

    def _should_stop(self) -> bool:
        now = time.monotonic()
        if not self.stop_event.is_set() and now - self._last_cancel_poll >= CANCEL_POLL_EVERY_S:
            self._last_cancel_poll = now
            if self.store.cancel_requested(self.job_id):
                self.stop_event.set()
        return self.stop_event.is_set()

    def _job_spec(self):
        try:
            return self.store.get(self.job_id).spec
        except Exception:  # noqa: BLE001 - without the spec the figures only leave out the method's extra passes
            return None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Record where training starts (a resumed job starts mid-way) and start the performance meter."""
        t0 = time.perf_counter()
        self._started = time.monotonic()
        self._first_step = state.global_step
        self._flush(state, force=True)
        self.performance.start(args, state, model, self._job_spec())
        self.overhead_s += time.perf_counter() - t0

    def on_step_end(self, args, state, control, **kwargs):
        """Flush progress and metrics to the store, and stop (without saving) when a cancel was asked."""
        self.performance.step_end()
        t0 = time.perf_counter()
        self._flush(state)
        if self._should_stop():
            self.cancelled = True
            control.should_training_stop = True
            control.should_save = False
        self.overhead_s += time.perf_counter() - t0
        self.performance.mark()

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
            if self._sample_source is not None and "train_runtime" not in data:
                self._capture_samples(state.global_step)
        self.overhead_s += time.perf_counter() - t0
        self.performance.mark()

    def on_save(self, args, state, control, **kwargs):
        """A checkpoint save is not counted as a training step's time."""
        self.performance.mark()  # a checkpoint save is not part of the next step's time

    def on_evaluate(self, args, state, control, **kwargs):
        """Evaluation time is not counted as a training step's."""
        self.performance.mark()

    def on_train_end(self, args, state, control, **kwargs):
        """Flush the last metrics and progress to the store."""
        t0 = time.perf_counter()
        self._flush(state, force=True)
        self.overhead_s += time.perf_counter() - t0
