"""Where ``datasets`` writes its Arrow copies of a user's file: folders inside that user's own uploads folder, in the
data folder, so the bytes count in their upload quota while they exist. Nothing of a user's file reaches the shared
datasets cache (``HF_DATASETS_CACHE``), which no quota counts and nothing ever empties.

A glance at the rows (the upload check, Evaluate, a preview, a dry run) reads them into memory and removes its folder
before it returns: nothing stays, even if the process is killed just after. A training job, and Check's and submit's
pre-flight in the app, hold a folder while they use the rows instead (``held_folder``) and memory-map them from
there, where the trainer writes its tokenized copies beside them (many times the file's size, which memory would
otherwise hold). Each folder is locked by the process
that made it, and the kernel lets go of a killed process's lock, so a sweep (when the user deletes an upload, and at
start-up) removes exactly what killed processes left.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from backend.core.paths import DATASETS_CACHE, STAGING

READ_PREFIX = "read-"
LIVE_MARK = ".reading"  # in a read's folder, locked by its process while it reads
# A read's folder without its mark and older than this was left by a process killed at its start.
LEFTOVER_AGE_S = 3600


def cache_root(uploads_dir: Path) -> Path:
    """The datasets cache of the user whose uploads folder (or its staging folder) is ``uploads_dir``.

    >>> cache_root(Path("/d/uploads/ann")), cache_root(Path("/d/uploads/ann/.staging"))
    (PosixPath('/d/uploads/ann/.datasets-cache'), PosixPath('/d/uploads/ann/.datasets-cache'))
    """
    owner_folder = uploads_dir.parent if uploads_dir.name == STAGING else uploads_dir
    return owner_folder / DATASETS_CACHE


@contextlib.contextmanager
def read_folder(root: Path | None) -> Iterator[Path]:
    """A fresh folder for one read's Arrow files inside ``root`` (a user's ``cache_root``, or a folder made by this
    function in another process; the system's temporary folder when None), removed afterwards with ``root`` itself
    once nothing else reads there (and the user's folder above it when this read made it). While it lasts, this
    process holds a lock on it that the kernel lets go of when the process dies, so ``sweep_reads`` can tell a killed
    read's leftover from a read in progress. A data folder that takes no new folder now (full, read-only) does not
    stop a read: it goes to the system's temporary folder, removed the same way."""
    made_owner = root is not None and not root.parent.exists()
    folder = _new_read_folder(root) if root is not None else None
    if folder is None or root is None:
        with tempfile.TemporaryDirectory(prefix=READ_PREFIX) as temporary:
            yield Path(temporary)
        return
    try:
        with _held_mark(folder):
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        with contextlib.suppress(OSError):
            root.rmdir()
            if made_owner:  # an empty user folder this read made (a builtin dataset's, say) goes with it
                root.parent.rmdir()


def _new_read_folder(root: Path) -> Path | None:
    """A new read folder in ``root``, or None when the disk takes none (full, read-only, over a quota)."""
    for attempt in range(3):  # another read of this user's may remove the empty root just after mkdir
        try:
            root.mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix=READ_PREFIX, dir=root))
        except FileNotFoundError:
            if attempt == 2:
                raise
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES):
                return None
            raise
    return None


@contextlib.contextmanager
def _held_mark(folder: Path) -> Iterator[None]:
    """``folder``'s LIVE_MARK, locked by this process until the block ends; it appears under its name already locked,
    so a sweep never finds it unlocked while its read is alive."""
    staged = folder / f"{LIVE_MARK}.new"
    with open(staged, "wb") as mark:
        fcntl.flock(mark, fcntl.LOCK_EX)
        os.replace(staged, folder / LIVE_MARK)
        yield


def _abandoned(folder: Path, older_than_s: float) -> bool:
    """Whether no process reads in ``folder`` any more: its mark is there and unlocked (its process died), or it has
    none (killed before it was made) and is older than any read starting now could be."""
    try:
        with open(folder / LIVE_MARK, "rb") as mark:
            try:
                fcntl.flock(mark, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True
    except FileNotFoundError:
        return time.time() - folder.stat().st_mtime > older_than_s


def held_folder(source: str, uploads_dir: Path) -> contextlib.AbstractContextManager[Path | None]:
    """The folder a training job or a pre-flight holds while it uses a dataset's rows (``load_training_dataset``'s
    ``kept_in``): in the owner's datasets cache, removed when the block ends. None for a Hub dataset, whose copy the
    shared cache keeps for everyone."""
    return contextlib.nullcontext() if source == "hub" else read_folder(cache_root(uploads_dir))


def cached_bytes(uploads_dir: Path) -> int:
    """The bytes of reads in progress (or left by a killed process) in the user's datasets cache."""
    total = 0
    for folder, _, files in os.walk(cache_root(uploads_dir)):
        for name in files:
            with contextlib.suppress(OSError):  # removed meanwhile
                total += os.lstat(os.path.join(folder, name)).st_size
    return total


def sweep_reads(root: Path, older_than_s: float = LEFTOVER_AGE_S) -> int:
    """Remove what killed reads left in a datasets cache (``root``), never a read in progress; how many folders were
    removed."""
    removed = 0
    with contextlib.suppress(FileNotFoundError):
        for leftover in root.glob(f"{READ_PREFIX}*"):
            with contextlib.suppress(OSError):
                if _abandoned(leftover, older_than_s):
                    shutil.rmtree(leftover)
                    removed += 1
    with contextlib.suppress(OSError):
        root.rmdir()
    return removed


def sweep_all_reads(uploads_root: Path, older_than_s: float = LEFTOVER_AGE_S) -> int:
    """``sweep_reads`` in every user's datasets cache (at start-up); how many folders were removed."""
    return sum(sweep_reads(root, older_than_s) for root in uploads_root.glob(f"*/{DATASETS_CACHE}"))
