"""Tool calls in a chat answer, read with TRL's own response parser (the one GRPO's tool loop and the dry run use):
an answer with calls is its text plus one call per tool, each a name and its arguments; a template TRL has no parser
for leaves every answer as the text it is."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("studio.chat")

# Each call names a tool in a few words and carries a small JSON object: larger ones are no call worth running.
MAX_TOOL_CALLS = 8
MAX_ARGUMENTS_CHARS = 20_000


@dataclass(frozen=True)
class ToolCall:
    """One tool call a model wrote: the tool's name and its arguments (as parsed; normally a JSON object)."""

    name: str
    arguments: Any = field(default_factory=dict)

    def arguments_json(self) -> str:
        """The arguments pretty-printed as JSON, for people.

        >>> print(ToolCall("submit_answer", {"answer": 50}).arguments_json())
        {
          "answer": 50
        }
        """
        return json.dumps(self.arguments, indent=2, ensure_ascii=False, default=str)

    def as_message_call(self) -> dict[str, Any]:
        """The call as chat templates and TRL's tool loop read it: ``{"type": "function", "function": {...}}``."""
        return {"type": "function", "function": {"name": self.name, "arguments": self.arguments}}

    @classmethod
    def from_message_call(cls, call: Any) -> ToolCall:
        """A call from its chat-template shape (nested under ``function`` or flat), as ``parse_response`` gives it;
        ValueError when it is not one."""
        if not isinstance(call, dict):
            raise ValueError("a tool call is an object with a name and arguments")
        function = call.get("function", call)
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name.strip() or len(name) > 200:
            raise ValueError("a tool call needs the tool's name")
        arguments = function.get("arguments")
        if arguments is None:
            arguments = {}
        if len(json.dumps(arguments, default=str)) > MAX_ARGUMENTS_CHARS:
            raise ValueError(f"the arguments of {name} are longer than {MAX_ARGUMENTS_CHARS:,} characters")
        return cls(name.strip(), arguments)


def tool_calls_from(calls: Sequence[Any]) -> tuple[ToolCall, ...]:
    """``calls`` (ToolCall objects or their chat-template dicts) as ToolCalls; ValueError (a sentence) when there are
    none, too many, or one is not a call."""
    if isinstance(calls, (str, bytes)) or not isinstance(calls, Sequence) or not calls:
        raise ValueError("there are no tool calls to run")
    if len(calls) > MAX_TOOL_CALLS:
        raise ValueError(f"one answer's tool calls are run at most {MAX_TOOL_CALLS} at a time, not {len(calls)}")
    return tuple(c if isinstance(c, ToolCall) else ToolCall.from_message_call(c) for c in calls)


@dataclass(frozen=True)
class ChatAnswer:
    """One side's final answer: ``text`` as it streamed (what the preference and thumb logs record), ``content``
    (what it says apart from its tool calls) and the calls in order; no calls when it made none or when TRL has no
    parser for the model's chat template, and then ``content`` is ``text``."""

    text: str
    content: str
    tool_calls: tuple[ToolCall, ...] = ()

    @classmethod
    def plain(cls, text: str) -> ChatAnswer:
        """An answer without tool calls."""
        return cls(text, text)


def can_parse(tokenizer: Any) -> bool:
    """Whether TRL can read tool calls from this tokenizer's answers: it has a response parser (its own, or the one
    ``add_response_schema`` sets for the chat templates TRL knows); False for any other template."""
    if getattr(tokenizer, "response_template", None) is not None or getattr(tokenizer, "response_schema", None):
        return True
    from trl.chat_template_utils import add_response_schema

    try:
        add_response_schema(tokenizer)
    except ValueError:  # "Unrecognized chat template": the answers stay as they are
        return False
    return True


def read_answer(tokenizer: Any, ids: Sequence[int], text: str, prefix: Sequence[int] | None = None) -> ChatAnswer:
    """One side's answer read for tool calls: ``ids`` are its generated tokens (end-of-turn cut off), ``text`` what
    the chat showed of them, ``prefix`` the prompt's tokens (the new-style parsers need where the answer starts).

    As the dry run reads a model turn (backend/environments/episodes.py): TRL's ``parse_response``, which falls back
    to the plain text for a malformed call. An answer without calls keeps ``text`` as is."""
    if not ids or not can_parse(tokenizer):
        return ChatAnswer.plain(text)
    from trl.chat_template_utils import parse_response

    try:
        parsed = parse_response(tokenizer, list(ids), prefix=list(prefix) if prefix is not None else None)
        calls = tuple(ToolCall.from_message_call(call) for call in parsed.get("tool_calls") or ())
    except Exception as exc:  # noqa: BLE001 - an answer the parser chokes on is shown as the text it is
        log.warning("tool calls not read from a chat answer: %s", exc)
        return ChatAnswer.plain(text)
    if not calls:
        return ChatAnswer.plain(text)
    content = parsed.get("content")
    return ChatAnswer(text, content.strip() if isinstance(content, str) else "", calls)


def read_text(tokenizer: Any, text: str, prompt: str | None = None) -> ChatAnswer:
    """:func:`read_answer` for an answer given as text with its markup (``<tool_call>...</tool_call>`` for Qwen3's
    template) after the rendered ``prompt`` (by default one empty user turn, rendered as the chat renders it); its
    tokens are the tokenizer's encoding of it."""
    if prompt is None:
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": ""}], add_generation_prompt=True, tokenize=False, enable_thinking=False
        )
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return read_answer(tokenizer, ids, text, tokenizer(prompt, add_special_tokens=False)["input_ids"])
