"""A finished reward job scoring the chat's answers: each side's conversation, as the reward model was trained to
read a prompt and its answer (through the chat template), one score each, in one batch.

One reward model is held at a time (loaded on the first score, replaced when another job scores): the chat's own
models stay loaded beside it, and a reward model of the demo's size loads in about a second.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from backend.jobs.records import JobRecord
from backend.methods.reward import scored_ids, sequence_scores
from backend.models.inference import load_reward_model


class AnswerScorer:
    """Scores conversations with a finished reward job's model, holding the last one loaded."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir
        self._lock = threading.Lock()
        self._held: tuple[str, Any, Any] | None = None  # (job id, model, tokenizer)

    def score(self, job: JobRecord, conversations: list[list[dict]]) -> list[float]:
        """The reward model's score of each conversation's last answer (its prompt: the turns before it); each read
        within the job's ``max_length``, its start cut off when longer, since the head reads the last token."""
        with self._lock:
            if self._held is None or self._held[0] != job.id:
                self._held = None  # the last one freed before the next loads
                adapter = Path(str(job.artifacts.adapter_dir))
                self._held = (job.id, *load_reward_model(job.spec.model, self.models_dir, adapter))
            _, model, tokenizer = self._held
            limit = job.spec.training.max_length
            ids = [
                scored_ids(tokenizer, {"prompt": turns[:-1], "chosen": turns[-1:]}, "chosen")[-limit:]
                for turns in conversations
            ]
            return sequence_scores(model, tokenizer, ids, [None] * len(ids))
