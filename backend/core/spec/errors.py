"""The spec's refusals: ``SpecError`` (one actionable sentence per problem) and how a pydantic error becomes one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

# A refusal quotes the user's input; a 20 MB field must not become a 20 MB reply.
ECHO_LIMIT = 80
PROBLEM_LIMIT = 500


class SpecError(ValueError):
    """A job spec a person must fix; ``problems`` holds one actionable sentence per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when something was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def quote_input(value: Any, limit: int = ECHO_LIMIT) -> str:
    """The user's input quoted for a refusal, cut to ``limit`` characters so a huge value is never replayed."""
    if isinstance(value, str):
        return repr(shorten(value, limit))
    return shorten(repr(value), limit)


def _describe(error: Mapping[str, Any]) -> str:
    # Dict keys in the location are the user's input too (an unknown setting, a column mapping).
    where = ".".join(shorten(str(p), ECHO_LIMIT) for p in error["loc"]) or "spec"
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        return f"{where}: unknown setting (check the spelling; see the spec fields in the README)"
    if kind == "missing":
        return f"{where}: required"
    msg = error["msg"]
    # A validator elsewhere (an environment URL check) may quote the input at any length.
    msg = shorten(msg.removeprefix("Value error, "), PROBLEM_LIMIT)
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}:
        msg = msg.replace("Input should be", "must be")
    if isinstance(got, (int, float, str)) and not isinstance(got, bool) and kind != "missing":
        return f"{where}: {msg} (got {quote_input(got)})"
    return f"{where}: {msg}"


def spec_error(exc: ValidationError) -> SpecError:
    """The SpecError that lists every problem pydantic found, one sentence each."""
    return SpecError([_describe(e) for e in exc.errors()])
