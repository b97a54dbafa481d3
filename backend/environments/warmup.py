"""Tool-use warm-up: an SFT dataset of demonstration episodes, written by playing the environment itself.

GRPO learns only from episodes that differ in reward, and a model that has never seen an environment's tools does
not call them: every episode scores the same and nothing is learned (TRL's guide: SFT first, so the model knows the
tool-call format). This module asks the running environment for its tools, and for each of the job's own prompts
plays one well-formed call of a tool (each tool in turn) with schema-valid arguments, keeping the environment's real
answer. Each row is the conversation GRPO will see, in the shape TRL's SFT trainer renders with the model's chat
template (``messages`` plus a ``tools`` column holding the same JSON schemas TRL derives from the tool methods during
GRPO):

    user: the dataset prompt + the environment's first observation
    assistant: <tool_call> tool(arguments) </tool_call>
    tool: what the environment answered
    assistant: a short closing turn

Arguments are chosen from a few candidates (a built-in environment's own solution for the row first, then the row's
values that fit an argument, then random valid values), keeping the one the environment rewarded most. Where the
environment rewarded any demonstration, only rewarded ones are kept: on an environment that checks answers (the
arithmetic one), an unrewarded call is a wrong answer, and SFT on it taught the model wrong answers (issue 37: the
warm-up then GRPO ended at 2% success where GRPO alone reached 26%). Where none was rewarded, the demonstrations
show the tool-call format only, and the summary says so.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from backend.core.hub_names import DEMO_MODEL_ID
from backend.core.spec import JobSpec
from backend.environments.adapter import OpenEnvEpisode, tool_methods
from backend.environments.connection import EnvironmentActionError
from backend.environments.discovery import ToolSpec
from backend.environments.episodes import opening_messages
from backend.environments.probe import random_arguments

CLOSING = "Done."


@dataclass(frozen=True)
class Demonstrations:
    """Tool-call demonstrations for an SFT warm-up: the rows kept, how many were played, rewarded or refused, the
    tools."""

    rows: list[dict[str, Any]]
    rewarded: int  # demonstrations whose call earned a positive reward
    refused: int  # candidate calls the environment refused (not used)
    tools: tuple[str, ...]
    played: int = 0  # demonstrations written before the unrewarded ones were left out (0: as many as kept)

    def summary(self) -> str:
        """The demonstrations in one line, for the log and the UI: how many were kept, and why.

        >>> Demonstrations([{}] * 20, 20, 0, ("submit_answer",), 32).summary()
        '20 demonstration episodes of submit_answer kept: the 20 of 32 the environment rewarded'
        >>> Demonstrations([{}] * 4, 0, 0, ("echo",)).summary()
        '4 demonstration episodes of echo kept: none earned a reward, so they show the tool-call format only'
        """
        played = self.played or len(self.rows)
        head = f"{len(self.rows)} demonstration episodes of {', '.join(self.tools)} kept"
        if not self.rewarded:
            return f"{head}: none earned a reward, so they show the tool-call format only"
        return f"{head}: the {self.rewarded} of {played} the environment rewarded"


def _fits(value: Any, prop: dict[str, Any]) -> bool:
    if prop.get("enum"):
        return value in prop["enum"]
    kind = prop.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    checks = {
        "string": lambda v: isinstance(v, str),
        "boolean": lambda v: isinstance(v, bool),
        "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    }
    return any(checks[k](value) for k in kinds if k in checks)


def candidate_arguments(tool: ToolSpec, row: dict[str, Any], rng: random.Random, count: int) -> list[dict[str, Any]]:
    """Up to ``count`` argument sets for ``tool``: first one built from the row's values that fit each argument
    (one per fitting column), then random schema-valid ones."""
    candidates: list[dict[str, Any]] = []
    values = [v for k, v in row.items() if k != "prompt" and not isinstance(v, (list, dict))]
    for value in values:
        arguments = random_arguments(tool, rng)
        fitted = {name: value for name in arguments if _fits(value, tool.parameters.get(name, {}))}
        if fitted:
            candidates.append({**arguments, **dict(list(fitted.items())[:1])})
    while len(candidates) < count:
        candidates.append(random_arguments(tool, rng))
    unique = {repr(sorted(c.items())): c for c in candidates}
    return list(unique.values())[:count]


def _play(
    environment: OpenEnvEpisode, row: dict[str, Any], tool: ToolSpec, arguments: dict[str, Any]
) -> tuple[float, list[dict[str, Any]]] | None:
    """One episode of one call: (summed reward, the conversation), or None when the environment refused the call."""
    messages = opening_messages(environment, row)  # as GRPO will see it
    try:
        answer = getattr(environment, tool.name)(**arguments)
    except EnvironmentActionError:
        return None
    call = {"type": "function", "function": {"name": tool.name, "arguments": arguments}}
    messages += [
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "name": tool.name, "content": str(answer)},
        {"role": "assistant", "content": CLOSING},
    ]
    return sum(environment.rewards), messages


def demonstrate(
    environment: OpenEnvEpisode,
    rows: list[dict[str, Any]],
    *,
    count: int = 32,
    tries: int = 4,
    seed: int = 0,
    solve: Callable[[dict[str, Any]], dict[str, Any] | None] | None = None,
) -> Demonstrations:
    """``count`` demonstrations over ``rows`` (cycled), each tool in turn, on one open session of ``environment``;
    only the rewarded ones where any was. ``solve``: a built-in environment's rewarded arguments for a row, tried
    first."""
    from transformers.utils import get_json_schema

    if not rows:
        raise ValueError("the dataset has no rows to write demonstrations for")
    rng = random.Random(seed)
    methods = tool_methods(environment)
    schemas = [get_json_schema(method) for method in methods]  # what TRL hands the chat template during GRPO
    by_name = {tool.name: tool for tool in environment.info.tools}
    tools = [by_name[m.__name__] for m in methods]
    out: list[tuple[float, dict[str, Any]]] = []
    refused = 0
    for i in range(count):
        row, tool = rows[i % len(rows)], tools[i % len(tools)]
        solved = solve(row) if solve is not None else None
        candidates = candidate_arguments(tool, row, rng, tries)
        if solved is not None and set(solved) <= set(tool.parameters):
            candidates = [solved, *(c for c in candidates if c != solved)][:tries]
        best: tuple[float, list[dict[str, Any]]] | None = None
        for arguments in candidates:
            played = _play(environment, row, tool, arguments)
            if played is None:
                refused += 1
            elif best is None or played[0] > best[0]:
                best = played
        if best is not None:
            out.append((best[0], {"messages": best[1], "tools": schemas}))
    if not out:
        raise EnvironmentActionError(
            f"the environment refused every one of {refused} schema-valid calls, so no demonstration could be written"
        )
    rewarded = [row for reward, row in out if reward > 0]
    return Demonstrations(
        rows=rewarded or [row for _, row in out],
        rewarded=len(rewarded),
        refused=refused,
        tools=tuple(t.name for t in tools),
        played=len(out),
    )


# The demo model's weights are random: it learns the tool-call format only with many large steps (loss ~0.1 after
# 200 steps of 8 rows at 1e-2). A pretrained model (builtin:tiny-qwen3-arith too: 200 steps at 1e-2 would wipe out
# the arithmetic it knows) needs a normal LoRA rate and a couple of passes over the demonstrations.
DEMO_MODEL_WARMUP = {"max_steps": 200, "learning_rate": 1e-2}
WARMUP_EPOCHS = 2
WARMUP_LEARNING_RATE = 2e-4


def demonstrations_to_play(rows: int) -> int:
    """How many demonstrations a warm-up of ``rows`` training rows plays: a quarter more, held out so the warm-up's
    verdict is scored on demonstrations it did not train on (none under 8 rows, too few to judge).

    >>> demonstrations_to_play(32), demonstrations_to_play(4)
    (40, 4)
    """
    return rows + (rows // 4 if rows >= 8 else 0)


def warmup_holdout(kept: int) -> int:
    """Of ``kept`` demonstrations (played by :func:`demonstrations_to_play`, the unrewarded left out), how many the
    warm-up holds out for its verdict: a fifth, none under 10.

    >>> warmup_holdout(40), warmup_holdout(9)
    (8, 0)
    """
    return kept // 5 if kept >= 10 else 0


def warmup_spec(
    spec: JobSpec, upload_id: str, rows: int, steps: int | None = None, learning_rate: float | None = None
) -> dict[str, Any]:
    """The SFT job that teaches ``spec``'s model the environment's tool calls from the ``rows`` demonstrations in
    ``upload_id``: same model, quantization, LoRA shape, batch and length as the GRPO job it comes before. Some are
    held out (:func:`warmup_holdout`), so its verdict, guards and all, is scored as every job's is."""
    t = spec.training
    demo = spec.model.name_or_path == DEMO_MODEL_ID
    default_steps = (
        DEMO_MODEL_WARMUP["max_steps"]
        if demo
        else max(
            10,
            math.ceil(WARMUP_EPOCHS * (rows - warmup_holdout(rows)) / (t.batch_or(4) * t.gradient_accumulation_steps)),
        )
    )
    name = spec.output.run_name or spec.environment.name or "environment"
    return {
        "method": "sft",
        "owner": spec.owner,
        "model": spec.model.model_dump(),
        "quantization": spec.quantization.model_dump(),
        "lora": spec.lora.model_dump(),
        "dataset": {"source": "upload", "name": upload_id},
        "training": {
            "max_steps": steps or default_steps,
            "learning_rate": learning_rate or (DEMO_MODEL_WARMUP["learning_rate"] if demo else WARMUP_LEARNING_RATE),
            "batch_size": t.batch_size,
            "gradient_accumulation_steps": t.gradient_accumulation_steps,
            "max_length": t.max_length,
            "seed": t.seed,
            "save_steps": max(steps or default_steps, 50),
            "gradient_checkpointing": t.gradient_checkpointing,
            "num_processes": t.num_processes,
            "distributed": t.distributed,
        },
        "eval": {"holdout_rows": held} if (held := warmup_holdout(rows)) else {},
        "output": {"run_name": f"{name}-warm-up"[:96]},
    }
