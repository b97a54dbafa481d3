"""Turn any running OpenEnv server into the class TRL's ``GRPOTrainer(environment_factory=...)`` expects.

TRL builds one instance per rollout (``__init__`` takes no arguments), calls ``reset(**row)`` before each episode,
exposes every other public method as a function-calling tool (name, typed signature and an ``Args:`` docstring), and
reads the reward from ``get_reward``. Everything is learned from the server itself (``discovery`` reads ``/metadata``,
``/schema`` and ``list_tools``): the adapter never imports an environment's code.

- MCP environments: one method per MCP tool, typed from the tool's input schema.
- Typed-action environments: one clearly named method whose arguments are the action's fields (never ``step``).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import time
import weakref
from typing import Any, ClassVar, Literal

from backend.environments.connection import (
    CapacityError,
    ConnectionLost,
    EnvironmentActionError,
    EnvironmentUnavailable,
    Session,
    StepTimeout,
)
from backend.environments.discovery import IDENTIFIER, EnvironmentInfo, ToolSpec
from backend.environments.observations import observation_text as render_observation
from backend.environments.schema import argument_text, python_type, split_docstring
from backend.environments.wire import MESSAGE_LIMIT

RewardMode = Literal["success", "last", "sum"]

# --- building the TRL environment class ------------------------------------------------------------------------


def tool_docstring(tool: ToolSpec) -> str:
    """The description plus an ``Args:`` section: TRL (through transformers) builds the tool schema from it."""
    prose, _ = split_docstring(tool.description)  # a section left in the description would end it early
    lines = [prose or f"Call the {tool.name} tool.", ""]
    if tool.parameters:
        lines.append("Args:")
        lines += [f"    {pname}: {argument_text(pname, prop)}" for pname, prop in tool.parameters.items()]
    return "\n".join(lines).strip() + "\n"


def _signature(tool: ToolSpec) -> tuple[inspect.Signature, dict[str, Any]]:
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    ordered = sorted(tool.parameters, key=lambda p: p not in tool.required)  # required ones first
    for pname in ordered:
        if not IDENTIFIER.match(pname):
            raise EnvironmentUnavailable(f"tool {tool.name!r} has an argument {pname!r} that is not a valid name")
        annotation = python_type(tool.parameters[pname])
        default = inspect.Parameter.empty if pname in tool.required else tool.parameters[pname].get("default")
        params.append(inspect.Parameter(pname, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation))
        annotations[pname] = annotation
    annotations["return"] = str
    return inspect.Signature(params, return_annotation=str), annotations


def observation_text(
    observation: dict[str, Any],
    *,
    previous: dict[str, Any] | None = None,
    reward: float | None = None,
    done: bool = False,
    template: str | None = None,
) -> str:
    """What the model reads after a reset or an action (``observations.render_observation``); an MCP tool's result
    is its readable part."""
    if "tool_name" in observation and ("result" in observation or "error" in observation):
        observation = {"result": mcp_result_text(observation.get("result")), "metadata": observation.get("metadata")}
    return render_observation(observation, previous=previous, reward=reward, done=done, template=template)


def mcp_result_text(result: Any) -> str:
    """The readable part of an MCP CallToolResult (its ``data``, else its text content)."""
    if isinstance(result, dict):
        if result.get("data") is not None:
            data = result["data"]
            return data if isinstance(data, str) else json.dumps(data)
        structured = result.get("structured_content") or result.get("structuredContent")
        if isinstance(structured, dict) and "result" in structured:
            return str(structured["result"])
        texts = [c.get("text", "") for c in result.get("content") or [] if isinstance(c, dict)]
        if texts:
            return "\n".join(texts)
    return "" if result is None else str(result)


def _validate_arguments(tool: ToolSpec, arguments: dict[str, Any]) -> None:
    import jsonschema

    schema = {
        "type": "object",
        "properties": tool.parameters,
        "required": list(tool.required),
        "additionalProperties": False,
    }
    try:
        jsonschema.validate(arguments, schema)
    except jsonschema.ValidationError as exc:
        where = ".".join(map(str, exc.absolute_path)) or "arguments"
        raise EnvironmentActionError(f"invalid arguments for {tool.name}: {where}: {exc.message[:300]}") from None
    except jsonschema.SchemaError:
        raise EnvironmentActionError(
            f"the environment's schema for {tool.name} is not a valid JSON schema, so its arguments cannot be checked"
        ) from None


class OpenEnvEpisode:
    """Base of the generated classes: one rollout's session with the server, its rewards and its end.

    ``reward_mode``: ``success`` is 1.0 when the episode ends with a positive reward, else 0.0 (binary, as TRL's
    Wordle/Sudoku experiments recommend); ``last`` is the last reward received; ``sum`` adds them up.
    """

    info: EnvironmentInfo
    reward_mode: RewardMode = "success"
    timeout_s: float = 60.0
    observation_template: str | None = None
    # Every instance still alive (TRL pools them out of our reach): environment_class gives each class its own set.
    _live: ClassVar[weakref.WeakSet] = weakref.WeakSet()

    def __init__(self) -> None:
        self._session = Session(
            self.info.url, connect_timeout_s=min(self.timeout_s, 30.0), message_timeout_s=self.timeout_s
        )
        type(self)._live.add(self)
        self._session.open_checked()  # a refused session (at capacity) fails here, clearly
        self._unreachable: str | None = None
        self._begin()

    def _begin(self) -> None:
        self.rewards: list[float] = []
        self.done = False
        self.failed: str | None = None
        self.actions = 0
        self._previous: dict[str, Any] = {}  # the last observation, so a growing history is shown by its new part

    def reset(self, **row: Any) -> str | None:
        """Start a new episode; dataset columns (other than the prompt) are passed to the server's ``reset``."""
        self._begin()
        kwargs = {k: v for k, v in row.items() if k != "prompt" and _is_json(v)}
        if self._unreachable or not self._session.connected:
            self._reconnect()
        try:
            outcome = self._session.reset(**kwargs)
        except ConnectionLost:
            self._reconnect()
            outcome = self._session.reset(**kwargs)
        self._previous = outcome.observation
        text = observation_text(outcome.observation, template=self.observation_template)
        # TRL appends this to the last prompt message as is: keep it a separate paragraph.
        return f"\n\n{text}" if text else None

    def _reconnect(self) -> None:
        """One new session; when that fails too, the server is gone and the job must stop, not hang or guess.

        A session whose step timed out keeps its slot on the server until the step finishes, so a server at capacity
        is asked again for up to ``timeout_s``.
        """
        deadline = time.monotonic() + self.timeout_s
        try:
            while True:
                try:
                    self._session.open_checked()
                    break
                except CapacityError:
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(0.5)
            self._unreachable = None
        except EnvironmentUnavailable as exc:
            self._unreachable = str(exc)
            raise EnvironmentUnavailable(
                f"the environment server at {self.info.url} stopped answering and a reconnect failed: {exc}"
            ) from exc

    def _act(self, tool: ToolSpec, arguments: dict[str, Any]) -> str:
        if self.done:
            why = f" ({self.failed})" if self.failed else ""
            raise EnvironmentActionError(f"The episode is over{why}; no more actions are accepted.")
        _validate_arguments(tool, arguments)
        payload = (
            {"type": "call_tool", "tool_name": tool.name, "arguments": arguments}
            if self.info.kind == "mcp"
            else arguments
        )
        try:
            outcome = self._session.step(payload)
        except ConnectionLost as exc:
            self.done, self.failed = True, "the connection to the environment was lost"
            try:
                self._reconnect()  # so the next episode can start; this one's server-side state is gone
            except EnvironmentUnavailable:
                pass
            raise EnvironmentActionError(f"{exc}; the episode cannot continue") from exc
        except StepTimeout as exc:
            # Slow model-written code is normal in a code environment: the episode ends (a failed tool call the model
            # is told about), not the job. The next reset opens a new session; only if that fails is the server gone.
            self.done, self.failed = True, f"no answer within {self.timeout_s:g} s"
            raise EnvironmentActionError(
                f"The environment did not answer within {self.timeout_s:g} s; the episode is over."
            ) from exc
        except EnvironmentUnavailable as exc:
            self.done, self.failed, self._unreachable = True, str(exc), str(exc)
            raise
        self.actions += 1
        if outcome.reward is not None:
            self.rewards.append(outcome.reward)
        self.done = outcome.done
        error = outcome.observation.get("error") if self.info.kind == "mcp" else None
        if error:
            message = error.get("message", error) if isinstance(error, dict) else error
            raise EnvironmentActionError(str(message)[:MESSAGE_LIMIT])
        text = observation_text(
            outcome.observation,
            previous=self._previous,
            reward=outcome.reward,
            done=outcome.done,
            template=self.observation_template,
        )
        self._previous = outcome.observation
        return text

    def get_reward(self) -> float:
        """The episode's reward, read from the environment (see ``reward_mode``)."""
        if self._unreachable:
            raise EnvironmentUnavailable(
                f"the environment server at {self.info.url} is unreachable: {self._unreachable}"
            )
        return episode_reward(self.rewards, self.done, self.failed, self.reward_mode)

    def _close(self) -> None:  # private: TRL turns every public method into a tool
        self._session.close()

    @classmethod
    def _close_all(cls) -> None:
        """Close the session of every instance still alive, once the trainer and the evaluation are done with them.

        Left to ``__del__`` they would be closed during interpreter shutdown, where closing joins the socket's reader
        thread, which can no longer run: the worker hung there after recording its job's status.
        """
        for environment in list(cls._live):
            environment._close()

    def __del__(self) -> None:
        if sys.is_finalizing():  # see _close_all: the process is ending and takes its sockets with it
            return
        try:
            self._session.close()
        except Exception:  # noqa: BLE001
            pass


def episode_reward(rewards: list[float], done: bool, failed: str | None, mode: RewardMode) -> float:
    """The episode's reward as ``mode`` reads it: the sum of the steps', the last step's, or 1.0 for a clean success.

    >>> episode_reward([0.0, 1.0], True, None, "success"), episode_reward([0.5, 0.25], False, None, "sum")
    (1.0, 0.75)
    """
    if mode == "sum":
        return float(sum(rewards))
    if mode == "last":
        return float(rewards[-1]) if rewards else 0.0
    return 1.0 if done and not failed and rewards and rewards[-1] > 0 else 0.0


def _is_json(value: Any) -> bool:
    try:
        json.dumps(value)
        return True
    except (TypeError, ValueError):
        return False


def _make_tool(tool: ToolSpec):
    signature, annotations = _signature(tool)

    def call(self, **arguments):
        return self._act(tool, arguments)

    call.__name__ = call.__qualname__ = tool.name
    call.__doc__ = tool_docstring(tool)
    call.__signature__ = signature  # type: ignore[attr-defined]
    call.__annotations__ = annotations
    return call


def class_name(env_name: str) -> str:
    """The class (and so the reward metric) name for an environment.

    >>> [class_name(n) for n in ("echo_env", "wordle", "127.0.0.1:8001", "Connect4Environment")]
    ['EchoEnv', 'WordleEnv', 'OpenEnv', 'Connect4Env']
    """
    words = [w for w in re.split(r"[^A-Za-z0-9]+", env_name) if w]
    base = "".join(w[:1].upper() + w[1:] for w in words).lstrip("0123456789") or "OpenEnv"
    base = re.sub(r"Environment$", "Env", base)  # servers often report their class name: Connect4Environment
    return base if base.endswith("Env") else base + "Env"


def environment_class(
    info: EnvironmentInfo,
    *,
    reward_mode: RewardMode = "success",
    timeout_s: float = 60.0,
    name: str | None = None,
    observation_template: str | None = None,
) -> type[OpenEnvEpisode]:
    """A class for ``environment_factory``: no-argument constructor, ``reset``, one method per tool, ``get_reward``.

    TRL names the environment's reward column after the class, so the class is named after the environment.
    """
    reserved = {"reset", "get_reward"} | set(dir(OpenEnvEpisode))
    members: dict[str, Any] = {
        "info": info,
        "reward_mode": reward_mode,
        "timeout_s": timeout_s,
        "observation_template": observation_template,
        "_live": weakref.WeakSet(),
        "__doc__": info.description or f"The {info.name} environment.",
    }
    for tool in info.tools:
        if tool.name in reserved or tool.name.startswith("_") or not IDENTIFIER.match(tool.name):
            raise EnvironmentUnavailable(f"the environment's tool name {tool.name!r} cannot be used as a tool method")
        members[tool.name] = _make_tool(tool)
    return type(class_name(name or info.name), (OpenEnvEpisode,), members)


def tool_methods(environment: OpenEnvEpisode) -> list:
    """The bound tool methods the way TRL finds them (public functions on the class, minus reset/get_reward)."""
    return [
        getattr(environment, member)
        for member, _ in inspect.getmembers(type(environment), predicate=inspect.isfunction)
        if member not in ("reset", "get_reward") and not member.startswith("_")
    ]
