"""What users say about the Chat tab's answers, kept per user as training data: "this side is better" picks as DPO
pairs, 👍/👎 on one answer as KTO rows, the agent arena's "this side played better" as DPO pairs of whole episodes
(with their tool calls and tools), and their exports as dataset files."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, overload

from backend.core.paths import DataPaths, storage_problem
from backend.models.demo import ARITH_MODEL_DIR

Message = dict[str, str]
FeedbackFormat = Literal["dpo", "kto", "episodes"]
SIDES = ("base", "tuned")

PREFERENCE_COLUMNS = ("prompt", "chosen", "rejected")
# TRL's unpaired preference format (what KTOTrainer reads), conversational: prompt and completion are message lists.
THUMB_COLUMNS = ("prompt", "completion", "label")
# TRL's conversational preference format with tools: DPOTrainer renders ``tools`` (JSON text of the schemas) into the
# chat template of prompt + chosen and prompt + rejected.
EPISODE_COLUMNS = ("prompt", "chosen", "rejected", "tools")
# The template a row is checked against when the caller does not give the model's own: the built-in models'
# (TRL's qwen3 template, saved with builtin:tiny-qwen3-arith; read from the file, without importing TRL).
BUILTIN_TEMPLATE = ARITH_MODEL_DIR / "chat_template.jinja"


class NoAnswerYet(ValueError):
    """The chat holds no answer to judge yet, so nothing was recorded."""


class NotSaved(ValueError):
    """A row or an export could not be written (a full disk, a read-only folder): the log is exactly as it was."""


def _text(content: Any) -> str:
    from backend.chat.side_by_side import message_text  # the chat widget hands content as a string or as typed parts

    return message_text(content) or ""


def last_turn(history: Sequence[dict], system_prompt: str = "") -> tuple[list[Message], str] | None:
    """One side's last turn as (prompt, answer): the system prompt, that side's conversation up to and including its
    last user message, and the assistant answer after it; None when the history does not end with an answer."""
    history = list(history or [])
    users = [i for i, m in enumerate(history) if m.get("role") == "user"]
    if not users or history[-1].get("role") != "assistant":
        return None
    cut = users[-1]
    prompt = [{"role": "system", "content": system_prompt}] if (system_prompt or "").strip() else []
    prompt += [{"role": m["role"], "content": _text(m.get("content"))} for m in history[: cut + 1]]
    return prompt, _text(history[-1].get("content"))


def _read_all(fd: int) -> bytes:
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 20, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _parsed(line: bytes) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except ValueError:  # a line cut short by a crash is no row
        return None
    return row if isinstance(row, dict) else None


def _asked(prompt: Sequence[Message]) -> list[Message]:
    """A prompt without the assistant's messages: what was asked, the same on both sides of a turn."""
    return [m for m in prompt if m["role"] != "assistant"]


class FeedbackLog:
    """A JSONL file of rows, each written under an exclusive file lock, so rows from several threads or processes
    never interleave; a new row replaces the last earlier row it counts as the same as (one judgement per turn)."""

    columns: tuple[str, ...] = ()
    nothing_yet = "nothing recorded yet"

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        raise NotImplementedError

    def _put(self, row: dict[str, Any]) -> dict[str, Any] | None:
        """Append ``row``, or write it over the last row it is the same as; the row it replaced, or None.

        All or nothing: NotSaved (with the reason) leaves the file exactly as it was. An append that fails is cut
        off again; a rewrite goes to a temporary file that replaces the log only once complete. A last line torn by
        a crash is set aside (``<log>.torn``) before anything is added, so a new row never merges into it.
        """
        line = (json.dumps(row, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = self._locked()
        except OSError as exc:
            raise NotSaved(f"not saved: {storage_problem(exc)}") from exc
        try:
            data = _read_all(fd)
            lines = data.splitlines(keepends=True)
            torn = lines.pop() if lines and not lines[-1].endswith(b"\n") else None
            same = [i for i, old in enumerate(lines) if self._same_as(_parsed(old), row)]
            replaced = _parsed(lines[same[-1]]) if same else None
            if same or torn is not None:
                if same:
                    lines[same[-1]] = line
                else:
                    lines.append(line)
                self._replace(b"".join(lines))
                if torn is not None:
                    self._set_aside(torn)
            else:
                try:
                    _write_all(fd, line)
                except OSError:
                    os.ftruncate(fd, len(data))  # never half a row
                    raise
            return replaced
        except OSError as exc:
            raise NotSaved(f"not saved: {storage_problem(exc)}") from exc
        finally:
            os.close(fd)  # closing releases the lock

    def _locked(self) -> int:
        """The log opened for appending under an exclusive lock. A rewrite replaces the file, so a writer that waited
        on the lock of the old one opens the new one and locks again."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                if os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                    return fd
            except FileNotFoundError:
                pass
            os.close(fd)

    def _replace(self, data: bytes) -> None:
        """Write the whole log to a temporary file beside it and rename it over the log (the caller holds the lock)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        try:
            _write_all(fd, data)
            os.fsync(fd)
            os.close(fd)
            fd = -1
            os.chmod(tmp, 0o644)
            os.replace(tmp, self.path)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise

    def _set_aside(self, torn: bytes) -> None:
        """Keep a line a crash cut short beside the log, for a person to look at; losing it is no worse than before."""
        with contextlib.suppress(OSError), open(self.path.with_name(self.path.name + ".torn"), "ab") as fh:
            fh.write(torn + b"\n")

    def _same_as(self, old: dict[str, Any] | None, new: dict[str, Any]) -> bool:
        if old is None:
            return False
        try:
            return self._same(old, new)
        except (KeyError, IndexError, TypeError):  # a row of another shape is no match
            return False

    def rows(self) -> list[dict[str, Any]]:
        """Every recorded row, oldest first (a line cut short by a crash is skipped)."""
        if not self.path.is_file():
            return []
        rows = []
        with open(self.path, "rb") as fh:
            fcntl.flock(fh, fcntl.LOCK_SH)
            for line in fh:
                if line.strip() and (row := _parsed(line)) is not None:
                    rows.append(row)
        return rows

    def export(self, path: Path | str) -> Path:
        """Write the rows as a training-ready JSONL (the format's columns only) and return its path; ValueError when
        there are none."""
        rows = self.rows()
        if not rows:
            raise ValueError(self.nothing_yet)
        target = Path(path)
        tmp = None
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                for row in rows:
                    fh.write(json.dumps({k: row[k] for k in self.columns}, ensure_ascii=False) + "\n")
            os.replace(tmp, target)  # a reader never sees a half-written export
        except OSError as exc:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise NotSaved(f"the export was not written: {storage_problem(exc)}") from exc
        except BaseException:
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)
            raise
        return target


class PreferenceLog(FeedbackLog):
    """Which of the two answers a user preferred, as DPO rows.

    Each row: ``prompt`` (the messages up to and including the user turn, system prompt first), ``chosen`` and
    ``rejected`` (one assistant message each), ``job_id`` and ``created_at`` (seconds since the epoch).
    """

    columns = PREFERENCE_COLUMNS
    nothing_yet = "no preferences recorded yet; pick the better answer in a few chats first"

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """A pick for the same turn: same job, pair of answers and what was asked (a regenerated turn is a new one).

        The prompts themselves may differ: each is the picked side's conversation, with that side's earlier answers.
        """
        answers = {old["chosen"][0]["content"], old["rejected"][0]["content"]}
        return (
            old.get("job_id") == new["job_id"]
            and _asked(old["prompt"]) == _asked(new["prompt"])
            and answers == {new["chosen"][0]["content"], new["rejected"][0]["content"]}
        )

    def record(self, prompt_messages: Sequence[Message], better: str, worse: str, job_id: str | None) -> dict[str, Any]:
        """Record one preference and return the row written, with ``replaced`` True when it replaced this turn's
        earlier pick: one preference per turn (same job, prompt and pair of answers), the last click wins."""
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt_messages]
        if not prompt or prompt[-1]["role"] != "user":
            raise ValueError("a preference's prompt must end with the user's message the two answers reply to")
        if not better.strip() or not worse.strip():
            raise ValueError("one of the answers is empty; there is nothing to prefer - ask again or pick another turn")
        if better == worse:
            raise ValueError(
                "both answers are the same, so neither is better; ask something else, or pick Conversation and ask "
                "again with sampling on (Compare answers greedily)"
            )
        row = {
            "prompt": prompt,
            "chosen": [{"role": "assistant", "content": better}],
            "rejected": [{"role": "assistant", "content": worse}],
            "job_id": job_id,
            "created_at": time.time(),
        }
        return {**row, "replaced": self._put(row) is not None}

    def record_turn(
        self,
        base_history: Sequence[dict],
        tuned_history: Sequence[dict],
        system_prompt: str,
        better_side: str,
        job_id: str | None,
    ) -> dict[str, Any]:
        """Record that ``better_side``'s answer to the last turn beats the other side's; the prompt is the preferred
        side's conversation (each side keeps its own answers). NoAnswerYet when either side has no answer."""
        if better_side not in SIDES:
            raise ValueError(f"the better side is 'base' or 'tuned', not {better_side!r}")
        base, tuned = last_turn(base_history, system_prompt), last_turn(tuned_history, system_prompt)
        if base is None or tuned is None:
            raise NoAnswerYet("Ask something first; then pick the better answer.")
        (prompt, better), (_, worse) = (base, tuned) if better_side == "base" else (tuned, base)
        return self.record(prompt, better, worse, job_id)


class ThumbLog(FeedbackLog):
    """👍/👎 on one side's answer, as KTO rows (TRL's conversational unpaired preference format).

    Each row: ``prompt`` (that side's messages up to and including the user turn, system prompt first),
    ``completion`` (one assistant message), ``label`` (True for 👍), ``side`` (base or tuned), ``job_id`` and
    ``created_at``. One thumb per side per turn: a second one on the same answer replaces the first.
    """

    columns = THUMB_COLUMNS
    nothing_yet = "no thumbs recorded yet; give a few answers a 👍 or 👎 first"

    def _same(self, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """A thumb on the same answer: same job, side, prompt and completion (a regenerated answer is a new one)."""
        return (
            old.get("job_id") == new["job_id"]
            and old.get("side") == new["side"]
            and old.get("prompt") == new["prompt"]
            and old["completion"] == new["completion"]
        )

    def record(
        self, prompt_messages: Sequence[Message], answer: str, label: bool, side: str, job_id: str | None
    ) -> dict[str, Any]:
        """Record one thumb and return the row written, with ``previous``: the label it replaced (None if new)."""
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt_messages]
        if not prompt or prompt[-1]["role"] != "user":
            raise ValueError("a thumb's prompt must end with the user's message the answer replies to")
        if side not in SIDES:
            raise ValueError(f"a thumb is on the 'base' or the 'tuned' answer, not {side!r}")
        if not isinstance(label, bool):
            raise ValueError(f"a thumb's label is True (👍) or False (👎), not {label!r}")
        if not answer.strip():
            raise ValueError(f"the {side} answer is empty, so there is nothing to rate; ask again")
        row = {
            "prompt": prompt,
            "completion": [{"role": "assistant", "content": answer}],
            "label": label,
            "side": side,
            "job_id": job_id,
            "created_at": time.time(),
        }
        replaced = self._put(row)
        return {**row, "previous": replaced.get("label") if replaced else None}

    def record_turn(
        self, history: Sequence[dict], system_prompt: str, label: bool, side: str, job_id: str | None
    ) -> dict[str, Any]:
        """Record a thumb on the last answer of one side's chat history; NoAnswerYet when it has none."""
        turn = last_turn(history, system_prompt)
        if turn is None:
            raise NoAnswerYet("there is no answer yet; ask something first, then rate an answer with 👍 or 👎")
        prompt, answer = turn
        return self.record(prompt, answer, label, side, job_id)


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


# Each export format: its folder under the data dir (one of ``paths.FEEDBACK_KINDS``) and its log.
FEEDBACK_LOGS: dict[FeedbackFormat, tuple[str, type[FeedbackLog]]] = {
    "dpo": ("preferences", PreferenceLog),
    "kto": ("thumbs", ThumbLog),
    "episodes": ("arena-preferences", EpisodePreferenceLog),
}
FEEDBACK_FORMATS: tuple[FeedbackFormat, ...] = tuple(FEEDBACK_LOGS)


@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["dpo"]) -> PreferenceLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["kto"]) -> ThumbLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: Literal["episodes"]) -> EpisodePreferenceLog: ...
@overload
def feedback_log(paths: DataPaths, user_name: str, format: FeedbackFormat) -> FeedbackLog: ...
def feedback_log(paths: DataPaths, user_name: str, format: FeedbackFormat) -> FeedbackLog:
    """A user's own log of one format: ``preferences/<user>.jsonl`` (DPO), ``thumbs/<user>.jsonl`` (KTO) or
    ``arena-preferences/<user>.jsonl`` (DPO rows of whole agent episodes)."""
    if format not in FEEDBACK_LOGS:
        raise ValueError(
            "the export format is 'dpo' (better-answer picks), 'kto' (thumbs) or 'episodes' (agent arena picks), "
            f"not {format!r}"
        )
    folder, kind = FEEDBACK_LOGS[format]
    return kind(paths.feedback(folder, user_name))


def export_feedback(paths: DataPaths, user_name: str, format: FeedbackFormat) -> Path:
    """A user's log of one format as ``<user>-<format>.jsonl`` in a fresh downloads folder (the only place the app
    serves files from); their earlier exports of that format there are removed. ValueError when it is empty, NotSaved
    (nothing left behind) when it could not be written."""
    log = feedback_log(paths, user_name, format)
    try:
        path = paths.new_download(f"{log.path.stem}-{format}.jsonl")
    except OSError as exc:
        raise NotSaved(f"the export was not written: {storage_problem(exc)}") from exc
    try:
        target = log.export(path)
    except BaseException:
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # no empty folder left in downloads/ (an empty log too: ValueError)
        raise
    for old in paths.downloads.glob(f"*/{target.name}"):
        if old != target:
            old.unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                old.parent.rmdir()
    return target
