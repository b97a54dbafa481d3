"""Real faults for tests: a small tmpfs mounted over a folder (and always unmounted), filled to the last page."""

from __future__ import annotations

import contextlib
import errno
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def tmpfs(target: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``target`` (created if missing) for the block; skips where mounting is not
    allowed. Unmounted in a finally, lazily when a process still holds a file open there."""
    target.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)], capture_output=True, text=True
    )
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here to fill a disk ({result.stderr.strip() or result.returncode})")
    try:
        yield target
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)])


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` with one file until it is full (ENOSPC); that file, to free it later."""
    filler = directory / "filler"
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 2**20)
        except OSError as exc:
            assert exc.errno == errno.ENOSPC
    return filler


@contextlib.contextmanager
def read_only(target: Path) -> Iterator[Path]:
    """``target`` made read-only under a running process for the block: a read-only bind mount of it over itself.

    Linux refuses to remount a filesystem read-only while a process holds a file open for writing (EBUSY), as the
    app always does (its SQLite store), so this is the read-only that can happen under a running app: every file
    opened from now on, every new SQLite connection included, is read-only (EROFS). Unmounted in a finally."""
    mounts = [["mount", "--bind", str(target), str(target)], ["mount", "-o", "remount,bind,ro", str(target)]]
    result = subprocess.run(mounts[0], capture_output=True, text=True)
    if result.returncode != 0:
        pytest.skip(f"cannot bind-mount here to make a folder read-only ({result.stderr.strip() or result.returncode})")
    try:
        subprocess.run(mounts[1], check=True, capture_output=True)
        yield target
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)])


@contextlib.contextmanager
def timed_all_through(call: Callable[[], object], every_s: float = 0.1) -> Iterator[list[float]]:
    """``call()`` again and again in a thread all through the block (another user's request while a case runs);
    yields the list of how long each call took, complete once the block has ended."""
    waits: list[float] = []
    done = threading.Event()

    def again():
        while True:
            started = time.monotonic()
            call()
            waits.append(time.monotonic() - started)
            if done.wait(every_s):
                return

    caller = threading.Thread(target=again, daemon=True)
    caller.start()
    try:
        yield waits
    finally:
        done.set()
        caller.join(30)
