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
from backend.methods.reward import SCORE_HEAD, scored_ids, sequence_scores
from backend.models.loading import head_init_kwargs, load_tokenizer, resolve_model


def load_reward_model(job: JobRecord, models_dir: Path) -> tuple[Any, Any]:
    """A finished reward job's model (its base with the score head, its adapter on, in eval mode) and tokenizer."""
    import transformers
    from peft import PeftModel

    adapter = str(job.artifacts.adapter_dir)
    tokenizer = load_tokenizer(adapter, job.spec.model)
    base = getattr(transformers, SCORE_HEAD.auto_class).from_pretrained(
        resolve_model(job.spec.model, models_dir), **head_init_kwargs(SCORE_HEAD)
    )
    base.config.pad_token_id = tokenizer.pad_token_id  # the head reads each row's last token that is not padding
    return PeftModel.from_pretrained(base, adapter).eval(), tokenizer


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
                self._held = (job.id, *load_reward_model(job, self.models_dir))
            _, model, tokenizer = self._held
            limit = job.spec.training.max_length
            ids = [
                scored_ids(tokenizer, {"prompt": turns[:-1], "chosen": turns[-1:]}, "chosen")[-limit:]
                for turns in conversations
            ]
            return sequence_scores(model, tokenizer, ids, [None] * len(ids))
