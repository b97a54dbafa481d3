"""What an OpenEnv server's answers must look like, as typed models: ``/health``, ``/metadata``, ``/schema`` and the
WebSocket frames of a session. A server is a stranger: an answer of another shape is a sentence that names the
environment and what was wrong, and quotes at most a short, escaped excerpt of a field the protocol defines."""

from __future__ import annotations

import json
import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, ValidationError, field_validator

from backend.core.spec import shorten

EXCERPT = 60  # characters of a server's own field quoted in a sentence
NAME_LIMIT = 80
DESCRIPTION_LIMIT = 4000
MESSAGE_LIMIT = 1000  # an error frame's message, as the model reads it in a tool's answer


class WrongShape(ValueError):
    """The server answered in a shape OpenEnv does not use (the text says where and what)."""


def excerpt(value: Any, limit: int = EXCERPT) -> str:
    """A server's value quoted for a sentence: escaped (``repr``), and cut to ``limit`` characters.

    >>> excerpt("healthy"), excerpt("x" * 500)[:12], len(excerpt("x" * 500))
    ("'healthy'", "'xxxxxxxxxxx", 63)
    """
    text = value if isinstance(value, str) else json.dumps(value, default=str)[: limit * 2]
    cut = text if len(text) <= limit else text[:limit] + "\u2026"
    return repr(cut)


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Health(_Answer):
    """``GET /health``."""

    status: str


class Metadata(_Answer):
    """``GET /metadata``: a name and description (both optional), each kept short."""

    name: str | None = None
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _short_name(cls, value: str | None) -> str | None:
        return None if value is None else shorten(" ".join(value.split()), NAME_LIMIT)

    @field_validator("description")
    @classmethod
    def _short_description(cls, value: str | None) -> str | None:
        return None if value is None else shorten(value, DESCRIPTION_LIMIT)


class Schema(_Answer):
    """``GET /schema``: the JSON schemas of the action (what the tools are made from), observation and state."""

    action: dict[str, Any] = Field(default_factory=dict)
    observation: dict[str, Any] | None = None
    state: dict[str, Any] | None = None


class Frame(_Answer):
    """One WebSocket message: ``{"type": ..., "data": {...}}``."""

    type: str
    data: dict[str, Any] | None = None


class ErrorData(_Answer):
    """The ``data`` of an error frame."""

    code: str = "ERROR"
    message: str = "unknown error"
    errors: list[dict[str, Any]] | None = None

    @field_validator("message")
    @classmethod
    def _short_message(cls, value: str) -> str:
        return shorten(value, MESSAGE_LIMIT)


class StepData(_Answer):
    """The ``data`` of an observation frame (reset and step): the observation, a reward if any, and done."""

    observation: dict[str, Any] = Field(default_factory=dict)
    reward: StrictFloat | StrictInt | None = None
    done: StrictBool = False

    @field_validator("observation", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return {} if value is None else value

    @property
    def reward_value(self) -> float | None:
        """The reward as a float (NaN and infinity are kept: the episode's reward reading decides)."""
        return None if self.reward is None else float(self.reward)


_KINDS = {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null"}


def kind_of(value: Any) -> str:
    """How a JSON value reads in a sentence: ``a list``, ``a string``, ``a number``."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return "a number" if not (isinstance(value, float) and not math.isfinite(value)) else "not a number"
    return _KINDS.get(type(value), "something else")


def parse(model: type[_Answer], value: Any, where: str) -> Any:
    """``value`` as ``model``, or WrongShape: ``/health: a list, not an object``; ``reward: a string, not a number``.
    ``where`` names the answer (``/health``, ``a step``)."""
    if not isinstance(value, dict):
        raise WrongShape(f"{where} with {kind_of(value)}, not an object")
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = str(error["loc"][0]) if error["loc"] else "the answer"  # the field, not a union member's name
        if error["type"] == "missing":
            raise WrongShape(f"{where} without {field}") from None
        raise WrongShape(
            f"{where} with {field} {kind_of(error.get('input'))}, not {_expected(error['type'])}"
        ) from None


def _expected(error_type: str) -> str:
    if error_type.startswith(("float", "int")):
        return "a number"
    if error_type.startswith("bool"):
        return "true/false"
    if error_type.startswith("string"):
        return "a string"
    if error_type.startswith(("dict", "model")):
        return "an object"
    if error_type.startswith("list"):
        return "a list"
    return "what OpenEnv sends"


def decode_json(raw: bytes | str, where: str) -> Any:
    """JSON from a server, or WrongShape (not JSON, not UTF-8, nested too deep)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        raise WrongShape(f"{where} with something that is not JSON") from None
