"""The OpenEnv environments that ship with the project, each a real server the backend can start offline."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backend.core.spec import BUILTIN_ENVIRONMENT_NAMES

# Most simultaneous WebSocket sessions (one environment each) a built-in server accepts unless told otherwise.
DEFAULT_MAX_SESSIONS = 64


@dataclass(frozen=True)
class BuiltinEnvironment:
    """One built-in environment: the module that serves it and the demo dataset whose rows feed its ``reset``."""

    name: str
    module: str  # run as `python -m <module> --port N`
    description: str
    kind: Literal["mcp", "typed"]
    dataset: str  # a key of backend.data.builtin.BUILTIN_DATASETS
    typical_episode_tokens: int  # a fair max_completion_length for a whole episode (tool calls and results)


BUILTIN_ENVIRONMENTS: dict[str, BuiltinEnvironment] = {
    env.name: env
    for env in (
        BuiltinEnvironment(
            name="echo",
            module="backend.environments.builtin.echo",
            description="MCP tool echo_message: echo the target text exactly (3 attempts). Reward 1.0 on a match.",
            kind="mcp",
            dataset="echo-demo",
            typical_episode_tokens=256,
        ),
        BuiltinEnvironment(
            name="wordle",
            module="backend.environments.builtin.wordle",
            description="Typed action `guess`: find a five-letter word in six guesses with G/Y/X hints. "
            "Reward 1.0 on a win.",
            kind="typed",
            dataset="wordle-demo",
            typical_episode_tokens=1024,
        ),
        BuiltinEnvironment(
            name="arithmetic",
            module="backend.environments.builtin.arithmetic",
            description="Typed action `submit_answer`: answer one integer calculation in three tries with "
            "too-high/too-low hints. Reward 1.0 when correct.",
            kind="typed",
            dataset="arithmetic-demo",
            typical_episode_tokens=256,
        ),
    )
}


# The spec validates names against its own list (it imports nothing above it): the two must say the same.
if tuple(BUILTIN_ENVIRONMENTS) != BUILTIN_ENVIRONMENT_NAMES:
    raise RuntimeError(
        f"backend.core.spec.BUILTIN_ENVIRONMENT_NAMES {BUILTIN_ENVIRONMENT_NAMES} must list the built-in "
        f"environments of this registry in order: {tuple(BUILTIN_ENVIRONMENTS)}"
    )


def builtin_environment(name: str) -> BuiltinEnvironment:
    """The built-in environment called ``name``; KeyError naming the known ones otherwise."""
    try:
        return BUILTIN_ENVIRONMENTS[name]
    except KeyError:
        known = ", ".join(BUILTIN_ENVIRONMENTS)
        raise KeyError(f"no built-in environment {name!r}; the built-in environments are: {known}") from None
