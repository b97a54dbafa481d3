"""The TrainerCallback that reports a worker's metrics and progress to the store and honours cancel requests."""

from __future__ import annotations

import math
import threading
import time
from typing import Any

from transformers import TrainerCallback

from backend.store import JobStore

# Progress and cancel checks touch the database; doing it at most this often keeps per-step overhead negligible.
_PROGRESS_EVERY_S = 0.5
_CANCEL_POLL_EVERY_S = 0.5


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    return value


class StoreReportingCallback(TrainerCallback):
    """Appends every ``on_log`` to the job's metrics, keeps its progress row fresh and stops on cancel."""

    def __init__(self, store: JobStore, job_id: str, stop_event: threading.Event):
        self.store = store
        self.job_id = job_id
        self.stop_event = stop_event
        self.cancelled = False
        self._started = time.monotonic()
        self._first_step: int | None = None
        self._last_progress = 0.0
        self._last_cancel_poll = 0.0

    def _report_progress(self, state, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_progress < _PROGRESS_EVERY_S:
            return
        self._last_progress = now
        step, total = state.global_step, state.max_steps or 0
        if self._first_step is None:
            self._first_step = step
        done_here = step - self._first_step
        eta = None
        if done_here > 0 and total:
            eta = (now - self._started) / done_here * (total - step)
        last_loss = next((e["loss"] for e in reversed(state.log_history) if "loss" in e), None)
        self.store.update_progress(
            self.job_id,
            {
                "step": step,
                "total_steps": total,
                "epoch": state.epoch,
                "loss": last_loss,
                "eta_seconds": eta,
                "updated_at": time.time(),
            },
        )

    def _should_stop(self) -> bool:
        if self.stop_event.is_set():
            return True
        now = time.monotonic()
        if now - self._last_cancel_poll >= _CANCEL_POLL_EVERY_S:
            self._last_cancel_poll = now
            if self.store.cancel_requested(self.job_id):
                self.stop_event.set()
        return self.stop_event.is_set()

    def on_train_begin(self, args, state, control, **kwargs):
        self._started = time.monotonic()
        self._first_step = state.global_step
        self._report_progress(state, force=True)

    def on_step_end(self, args, state, control, **kwargs):
        self._report_progress(state)
        if self._should_stop():
            self.cancelled = True
            control.should_training_stop = True
            control.should_save = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            data = {k: _jsonable(v) for k, v in logs.items()}
            data.setdefault("epoch", state.epoch)
            self.store.append_metrics(self.job_id, state.global_step, data)

    def on_train_end(self, args, state, control, **kwargs):
        self._report_progress(state, force=True)
