"""Echo: an MCP environment whose goal is to echo a target text exactly through the ``echo_message`` tool."""

from __future__ import annotations

from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import ToolError
from openenv.core.env_server import CallToolAction, CallToolObservation, MCPEnvironment, Observation, State
from pydantic import Field

from backend.environments.builtin.serving import EnvironmentServer, ServedEnvironment, seeded_choice
from backend.environments.builtin.splits import TARGETS

MAX_ATTEMPTS = 3
TOOL_NAME = "echo_message"


class EchoObservation(Observation):
    """What reset returns: the instruction naming the text to echo."""

    prompt: str = Field(description="The instruction, including the exact text to echo")
    attempts_left: int = Field(description="How many echo_message calls remain in this episode")


class EchoState(State):
    """The episode's target text and progress."""

    target: str = Field(default="", description="The text that must be echoed exactly")
    attempts: int = Field(default=0, description="echo_message calls made so far")
    max_attempts: int = Field(default=MAX_ATTEMPTS, description="echo_message calls allowed per episode")
    done: bool = Field(default=False, description="Whether the episode has ended")
    won: bool = Field(default=False, description="Whether the target was echoed exactly")


class EchoEnvironment(ServedEnvironment, MCPEnvironment):
    """Echo the target text exactly with the ``echo_message`` tool: reward 1.0 on a match, else 0.0.

    The episode ends on a match or after three attempts.
    """

    NAME = "echo"
    DESCRIPTION = "Echo the target text exactly with the echo_message tool (MCP). Reward 1.0 on an exact match."

    def __init__(self) -> None:
        # One FastMCP server per environment, so the tool closes over this session's state only.
        mcp = FastMCP("echo")

        @mcp.tool(name=TOOL_NAME)
        def echo_message(message: str) -> str:
            """Echo a message back unchanged. The episode is won when the message equals the target text exactly.

            Args:
                message: The text to echo back, character for character.
            """
            return self._echo(message)

        super().__init__(mcp)
        self._state = EchoState()
        self._last_reward = 0.0

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        target: str | None = None,
        split: str | None = None,
        index: int | None = None,
        **kwargs: Any,
    ) -> EchoObservation:
        """Start an episode echoing ``target`` (or task ``index`` of ``split``, or a built-in text picked with
        ``seed``); other kwargs are ignored."""
        target = self.task_arguments(split, index).get("target", target)
        if target is None:
            target = seeded_choice(TARGETS, seed)
        elif not isinstance(target, str) or not target:
            raise ValueError(f"target must be a non-empty string, got {target!r}")
        self._state = EchoState(episode_id=episode_id, target=target)
        self._last_reward = 0.0
        return EchoObservation(
            prompt=f"Echo this text exactly: {target}",
            attempts_left=MAX_ATTEMPTS,
            reward=None,
            done=False,
        )

    def _echo(self, message: str) -> str:
        # ToolError (not RuntimeError) so FastMCP reports the message to the caller without logging a traceback.
        state = self._state
        if not state.target:
            raise ToolError("no episode is running; call reset before echo_message")
        if state.done:
            raise ToolError(
                "the episode is over (the target was echoed or attempts ran out); call reset to start a new one"
            )
        state.attempts += 1
        state.step_count += 1
        state.won = message == state.target
        state.done = state.won or state.attempts >= state.max_attempts
        self._last_reward = 1.0 if state.won else 0.0
        return message

    def _scored(self, action: Any, observation: Observation) -> Observation:
        """Attach this call's reward and the episode's done flag to a tool-call observation."""
        if isinstance(action, CallToolAction):
            observation.reward = self._last_reward
            observation.done = self._state.done
        return observation

    async def step_async(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Run an MCP action (the WebSocket path) and score tool calls."""
        self._last_reward = 0.0
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        return self._scored(action, observation)

    def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        """Run an MCP action (the HTTP path) and score tool calls."""
        self._last_reward = 0.0
        observation = super().step(action, timeout_s=timeout_s, **kwargs)
        return self._scored(action, observation)

    def _step_impl(self, action: Any, timeout_s: float | None = None, **kwargs: Any) -> Observation:
        raise ValueError(
            f"echo only takes MCP actions: list_tools, or call_tool with tool_name={TOOL_NAME!r}; "
            f"got {type(action).__name__}"
        )


SERVER = EnvironmentServer(
    EchoEnvironment,
    CallToolAction,
    CallToolObservation,
    EchoState,
    "Serve the echo OpenEnv environment (MCP tool echo_message).",
    reset_observation=EchoObservation,
)
build_app, main, __getattr__ = SERVER.build_app, SERVER.main, SERVER.module_getattr(__name__)

if __name__ == "__main__":
    main()
