"""What an OpenEnv server says about itself, read as the tools a model will be given: ``describe`` checks its health,
reads its metadata and schema and lists its tools (MCP) or builds one from its action (typed); ``check_sessions``
refuses a server that allows fewer concurrent sessions than a job plays."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from backend.environments.connection import (
    EnvironmentProtocolError,
    EnvironmentUnavailable,
    Session,
    get_answer,
    probe_capacity,
)
from backend.environments.schema import inline_refs, snake, split_docstring
from backend.environments.wire import DESCRIPTION_LIMIT, NAME_LIMIT, Health, Metadata, Schema, excerpt

_MCP_ACTIONS = {"CallToolAction", "ListToolsAction"}
IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_TOOLS = 64  # an MCP server listing more is not describing tools for a model


@dataclass(frozen=True)
class ToolSpec:
    """One tool as the model will see it."""

    name: str
    description: str
    parameters: dict[str, dict[str, Any]]  # JSON-schema properties
    required: tuple[str, ...]


@dataclass(frozen=True)
class EnvironmentInfo:
    """What the server says about itself."""

    url: str
    name: str
    description: str
    kind: Literal["mcp", "typed"]
    tools: tuple[ToolSpec, ...]
    action_schema: dict[str, Any] = field(default_factory=dict, repr=False)

    def summary(self) -> str:
        """The environment in one line: name, kind, URL and tool names."""
        names = ", ".join(tool.name for tool in self.tools)
        return f"{self.name} ({self.kind} environment at {self.url}; tools: {names})"


def describe(url: str, *, timeout_s: float = 10.0) -> EnvironmentInfo:
    """Check ``/health``, read ``/metadata`` and ``/schema``, and list the tools the model will be given. Every
    answer is read as its typed model (``wire``); one the studio cannot turn into tools is a sentence."""
    health = get_answer(url, "/health", Health, timeout_s)
    if health.status.lower() != "healthy":
        raise EnvironmentUnavailable(f"the environment at {url} reports status {excerpt(health.status)}, not healthy")
    metadata = get_answer(url, "/metadata", Metadata, timeout_s)
    schema = get_answer(url, "/schema", Schema, timeout_s)
    name = metadata.name or "environment"
    try:
        action = inline_refs(schema.action)
        if action.get("title") in _MCP_ACTIONS or "tool_name" in _properties(action):
            tools = _list_mcp_tools(url, timeout_s)
            kind: Literal["mcp", "typed"] = "mcp"
        else:
            tools = (_action_tool(action, name),)
            kind = "typed"
    except (TypeError, KeyError, AttributeError, ValueError, RecursionError) as exc:
        if isinstance(exc, EnvironmentUnavailable):
            raise
        raise EnvironmentProtocolError(
            f"the environment at {url} describes its actions or tools in a shape the studio cannot read "
            f"({type(exc).__name__})"
        ) from None
    return EnvironmentInfo(
        url=url, name=name, description=metadata.description or "", kind=kind, tools=tools, action_schema=action
    )


def _properties(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    if not isinstance(properties, dict):
        raise TypeError("properties is not an object")
    return properties


def _list_mcp_tools(url: str, timeout_s: float) -> tuple[ToolSpec, ...]:
    session = Session(url, connect_timeout_s=timeout_s, message_timeout_s=timeout_s)
    try:
        observation = session.step({"type": "list_tools"}).observation
    finally:
        session.close()
    listed = observation.get("tools") or []
    if not isinstance(listed, list):
        raise TypeError("tools is not a list")
    tools = []
    for tool in listed[:MAX_TOOLS]:
        schema = inline_refs(tool.get("input_schema") or tool.get("inputSchema") or {})
        description, described = split_docstring(str(tool.get("description") or "")[:DESCRIPTION_LIMIT])
        tools.append(
            ToolSpec(
                name=str(tool["name"])[:NAME_LIMIT],
                description=description,
                parameters=_with_descriptions(_properties(schema), described),
                required=tuple(str(r) for r in schema.get("required") or ()),
            )
        )
    if not tools:
        raise EnvironmentUnavailable(f"the MCP environment at {url} lists no tools")
    return tuple(tools)


# A single field with one of these names says nothing about the action: ``action(action=...)`` reads badly.
_GENERIC_FIELDS = {"action", "command", "input", "value", "data", "payload", "move"}


def _with_descriptions(properties: dict[str, Any], described: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The properties, each given the docstring's description where the schema has none of its own."""
    return {
        name: (
            {**prop, "description": described[name]}
            if not prop.get("description") and name in described
            else dict(prop)
        )
        for name, prop in properties.items()
    }


def _action_tool(action: dict[str, Any], env_name: str) -> ToolSpec:
    """The tool for a typed action: its fields as arguments, named by the action's ``x-tool-name`` if it has one,
    else by its only field (``guess``) unless that name is generic, else by the action's class (``MoveAction`` ->
    ``move``, ``REPLAction`` -> ``repl``)."""
    description, described = split_docstring(action.get("description") or "")
    properties = _with_descriptions(
        {k: v for k, v in (action.get("properties") or {}).items() if k != "metadata"}, described
    )
    if not properties:
        raise EnvironmentUnavailable(f"the action schema of {env_name} has no fields to turn into a tool")
    title = re.sub(r"Action$", "", str(action.get("title") or ""))
    if action.get("x-tool-name"):
        name = str(action["x-tool-name"])
    elif len(properties) == 1 and next(iter(properties)) not in _GENERIC_FIELDS:
        name = next(iter(properties))
    else:
        name = snake(title) if IDENTIFIER.match(snake(title)) else "act"
    return ToolSpec(
        name=name,
        description=description or f"Take an action in the {env_name} environment.",
        parameters=properties,
        required=tuple(action.get("required") or ()),
    )


def check_sessions(url: str, needed: int, *, timeout_s: float = 10.0, least: int = 2) -> None:
    """Refuse, with the numbers and what to do, when the server allows fewer concurrent sessions than a job needs.

    ``least`` is the fewest episodes any job of this kind runs at once (GRPO compares at least 2 completions of a
    prompt): below it, lowering the batch can never be enough, and the advice says so.
    """
    allowed = probe_capacity(url, needed, timeout_s=timeout_s)
    if allowed >= needed:
        return
    more = (
        "run your own copy with more sessions (duplicate the Space and raise max_concurrent_envs in the "
        "create_app call of its server/app.py, or the MAX_CONCURRENT_ENVS variable where the server reads one; "
        "openenv starts more than one session only for an environment class that declares "
        "SUPPORTS_CONCURRENT_SESSIONS = True, which is right when each instance keeps its own state)"
    )
    if allowed < least:
        advice = (
            f"GRPO plays at least {least} episodes at once (one per completion of a prompt), so no batch "
            f"size fits: {more}"
        )
    else:
        advice = (
            f"{more}, or lower the batch size x gradient accumulation to at most {allowed} (a multiple of "
            f"num_generations)"
        )
    raise EnvironmentUnavailable(
        f"the environment at {url} accepted only {allowed} concurrent session(s), but this job runs {needed} "
        f"episodes at once (per-device batch x gradient accumulation). To train on it, {advice}."
    )
