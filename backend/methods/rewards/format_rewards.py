"""Rewards that check the shape of a completion: a user's pattern, or JSON (optionally under a JSON Schema)."""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import regex

from backend.methods.rewards.reading import USER_PATTERN_TIMEOUT_S, completion_text, search_user_pattern

log = logging.getLogger(__name__)


class RegexMatch:
    r"""1.0 if the pattern occurs anywhere in the completion (a search), else 0.0.

    Case is ignored unless ``case_sensitive``. The pattern is the user's, so each search may take at most
    ``USER_PATTERN_TIMEOUT_S``: one that runs longer scores 0.0, is logged, and its index is kept in
    ``timed_out`` (for the test bench to say so).

    >>> RegexMatch(r"answer: \d+")(["Answer: 42", "no idea"])
    [1.0, 0.0]
    """

    def __init__(self, pattern: str, case_sensitive: bool = False):
        self.pattern = regex.compile(pattern, regex.V0 if case_sensitive else regex.V0 | regex.IGNORECASE)
        self.timed_out: list[int] = []
        self.__name__ = "regex"

    def __call__(self, completions, **kwargs) -> list[float]:
        found = [search_user_pattern(self.pattern, completion_text(c)) for c in completions]
        self.timed_out = [index for index, hit in enumerate(found) if hit is None]
        if self.timed_out:
            log.warning(
                "%s reward: pattern %r ran past %.1f s on %d of %d completions; they score 0.0",
                self.__name__,
                self.pattern.pattern[:80],
                USER_PATTERN_TIMEOUT_S,
                len(self.timed_out),
                len(found),
            )
        return [1.0 if hit else 0.0 for hit in found]


class ValidJSON:
    """1.0 if the completion is JSON (and, given a schema, valid under JSON Schema Draft 2020-12), else 0.0.

    The whole completion, stripped, must be JSON, or be one fenced block (```json ... ``` or ``` ... ```)
    holding JSON; prose around the JSON scores 0.0. NaN and Infinity are refused, as strict JSON does,
    and so is nesting too deep for Python to parse.

    >>> ValidJSON({"type": "object", "required": ["name"]})(['{"name": "x"}', '```json\\n{"name": 1}\\n```', "{}"])
    [1.0, 1.0, 0.0]
    """

    def __init__(self, json_schema: dict[str, Any] | None = None):
        self.json_schema = json_schema
        self._validator = None
        self.__name__ = "valid_json"

    def __call__(self, completions, **kwargs) -> list[float]:
        return [self.score(completion_text(c)) for c in completions]

    def score(self, text: str) -> float:
        """1.0 when the text (code fences removed) is JSON that fits the schema, else 0.0."""
        try:
            document = json.loads(unfence(text), parse_constant=_refuse_constant)
        except (ValueError, RecursionError):
            return 0.0
        return 1.0 if self._fits_schema(document) else 0.0

    def _fits_schema(self, document: Any) -> bool:
        if self.json_schema is None:
            return True
        from referencing.exceptions import Unresolvable

        try:
            return self.validator().is_valid(document)
        except (RecursionError, Unresolvable):  # a $ref that leads nowhere fails the completion, not the job
            return False

    def validator(self):
        """The JSON-schema validator for ``json_schema``, built on first use with time-limited patterns."""
        if self._validator is None:
            self._validator = _time_limited_pattern_validator()(self.json_schema)
        return self._validator

    def __getstate__(self) -> dict[str, Any]:
        # jsonschema validators hold local functions and cannot be pickled; rebuild one after unpickling.
        return {**self.__dict__, "_validator": None}


def _time_limited_pattern_validator():
    """Draft 2020-12 with the schema's own regexes (pattern, patternProperties) run like every user pattern:
    on ``regex`` with a time limit, a timeout counting as no match. (unevaluatedProperties still uses re.)"""
    from jsonschema import Draft202012Validator, ValidationError, validators

    def matches(pattern: str, text: str) -> bool:
        try:
            return bool(search_user_pattern(_compiled(pattern), text))
        except regex.error:
            return False

    def pattern(validator, pattern_text, instance, schema):
        if validator.is_type(instance, "string") and not matches(pattern_text, instance):
            yield ValidationError(f"{instance[:80]!r} does not match {pattern_text[:80]!r}")

    def pattern_properties(validator, patterns, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        for pattern_text, subschema in patterns.items():
            for key, value in instance.items():
                if matches(pattern_text, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern_text)

    def additional_properties(validator, allowed, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        named, patterns = schema.get("properties", {}), schema.get("patternProperties", {})
        extras = [key for key in instance if key not in named and not any(matches(p, key) for p in patterns)]
        if validator.is_type(allowed, "object"):
            for key in extras:
                yield from validator.descend(instance[key], allowed, path=key)
        elif not allowed and extras:
            yield ValidationError(f"additional properties are not allowed ({', '.join(map(repr, extras[:5]))})")

    return validators.extend(
        Draft202012Validator,
        {
            "pattern": pattern,
            "patternProperties": pattern_properties,
            "additionalProperties": additional_properties,
        },
    )


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> regex.Pattern:
    return regex.compile(pattern, regex.V0)


def unfence(text: str) -> str:
    """The inside of a completion that is one Markdown code fence, else the stripped completion.

    >>> unfence('```json\\n{"a": 1}\\n```')
    '{"a": 1}'
    """
    text = text.strip()
    if not (text.startswith("```") and text.endswith("```") and len(text) >= 6):
        return text
    inner = text[3:-3]
    first_line, newline, rest = inner.partition("\n")
    # The opening line may carry a language tag (```json); if the fence is all on one line, keep it all.
    return (rest if newline else first_line).strip()


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")
