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


class StoreShapeMismatch(StoreError):
    """A writable store whose tables lack columns its own schema version has (edited by hand, or written by a tool
    that kept the number and not the shape): every list and submit would fail on it. ``open_store`` sets it aside."""

    def __init__(self, db_path: Path, version: int, missing: list[str]):
        self.db_path, self.version, self.missing = db_path, version, missing
        self.problem = f"its schema version {version} has {', '.join(missing[:4])}, and its tables do not"
        super().__init__(
            f"The job store {db_path.name} does not match its schema version ({self.problem}); it is set aside and "
            "its rows are read into a store of the right shape."
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


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


class QueueFull(SpecError):
    """The Space's whole queue holds as many waiting jobs as it may (a job of N training processes counts N); nothing
    was queued."""

    def __init__(self, waiting: int, limit: int, jobs: int | None = None, processes: int = 1):
        self.waiting, self.limit, self.processes = waiting, limit, processes
        jobs = waiting if jobs is None else jobs
        setting = f"STUDIO_MAX_QUEUED_TOTAL = {limit}"
        if processes == 1 and jobs == waiting:  # every waiting job is one process: places are jobs
            said = (
                f"the queue is full: {waiting} jobs are waiting, the most this Space holds ({setting}); try again "
                "in a few minutes, once some have started"
            )
        elif processes > limit:
            said = (
                f"training.num_processes: a job of {_processes(processes)} takes {processes} places in the queue "
                f"(one per process) and this Space holds {limit} in all ({setting}); lower it to {limit} or fewer"
            )
        else:
            said = (
                f"the queue is full for this job: a job of {_processes(processes)} takes {processes} of the {limit} "
                f"places this Space holds ({setting}), and the {jobs} waiting job(s) take {waiting} (one place per "
                "training process); try again once some have started, or lower training.num_processes"
            )
        super().__init__([said])


class QuotaExceeded(SpecError):
    """The owner already has as many jobs waiting as one user may (a job of N training processes counts N); nothing
    was queued."""

    def __init__(self, waiting: int, limit: int, jobs: int | None = None, processes: int = 1, reserved: int = 0):
        self.waiting, self.limit, self.processes = waiting, limit, processes
        jobs = waiting if jobs is None else jobs
        held = f" ({reserved} of them trials your TPE sweep has yet to queue)" if reserved else ""
        if processes == 1 and jobs == waiting:  # every waiting job is one process: places are jobs
            said = (
                f"you already have {waiting} job(s) waiting in the queue{held} and the limit per user is {limit}: "
                "wait for one to start, or cancel one"
            )
        elif processes > limit:
            said = (
                f"training.num_processes: a job of {_processes(processes)} takes {processes} places in the queue "
                f"(one per process) and the limit per user is {limit}; lower it to {limit} or fewer"
            )
        else:
            said = (
                f"a job of {_processes(processes)} takes {processes} of your {limit} places in the queue (one per "
                f"training process), and your {jobs} waiting job(s){held} already take {waiting}: wait for one to "
                "start, or cancel one"
            )
        super().__init__([said])


class ExportBusy(SpecError):
    """The owner already has an export queued or running: one at a time per user, refused at once (it would wait
    behind that one anyway); nothing was queued."""

    def __init__(self, job_id: str):
        self.job_id = job_id
        said = f"your export {job_id} is still queued or running: wait for it to end (or cancel it), then export again"
        super().__init__([said])


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite's error says the file is damaged or is not a database at all."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in {_SQLITE_CORRUPT, _SQLITE_NOTADB}
    return "malformed" in str(exc) or "not a database" in str(exc)
