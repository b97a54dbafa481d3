"""The environment part: which OpenEnv environment a job plays (a built-in, a Hub Space or a URL) and how its reward
and observations are read, with the rules that judge those names."""

from __future__ import annotations

from string import Formatter
from typing import Literal

from pydantic import Field, field_validator

from backend.core.hub_names import BUILTIN_PREFIX, is_builtin, is_namespaced_repo_id
from backend.core.spec.base import SpecPart
from backend.core.spec.errors import quote_input

# The built-in environments by name; backend/environments/builtin/registry.py says what each one is (and refuses to
# drift from this list at import). The names live here so that the spec, the ground floor, imports nothing above it.
BUILTIN_ENVIRONMENT_NAMES = ("echo", "wordle", "arithmetic")


def remote_environment_problem(reference: str) -> str | None:
    """Why ``reference`` names no environment server (a sentence), or None for a Hub Space id or an http(s) URL."""
    if reference.startswith(("http://", "https://")):
        return _environment_url_problem(reference)
    if is_namespaced_repo_id(reference):
        return None
    return (
        f"{quote_input(reference)} is not an environment: give a Hub Space id (owner/name), an http(s) URL, "
        f"or a built-in name such as {BUILTIN_PREFIX}echo"
    )


def _environment_url_problem(url: str) -> str | None:
    """Why an http(s) URL cannot be an environment server's base URL: the studio appends ``/health``, ``/ws`` and the
    like as URL paths, so a query string or fragment (which would swallow them), user-info or a bad port is refused.

    >>> _environment_url_problem("http://host:8000/prefix") is None
    True
    >>> _environment_url_problem("http://host/x?y=")
    "'http://host/x?y=' is not an environment server's URL: it has a query string or fragment; give its base URL"
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{quote_input(url)} is not a valid URL (its host or port cannot be read)"
    if "?" in url or "#" in url:
        return (
            f"{quote_input(url)} is not an environment server's URL: it has a query string or fragment; give its "
            "base URL"
        )
    if "@" in parts.netloc:
        return f"{quote_input(url)} is not an environment server's URL: it holds a user name or password"
    if not parts.hostname or port == 0:
        return f"{quote_input(url)} is not an environment server's URL: it names no host or port"
    return None


def template_problem(template: str) -> str | None:
    """Why an observation template cannot be used (a sentence), or None. Only plain field names are allowed: no
    attribute or index lookups, no conversions."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        return f"it is not a valid format string ({exc}); write fields as {{name}} and braces as {{{{ }}}}"
    for _, name, _, conversion in parsed:
        if name is not None and (not name.isidentifier() or conversion):
            return f"{{{name}}} is not a plain field name: use {{board}}, {{message}} and the like"
    return None


class EnvironmentSpec(SpecPart):
    """The OpenEnv environment a GRPO job plays, and how its reward and observations are read."""

    name: str | None = Field(
        None,
        description="OpenEnv environment for GRPO: a Hub Space id (openenv/echo_env), an http(s) URL, "
        "or a built-in (builtin:echo, builtin:wordle, builtin:arithmetic). None: no environment.",
    )
    reward: Literal["success", "last", "sum"] = Field(
        "success",
        description="Reward read from the environment: success (1.0 when the episode ends with a positive "
        "reward, else 0.0; binary, as TRL recommends), last (last reward) or sum (all rewards).",
    )
    max_tool_calling_iterations: int = Field(8, ge=1, le=64, description="Most model turns (tool calls) per episode.")
    eval_episodes: int = Field(
        16,
        ge=0,
        le=512,
        description="Episodes played after training by the base and the tuned model (same seeds) to measure the "
        "success rate (0: skip).",
    )
    timeout_s: float = Field(60.0, gt=0, le=600, description="Longest wait for one environment answer (seconds).")
    observation_template: str | None = Field(
        None,
        max_length=2000,
        description="How the model reads an observation, for the rare environment that needs a layout: a format "
        "string over its fields, e.g. '{board}\\nLegal moves: {legal_moves}'. None: the fields as short text.",
    )

    @field_validator("name")
    @classmethod
    def _known_form(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if is_builtin(value):
            if value.removeprefix(BUILTIN_PREFIX) not in BUILTIN_ENVIRONMENT_NAMES:
                known = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in BUILTIN_ENVIRONMENT_NAMES)
                raise ValueError(f"unknown built-in environment; the built-ins are {known}")
            return value
        problem = remote_environment_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("observation_template")
    @classmethod
    def _plain_fields(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        problem = template_problem(value)
        if problem:
            raise ValueError(problem)
        return value
