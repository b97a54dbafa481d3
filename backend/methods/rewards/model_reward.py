"""A reward model as a reward: each prompt + completion scored by a sequence-classification model (one score), as
TRL's GRPOTrainer scores a reward model given in ``reward_funcs``: the chat template over prompt + completion for
conversations (prompt + completion as text otherwise), right-padded batches, the score at the last real token.

It is a function rather than the model handed to TRL, so that one scorer serves the trainer, the held-out
evaluation, the reward bench and pre-flight alike (they all call rewards as functions), keeps the studio's reward
name (TRL names a model by its config's path, the base model's folder for a reward job), and scores a reward job's
model, which PEFT loads as a ``PeftModel`` that TRL's reward-model path (``isinstance(PreTrainedModel)``) passes by.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backend.models.mixed_batch import model_device
from backend.models.scoring import as_messages, chunks

# Sequences per forward pass: a training step's group of completions in a few passes, without a memory spike.
SCORE_BATCH = 32


class ModelReward:
    """A reward callable that scores each prompt + completion with a reward model, in batches on its device."""

    def __init__(self, model: Any, tokenizer: Any, name: str = "reward_model") -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.__name__ = name

    def named(self, name: str) -> ModelReward:
        """The same scorer (one model in memory) under another name, for a second entry with its own weight."""
        renamed = copy.copy(self)
        renamed.__name__ = name
        return renamed

    def to(self, device: Any) -> ModelReward:
        """Move the reward model to ``device`` (the trainer's), where it scores."""
        self.model.to(device)
        return self

    def texts(self, prompts: Sequence[Any] | None, completions: Sequence[Any]) -> list[str]:
        """What the model reads per completion, as TRL renders it: the chat template over prompt + completion when
        either is a conversation, else the two texts joined."""
        from trl.data_utils import apply_chat_template

        prompts = list(prompts) if prompts is not None else [None] * len(completions)
        texts = []
        for prompt, completion in zip(prompts, completions):
            completion_messages = as_messages(completion)
            prompt_messages = as_messages(prompt) if prompt is not None else None
            if completion_messages is not None or prompt_messages is not None:
                prompt_part = prompt_messages if prompt_messages is not None else _as_user(prompt)
                answer = completion_messages if completion_messages is not None else _as_assistant(completion)
                texts.append(apply_chat_template({"messages": prompt_part + answer}, self.tokenizer)["text"])
            else:
                texts.append((prompt or "") + (completion or ""))
        return texts

    def __call__(self, prompts: Sequence[Any] | None = None, completions: Sequence[Any] = (), **_: Any) -> list[float]:
        """One score per completion (TRL passes ``prompts`` and ``completions``; the dataset columns are not read)."""
        import torch

        texts = self.texts(prompts, completions)
        scores: list[float] = []
        for chunk in chunks(texts, SCORE_BATCH):
            batch = self.tokenizer(
                text=chunk, return_tensors="pt", padding=True, padding_side="right", add_special_tokens=False
            )
            with torch.inference_mode():
                logits = self.model(**batch.to(model_device(self.model))).logits
            scores += [float(score) for score in logits[:, 0].float()]
        return scores


def _as_user(prompt: Any) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}] if prompt else []


def _as_assistant(completion: Any) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": completion or ""}]


def load_model_rewards(sources: Mapping[str, Any], models_dir: Path) -> dict[str, ModelReward]:
    """A scorer for each reward model a job names (``training.reward_models.RewardModelSource`` by the name in the
    spec), loaded once each, on the CPU until the trainer moves it."""
    from backend.models.inference import load_reward_model

    return {
        name: ModelReward(*load_reward_model(source.model, models_dir, source.adapter))
        for name, source in sources.items()
    }
