"""What the job store refuses with, as sentences a person can act on, and how a SQLite error is told apart."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from backend.core.spec import SpecError, shorten

# SQLite's primary result codes for a damaged file and for a file that is not a database at all.
_SQLITE_CORRUPT, _SQLITE_NOTADB = 11, 26


class JobNotFound(KeyError):
    """No job has this id (or none the asker may see)."""

    def __init__(self, job_id: str):
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r}"


class InvalidTransition(ValueError):
    """An action that does not fit the job's current status (e.g. resuming a job that succeeded)."""


class StoreError(RuntimeError):
    """A problem with the job store that a person must act on; ``str()`` is one sentence saying what to do."""


class StoreCorrupt(StoreError):
    """The database file is damaged or is not SQLite at all: the app cannot start on it."""

    def __init__(self, db_path: Path, detail: str):
        self.db_path = db_path
        super().__init__(
            f"The job store {db_path} is damaged or is not a SQLite database ({shorten(detail, 200)}): stop the app, "
            f"move that file aside together with any {db_path.name}-wal and {db_path.name}-shm beside it (or restore "
            "them from a backup) and start again; a fresh, empty store is created in its place."
        )


class StoreTooNew(StoreError):
    """The store file was written by a newer version of the studio (its schema version is higher than this code
    knows): it is not opened, and nothing is written to it."""

    def __init__(self, db_path: Path, found: int, known: int):
        self.db_path, self.found, self.known = db_path, found, known
        super().__init__(
            f"The job store {db_path} was written by a newer version of the studio (schema version {found}; this "
            f"version knows up to {known}), so this version leaves it untouched: run the newer version again (update "
            "the Space or `git pull`), or start this one on another data folder (STUDIO_DATA_DIR)."
        )


class StoreNeedsUpgrade(StoreError):
    """A read-only store written by an older version, lacking columns this version reads: it cannot be upgraded
    where it is, and read without them every job would be missing."""

    def __init__(self, db_path: Path, missing: list[str]):
        self.db_path, self.missing = db_path, missing
        super().__init__(
            f"The job store {db_path} was written by an older version of the studio and lacks "
            f"{', '.join(missing[:4])}; this version adds them at start, which needs its folder writable: make it "
            "writable and start again (nothing else changes in the file)."
        )


class UnreadableJob(StoreError):
    """A job row this version cannot read (written by an older version or edited by hand); lists skip it."""

    def __init__(self, job_id: str, reason: str):
        self.job_id = job_id
        self.reason = reason
        super().__init__(
            f"job {job_id} cannot be read ({reason}); it was stored by another version of the app or edited by "
            "hand, so it is left out of job lists and never started"
        )


READ_ONLY_SENTENCE = (
    "the studio’s data folder is read-only just now: jobs, logs and adapters can be read, but "
    "nothing can be queued, changed or saved until it is writable again"
)


class StoreReadOnly(SpecError):
    """The store's folder is read-only (a read-only mount): reads answer, this write did not happen."""

    def __init__(self):
        super().__init__([READ_ONLY_SENTENCE])


def is_read_only(exc: sqlite3.Error) -> bool:
    """Whether SQLite refused a write because its files cannot be written (SQLITE_READONLY and its kinds)."""
    return getattr(exc, "sqlite_errorname", "").startswith("SQLITE_READONLY") or "readonly database" in str(exc)


class QueueFull(SpecError):
    """The Space's whole queue holds as many waiting jobs as it may; nothing was queued."""

    def __init__(self, waiting: int, limit: int):
        self.waiting, self.limit = waiting, limit
        super().__init__(
            [
                f"the queue is full: {waiting} jobs are waiting, the most this Space holds "
                f"(STUDIO_MAX_QUEUED_TOTAL = {limit}); try again in a few minutes, once some have started"
            ]
        )


class QuotaExceeded(SpecError):
    """The owner already has as many jobs waiting as one user may; nothing was queued."""

    def __init__(self, waiting: int, limit: int, reserved: int = 0):
        self.waiting = waiting
        self.limit = limit
        held = f" ({reserved} of them trials your TPE sweep has yet to queue)" if reserved else ""
        super().__init__(
            [
                f"you already have {waiting} job(s) waiting in the queue{held} and the limit per user is {limit}: "
                "wait for one to start, or cancel one"
            ]
        )


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file is damaged or is not a database at all."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in {_SQLITE_CORRUPT, _SQLITE_NOTADB}
    return "malformed" in str(exc) or "not a database" in str(exc)
