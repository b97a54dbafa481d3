"""A finished reward job scoring the chat's answers: each side's conversation, as the reward model was trained to
read a prompt and its answer (through the chat template), one score each, in one batch.

One reward model is held at a time (loaded on the first score, replaced when another job scores): the chat's own
models stay loaded beside it, and a reward model of the demo's size loads in about a second.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from backend.methods.reward import scored_ids, sequence_scores
from backend.models.inference import load_reward_model


class AnswerScorer:
    """Scores conversations with a finished reward job's model, holding the last one loaded."""

    def __init__(self, models_dir: Path) -> None:
        self.models_dir = models_dir
        self._lock = threading.Lock()
        self._held: tuple[str, Any, Any] | None = None  # (key, model, tokenizer)

    def score(self, key: str, source: Any, conversations: list[list[dict]]) -> list[float]:
        """The score of each conversation's last answer (its prompt: the turns before it) by the reward model
        ``source`` names (``training.reward_models.RewardModelSource``: a model, and a reward job's adapter on it),
        held under ``key``; each read within the source's ``max_length`` tokens (the reward job's), its start cut
        off when longer, since the head reads the last token."""
        cut = -source.max_length if source.max_length else None
        with self._lock:
            if self._held is None or self._held[0] != key:
                self._held = None  # the last one freed before the next loads
                self._held = (key, *load_reward_model(source.model, self.models_dir, source.adapter))
            _, model, tokenizer = self._held
            ids = [
                scored_ids(tokenizer, {"prompt": turns[:-1], "chosen": turns[-1:]}, "chosen")[cut:]
                for turns in conversations
            ]
            return sequence_scores(model, tokenizer, ids, [None] * len(ids))
