"""The job store file's schema, its version (SQLite's ``PRAGMA user_version``) and the forward migrations to it.

Every table of the file is declared here, the remote job registry's too, so one number says what shape a file has.
A file of version 0 was written before versions were kept (every build up to issue 36): its shape is read from
``PRAGMA table_info`` and brought to version 1 by creating the tables it lacks and adding the columns it lacks with
their defaults. A later change to the schema adds a step to ``STEPS`` and raises ``SCHEMA_VERSION``; a file newer
than this code is refused whole (StoreTooNew) before anything is written to it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from backend.jobs.store_errors import StoreError, StoreTooNew

# Version 1: the shape every build has written since the remote job registry (2026-11-29), now with a number.
SCHEMA_V1 = """
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
CREATE TABLE IF NOT EXISTS remote_jobs (
    hf_job_id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    flavor TEXT NOT NULL,
    created_at REAL NOT NULL,
    last_stage TEXT,
    last_message TEXT
);
"""


def _columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str, bool, str | None, bool]]:
    """(name, type, not null, default as SQL, part of the primary key) of each column of ``table``."""
    return [(r[1], r[2], bool(r[3]), r[4], bool(r[5])) for r in con.execute(f"PRAGMA table_info({table})")]


def _tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _wanted(schema: str) -> dict[str, list[tuple[str, str, bool, str | None, bool]]]:
    """The columns of each table ``schema`` creates, as ``_columns`` gives them."""
    reference = sqlite3.connect(":memory:")
    try:
        reference.executescript(schema)
        return {table: _columns(reference, table) for table in _tables(reference) if not table.startswith("sqlite_")}
    finally:
        reference.close()


def missing_columns(con: sqlite3.Connection) -> list[str]:
    """``table.column`` for each column of the current schema that a table of this file lacks (what a migration
    adds; a read-only store cannot get them, and reads without them would go wrong)."""
    present = _tables(con)
    missing: list[str] = []
    for table, columns in _wanted(SCHEMA).items():
        if table in present:
            have = {c[0] for c in _columns(con, table)}
            missing.extend(f"{table}.{column[0]}" for column in columns if column[0] not in have)
    return missing


def _adopt(con: sqlite3.Connection, schema: str, db_path: Path) -> None:
    """Bring a file of any earlier shape to ``schema``: each table it has gets the columns it lacks (with their
    defaults), then the tables and indexes it lacks are created. A column that cannot be added (part of the primary
    key, or required with no default) means the table is not one this studio wrote: StoreError."""
    present = _tables(con)
    for table, columns in _wanted(schema).items():
        if table not in present:
            continue
        have = {column[0] for column in _columns(con, table)}
        for name, kind, not_null, default, in_key in columns:
            if name in have:
                continue
            if in_key or (not_null and default is None):
                raise StoreError(
                    f"The job store {db_path} has a table {table!r} without its column {name!r}, which cannot be "
                    "added afterwards: the file was not written by this studio; move it aside and start again "
                    "(a fresh, empty store is created in its place)."
                )
            clause = f"{name} {kind}" + (" NOT NULL" if not_null else "") + (f" DEFAULT {default}" if default else "")
            con.execute(f"ALTER TABLE {table} ADD COLUMN {clause}")
    for statement in schema.split(";"):  # executescript would commit the caller's transaction
        if statement.strip():
            con.execute(statement)


# Version 2: sweeps (backend/jobs/sweeps.py): a sweep's row (its base spec, the fields it varies and how it searches)
# and one row per child job, with the values it tried. The jobs table is unchanged: a child is an ordinary job.
SCHEMA_V2 = (
    SCHEMA_V1
    + """
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    spec TEXT NOT NULL,
    vary TEXT NOT NULL,
    search TEXT NOT NULL,
    trials INTEGER NOT NULL,
    objective TEXT NOT NULL DEFAULT 'learning',
    created_at REAL NOT NULL,
    cancelled INTEGER NOT NULL DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS sweeps_owner ON sweeps(owner, created_at);
CREATE TABLE IF NOT EXISTS sweep_children (
    job_id TEXT PRIMARY KEY,
    sweep_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    params TEXT NOT NULL,
    trial INTEGER,
    told INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS sweep_children_sweep ON sweep_children(sweep_id, position);
"""
)


# Version 3: a sweep records its submitter's rights (trusted, local, admin or user; backend/jobs/sweep_door.py), so
# a TPE child queued later by the scheduler passes the door as that user (a sweep stored before has the least), and
# the sentence that stopped it when a child could not be queued.
SCHEMA_V3 = SCHEMA_V2.replace(
    "    active INTEGER NOT NULL DEFAULT 1\n);",
    "    active INTEGER NOT NULL DEFAULT 1,\n    rights TEXT NOT NULL DEFAULT 'user',\n    stopped TEXT\n);",
)


# STEPS[v] takes a file from version v to v + 1, inside the caller's transaction.
STEPS: tuple[Callable[[sqlite3.Connection, Path], None], ...] = (
    lambda con, db_path: _adopt(con, SCHEMA_V1, db_path),  # 0 -> 1: any shape that shipped unversioned
    lambda con, db_path: _adopt(con, SCHEMA_V2, db_path),  # 1 -> 2: the sweeps' tables
    lambda con, db_path: _adopt(con, SCHEMA_V3, db_path),  # 2 -> 3: a sweep's submitter's rights, why it stopped
)
SCHEMA_VERSION = len(STEPS)
SCHEMA = SCHEMA_V3  # the shape of a file at SCHEMA_VERSION


def schema_version(con: sqlite3.Connection) -> int:
    """The version a store file says it has (0: written before versions were kept, or new and empty)."""
    return int(con.execute("PRAGMA user_version").fetchone()[0])


def refuse_newer(con: sqlite3.Connection, db_path: Path) -> int:
    """The file's version; StoreTooNew when a newer studio wrote it (nothing is written then)."""
    found = schema_version(con)
    if found > SCHEMA_VERSION:
        raise StoreTooNew(db_path, found, SCHEMA_VERSION)
    return found


def migrate(con: sqlite3.Connection, db_path: Path) -> int:
    """Bring the store file open on ``con`` (autocommit) to SCHEMA_VERSION, all steps in one transaction (another
    process may be doing the same: the version is read again once the write lock is held). Returns the version
    the file had; StoreTooNew for a file newer than this code, StoreError for a shape no studio wrote."""
    if refuse_newer(con, db_path) == SCHEMA_VERSION:
        return SCHEMA_VERSION
    con.execute("BEGIN IMMEDIATE")
    try:
        found = refuse_newer(con, db_path)
        for step in STEPS[found:]:
            step(con, db_path)
        con.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return found
