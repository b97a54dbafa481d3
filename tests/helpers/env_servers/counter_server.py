"""A test-only typed-action OpenEnv server, unknown to the backend: count up or down to hit a target exactly.

Run it as ``python tests/helpers/env_servers/counter_server.py --port N [--max-sessions N]``; clients reach it by URL
only.
Its action has two fields (one an enum) and no ``x-tool-name``, so clients must name the tool themselves.
With ``--splits`` it serves OpenEnv's Task API: a ``train`` split (targets 5..19) and a ``test`` split (targets
20..27), played with ``reset(split=..., index=...)``; ``--record-resets FILE`` appends every reset's arguments to FILE
(one JSON line each), so a test can see which tasks a client played.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from typing import Any, Literal

import uvicorn
from openenv.core.env_server import Action, Environment, Observation, State, create_app
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field

MAX_MOVES = 5
STRICT_STATE = False  # --strict-state
NO_REWARD = False  # --no-reward
RECORD_RESETS: str | None = None  # --record-resets FILE
TASKS = {"train": [{"target": t} for t in range(5, 20)], "test": [{"target": t} for t in range(20, 28)]}


class CounterAction(Action):
    """Move the counter by step_by in the given direction."""

    step_by: int = Field(ge=1, le=10, description="How far to move the counter, 1 to 10")
    direction: Literal["up", "down"] = Field(default="up", description="Which way to move: up or down")


class CounterObservation(Observation):
    """The counter after reset or a move."""

    count: int = Field(description="The counter's value")
    target: int = Field(description="The value to reach exactly")
    moves_left: int = Field(description="Moves remaining")
    message: str = Field(description="What happened")


class CounterState(State):
    """The counter, its target and the moves made."""

    count: int = 0
    target: int = 0
    moves: int = 0
    started: bool = False
    done: bool = False
    slow_s: float = 0.0


class CounterEnvironment(Environment[CounterAction, CounterObservation, CounterState]):
    """Reach the target count exactly within five moves: reward 1.0 if reached, else 0.0."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._state = CounterState()

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        target: int | None = None,
        start: int = 0,
        slow_s: float = 0.0,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> CounterObservation:
        """Start counting from ``start`` towards ``target`` (task ``index`` of ``split``'s, or random 5..30 when not
        given); every move of the episode then takes ``slow_s`` seconds (a slow but healthy server, as a code
        environment running slow code)."""
        if split is not None:
            target = TASKS[split][int(index or 0)]["target"]
        if RECORD_RESETS:
            with open(RECORD_RESETS, "a") as record:
                record.write(json.dumps({"split": split, "index": index, "target": target, "seed": seed}) + "\n")
        goal = random.Random(seed).randint(5, 30) if target is None else int(target)
        self._state = CounterState(
            episode_id=episode_id, count=int(start), target=goal, started=True, slow_s=float(slow_s)
        )
        return CounterObservation(
            count=int(start),
            target=goal,
            moves_left=MAX_MOVES,
            message=f"Move the counter from {start} to exactly {goal} in at most {MAX_MOVES} moves.",
        )

    def step(self, action: CounterAction, timeout_s: float | None = None, **kwargs: Any) -> CounterObservation:
        """Apply one move."""
        state = self._state
        if not state.started:
            raise RuntimeError("call reset before moving the counter")
        if state.done:
            raise RuntimeError("the episode is over; call reset to play again")
        time.sleep(state.slow_s)
        state.count += action.step_by if action.direction == "up" else -action.step_by
        state.moves += 1
        state.step_count += 1
        won = state.count == state.target
        state.done = won or state.moves >= MAX_MOVES
        message = "Target reached!" if won else f"The counter is at {state.count}."
        return CounterObservation(
            count=state.count,
            target=state.target,
            moves_left=MAX_MOVES - state.moves,
            message=message,
            reward=None if NO_REWARD else 1.0 if won else 0.0,
            done=state.done,
        )

    @property
    def state(self) -> CounterState:
        if STRICT_STATE and not self._state.started:  # as some code environments answer a state before reset
            raise RuntimeError("Environment not initialized. Call reset() first.")
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name="counter", description="Reach a target count exactly (test-only typed-action server).", version="0.1.0"
        )


class SplitCounterEnvironment(CounterEnvironment):
    """The counter with OpenEnv's Task API: a train and a test split of targets."""

    def list_splits(self) -> list[str]:
        return list(TASKS)

    def list_tasks(self, split: str) -> list[dict[str, int]]:
        return TASKS[split]

    def num_tasks(self, split: str) -> int:
        return len(TASKS[split])

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        if not 0 <= index < len(TASKS[split]):
            raise IndexError(index)
        return {"prompt": f"Reach {TASKS[split][index]['target']} with the counter tool.", **TASKS[split][index]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--strict-state", action="store_true", help="refuse to report the state before a reset")
    parser.add_argument("--no-reward", action="store_true", help="never give a reward (as some environments do)")
    parser.add_argument("--splits", action="store_true", help="serve the Task API with a train and a test split")
    parser.add_argument("--record-resets", help="append every reset's arguments to this file, one JSON line each")
    args = parser.parse_args()
    global STRICT_STATE, NO_REWARD, RECORD_RESETS
    STRICT_STATE, NO_REWARD, RECORD_RESETS = args.strict_state, args.no_reward, args.record_resets
    app = create_app(
        SplitCounterEnvironment if args.splits else CounterEnvironment,
        CounterAction,
        CounterObservation,
        env_name="counter",
        max_concurrent_envs=args.max_sessions,
        state_cls=CounterState,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
