"""The Ollama ``Modelfile`` beside a GGUF export: ``FROM`` the file, a ``TEMPLATE`` translated from the tokenizer's chat
template, its stop tokens, and the job's system prompt. Never an ``ADAPTER`` line: Ollama's CLI refuses one from
v0.34.1, so an Ollama export is always a merged model.

The translation learns the chat template's shape from what it renders, not from its Jinja source: sentinel
conversations (one user turn, a system prompt, a second turn) are rendered with ``apply_chat_template``, and the text
around each sentinel is that role's prefix and suffix, the text the generation prompt adds is the assistant's opening,
and what comes before the first turn is the start (a BOS, or the template's default system block, used when there is no
system prompt). The Go template Ollama runs is built from those parts (``.System`` at the top, then ``range`` over
``.Messages`` with the generation prompt after the last user turn), and the parts are checked by rendering longer
conversations both ways: a template whose text does not fit that shape (a system prompt folded into the first user
turn, content that changes the wrapping) is refused with a sentence, and the Modelfile then leaves ``TEMPLATE`` to
Ollama, which picks one from the chat template inside the GGUF. Tools are not translated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# Sentinels: text no chat template adds of itself, so finding them in a rendering finds the message's content.
_SYSTEM = "STUDIOSENTINELSYSTEM"
_USER_1, _ASSISTANT_1, _USER_2 = "STUDIOSENTINELUSER1", "STUDIOSENTINELASSISTANT1", "STUDIOSENTINELUSER2"
# Conversations checked both ways once the parts are learned: plain words, several turns, with and without system.
_CHECKS: tuple[tuple[tuple[str, str], ...], ...] = (
    (("user", "Hello there!"),),
    (("system", "You answer briefly."), ("user", "What is 12 + 9?")),
    (("user", "Hi"), ("assistant", "Hello! How can I help?"), ("user", "Count to three.")),
    (
        ("system", "Be kind."),
        ("user", "First question"),
        ("assistant", "First answer"),
        ("user", "Second question"),
        ("assistant", "Second answer"),
        ("user", "Third question"),
    ),
)


class TemplateMismatch(ValueError):
    """A chat template a Modelfile ``TEMPLATE`` cannot say, with one sentence saying why."""


@dataclass(frozen=True)
class ChatShape:
    """A chat template as text around each message: what a Modelfile's Go template needs to say it again."""

    start: str
    system_prefix: str
    system_suffix: str
    default_system: str  # what stands where the system block would, when there is no system prompt
    user_prefix: str
    user_suffix: str
    assistant_prefix: str
    assistant_suffix: str
    generation: str  # the generation prompt, after the last user turn

    def render(self, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """A conversation as these parts render it (what the Go template renders too)."""
        system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
        text = self.start + (self.system_prefix + system + self.system_suffix if system else self.default_system)
        turns = [m for m in messages if m["role"] != "system"]
        for index, message in enumerate(turns):
            last = index == len(turns) - 1
            if message["role"] == "user":
                text += self.user_prefix + message["content"] + self.user_suffix
                text += self.generation if last and add_generation_prompt else ""
            elif message["role"] == "assistant":
                text += self.assistant_prefix + message["content"] + ("" if last else self.assistant_suffix)
        return text


def _render(tokenizer: Any, pairs: Sequence[tuple[str, str]], add_generation_prompt: bool) -> str:
    messages = [{"role": role, "content": content} for role, content in pairs]
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # noqa: BLE001 - a template that raises on a plain conversation: one sentence
        roles = ", ".join(role for role, _ in pairs)
        raise TemplateMismatch(f"the chat template refuses a conversation of {roles} ({type(exc).__name__})") from None


def _special_tokens(tokenizer: Any) -> list[str]:
    tokens = set(getattr(tokenizer, "all_special_tokens", []) or [])
    tokens |= set((getattr(tokenizer, "get_added_vocab", dict)() or {}).keys())
    return sorted((t for t in tokens if t), key=len, reverse=True)


def _common_suffix(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[-1 - n] == b[-1 - n]:
        n += 1
    return n


def _user_prefix_size(head: str, length: int, opener: str | None, specials: list[str]) -> int:
    """How much of ``head``'s last ``length`` characters (shared with the text between an assistant message and the
    next user message) is the user turn's prefix: from the last place a turn opens (``opener``, the special token the
    assistant turn opens with) where there is one, else the longest part that is all of ``head`` or starts with a
    special token, else all ``length`` characters (a template of plain words)."""
    tail = head[len(head) - length :]
    if opener and opener in tail:
        return length - tail.rindex(opener)
    for size in range(length, 0, -1):
        if size == len(head) or any(head[len(head) - size :].startswith(token) for token in specials):
            return size
    return length


def _cut(text: str, sentinel: str, what: str) -> int:
    if text.count(sentinel) != 1:
        raise TemplateMismatch(f"the chat template does not show {what} exactly once where it was given")
    return text.index(sentinel)


@dataclass(frozen=True)
class _Turns:
    """What one- and two-turn conversations without a system message show."""

    before_user: str  # what stands before the first user prefix: the start, and any default system block
    user_prefix: str
    user_suffix: str
    assistant_prefix: str
    assistant_suffix: str
    generation: str
    prompted: str  # one user turn with the generation prompt


def _turn_parts(tokenizer: Any, specials: list[str]) -> _Turns:
    """The turns' wrapping, learned from one- and two-turn conversations without a system message."""
    one = _render(tokenizer, [("user", _USER_1)], False)
    prompted = _render(tokenizer, [("user", _USER_1)], True)
    if not prompted.startswith(one):
        raise TemplateMismatch("the chat template's generation prompt changes the turns before it")
    at = _cut(one, _USER_1, "a user message")
    head, user_suffix, generation = one[:at], one[at + len(_USER_1) :], prompted[len(one) :]
    two = _render(tokenizer, [("user", _USER_1), ("assistant", _ASSISTANT_1), ("user", _USER_2)], True)
    if not two.startswith(one):
        raise TemplateMismatch("the chat template renders the first turn differently once a second one follows")
    rest = two[len(one) :]
    at = _cut(rest, _ASSISTANT_1, "an assistant message")
    assistant_prefix, after = rest[:at], rest[at + len(_ASSISTANT_1) :]
    at = _cut(after, _USER_2, "the second user message")
    between = after[:at]
    if after[at + len(_USER_2) :] != user_suffix + generation:
        raise TemplateMismatch("the chat template closes the second user turn differently from the first")
    opener = next((t for t in specials if (assistant_prefix or generation).startswith(t)), None)
    size = _user_prefix_size(head, _common_suffix(head, between), opener, specials)
    return _Turns(
        before_user=head[: len(head) - size],
        user_prefix=head[len(head) - size :] if size else "",
        user_suffix=user_suffix,
        assistant_prefix=assistant_prefix,
        assistant_suffix=between[: len(between) - size],
        generation=generation,
        prompted=prompted,
    )


def chat_shape(tokenizer: Any) -> ChatShape:
    """The tokenizer's chat template as text around each message; TemplateMismatch with a sentence when its text does
    not fit that shape (checked by rendering longer conversations both ways)."""
    if not getattr(tokenizer, "chat_template", None):
        raise TemplateMismatch("the tokenizer has no chat template")
    specials = _special_tokens(tokenizer)
    turns = _turn_parts(tokenizer, specials)
    before_user, user_prefix, prompted = turns.before_user, turns.user_prefix, turns.prompted
    with_system = _render(tokenizer, [("system", _SYSTEM), ("user", _USER_1)], True)
    at_system = _cut(with_system, _SYSTEM, "the system message")
    at_user = _cut(with_system, _USER_1, "the user message")
    if at_user < at_system or with_system[at_user:] != prompted[prompted.index(_USER_1) :]:
        raise TemplateMismatch("the chat template puts the system message after the user's or changes the turn")
    between = with_system[at_system + len(_SYSTEM) : at_user]
    if not between.endswith(user_prefix):
        raise TemplateMismatch("the chat template folds the system message into the first user turn")
    opening = with_system[:at_system]
    common = 0
    while common < min(len(opening), len(before_user)) and opening[common] == before_user[common]:
        common += 1
    if common < len(before_user):  # a default system block: start where the system block opens (a special token)
        common = max(
            (i for i in range(common, -1, -1) if i == 0 or any(opening[i:].startswith(t) for t in specials)), default=0
        )
    shape = ChatShape(
        start=opening[:common],
        system_prefix=opening[common:],
        system_suffix=between[: len(between) - len(user_prefix)],
        default_system=before_user[common:],
        user_prefix=user_prefix,
        user_suffix=turns.user_suffix,
        assistant_prefix=turns.assistant_prefix,
        assistant_suffix=turns.assistant_suffix,
        generation=turns.generation,
    )
    for pairs in _CHECKS:
        messages = [{"role": role, "content": content} for role, content in pairs]
        if shape.render(messages) != _render(tokenizer, pairs, True):
            turns = len([m for m in messages if m["role"] == "user"])
            raise TemplateMismatch(
                f"the chat template renders a conversation of {turns} user turns differently from its one-turn parts"
            )
    return shape


def _literal(text: str) -> str:
    """``text`` as a Go template action that prints it as it is (a raw string; a quoted one if it has a backtick)."""
    if not text:
        return ""
    if "`" not in text:
        return "{{ `" + text + "` }}"
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\t", "\\t")
    return '{{ "' + quoted + '" }}'


def go_template(shape: ChatShape) -> str:
    """The Go template Ollama renders a chat with, saying what ``shape`` says: the system prompt (``.System``) or the
    default block, each user and assistant message of ``.Messages`` in its wrapping, and the generation prompt after
    the last user message. Trim markers touch only the template's own line breaks, never the printed text."""
    system = _literal(shape.system_prefix) + "{{ .System }}" + _literal(shape.system_suffix)
    default = "{{ else }}" + _literal(shape.default_system) if shape.default_system else ""
    lines = [_literal(shape.start) + "{{ if .System }}" + system + default + "{{ end }}"]
    lines += [
        "{{- range $i, $_ := .Messages }}",
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}",
        '{{- if eq .Role "user" }}' + _literal(shape.user_prefix) + "{{ .Content }}" + _literal(shape.user_suffix),
        "{{- if $last }}" + _literal(shape.generation) + "{{ end }}",
        '{{- else if eq .Role "assistant" }}' + _literal(shape.assistant_prefix) + "{{ .Content }}",
        "{{- if not $last }}" + _literal(shape.assistant_suffix) + "{{ end }}",
        "{{- end }}",
        "{{- end }}",
    ]
    return "\n".join(lines)


def stop_tokens(tokenizer: Any, shape: ChatShape | None, eos_ids: Sequence[int] = ()) -> list[str]:
    """The texts Ollama stops at: the end-of-sequence tokens (the tokenizer's and the generation config's), the special
    token that closes an assistant turn and the one that opens a user turn."""
    specials = _special_tokens(tokenizer)
    found: list[str] = []
    for token_id in eos_ids:
        found.append(tokenizer.convert_ids_to_tokens(int(token_id)))
    found.append(getattr(tokenizer, "eos_token", None) or "")
    if shape is not None:
        for text in (shape.assistant_suffix, shape.user_prefix):
            found += [t for t in specials if text.startswith(t)][:1]
    return [t for i, t in enumerate(found) if t and t in specials and t not in found[:i]]


def _triple_quoted(text: str) -> str:
    return '"""' + text + '"""'


def build_modelfile(
    tokenizer: Any, gguf_name: str, system: str | None = None, eos_ids: Sequence[int] = ()
) -> tuple[str, str | None]:
    """(the Modelfile's text, None) for ``gguf_name`` beside it; (the Modelfile without ``TEMPLATE``, the sentence
    why) when the chat template cannot be translated, in which case Ollama picks a template from the GGUF's own."""
    try:
        shape: ChatShape | None = chat_shape(tokenizer)
        note = None
    except TemplateMismatch as exc:
        shape, note = None, f"{exc}: the Modelfile has no TEMPLATE, so Ollama picks one from the GGUF's chat template"
    lines = [f"FROM ./{gguf_name}", ""]
    if shape is not None:
        template = go_template(shape)
        if '"""' in template:
            shape, note = None, "the chat template holds three double quotes in a row, which a Modelfile cannot hold"
        else:
            lines += [f"TEMPLATE {_triple_quoted(template)}", ""]
    if note is not None:
        lines += [f"# TEMPLATE: {note}.", ""]
    lines += [f'PARAMETER stop "{token}"' for token in stop_tokens(tokenizer, shape, eos_ids) if '"' not in token]
    if system and '"""' not in system:
        lines += ["", f"SYSTEM {_triple_quoted(system)}"]
    return "\n".join(lines).rstrip() + "\n", note
