"""Rows saved from a damaged SQLite file into a new one, with nothing but Python's sqlite3 module.

The sqlite3 shell's ``.recover`` is not reachable from Python (and the shell is not installed everywhere), and a
plain ``SELECT *`` or ``iterdump`` stops at the first damaged page. So each table is read in rowid order, and where
a read fails the scan seeks past the damage one rowid at a time (a b-tree seek reaches the intact pages on either
side of a damaged one) and carries on. Rows below a damaged interior page, out of SQLite's reach, are then read off
their leaf pages (backend/platform/sqlite_pages.py) into the table whose shape they fit. What is lost is what lay on
the damaged pages; a damaged first page (the file header and the schema) leaves nothing to read. The damaged file is
opened immutable and read as bytes: nothing is written to it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.platform.sqlite_pages import PageFile

# How far past the last readable rowid a scan seeks when the table's highest rowid cannot be read either.
_BLIND_REACH = 100_000


@dataclass
class Recovery:
    """What a recovery saved: rows per table, the rowid stretches that could not be read, and why nothing could
    be (``error``) when the schema itself was unreadable."""

    rows: dict[str, int] = field(default_factory=dict)
    damaged_stretches: int = 0
    from_pages: int = 0  # of ``rows``, those read off leaf pages SQLite could no longer reach
    error: str | None = None
    seconds: float = 0.0


def _open_damaged(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path.resolve().as_posix()}?mode=ro&immutable=1", uri=True)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _highest_rowid(src: sqlite3.Connection, table: str) -> int | None:
    """The highest rowid the table has had, from its own b-tree or from sqlite_sequence (AUTOINCREMENT)."""
    found: list[int] = []
    for query, args in (
        (f"SELECT max(rowid) FROM {_quoted(table)}", ()),
        ("SELECT seq FROM sqlite_sequence WHERE name = ?", (table,)),
    ):
        with contextlib.suppress(sqlite3.DatabaseError):
            row = src.execute(query, args).fetchone()
            if row and row[0] is not None:
                found.append(int(row[0]))
    return max(found) if found else None


def _next_readable(src: sqlite3.Connection, scan_from: str, after: int, limit: int) -> int | None:
    """The first rowid above ``after`` whose whole row reads again (None: none up to ``limit``)."""
    for rowid in range(after + 1, limit + 1):
        try:
            row = src.execute(scan_from + " LIMIT 1", (rowid,)).fetchone()
        except sqlite3.DatabaseError:
            continue
        return None if row is None else int(row[0])
    return None


def _copy_table(src: sqlite3.Connection, dst: sqlite3.Connection, table: str, recovery: Recovery) -> None:
    columns = [row[1] for row in src.execute(f"PRAGMA table_info({_quoted(table)})")]
    names = ", ".join(_quoted(c) for c in columns)
    insert = f"INSERT OR IGNORE INTO {_quoted(table)} (rowid, {names}) VALUES (?, {', '.join('?' * len(columns))})"
    # ``rowid >= last + 1``, not ``rowid > last``: a seek past ``last`` starts on ``last``'s page, which may be the
    # damaged one; a seek to the next rowid goes straight to the page that holds it.
    scan = f"SELECT rowid, {names} FROM {_quoted(table)} WHERE rowid >= ? ORDER BY rowid"
    highest = _highest_rowid(src, table)
    last, saved = -(2**63), 0

    def keep(row: tuple) -> None:
        nonlocal last, saved
        last = row[0]
        with contextlib.suppress(sqlite3.Error):  # a value a damaged page garbled into breaking a constraint
            saved += dst.execute(insert, row).rowcount

    while True:
        try:
            for row in src.execute(scan, (last + 1,)):
                if row[0] > last:  # a damaged page read as rows out of order: never step back
                    keep(row)
            break
        except sqlite3.DatabaseError:
            pass
        # Python's cursor reads a row ahead, so the error may have cost rows before the damage: one row a query up
        # to it (LIMIT 1 reads no further), then seek past it.
        try:
            while (row := src.execute(scan + " LIMIT 1", (last + 1,)).fetchone()) is not None and row[0] > last:
                keep(row)
            break  # the damage was only read ahead: the table ends here
        except sqlite3.DatabaseError:
            recovery.damaged_stretches += 1
        start = max(last, 0) + 1  # the row after ``last`` is the damaged one
        resume_at = _next_readable(src, scan, start, max(highest or 0, start + _BLIND_REACH))
        if resume_at is None:
            break
        last = resume_at - 1
    recovery.rows[table] = saved


class _Shape:
    """What a row of one table can look like: its columns' affinities, which must not be NULL, which have a default,
    and which one is the rowid (an INTEGER PRIMARY KEY, stored as NULL in the record)."""

    def __init__(self, dst: sqlite3.Connection, table: str):
        self.table = table
        info = dst.execute(f"PRAGMA table_info({_quoted(table)})").fetchall()
        self.names = [row[1] for row in info]
        keys = [row for row in info if row[5]]
        self.alias = keys[0][1] if len(keys) == 1 and keys[0][2].upper() == "INTEGER" else None
        self.kinds = [_affinity(row[2]) for row in info]
        self.required = [bool(row[3]) and row[4] is None and row[1] != self.alias for row in info]

    def fits(self, values: list[Any]) -> bool:
        """Whether ``values`` (a record off a leaf page) can be a row of this table as SQLite would have stored it."""
        if len(values) > len(self.names) or any(self.required[len(values) :]):
            return False
        for name, kind, required, value in zip(self.names, self.kinds, self.required, values):
            if name == self.alias:
                if value is not None:
                    return False
            elif value is None:
                if required:
                    return False
            elif kind == "text" and not isinstance(value, str):
                return False
            elif kind == "number" and not isinstance(value, (int, float)):
                return False
        return True


def _affinity(declared: str) -> str:
    """SQLite's column affinity rules, folded to what a stored value's type can show: text, number or any."""
    kind = declared.upper()
    if "INT" in kind or any(word in kind for word in ("REAL", "FLOA", "DOUB", "NUM", "DEC", "BOOL")):
        return "number"
    if any(word in kind for word in ("CHAR", "CLOB", "TEXT")):
        return "text"
    return "any"


def _copy_unreachable(damaged: Path, dst: sqlite3.Connection, recovery: Recovery) -> None:
    """Rows on table leaf pages the b-tree scan could not reach (below a damaged interior page): each goes to the
    one table whose shape it fits, unless a row with its rowid is there already (read by SQLite itself)."""
    try:
        pages = PageFile(damaged)
    except (OSError, ValueError):
        return
    shapes = [_Shape(dst, t) for (t,) in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
    shapes = [shape for shape in shapes if not shape.table.startswith("sqlite_")]
    for number in pages.table_leaves():
        for index, (rowid, values) in enumerate(pages.leaf_rows(number)):
            fitting = [shape for shape in shapes if shape.fits(values)]
            if len(fitting) != 1:  # no table, or more than one could hold it: not worth a guess
                continue
            shape = fitting[0]
            table = _quoted(shape.table)
            if index == 0 and dst.execute(f"SELECT 1 FROM {table} WHERE rowid = ?", (rowid,)).fetchone():
                break  # the scan read this page (a page is read whole or not at all): on to the next
            names = ", ".join(_quoted(n) for n in shape.names[: len(values)])
            insert = f"INSERT OR IGNORE INTO {table} (rowid, {names}) VALUES (?{', ?' * len(values)})"
            with contextlib.suppress(sqlite3.Error):
                values = [rowid if name == shape.alias else v for name, v in zip(shape.names, values)]
                added = dst.execute(insert, [rowid, *values]).rowcount
                recovery.rows[shape.table] = recovery.rows.get(shape.table, 0) + added
                recovery.from_pages += added


def recover_database(damaged: Path, target: Path) -> Recovery:
    """Copy every row that can still be read from the SQLite file ``damaged`` into a new file at ``target``
    (replaced whole: written under a temporary name, then renamed), with the tables, indexes and user_version of
    the damaged file's schema. ``error`` says why nothing could be read, and then ``target`` is not written."""
    started = time.monotonic()
    recovery = Recovery()
    part = target.with_name(f".{target.name}.recovering-{os.getpid()}")
    part.unlink(missing_ok=True)
    try:
        src = _open_damaged(damaged)
    except sqlite3.Error as exc:
        recovery.error = str(exc)
        return recovery
    try:
        try:
            schema = src.execute(
                "SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            ).fetchall()
            version = int(src.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            recovery.error = f"its schema cannot be read ({exc})"
            return recovery
        dst = sqlite3.connect(part, isolation_level=None)
        try:
            dst.execute("BEGIN")
            for kind in ("table", "index"):  # indexes before rows: a garbled duplicate is ignored, not fatal
                for _, _, sql in (entry for entry in schema if entry[0] == kind):
                    with contextlib.suppress(sqlite3.Error):
                        dst.execute(sql)
            tables = [row[0] for row in dst.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            for table in tables:
                if not table.startswith("sqlite_"):
                    _copy_table(src, dst, table, recovery)
            if recovery.damaged_stretches:
                _copy_unreachable(damaged, dst, recovery)
            dst.execute(f"PRAGMA user_version = {version}")
            dst.execute("COMMIT")
        finally:
            dst.close()
        os.replace(part, target)
    finally:
        src.close()
        part.unlink(missing_ok=True)
        recovery.seconds = time.monotonic() - started
    return recovery
