"""Jobs sent to Hugging Face Jobs: who sent which spec where, so the Jobs tab can follow, show logs and cancel.

A small table in the studio's SQLite file, beside the local queue (a remote job is not the scheduler's to run).
The user's token is never stored: each status, logs or cancel call uses the token of the user asking.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SCHEMA = """
CREATE TABLE IF NOT EXISTS remote_jobs (
    hf_job_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    flavor TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_stage TEXT,
    last_message TEXT
)
"""


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


class RemoteRegistry:
    """The SQLite table of jobs launched on Hugging Face Jobs, with the last status seen of each."""
    def __init__(self, db: Path):
        self.db = Path(db)
        with self._connect() as con:
            con.execute(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        con = sqlite3.connect(self.db, timeout=30, isolation_level=None)
        con.row_factory = sqlite3.Row
        return con

    def add(self, hf_job_id: str, owner: str, spec_json: str, flavor: str) -> RemoteJob:
        """Record a newly launched job and return its row."""
        with self._connect() as con:
            con.execute(
                "INSERT INTO remote_jobs (hf_job_id, owner, spec, flavor, created_at) VALUES (?, ?, ?, ?, ?)",
                (hf_job_id, owner, spec_json, flavor, time.time()),
            )
        return self.get(hf_job_id)

    def get(self, hf_job_id: str) -> RemoteJob | None:
        """The row of one launched job, or None."""
        with self._connect() as con:
            row = con.execute("SELECT * FROM remote_jobs WHERE hf_job_id = ?", (hf_job_id,)).fetchone()
        return _record(row) if row else None

    def list(self, owner: str | None = None) -> list[RemoteJob]:
        """The launched jobs (of one owner, if given), oldest first."""
        query, args = "SELECT * FROM remote_jobs", ()
        if owner is not None:
            query, args = query + " WHERE owner = ?", (owner,)
        with self._connect() as con:
            return [_record(r) for r in con.execute(query + " ORDER BY created_at", args).fetchall()]

    def record_status(self, hf_job_id: str, stage: str, message: str) -> None:
        """Remember the last stage and message read from the Hub for a job."""
        with self._connect() as con:
            con.execute("UPDATE remote_jobs SET last_stage = ?, last_message = ? WHERE hf_job_id = ?",
                        (stage, message, hf_job_id))


def _record(row: sqlite3.Row) -> RemoteJob:
    return RemoteJob(row["hf_job_id"], row["owner"], json.loads(row["spec"]), row["flavor"], row["created_at"],
                     row["last_stage"], row["last_message"])
