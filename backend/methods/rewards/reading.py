"""What every reward reads: a completion's text, a batch's dataset column, and a user's pattern under a time limit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import regex

RewardFunction = Callable[..., Sequence[float | None]]

# Keyword arguments TRL passes to every reward besides the dataset columns; a dataset row must not shadow them.
TRAINER_KWARGS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric"})
# Columns TRL hands to rewards under other names (prompts=, completions=), never as themselves.
NON_REWARD_COLUMNS = frozenset({"prompt", "completion", "completion_ids"})
# A user's pattern can backtrack exponentially ("(a|aa)+$"); Python's re cannot be interrupted and holds the GIL, so
# user patterns run on the ``regex`` package with a time limit per match (and release the GIL while matching).
USER_PATTERN_TIMEOUT_S = 0.1


def search_user_pattern(pattern: regex.Pattern, text: str) -> bool | None:
    """Whether a user's compiled pattern occurs in ``text``; None when it ran out of time.

    >>> search_user_pattern(regex.compile("(a|aa)+$"), "a" * 40 + "b") is None
    True
    """
    try:
        return pattern.search(text, timeout=USER_PATTERN_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError:
        return None


# --- reading completions -----------------------------------------------------------------------------------


def completion_text(completion: Any) -> str:
    """The text a reward scores: a plain completion itself, or the last assistant message's content.

    >>> completion_text("Paris")
    'Paris'
    >>> completion_text([{"role": "assistant", "content": "Paris"}])
    'Paris'
    >>> completion_text([{"role": "assistant", "content": None}])
    ''
    """
    if completion is None:
        return ""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, dict):
        return _content_text(completion.get("content"))
    for message in reversed(list(completion)):
        # TRL's own examples omit the role on completion messages, so a missing role means the model spoke.
        if isinstance(message, dict) and message.get("role", "assistant") == "assistant":
            return _content_text(message.get("content"))
    return ""


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # multimodal content: [{"type": "text", "text": ...}, {"type": "image"}]
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return str(content)


def batch_column(kwargs: dict[str, Any], column: str, reward_name: str, count: int) -> list[Any]:
    """A batch's dataset column, one value per completion; a sentence naming the reward when it is missing."""
    if column not in kwargs:
        raise ValueError(f"the {reward_name} reward needs the dataset column {column!r}, which the batch lacks")
    values = list(kwargs[column])
    if len(values) != count:
        raise ValueError(f"column {column!r} has {len(values)} values for {count} completions")
    return values
