"""Opening the job store at start: a file whose tables disagree with its schema version is set aside, like a
damaged snapshot, and its rows are read into a store of the right shape, so lists and submits answer and the
header says what happened."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from backend.jobs.store import JobStore
from backend.jobs.store_errors import StoreShapeMismatch
from backend.platform.snapshot_rescue import rescue_snapshot

log = logging.getLogger(__name__)


def open_store(db_path: Path) -> tuple[JobStore, str | None]:
    """The store at ``db_path``, and the sentence for the header when it had to be set aside first (None when it
    opened as it was). The set-aside file keeps every byte; its rows come back at version 0, so the migration adds
    the columns they lack with their defaults (a column it cannot add is the migration's StoreError, a sentence)."""
    try:
        return JobStore(db_path), None
    except StoreShapeMismatch as exc:
        mismatch = exc
    sentence = rescue_snapshot(
        db_path, mismatch.problem, db_path, what="The job store did not match its schema version"
    )
    if db_path.exists():
        con = sqlite3.connect(db_path)
        try:
            con.execute("PRAGMA user_version = 0")  # read as a file of unknown shape: the migration adopts it
        finally:
            con.close()
    return JobStore(db_path), sentence
