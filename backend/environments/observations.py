"""An environment's observation as the short text the model reads next.

What the model needs after an action is what changed and the feedback on it: the observation's own fields (a board
drawn as rows, a list as lines), the reward and whether the episode ended, and the messages a server puts in
``metadata`` (``error``, ``message``, ``last_move_valid``). What it must not get is the same history again every
turn: a list or text field that only grew since the previous observation is shown by its new part. Empty fields are
left out, every field is capped, and an environment that needs a particular layout can give a template
(``environment.observation_template``: ``str.format`` over the fields).
"""

from __future__ import annotations

import json
from typing import Any

MAX_FIELD_CHARS = 1200
_FEEDBACK_KEYS = ("reward", "done", "metadata")


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == [] or value == {}


def _scalar(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool)) or value is None


def _cap(text: str) -> str:
    if len(text) <= MAX_FIELD_CHARS:
        return text
    return f"{text[:MAX_FIELD_CHARS]}… ({len(text) - MAX_FIELD_CHARS} more characters)"


def render_value(value: Any) -> str:
    """A value as compact text: a grid as rows, a list of scalars one per line, anything else as compact JSON.

    >>> print(render_value([[0, 1], [1, 0]]))
    0 1
    1 0
    >>> render_value({"x": 1, "y": [2, 3]})
    '{"x": 1, "y": [2, 3]}'
    """
    if isinstance(value, str):
        return _cap(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and value and all(isinstance(row, list) and all(map(_scalar, row)) for row in value):
        return _cap("\n".join(" ".join("." if cell is None else str(cell) for cell in row) for row in value))
    if isinstance(value, list) and all(map(_scalar, value)) and any(isinstance(v, str) and " " in v for v in value):
        return _cap("\n".join(str(v) for v in value))
    return _cap(json.dumps(value, ensure_ascii=False, separators=(", ", ": ")))


def _new_part(value: Any, before: Any) -> Any:
    """The part of ``value`` added since ``before`` when it only grew (a history), else ``value``.

    It looks inside too: a list whose last item grew (TextArena keeps a game's log in one message whose text gets
    longer each turn) shows that item's new part, and so does a dict for each of its fields that grew.

    >>> _new_part([{"id": 1, "log": "x" * 50 + "\\nthen y"}], [{"id": 1, "log": "x" * 50}])
    [{'id': 1, 'log': 'then y'}]
    """
    if isinstance(value, list) and isinstance(before, list) and before:
        if value[: len(before)] == before:
            if len(value) > len(before):
                return value[len(before) :]
            return f"(unchanged, {len(value)} items)" if len(value) > 10 else value
        if len(value) == len(before) and value[:-1] == before[:-1]:
            last = _new_part(value[-1], before[-1])
            return [last] if last is not value[-1] else value
        return value
    if isinstance(value, dict) and isinstance(before, dict) and value.keys() == before.keys():
        parts = {key: _new_part(item, before[key]) for key, item in value.items()}
        return parts if any(parts[key] is not value[key] for key in value) else value
    if isinstance(value, str) and isinstance(before, str) and len(before) > 40 and value.startswith(before):
        return value[len(before) :].lstrip("\n")
    return value


def _feedback(observation: dict[str, Any], previous: dict[str, Any], reward: float | None, done: bool) -> list[str]:
    lines = []
    metadata = observation.get("metadata")
    if isinstance(metadata, dict):
        # Scalars (messages, flags) and lists (a maze some servers keep here); dicts are bookkeeping. A history kept
        # here is shown by its new part, as the observation's own fields are.
        before = previous.get("metadata") if isinstance(previous.get("metadata"), dict) else {}
        shown = {
            key: _new_part(value, before.get(key))
            for key, value in metadata.items()
            if _scalar(value) or isinstance(value, list)
        }
        lines += [_labelled(key, render_value(value)) for key, value in shown.items() if not _empty(value)]
    if reward is not None:
        lines.append(f"reward: {reward:g}")
    if done:
        lines.append("The episode is over.")
    return lines


def observation_text(
    observation: dict[str, Any],
    *,
    previous: dict[str, Any] | None = None,
    reward: float | None = None,
    done: bool = False,
    template: str | None = None,
) -> str:
    """The text for one observation (see the module's docstring); ``previous`` is the episode's last one.

    >>> print(observation_text({"board": [[0, 1], [1, 0]], "history": ["a", "b", "c"], "legal": [],
    ...                         "metadata": {"error": "column 9 is off the board"}},
    ...                        previous={"history": ["a", "b"]}, reward=0.0))
    board:
    0 1
    1 0
    history: ["c"]
    error: column 9 is off the board
    reward: 0
    """
    previous = previous or {}
    fields = {
        key: _new_part(value, previous.get(key)) for key, value in observation.items() if key not in _FEEDBACK_KEYS
    }
    fields = {key: value for key, value in fields.items() if not _empty(value)}
    if template:
        body = render_template(template, observation)
    elif len(fields) == 1 and isinstance(next(iter(fields.values())), str):
        body = render_value(next(iter(fields.values())))
    else:
        body = "\n".join(_labelled(key, render_value(value)) for key, value in fields.items())
    return "\n".join(part for part in [body, *_feedback(observation, previous, reward, done)] if part)


def _labelled(key: str, text: str) -> str:
    return f"{key}:\n{text}" if "\n" in text else f"{key}: {text}"


class _Fields(dict):
    def __missing__(self, key: str) -> str:
        return ""


def render_template(template: str, observation: dict[str, Any]) -> str:
    """``template`` filled with the observation's fields rendered as text (a missing field is empty)."""
    values = _Fields({key: render_value(value) for key, value in observation.items() if key != "metadata"})
    if isinstance(observation.get("metadata"), dict):
        values.update({key: render_value(value) for key, value in observation["metadata"].items() if key not in values})
    return template.format_map(values).strip()
