"""Turns the ways a job can end badly into one sentence a person can act on."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from backend.spec import SpecError
from backend.store import JobStatus

LOG_TAIL_LINES = 15
_MEMORY_MARKERS = ("out of memory", "can't allocate memory", "cannot allocate memory", "bad_alloc")


def looks_like_oom(text: str) -> bool:
    lowered = text.lower()
    return any(marker in lowered for marker in _MEMORY_MARKERS)


def describe_failure(exc: BaseException) -> str:
    """One line a person can act on, for the job's error field."""
    if isinstance(exc, SpecError):
        return str(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or looks_like_oom(text):
        return (
            f"Out of memory ({type(exc).__name__}: {text or 'no details'}). "
            "Lower the batch size or max length, enable 4-bit loading, or pick a smaller model."
        )
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_exit(returncode: int | None, cancel_requested: bool) -> tuple[JobStatus, str]:
    """Status and reason for a worker that exited without recording its own end."""
    if cancel_requested:
        return JobStatus.cancelled, "stopped by request (the worker was killed after the grace period)"
    if returncode is None:
        return JobStatus.failed, "the worker process disappeared without reporting how it ended"
    if returncode < 0:
        sig = signal.Signals(-returncode)
        if sig is signal.SIGKILL:
            return JobStatus.failed, (
                "the worker was killed (SIGKILL); the system's out-of-memory killer does this when memory runs out"
            )
        return JobStatus.failed, f"the worker was killed by {sig.name}"
    return JobStatus.failed, f"the worker exited with code {returncode} without reporting a result"


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            text = fh.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-n:]


def with_log_tail(reason: str, log_path: Path) -> str:
    """The reason followed by the last lines of the job's log, so the cause is visible without opening the file."""
    tail = tail_lines(log_path)
    return reason + ("\nLast log lines:\n" + "\n".join(tail) if tail else "")
