"""The agent arena's feedback: which side played an episode better, kept as DPO rows of whole episodes (their tool
calls and tools), checked to render through the chat template as they were played."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from backend.chat.feedback_log import SIDES, FeedbackLog
from backend.models.demo import ARITH_MODEL_DIR

# TRL's conversational preference format with tools: DPOTrainer renders ``tools`` (JSON text of the schemas) into the
# chat template of prompt + chosen and prompt + rejected.
EPISODE_COLUMNS = ("prompt", "chosen", "rejected", "tools")
# The template a row is checked against when the caller does not give the model's own: the built-in models'
# (TRL's qwen3 template, saved with builtin:tiny-qwen3-arith; read from the file, without importing TRL).
BUILTIN_TEMPLATE = ARITH_MODEL_DIR / "chat_template.jinja"


def _row_call(call: Any, where: str) -> dict[str, Any]:
    """One tool call as a row keeps it: its arguments as JSON text, written as the chat template's ``tojson`` writes
    an object (``json.dumps``, non-ASCII kept), so it renders the same tokens; a file of rows whose calls carry
    differently typed arguments (``{"answer": 42}``, ``{"answer": "42"}``) then still loads with ``datasets``."""
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(f"{where} has a tool call without a function name, so it cannot be kept as a training row")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    kind = call.get("type")
    return {
        "type": kind if isinstance(kind, str) else "function",
        "function": {"name": function["name"], "arguments": arguments},
    }


def _parts_text(parts: list) -> str:
    """A list of content parts as text: its text parts, joined."""
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _row_message(message: Any, where: str, parts: Callable[[list], str]) -> dict[str, Any]:
    """One message as a row keeps it: role, content as text (none is ``""``; a list of parts as ``parts`` makes
    it), reasoning, tool calls (as ``_row_call`` keeps them) and a tool answer's tool name: what chat templates read.
    Anything else an episode's message carries is left out, so a file of rows loads with ``datasets``."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ValueError(f"{where} is not a chat message with a role")
    content = message.get("content")
    if isinstance(content, list):
        content = parts(content)
    elif content is None:
        content = ""
    elif not isinstance(content, str):
        raise ValueError(f"{where}'s content is neither text nor a list of parts")
    row: dict[str, Any] = {"role": message["role"], "content": content}
    if isinstance(message.get("reasoning_content"), str):
        row["reasoning_content"] = message["reasoning_content"]
    if message.get("tool_calls"):
        row["tool_calls"] = [_row_call(call, where) for call in message["tool_calls"]]
    if isinstance(message.get("name"), str):
        row["name"] = message["name"]
    return row


def _rendered(messages: list[dict[str, Any]], tools: list[dict[str, Any]], template: str) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    rendered, _ = render_jinja_template([messages], tools=tools or None, chat_template=template)
    return rendered[0]


def _row_messages(messages: list[Any], tools: list[dict[str, Any]], template: str, side: str) -> list[dict[str, Any]]:
    """An episode's messages as a row keeps them, checked to render through ``template`` exactly as the episode's
    own messages do. A tool's answer given as a list of parts (TRL passes a tool's list result as it is) becomes the
    text the template renders it as: its text parts joined, or nothing (Qwen3's template renders a list as nothing).
    ValueError when no text renders the same."""
    where = [f"the {side} episode's message {i}" for i in range(len(messages))]
    try:
        reference = _rendered(messages, tools, template)
    except Exception:  # noqa: BLE001 - a template that cannot render the episode itself cannot judge its row
        return [_row_message(m, w, _parts_text) for m, w in zip(messages, where)]
    for parts in (_parts_text, lambda parts: ""):
        row = [_row_message(m, w, parts) for m, w in zip(messages, where)]
        if _rendered(row, tools, template) == reference:
            return row
    raise ValueError(
        f"the {side} episode cannot be kept as a training row that renders as it was played: the chat template "
        "writes its tool calls or tool answers differently once they are text"
    )


def _played(episode: Any, side: str) -> tuple[list[Any], int]:
    """(messages, how many are the prompt) of an ``Episode.to_dict()``; ValueError for anything else."""
    messages = episode.get("messages") if isinstance(episode, dict) else None
    count = episode.get("prompt_messages") if isinstance(episode, dict) else None
    if (
        not isinstance(messages, list)
        or not isinstance(count, int)
        or isinstance(count, bool)
        or not 1 <= count <= len(messages)
    ):
        raise ValueError(f"the {side} side is not a played episode (its messages and how many of them are the prompt)")
    if episode.get("over") is False:
        raise ValueError(f"the {side} episode is still being played; pick the better side once both have ended")
    return messages, count


def _acted(message: dict[str, Any]) -> bool:
    return bool(
        message.get("tool_calls") or message["content"].strip() or (message.get("reasoning_content") or "").strip()
    )


class EpisodePreferenceLog(FeedbackLog):
    """Which side played an agent arena episode better, as DPO rows of whole episodes (TRL's conversational
    preference format with tools).

    Both sides played the same episode (same seed, same first observation), so they share the prompt. Each row:
    ``prompt`` (the episode's prompt messages), ``chosen`` and ``rejected`` (every message after the prompt: the
    model's turns with their tool calls and the tools' answers, of the better and of the other side), ``tools`` (the
    JSON schemas the model was given, as JSON text, which TRL's DPOTrainer parses), ``job_id``, ``episode`` (its
    number in the user's arena for that job), ``better`` (base or tuned) and ``created_at``. One pick per job and
    episode: a second click replaces the first.
    """

    columns = EPISODE_COLUMNS
    nothing_yet = (
        "no arena picks recorded yet; play a few episodes in the agent arena and pick the side that played better"
    )

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """A pick for the same episode of the same job."""
        return old["job_id"] == new["job_id"] and old["episode"] == new["episode"]

    def record_episodes(
        self,
        base: dict,
        tuned: dict,
        tools: list[dict],
        better_side: str,
        job_id: str,
        episode: int,
        *,
        chat_template: str | None = None,
    ) -> dict[str, Any]:
        """Record that ``better_side`` played episode ``episode`` better and return the row written, with
        ``replaced`` True when it replaced that episode's earlier pick.

        ``base`` and ``tuned`` are the two sides' ``Episode.to_dict()``; ``tools`` the JSON schemas both were given.
        The row is checked to render, through ``chat_template`` (the played model's; by default the built-in
        models' Qwen3 template), the same text as the episodes themselves. ValueError, with the reason, when the
        prompts differ, a side played nothing, both sides played the same turns, or the row cannot render the same.
        """
        if better_side not in SIDES:
            raise ValueError(f"the better side is 'base' or 'tuned', not {better_side!r}")
        if not isinstance(episode, int) or isinstance(episode, bool) or episode < 0:
            raise ValueError(f"an arena episode is numbered 0, 1, 2, ..., not {episode!r}")
        if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
            raise ValueError("the tools are a list of JSON schemas, one per tool the model was given")
        template = chat_template or BUILTIN_TEMPLATE.read_text(encoding="utf-8")
        sides = {}
        for side, played in (("base", base), ("tuned", tuned)):
            messages, count = _played(played, side)
            row = _row_messages(messages, tools, template, side)
            sides[side] = (row[:count], row[count:])
        (prompt, base_turns), (tuned_prompt, tuned_turns) = sides["base"], sides["tuned"]
        if prompt != tuned_prompt:
            raise ValueError(
                "the two episodes start from different prompts (not the same seed and first observation), so they "
                "cannot be compared"
            )
        for side, turns in (("base", base_turns), ("tuned", tuned_turns)):
            if not any(_acted(m) for m in turns if m["role"] == "assistant"):
                raise ValueError(
                    f"the {side} side played no turn, so there is nothing to compare; play the episode again"
                )
        if base_turns == tuned_turns:
            raise ValueError("both sides played the same episode, so neither is better")
        chosen, rejected = (base_turns, tuned_turns) if better_side == "base" else (tuned_turns, base_turns)
        row = {
            "prompt": prompt,
            "chosen": chosen,
            "rejected": rejected,
            "tools": json.dumps(tools, ensure_ascii=False),
            "job_id": job_id,
            "episode": episode,
            "better": better_side,
            "created_at": time.time(),
        }
        return {**row, "replaced": self._put(row) is not None}
