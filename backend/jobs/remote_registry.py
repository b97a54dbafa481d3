"""Jobs sent to Hugging Face Jobs: who sent which spec where, so the Jobs tab can follow, show logs and cancel.

A small table in the studio's SQLite file, beside the local queue (a remote job is not the scheduler's to run).
The user's token is never stored: each status, logs or cancel call uses the token of the user asking.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from dataclasses import dataclass
from typing import Any

from backend.jobs.records import JobStatus
from backend.jobs.store import JobStore

# A Hugging Face Jobs stage as the Jobs tab's status column says it, beside the local jobs' (JobStage values).
_STATUS_OF_STAGE = {
    "SCHEDULING": JobStatus.queued,
    "RUNNING": JobStatus.running,
    "COMPLETED": JobStatus.succeeded,
    "ERROR": JobStatus.failed,
    "CANCELED": JobStatus.cancelled,
    "DELETED": JobStatus.cancelled,
}


@dataclass(frozen=True)
class RemoteJob:
    """A job launched on Hugging Face Jobs, as the studio recorded it: owner, spec, flavor, last status seen."""

    hf_job_id: str
    owner: str
    spec: dict[str, Any]
    flavor: str
    created_at: float
    last_stage: str | None
    last_message: str | None

    @property
    def status(self) -> JobStatus:
        """The last stage seen, as a local job's status (queued until a stage was read)."""
        return _STATUS_OF_STAGE.get(self.last_stage or "SCHEDULING", JobStatus.running)

    @property
    def method(self) -> str:
        """The spec's training method."""
        return str(self.spec.get("method", ""))

    def url(self, endpoint: str) -> str:
        """The job's page on the Hub (as ``JobInfo.url`` builds it)."""
        return f"{endpoint.rstrip('/')}/jobs/{self.owner}/{self.hf_job_id}"


class RemoteRegistry:
    """The SQLite table of jobs launched on Hugging Face Jobs, with the last status seen of each."""

    def __init__(self, store: JobStore):
        # One file, one way in: its connections, its read-only mode, and its schema (the table is declared with the
        # store's others in backend/jobs/migrations.py, so one version number covers it).
        self.store = store

    def add(self, hf_job_id: str, owner: str, spec_json: str, flavor: str) -> RemoteJob:
        """Record a newly launched job and return its row."""
        with self.store.writing() as con:
            con.execute(
                "INSERT INTO remote_jobs (hf_job_id, owner, spec, flavor, created_at) VALUES (?, ?, ?, ?, ?)",
                (hf_job_id, owner, spec_json, flavor, time.time()),
            )
        added = self.get(hf_job_id)
        assert added is not None  # written just above, in the same store
        return added

    def get(self, hf_job_id: str) -> RemoteJob | None:
        """The row of one launched job, or None."""
        found = self._rows("SELECT * FROM remote_jobs WHERE hf_job_id = ?", (hf_job_id,))
        return found[0] if found else None

    def list(self, owner: str | None = None) -> builtins.list[RemoteJob]:
        """The launched jobs (of one owner, if given), oldest first."""
        query = "SELECT * FROM remote_jobs"
        args: tuple[str, ...] = ()
        if owner is not None:
            query, args = query + " WHERE owner = ?", (owner,)
        return self._rows(query + " ORDER BY created_at", args)

    def _rows(self, query: str, args: tuple) -> builtins.list[RemoteJob]:
        with self.store.reading() as con:
            if con.execute("SELECT 1 FROM sqlite_master WHERE name = 'remote_jobs'").fetchone() is None:
                return []  # a read-only store that never had one
            return [_record(r) for r in con.execute(query, args).fetchall()]

    def record_status(self, hf_job_id: str, stage: str, message: str) -> None:
        """Remember the last stage and message read from the Hub for a job."""
        with self.store.writing() as con:
            con.execute(
                "UPDATE remote_jobs SET last_stage = ?, last_message = ? WHERE hf_job_id = ?",
                (stage, message, hf_job_id),
            )


def _record(row: sqlite3.Row) -> RemoteJob:
    return RemoteJob(
        row["hf_job_id"],
        row["owner"],
        json.loads(row["spec"]),
        row["flavor"],
        row["created_at"],
        row["last_stage"],
        row["last_message"],
    )
