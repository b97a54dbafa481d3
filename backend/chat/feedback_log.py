"""The base of every feedback log: a JSONL file of rows kept per user under a file lock, and reading a chat's last
turn (the logs themselves: ``backend.chat.feedback``; the agent arena's: ``backend.chat.episode_feedback``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from backend.core.paths import storage_problem

Message = dict[str, str]
SIDES = ("base", "tuned")


class NoAnswerYet(ValueError):
    """The chat holds no answer to judge yet, so nothing was recorded."""


class NotSaved(ValueError):
    """A row or an export could not be written (a full disk, a read-only folder): the log is exactly as it was."""


def message_text(content: Any) -> str | None:
    """A message's text: a string as is, or the text parts of a multimodal content list joined (the chat widget
    hands content either way)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def _text(content: Any) -> str:
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
