"""The TrainerCallback that follows Transformers' background checkpoint pushes (``output.push_checkpoints``) and records
how each one ended; backend/hub/checkpoints.py says where they go and in which words."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from backend.hub.checkpoints import describe_checkpoint_failure, record_push_failure, record_pushed
from backend.jobs.reporter import JobReporter


class CheckpointPushWatch(TrainerCallback):
    """Records each checkpoint push once its uploads have ended: the step pushed (``hub_checkpoint``) or why it was
    not (``hub_checkpoint_error`` and the log). Never stops training.

    With ``hub_strategy="checkpoint"`` every save starts uploads in a background thread (the checkpoint to
    ``last-checkpoint/``, the latest weights to the repo's root) and skips the push while the previous one is still
    under way; ``train()`` waits for the last one before it returns. The outcomes are read, and written to the store,
    from the training thread only: at the next save, and in :meth:`settle` once training is over.
    """

    def __init__(self, trainer: Any, store: JobReporter, job_id: str, private: bool, token: str | None = None):
        self.trainer = trainer
        self.store = store
        self.job_id = job_id
        self.private = private
        self.token = token
        self._seen: set[futures.Future] = set()
        self._pending: list[tuple[int, list[futures.Future]]] = []

    @property
    def repo_id(self) -> str:
        """The repo Transformers pushes to (created by it, under the token's account when no owner was given)."""
        return self.trainer.hub_model_id

    def on_save(self, args, state, control, **kwargs):
        """Note the uploads this save started, and record the ones that have ended."""
        progress = getattr(self.trainer, "push_in_progress", None)
        started = [upload for upload in (progress.jobs if progress is not None else []) if upload not in self._seen]
        if started:
            self._seen.update(started)
            self._pending.append((state.global_step, started))
        self.record_ended()

    def record_ended(self, wait: bool = False) -> None:
        """Record every push whose uploads have all ended (``wait``: wait for them first)."""
        pending = []
        for step, uploads in self._pending:
            if wait:
                futures.wait(uploads)
            if not all(upload.done() for upload in uploads):
                pending.append((step, uploads))
                continue
            failed = next((u.exception() for u in uploads if not u.cancelled() and u.exception() is not None), None)
            if failed is not None:
                output_dir = Path(self.trainer.args.output_dir)
                sentence = describe_checkpoint_failure(failed, self.repo_id, output_dir, step, self.token)
                record_push_failure(self.store, self.job_id, sentence)
            elif not any(upload.cancelled() for upload in uploads):
                record_pushed(self.store, self.job_id, self.repo_id, step, self.private)
        self._pending = pending

    def settle(self) -> None:
        """Once training is over: record the pushes not yet recorded (``train()`` has waited for them already)."""
        self.record_ended(wait=True)
