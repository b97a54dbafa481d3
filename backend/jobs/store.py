"""The job store: SQLite in WAL mode holding job rows, their status, progress and append-only metrics.

What a job is (``JobRecord``, ``JobStatus``) and how it is written to a row are in ``records``; what the store refuses
with, in ``store_errors``.
"""

from __future__ import annotations

import builtins
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from backend.core.artifacts import JobArtifacts, artifact_update
from backend.core.spec import JobSpec
from backend.jobs.migrations import migrate, missing_columns, refuse_newer, schema_version
from backend.jobs.queue_places import queued_places, reserved_trials
from backend.jobs.records import (
    ATTEMPT_END_ARTIFACTS,
    EXPORT_SQL,
    RESUMABLE_STATUSES,
    JobRecord,
    JobStatus,
    export_sql,
    job_record,
    json_object,
    json_text,
    new_job_id,
    storable_spec_json,
)
from backend.jobs.store_errors import (
    ExportBusy,
    InvalidTransition,
    JobNotFound,
    QueueFull,
    QuotaExceeded,
    StoreCorrupt,
    StoreNeedsUpgrade,
    StoreReadOnly,
    StoreShapeMismatch,
    UnreadableJob,
    is_corruption,
    is_read_only,
)


class JobStore:
    """All job state. Every method opens its own short connection, so it is safe across threads and processes."""

    def __init__(self, db_path: Path | str):
        """Open (or create) the store; raise StoreCorrupt when the file is damaged or not a SQLite database."""
        self.db_path = Path(db_path)
        self._target, self._uri = str(self.db_path), False
        if self.db_path.is_file() and not os.access(self.db_path.parent, os.W_OK):
            self._open_read_only()
        else:
            self.db_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._connect() as con:
                # quick_check walks every page once (no index cross-checks): damage is found at start, not mid-job.
                verdict = [row[0] for row in con.execute("PRAGMA quick_check").fetchall()]
                if verdict != ["ok"]:
                    raise StoreCorrupt(self.db_path, "; ".join(verdict[:3]))
                refuse_newer(con, self.db_path)  # before the first write: a newer studio's file stays as it was
                if not self._uri:
                    con.execute("PRAGMA journal_mode=WAL")
                    migrate(con, self.db_path)
                    if missing := missing_columns(con):  # the number says one shape and the tables another
                        con.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all of it in the file that is set aside
                        raise StoreShapeMismatch(self.db_path, schema_version(con), missing)
                elif missing := missing_columns(con):
                    raise StoreNeedsUpgrade(self.db_path, missing)
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            raise StoreCorrupt(self.db_path, str(exc)) from None
        # Held open, idle, for the store's life: SQLite deletes the WAL and its index when the last connection
        # closes, and every next connection must create them again, which a full disk refuses ("disk I/O error"),
        # reads included. With this one open they stay, so reads answer on a full disk and small writes reuse the
        # WAL's pages.
        self._keeper = sqlite3.connect(self._target, check_same_thread=False, uri=self._uri)
        self._keeper.execute("SELECT 1 FROM jobs LIMIT 1").fetchall()

    def _open_read_only(self) -> None:
        """Started on a read-only folder (a read-only mount): open the file read-only, so reads answer and every
        write is StoreReadOnly. Without its WAL index beside it (a clean shutdown removes it, and none can be made
        here) SQLite reads a WAL-mode file only as immutable, which a read-only mount is."""
        base = f"file:{self.db_path.resolve().as_posix()}?mode=ro"
        wal_kept = Path(f"{self.db_path}-shm").exists() and Path(f"{self.db_path}-wal").exists()
        self._target, self._uri = (base if wal_kept else base + "&immutable=1"), True

    def writable(self) -> bool:
        """Whether the store's folder can be written now (False on a read-only mount): what the header says."""
        return not self._uri and os.access(self.db_path.parent, os.W_OK)

    def close(self) -> None:
        """Close the idle connection that keeps the WAL (every call opens its own short connection anyway)."""
        self._keeper.close()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self._target, timeout=30, isolation_level=None, uri=self._uri)
        try:
            con.row_factory = sqlite3.Row
            con.execute("PRAGMA busy_timeout=30000")
            if not self._uri:
                con.execute("PRAGMA synchronous=NORMAL")
            yield con
        finally:
            con.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """A write: all of it or none of it; StoreReadOnly (a sentence) when the folder cannot be written."""
        with self._connect() as con:
            try:
                con.execute("BEGIN IMMEDIATE")
                try:
                    yield con
                except BaseException:
                    con.execute("ROLLBACK")
                    raise
                con.execute("COMMIT")
            except sqlite3.OperationalError as exc:
                if not is_read_only(exc):
                    raise
                raise StoreReadOnly() from None

    def reading(self) -> AbstractContextManager[sqlite3.Connection]:
        """A short connection for reads of another table in this file (the remote job registry's)."""
        return self._connect()

    def writing(self) -> AbstractContextManager[sqlite3.Connection]:
        """A write transaction on this file for another table's rows; StoreReadOnly on a read-only folder."""
        return self._transaction()

    # --- creating and reading ---------------------------------------------------------------------
    def add(
        self,
        spec: JobSpec,
        job_id: str | None = None,
        max_queued_for_owner: int | None = None,
        max_queued_total: int | None = None,
    ) -> JobRecord:
        """Queue a job. The spec is written only if it reads back unchanged (SpecError otherwise); with
        ``max_queued_for_owner`` the owner's waiting jobs (and with ``max_queued_total`` everyone's) are counted in
        the same transaction as the insert, so concurrent submissions cannot overshoot a limit (QuotaExceeded or
        QueueFull, nothing queued). A job takes one place per training process (``queued_places``). An export job
        is refused (ExportBusy) while its owner has another export queued or running."""
        job_id = job_id or new_job_id()
        spec_json = storable_spec_json(spec)
        processes = spec.training.num_processes
        with self._transaction() as con:
            if spec.export is not None:
                self._refuse_second_export(con, spec.owner)
            if max_queued_for_owner is not None:
                self._refuse_over_quota(con, spec.owner, max_queued_for_owner, processes)
            if max_queued_total is not None:
                self._refuse_when_full(con, max_queued_total, processes)
            con.execute(
                "INSERT INTO jobs (id, owner, spec, status, created_at) VALUES (?, ?, ?, ?, ?)",
                (job_id, spec.owner, spec_json, JobStatus.queued.value, time.time()),
            )
        return self.get(job_id)

    @staticmethod
    def _refuse_over_quota(con: sqlite3.Connection, owner: str, limit: int, processes: int = 1) -> None:
        jobs, taken = queued_places(con, owner)
        if taken + processes > limit:
            raise QuotaExceeded(taken, limit, jobs, processes, reserved_trials(con, owner)[0])

    @staticmethod
    def _refuse_second_export(con: sqlite3.Connection, owner: str) -> None:
        row = con.execute(
            f"SELECT id FROM jobs WHERE owner = ? AND status IN ('queued', 'running') AND {EXPORT_SQL} LIMIT 1",
            (owner,),
        ).fetchone()
        if row is not None:
            raise ExportBusy(row["id"])

    @staticmethod
    def _refuse_when_full(con: sqlite3.Connection, limit: int, processes: int = 1) -> None:
        jobs, taken = queued_places(con)
        if taken + processes > limit:
            raise QueueFull(taken, limit, jobs, processes)

    def check_queue_room(self, owner: str, limit: int, total: int | None = None, processes: int = 1) -> None:
        """QuotaExceeded when ``owner``'s waiting jobs and a new job of ``processes`` would take more than ``limit``
        places, QueueFull when everyone's would take more than ``total``: an early answer before slow checks (``add``
        is what enforces the limits)."""
        with self._connect() as con:
            self._refuse_over_quota(con, owner, limit, processes)
            if total is not None:
                self._refuse_when_full(con, total, processes)

    def get(self, job_id: str) -> JobRecord:
        """One job; JobNotFound, or UnreadableJob (a sentence) for a row this version cannot read."""
        with self._connect() as con:
            row = con.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row is None:
            raise JobNotFound(job_id)
        return job_record(row)

    def _read_rows(self, owner: str | None, statuses: list[JobStatus] | None) -> list[JobRecord | UnreadableJob]:
        query, args = "SELECT * FROM jobs WHERE 1=1", []
        if owner is not None:
            query += " AND owner = ?"
            args.append(owner)
        if statuses:
            query += f" AND status IN ({','.join('?' * len(statuses))})"
            args.extend(s.value for s in statuses)
        with self._connect() as con:
            rows = con.execute(query + " ORDER BY seq", args).fetchall()
        read: list[JobRecord | UnreadableJob] = []
        for row in rows:
            try:
                read.append(job_record(row))
            except UnreadableJob as exc:
                read.append(exc)
        return read

    def list(self, owner: str | None = None, statuses: list[JobStatus] | None = None) -> list[JobRecord]:
        """The readable jobs, oldest first; a row that cannot be read is skipped (see ``unreadable_rows``)."""
        return [r for r in self._read_rows(owner, statuses) if isinstance(r, JobRecord)]

    def latest_export(self, job_id: str) -> JobRecord | None:
        """The newest export job of ``job_id`` (its spec's ``export.job_id``), or None."""
        with self._connect() as con:
            row = con.execute(
                f"SELECT * FROM jobs WHERE {EXPORT_SQL} AND json_extract(spec, '$.export.job_id') = ? "
                "ORDER BY seq DESC LIMIT 1",
                (job_id,),
            ).fetchone()
        return job_record(row) if row is not None else None

    def owners(self) -> builtins.list[str]:
        """Everyone who ever submitted a job here."""
        with self._connect() as con:
            return [row[0] for row in con.execute("SELECT DISTINCT owner FROM jobs")]

    def unreadable_rows(
        self, owner: str | None = None, statuses: builtins.list[JobStatus] | None = None
    ) -> builtins.list[tuple[str, str]]:
        """(job id, reason) for each row ``list`` skips because it cannot be read."""
        return [(r.job_id, r.reason) for r in self._read_rows(owner, statuses) if isinstance(r, UnreadableJob)]

    def queue_position(self, job_id: str) -> int | None:
        """1 for the next job to start in its lane (exports have their own); None when the job is not queued."""
        lane = f"{export_sql('q.spec')} = {export_sql('j.spec')}"
        with self._connect() as con:
            row = con.execute(
                f"SELECT (SELECT COUNT(*) FROM jobs q WHERE q.status = 'queued' AND q.seq <= j.seq AND {lane}) AS pos "
                "FROM jobs j WHERE j.id = ? AND j.status = 'queued'",
                (job_id,),
            ).fetchone()
        return row["pos"] if row else None

    # --- scheduling -------------------------------------------------------------------------------
    def claim_next(self, exports: bool | None = None) -> JobRecord | None:
        """Atomically move the oldest queued job that can start to running and return it (with ``exports`` True only
        an export job, False only another: exports have their own lane).

        A staged job waits while the job it continues is queued or running (others pass it); it fails with the reason
        when that job ended without an adapter. A queued row that cannot be read is marked failed with the reason on
        the way. Neither ever blocks the queue.
        """
        with self._connect() as con:  # a plain read first: the scheduler polls, and most polls find nothing
            if con.execute("SELECT 1 FROM jobs WHERE status = 'queued' LIMIT 1").fetchone() is None:
                return None
        with self._transaction() as con:
            lane = "" if exports is None else f" AND {'' if exports else 'NOT '}{EXPORT_SQL}"
            for row in con.execute(f"SELECT * FROM jobs WHERE status = 'queued'{lane} ORDER BY seq").fetchall():
                try:
                    problem = _parent_problem(con, job_record(row))
                except UnreadableJob as exc:
                    problem = str(exc)
                if problem is None:
                    break
                if problem != WAITING:
                    con.execute(
                        "UPDATE jobs SET status = 'failed', finished_at = ?, error = ? WHERE id = ?",
                        (time.time(), problem, row["id"]),
                    )
            else:
                return None
            con.execute(
                "UPDATE jobs SET status = 'running', started_at = ?, finished_at = NULL, error = NULL, pid = NULL, "
                "attempts = attempts + 1 WHERE id = ?",
                (time.time(), row["id"]),
            )
        return self.get(row["id"])

    def set_pid(self, job_id: str, pid: int) -> None:
        """Record the worker process that runs the job."""
        with self._connect() as con:
            con.execute("UPDATE jobs SET pid = ? WHERE id = ?", (pid, job_id))

    def finish(
        self, job_id: str, status: JobStatus, error: str | None = None, artifacts: Mapping[str, Any] | None = None
    ) -> bool:
        """Move a running job to a final status, merging ``artifacts`` (JobArtifacts fields) in the same transaction;
        False when it was no longer running (someone finished it first, and nothing is written)."""
        if not status.finished:
            raise ValueError(f"{status.value} is not a final status")
        update = artifact_update(artifacts or {})
        if not update:
            with self._connect() as con:
                cur = con.execute(
                    "UPDATE jobs SET status = ?, error = ?, finished_at = ? WHERE id = ? AND status = 'running'",
                    (status.value, error, time.time(), job_id),
                )
            return cur.rowcount == 1
        with self._transaction() as con:
            row = con.execute("SELECT artifacts FROM jobs WHERE id = ? AND status = 'running'", (job_id,)).fetchone()
            if row is None:
                return False
            merged = {**json.loads(row["artifacts"]), **update}
            con.execute(
                "UPDATE jobs SET status = ?, error = ?, finished_at = ?, artifacts = ? WHERE id = ?",
                (status.value, error, time.time(), json_text(merged), job_id),
            )
        return True

    def request_cancel(self, job_id: str) -> JobStatus:
        """Cancel a queued job at once, or flag a running one for a cooperative stop. Returns the status after."""
        with self._transaction() as con:
            row = con.execute("SELECT status FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            status = JobStatus(row["status"])
            if status is JobStatus.queued:
                con.execute(
                    "UPDATE jobs SET status = 'cancelled', finished_at = ?, error = NULL WHERE id = ?",
                    (time.time(), job_id),
                )
                return JobStatus.cancelled
            if status is JobStatus.running:
                con.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
                return JobStatus.running
        raise InvalidTransition(f"job {job_id} has already ended ({status.value}); there is nothing to cancel")

    def cancel_requested(self, job_id: str) -> bool:
        """Whether someone asked this job to stop."""
        with self._connect() as con:
            row = con.execute("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return bool(row and row["cancel_requested"])

    def requeue_for_resume(self, job_id: str) -> JobRecord:
        """Put an interrupted, cancelled or failed job back in the queue; the worker continues from its last
        checkpoint. The previous attempt's error and cancel notes are cleared (the log keeps them)."""
        with self._transaction() as con:
            row = con.execute("SELECT status, artifacts FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            if row["status"] not in {s.value for s in RESUMABLE_STATUSES}:
                raise InvalidTransition(
                    f"job {job_id} is {row['status']}; only an interrupted, cancelled or failed job can be resumed"
                )
            artifacts = {k: v for k, v in json.loads(row["artifacts"]).items() if k not in ATTEMPT_END_ARTIFACTS}
            # A resumed job goes to the back of the queue: a fresh seq keeps the queue strictly ordered.
            con.execute(
                "UPDATE jobs SET status = 'queued', resume = 1, cancel_requested = 0, pid = NULL, error = NULL, "
                "finished_at = NULL, artifacts = ?, seq = (SELECT MAX(seq) + 1 FROM jobs) WHERE id = ?",
                (json_text(artifacts), job_id),
            )
        return self.get(job_id)

    # --- progress, artifacts, metrics -------------------------------------------------------------
    def merge_artifacts(self, job_id: str, update: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        """Record some artifacts (JobArtifacts fields, as a dict or keywords), leaving the others as they are.

        UnknownArtifact for a key that is not a field, pydantic's ValidationError for a value of the wrong type:
        nothing is written then. Keys the row holds that this version does not know are kept.
        """
        checked = artifact_update({**(update or {}), **fields})
        with self._transaction() as con:
            row = con.execute("SELECT artifacts FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            merged = {**json.loads(row["artifacts"]), **checked}
            con.execute("UPDATE jobs SET artifacts = ? WHERE id = ?", (json_text(merged), job_id))

    def report(
        self,
        job_id: str,
        rows: builtins.list[tuple[int | None, float, dict[str, Any]]],
        progress: dict[str, Any] | None,
        samples: Sequence[tuple[int | None, dict[str, Any]]] = (),
    ) -> None:
        """A worker's periodic report in one transaction: metric rows (step, ts, data), samples and its progress.

        A NaN or infinite value (a diverged loss) is stored as null: the row stays readable by every JSON reader.
        """
        with self._transaction() as con:
            con.executemany(
                "INSERT INTO samples (job_id, step, data) VALUES (?, ?, ?)",
                [(job_id, step, json_text(data)) for step, data in samples],
            )
            con.executemany(
                "INSERT INTO metrics (job_id, step, ts, data) VALUES (?, ?, ?, ?)",
                [(job_id, step, ts, json_text(data)) for step, ts, data in rows],
            )
            if progress is not None:
                con.execute("UPDATE jobs SET progress = ? WHERE id = ?", (json_text(progress), job_id))

    def forget_reports_after(self, job_id: str, step: int) -> None:
        """Delete the metrics and samples logged after ``step``: a job resumed from its checkpoint at ``step``
        logs those steps again, and each step must be plotted once."""
        with self._transaction() as con:
            con.execute("DELETE FROM metrics WHERE job_id = ? AND step > ?", (job_id, step))
            con.execute("DELETE FROM samples WHERE job_id = ? AND step > ?", (job_id, step))

    def last_logged_step(self, job_id: str) -> int | None:
        """The highest training step a job logged metrics for (None: none yet)."""
        with self._connect() as con:
            row = con.execute("SELECT MAX(step) AS step FROM metrics WHERE job_id = ?", (job_id,)).fetchone()
        return None if row is None or row["step"] is None else int(row["step"])

    def samples(self, job_id: str, after_id: int = 0) -> builtins.list[dict[str, Any]]:
        """Sampled completions (GRPO) with their rewards, oldest first."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, step, data FROM samples WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after_id)
            ).fetchall()
        return [
            {"id": r["id"], "step": r["step"], **data} for r in rows if (data := json_object(r["data"])) is not None
        ]

    def metrics(self, job_id: str, after_id: int = 0) -> builtins.list[dict[str, Any]]:
        """Metric rows in the order they were logged; ``after_id`` lets a live view fetch only new rows."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, step, ts, data FROM metrics WHERE job_id = ? AND id > ? ORDER BY id", (job_id, after_id)
            ).fetchall()
        # A damaged row is skipped rather than taking the whole plot down.
        return [
            {"id": r["id"], "step": r["step"], "ts": r["ts"], **data}
            for r in rows
            if (data := json_object(r["data"])) is not None
        ]


WAITING = "waiting for its parent job"


def _parent_problem(con: sqlite3.Connection, job: JobRecord) -> str | None:
    """None when ``job`` can start now; WAITING while its parent job is queued or running; else why it never will."""
    parent_id = job.spec.model.parent_job_id
    if parent_id is None:
        return None
    row = con.execute("SELECT status, artifacts FROM jobs WHERE id = ?", (parent_id,)).fetchone()
    status = row["status"] if row else "gone"
    if status in ("queued", "running"):
        return WAITING
    if status == "succeeded" and JobArtifacts.from_stored(json_object(row["artifacts"]) or {}).adapter_dir:
        return None
    return (
        f"the job it continues ({parent_id}) ended {status} with no adapter to start from; queue this job "
        f"again once that one has succeeded"
    )
