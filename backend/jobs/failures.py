"""Turns the ways a job can end badly into one sentence a person can act on."""

from __future__ import annotations

import errno
import os
import re
import signal
import sqlite3
import subprocess
from pathlib import Path

from backend.core.spec import SpecError
from backend.jobs.records import JobStatus
from backend.platform.resource_errors import looks_like_oom

LOG_TAIL_LINES = 15


def disk_full_sentence(where: Path | str | None) -> str:
    """What a job's record says when the data disk filled up under it."""
    return (
        f"the data disk is full ({where or 'the data directory'}): free space on it, then resume or queue the job again"
    )


def disk_full_reason(exc: BaseException, data_dir: Path | str | None = None) -> str | None:
    """The sentence for a full data disk (ENOSPC, or SQLite's "database or disk is full"), else None.

    >>> disk_full_reason(sqlite3.OperationalError("database or disk is full"), "/data")
    'the data disk is full (/data): free space on it, then resume or queue the job again'
    >>> disk_full_reason(ValueError("no")) is None
    True
    """
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return disk_full_sentence(exc.filename or data_dir)
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in str(exc):
        return disk_full_sentence(data_dir)
    return None


def describe_failure(exc: BaseException, data_dir: Path | str | None = None) -> str:
    """One line a person can act on, for the job's error field."""
    if isinstance(exc, SpecError):
        return str(exc)
    disk_full = disk_full_reason(exc, data_dir)
    if disk_full:
        return disk_full
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError" or looks_like_oom(text):
        return (
            f"Out of memory ({type(exc).__name__}: {text or 'no details'}). "
            "Lower the batch size or max length, enable 4-bit loading, or pick a smaller model."
        )
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def describe_exit(
    returncode: int | None, cancel_requested: bool, oom_evidence: str | None = None
) -> tuple[JobStatus, str]:
    """Status and reason for a worker that exited without recording its own end (``returncode`` None: unknown).

    A SIGKILL is only blamed on memory when ``oom_evidence`` (see ``oom_evidence``) says so: people also kill -9.

    >>> describe_exit(-9, cancel_requested=False)
    (<JobStatus.failed: 'failed'>, 'the worker was killed (SIGKILL)')
    >>> describe_exit(-9, cancel_requested=True)[0].value
    'cancelled'
    """
    if cancel_requested:
        return JobStatus.cancelled, "stopped by request (the worker was killed after the grace period)"
    if returncode is None:
        # Only a worker adopted from an earlier scheduler has no exit status to read: like one found dead at start.
        return JobStatus.interrupted, (
            "the worker (started before the scheduler restarted) ended without recording a result; resume it to "
            "continue"
        )
    if returncode < 0:
        sig = signal.Signals(-returncode)
        if sig is signal.SIGKILL:
            if oom_evidence:
                return JobStatus.failed, (
                    f"the worker was killed (SIGKILL) by the out-of-memory killer ({oom_evidence}); lower the batch "
                    "size or max length, enable 4-bit loading, or pick a smaller model"
                )
            return JobStatus.failed, "the worker was killed (SIGKILL)"
        return JobStatus.failed, f"the worker was killed by {sig.name}"
    return JobStatus.failed, f"the worker exited with code {returncode} without reporting a result"


def _memory_cgroup_files() -> list[Path]:
    """Where this process's cgroup counts OOM kills: its own cgroup first (v2, then v1), then the roots."""
    candidates = []
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, cgroup = line.split(":", 2)
            if controllers == "":
                candidates.append(Path("/sys/fs/cgroup", cgroup.lstrip("/"), "memory.events"))
            elif "memory" in controllers.split(","):
                candidates.append(Path("/sys/fs/cgroup/memory", cgroup.lstrip("/"), "memory.oom_control"))
    except (OSError, ValueError):
        pass
    return candidates + [Path("/sys/fs/cgroup/memory.events"), Path("/sys/fs/cgroup/memory/memory.oom_control")]


def oom_kill_count(files: list[Path] | None = None) -> int | None:
    """The cgroup's ``oom_kill`` counter (how many processes the OOM killer ended), or None when unreadable."""
    for path in files if files is not None else _memory_cgroup_files():
        try:
            text = path.read_text()
        except OSError:
            continue
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None


def kernel_log_names_oom_kill(pid: int, since_monotonic: float | None) -> bool:
    """Whether the kernel log says the OOM killer killed ``pid`` (after ``since_monotonic``); False when dmesg is not
    readable (no root, dmesg_restrict) or slow: this is evidence when present, never a requirement."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=2, check=False)
    except (OSError, subprocess.SubprocessError):
        return False
    if out.returncode != 0:
        return False
    pattern = re.compile(rf"^\[\s*(\d+\.\d+)\].*(?:Killed process {pid}\b|oom-kill:.*\bpid={pid}\b)")
    for line in out.stdout.splitlines():
        match = pattern.match(line)
        # Kernel timestamps count from boot like CLOCK_MONOTONIC: older lines are an earlier process with this pid.
        if match and (since_monotonic is None or float(match.group(1)) >= since_monotonic - 1.0):
            return True
    return False


def oom_evidence(
    pid: int, log_text: str, oom_kills_at_launch: int | None, launched_monotonic: float | None
) -> str | None:
    """Why a SIGKILLed worker was probably the OOM killer's victim, or None when nothing points to memory."""
    if looks_like_oom(log_text):
        return "its log reports running out of memory"
    if kernel_log_names_oom_kill(pid, launched_monotonic):
        return f"the kernel log names process {pid}"
    now = oom_kill_count()
    if oom_kills_at_launch is not None and now is not None and now > oom_kills_at_launch:
        return f"the memory cgroup's oom_kill counter went from {oom_kills_at_launch} to {now} while it ran"
    return None


def tail_lines(path: Path, n: int = LOG_TAIL_LINES) -> list[str]:
    """The last ``n`` non-blank lines of a log file (read from its last 64 KiB); none if it cannot be read."""
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
