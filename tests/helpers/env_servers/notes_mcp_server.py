"""A test-only MCP OpenEnv server, unknown to the backend: write notes until the goal count is reached.

Run it as ``python tests/helpers/env_servers/notes_mcp_server.py --port N [--max-sessions N]``; clients reach it by URL
only.
``--max-sessions 1`` makes a server that refuses a second simultaneous session (CAPACITY_REACHED).
"""

from __future__ import annotations

import argparse
from typing import Any

import uvicorn
from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server import (
    CallToolAction,
    CallToolObservation,
    MCPEnvironment,
    Observation,
    State,
    create_app,
)
from openenv.core.env_server.types import EnvironmentMetadata
from pydantic import Field


class NotesObservation(Observation):
    """What reset returns."""

    instructions: str = Field(description="The goal for this episode")


class NotesState(State):
    """The notes written so far and the goal."""

    notes: dict[str, str] = Field(default_factory=dict)
    goal: int = 2
    done: bool = False


class NotesEnvironment(MCPEnvironment):
    """Add ``goal`` notes with distinct titles: reward 1.0 on the call that reaches the goal, which ends the episode."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        mcp = FastMCP("notes")

        @mcp.tool
        def add_note(title: str, body: str) -> str:
            """Save a note under a new title.

            Args:
                title: A short title, different from every earlier note's.
                body: The note's text.
            """
            state = self._state
            if state.done:
                raise ToolError("the episode is over; call reset to start again")
            if title in state.notes:
                raise ToolError(f"a note titled {title!r} already exists")
            state.notes[title] = body
            state.step_count += 1
            state.done = len(state.notes) >= state.goal
            return f"saved note {title!r} ({len(state.notes)} of {state.goal})"

        @mcp.tool
        def count_notes() -> int:
            """How many notes have been saved in this episode."""
            return len(self._state.notes)

        super().__init__(mcp)
        self._state = NotesState()

    def reset(
        self, seed: int | None = None, episode_id: str | None = None, goal: int = 2, **kwargs: Any
    ) -> NotesObservation:
        self._state = NotesState(episode_id=episode_id, goal=int(goal))
        return NotesObservation(instructions=f"Add {goal} notes with different titles using add_note.")

    def _scored(self, action: Any, observation: Observation, done_before: bool) -> Observation:
        if isinstance(action, CallToolAction):
            observation.done = self._state.done
            observation.reward = 1.0 if self._state.done and not done_before else 0.0
        return observation

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        done_before = self._state.done
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        return self._scored(action, observation, done_before)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        done_before = self._state.done
        observation = super().step(action, timeout_s=timeout_s, **kwargs)
        return self._scored(action, observation, done_before)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError("notes takes only list_tools and call_tool actions")

    @property
    def state(self) -> NotesState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name="notes", description="Write notes until the goal (test-only MCP server).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-sessions", type=int, default=8)
    args = parser.parse_args()
    app = create_app(
        NotesEnvironment,
        CallToolAction,
        CallToolObservation,
        env_name="notes",
        max_concurrent_envs=args.max_sessions,
        state_cls=NotesState,
        reset_observation_cls=NotesObservation,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
