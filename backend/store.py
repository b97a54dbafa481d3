"""The job store: SQLite in WAL mode holding job rows, their status, progress and append-only metrics."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Iterator

from backend.spec import JobSpec


class JobStatus(str, Enum):
    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    interrupted = "interrupted"

    @property
    def finished(self) -> bool:
        return self in {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}


class JobNotFound(KeyError):
    def __init__(self, job_id: str):
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"no job with id {self.job_id!r}"


class InvalidTransition(ValueError):
    """An action that does not fit the job's current status (e.g. resuming a job that succeeded)."""


@dataclass
class JobRecord:
    id: str
    seq: int
    owner: str
    status: JobStatus
    spec: JobSpec
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    artifacts: dict[str, Any] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    cancel_requested: bool = False
    resume: bool = False
    attempts: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "owner": self.owner,
            "status": self.status.value,
            "method": self.spec.method.value,
            "model": self.spec.model.name_or_path,
            "dataset": self.spec.dataset.name,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "artifacts": self.artifacts,
            "progress": self.progress,
            "attempts": self.attempts,
            "spec": self.spec.model_dump(mode="json"),
        }


_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    error TEXT,
    artifacts TEXT NOT NULL DEFAULT '{}',
    progress TEXT NOT NULL DEFAULT '{}',
    pid INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    resume INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, seq);
CREATE INDEX IF NOT EXISTS jobs_owner ON jobs(owner, seq);
CREATE TABLE IF NOT EXISTS metrics (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    step INTEGER,
    ts REAL NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS metrics_job ON metrics(job_id, id);
CREATE TABLE IF NOT EXISTS samples (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id TEXT NOT NULL,
    step INTEGER,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS samples_job ON samples(job_id, id);
"""


def new_job_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


class JobStore:
    """All job state. Every method opens its own short connection, so it is safe across threads and processes."""

    def __init__(self, db_path: Path | str):
        self.db_path = Path(db_path)
        self.db_path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.db_path, timeout=30, isolation_level=None)
        try:
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA synchronous=NORMAL")
            con.execute("PRAGMA busy_timeout=30000")
            yield con
        finally:
            con.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    @staticmethod
    def _record(row: sqlite3.Row) -> JobRecord:
        return JobRecord(
            id=row["id"],
            seq=row["seq"],
            owner=row["owner"],
            status=JobStatus(row["status"]),
            spec=JobSpec.model_validate_json(row["spec"]),
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            error=row["error"],
            artifacts=json.loads(row["artifacts"]),
            progress=json.loads(row["progress"]),
            pid=row["pid"],
            cancel_requested=bool(row["cancel_requested"]),
            resume=bool(row["resume"]),
            attempts=row["attempts"],
        )

    # --- creating and reading ---------------------------------------------------------------------
    def add(self, spec: JobSpec, job_id: str | None = None) -> JobRecord:
        job_id = job_id or new_job_id()
        with self._connect() as con:
            con.execute(
                "INSERT INTO jobs (id, owner, spec, status, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, spec.owner, spec.to_json(), JobStatus.queued.value, time.time()),
            )
        return self.get(job_id)

    def get(self, job_id: str) -> JobRecord:
        with self._connect() as con:
            row = con.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return self._record(row)

    def list(self, owner: str | None = None, statuses: list[JobStatus] | None = None) -> list[JobRecord]:
        query, args = "SELECT * FROM jobs WHERE 1=1", []
        if owner is not None:
            query += " AND owner = ?"
            args.append(owner)
        if statuses:
            query += f" AND status IN ({','.join('?' * len(statuses))})"
            args.extend(s.value for s in statuses)
        with self._connect() as con:
            rows = con.execute(query + " ORDER BY seq", args).fetchall()
        return [self._record(r) for r in rows]

    def queue_position(self, job_id: str) -> int | None:
        """1 for the next job to start; None when the job is not queued."""
        with self._connect() as con:
            row = con.execute(
                "SELECT (SELECT COUNT(*) FROM jobs q WHERE q.status = 'queued' AND q.seq <= j.seq) AS pos "
                "FROM jobs j WHERE j.id = ? AND j.status = 'queued'",
                (job_id,),
            ).fetchone()
        return row["pos"] if row else None

    # --- scheduling -------------------------------------------------------------------------------
    def claim_next(self) -> JobRecord | None:
        """Atomically move the oldest queued job to running and return it."""
        with self._connect() as con:  # a plain read first: the scheduler polls, and most polls find nothing
            if con.execute("SELECT 1 FROM jobs WHERE status = 'queued' LIMIT 1").fetchone() is None:
                return None
        with self._transaction() as con:
            row = con.execute("SELECT id FROM jobs WHERE status = 'queued' ORDER BY seq LIMIT 1").fetchone()
            if row is None:
                return None
            con.execute(
                "UPDATE jobs SET status = 'running', started_at = ?, finished_at = NULL, error = NULL, pid = NULL, "
                "attempts = attempts + 1 WHERE id = ?",
                (time.time(), row["id"]),
            )
        return self.get(row["id"])

    def set_pid(self, job_id: str, pid: int) -> None:
        with self._connect() as con:
            con.execute("UPDATE jobs SET pid = ? WHERE id = ?", (pid, job_id))

    def finish(self, job_id: str, status: JobStatus, error: str | None = None) -> bool:
        """Move a running job to a final status; False when it was no longer running (someone finished it first)."""
        if not status.finished:
            raise ValueError(f"{status.value} is not a final status")
        with self._connect() as con:
            cur = con.execute(
                "UPDATE jobs SET status = ?, error = ?, finished_at = ? WHERE id = ? AND status = 'running'",
                (status.value, error, time.time(), job_id),
            )
        return cur.rowcount == 1

    def request_cancel(self, job_id: str) -> JobStatus:
        """Cancel a queued job at once, or flag a running one for a cooperative stop. Returns the status after."""
        with self._transaction() as con:
            row = con.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            status = JobStatus(row["status"])
            if status is JobStatus.queued:
                con.execute(
                    "UPDATE jobs SET status = 'cancelled', finished_at = ?, error = 'cancelled before it started' "
                    "WHERE id = ?",
                    (time.time(), job_id),
                )
                return JobStatus.cancelled
            if status is JobStatus.running:
                con.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
                return JobStatus.running
        raise InvalidTransition(f"job {job_id} has already ended ({status.value}); there is nothing to cancel")

    def cancel_requested(self, job_id: str) -> bool:
        with self._connect() as con:
            row = con.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def requeue_for_resume(self, job_id: str) -> JobRecord:
        """Put an interrupted job back in the queue; the worker continues from its last checkpoint."""
        with self._transaction() as con:
            row = con.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            if row["status"] != JobStatus.interrupted.value:
                raise InvalidTransition(
                    f"job {job_id} is {row['status']}; only an interrupted job can be resumed"
                )
            # A resumed job goes to the back of the queue: a fresh seq keeps the queue strictly ordered.
            con.execute(
                "UPDATE jobs SET status = 'queued', resume = 1, cancel_requested = 0, pid = NULL, error = NULL, "
                "finished_at = NULL, seq = (SELECT MAX(seq) + 1 FROM jobs) WHERE id = ?",
                (job_id,),
            )
        return self.get(job_id)

    # --- progress, artifacts, metrics -------------------------------------------------------------
    def merge_artifacts(self, job_id: str, artifacts: dict[str, Any]) -> None:
        with self._transaction() as con:
            row = con.execute("SELECT artifacts FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            merged = {**json.loads(row["artifacts"]), **artifacts}
            con.execute("UPDATE jobs SET artifacts = ? WHERE id = ?", (json.dumps(merged), job_id))

    def report(
        self,
        job_id: str,
        rows: list[tuple[int | None, float, dict[str, Any]]],
        progress: dict[str, Any] | None,
        samples: list[tuple[int | None, dict[str, Any]]] = (),
    ) -> None:
        """A worker's periodic report in one transaction: metric rows (step, ts, data), samples and its progress."""
        with self._transaction() as con:
            con.executemany(
                "INSERT INTO samples (job_id, step, data) VALUES (?, ?, ?)",
                [(job_id, step, json.dumps(data)) for step, data in samples],
            )
            con.executemany(
                "INSERT INTO metrics (job_id, step, ts, data) VALUES (?, ?, ?, ?)",
                [(job_id, step, ts, json.dumps(data)) for step, ts, data in rows],
            )
            if progress is not None:
                con.execute("UPDATE jobs SET progress = ? WHERE id = ?", (json.dumps(progress), job_id))

    def samples(self, job_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        """Sampled completions (GRPO) with their rewards, oldest first."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, step, data FROM samples WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after_id)
            ).fetchall()
        return [{"id": r["id"], "step": r["step"], **json.loads(r["data"])} for r in rows]

    def metrics(self, job_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        """Metric rows in the order they were logged; ``after_id`` lets a live view fetch only new rows."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, step, ts, data FROM metrics WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after_id)
            ).fetchall()
        return [{"id": r["id"], "step": r["step"], "ts": r["ts"], **json.loads(r["data"])} for r in rows]
