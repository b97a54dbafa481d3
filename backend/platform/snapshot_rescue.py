"""A damaged snapshot of the store: set aside under a name of its own before anything is written over it, its
rows recovered into a new store, and a note beside it that the header and ``python -m backend status`` read.

The set-aside file is never overwritten, copied or deleted by the studio (the mirror skips its name): a person
deletes it once they no longer need it, and the notice goes with it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from pathlib import Path

from backend.platform.sqlite_recovery import recover_database

log = logging.getLogger(__name__)

DAMAGED_INFIX = ".damaged-"  # studio.sqlite3.damaged-20261205T054000Z
NOTE_SUFFIX = ".txt"  # the sentence about it, beside it


def is_set_aside(name: str, db_name: str) -> bool:
    """Whether ``name`` (a file in the data dir) is a set-aside snapshot of ``db_name`` or its note.

    >>> is_set_aside("studio.sqlite3.damaged-20261205T054000Z", "studio.sqlite3"), is_set_aside("x", "studio.sqlite3")
    (True, False)
    """
    return name.startswith(db_name + DAMAGED_INFIX)


def set_aside(snapshot: Path) -> Path:
    """Rename ``snapshot`` to ``<name>.damaged-<UTC time>`` beside it (a new name, never one that exists)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = snapshot.with_name(f"{snapshot.name}{DAMAGED_INFIX}{stamp}")
    serial = 1
    while target.exists() or target.with_name(target.name + NOTE_SUFFIX).exists():
        serial += 1
        target = snapshot.with_name(f"{snapshot.name}{DAMAGED_INFIX}{stamp}-{serial}")
    os.replace(snapshot, target)
    return target


def rescue_snapshot(
    snapshot: Path, problem: str, live_db: Path | None, what: str = "The store's snapshot was damaged"
) -> str:
    """Set the damaged ``snapshot`` aside, then (when ``live_db`` is given: the live side has no store, or it is the
    snapshot's own path) recover its rows into ``live_db``. Returns the sentence for the header and the status, also
    kept in a note beside the file and logged; ``what`` opens it."""
    aside = set_aside(snapshot)
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    kept = f"{what} ({problem}) when the studio started at {when}: it is kept as {aside}"
    if live_db is None:
        sentence = f"{kept}, and the studio goes on with the store on local disk, which is older."
    else:
        recovery = recover_database(aside, live_db)
        if recovery.error:
            sentence = f"{kept}; nothing could be recovered from it ({recovery.error}), so the store starts empty."
        else:
            jobs, metrics = recovery.rows.get("jobs", 0), recovery.rows.get("metrics", 0)
            lost = " (jobs on its damaged pages are missing)" if recovery.damaged_stretches else ""
            sentence = f"{kept}; {jobs} jobs and {metrics} metric rows were recovered from it{lost}."
        log.warning(
            "storage: recovered %s from %s in %.2f s (%d damaged stretches)",
            recovery.rows,
            aside,
            recovery.seconds,
            recovery.damaged_stretches,
        )
    sentence += " Delete that file once you no longer need it, and this notice goes."
    with contextlib.suppress(OSError):  # the sentence is said now anyway; the note makes it last
        note = aside.with_name(aside.name + NOTE_SUFFIX)
        part = note.with_name(f".{note.name}.part-{os.getpid()}")
        part.write_text(sentence + "\n", encoding="utf-8")
        os.replace(part, note)
    log.warning("storage: %s", sentence)
    return sentence


def set_aside_notes(durable: Path, db_name: str) -> list[str]:
    """The sentence of each damaged snapshot still set aside in ``durable``, oldest first."""
    notes = []
    with contextlib.suppress(OSError):
        for aside in sorted(durable.glob(f"{db_name}{DAMAGED_INFIX}*")):
            if aside.name.endswith(NOTE_SUFFIX):
                continue
            note = aside.with_name(aside.name + NOTE_SUFFIX)
            try:
                notes.append(note.read_text(encoding="utf-8").strip())
            except OSError:
                notes.append(
                    f"A damaged snapshot of the store is kept as {aside}; delete it once you no longer need it."
                )
    return notes
