"""Before a job: play a few random, schema-valid actions and see whether the environment ever gives a reward.

Some environments answer every tool call without a reward (``reward: null``). GRPO learns only from reward
differences within a group, so against such a server a job would "succeed" with reward 0.0 and an adapter that never
moved. Random actions rarely win a game, so only the absence of any reward value is reported, not a reward of 0.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from backend.environments.adapter import environment_class
from backend.environments.connection import EnvironmentActionError
from backend.environments.discovery import EnvironmentInfo, ToolSpec


@dataclass(frozen=True)
class RewardProbe:
    """What random valid actions got from an environment: episodes, actions carried out, answers rewarded."""

    episodes: int
    actions: int  # tool calls the server carried out (an MCP tool's error counts; a typed server's refusal does not)
    rewarded: int  # answers that carried a reward value (0.0 counts)

    def warning(self, name: str) -> str | None:
        """A warning when no action was ever rewarded (GRPO would have nothing to learn), else None."""
        if self.actions == 0 or self.rewarded:
            return None
        return (
            f"{name} gave no reward for any of {self.actions} random valid actions in {self.episodes} "
            f"episode(s): GRPO learns only from reward differences, so if it never rewards, training has "
            f"nothing to learn from. Check in a dry run that an episode can earn a reward"
        )


def random_value(prop: dict[str, Any], rng: random.Random) -> Any:
    """A value that satisfies ``prop`` in the common cases (enum, const, bounds, nested required fields)."""
    if "const" in prop:
        return prop["const"]
    if prop.get("enum"):
        return rng.choice(prop["enum"])
    options = [o for o in prop.get("anyOf") or prop.get("oneOf") or [] if o.get("type") != "null"]
    if options:
        return random_value(options[0], rng)
    kind = prop.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "string")
    if kind in ("integer", "number"):
        low = prop.get("minimum", prop.get("exclusiveMinimum", -1) + 1)
        high = prop.get("maximum", prop.get("exclusiveMaximum", low + 11) - 1)
        value = rng.randint(int(low), max(int(low), int(high)))
        return value if kind == "integer" else float(value)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return []
    if kind == "object":
        fields = prop.get("properties") or {}
        return {name: random_value(fields[name], rng) for name in prop.get("required") or () if name in fields}
    length = max(int(prop.get("minLength", 1)), 1)
    return "".join(rng.choice("abcdefghij") for _ in range(min(length, 64)))


def random_arguments(tool: ToolSpec, rng: random.Random) -> dict[str, Any]:
    """Random values for a tool's required parameters, each fitting its schema."""
    return {name: random_value(tool.parameters[name], rng) for name in tool.required if name in tool.parameters}


def probe_rewards(
    info: EnvironmentInfo, *, episodes: int = 2, actions_per_episode: int = 4, seed: int = 0, timeout_s: float = 15.0
) -> RewardProbe:
    """Play ``episodes`` short episodes of random valid calls on one session and count the answers with a reward."""
    rng = random.Random(seed)
    environment = environment_class(info, timeout_s=timeout_s)()
    actions = rewarded = 0
    try:
        for episode in range(episodes):
            environment.reset(seed=seed + episode)
            for _ in range(actions_per_episode):
                tool = rng.choice(info.tools)
                try:
                    getattr(environment, tool.name)(**random_arguments(tool, rng))
                except EnvironmentActionError:
                    pass  # refused (an illegal move): the episode's tally says whether it counted
                if environment.done:
                    break
            # The episode keeps the count: actions the server answered and the rewards that came with them.
            actions += environment.actions
            rewarded += len(environment.rewards)
    finally:
        environment._close()
    return RewardProbe(episodes=episodes, actions=actions, rewarded=rewarded)
