"""Places in the queue limits: a waiting job takes one per training process, and an active TPE sweep's trials not
queued yet take their base spec's each; the store's submit and the sweeps' submit count them the same way here."""

from __future__ import annotations

import sqlite3

from backend.core.spec import SpecError
from backend.jobs.records import PLACES_SQL


def reserved_trials(con: sqlite3.Connection, owner: str | None = None) -> tuple[int, int]:
    """(trials, the places they take) that active TPE sweeps (of ``owner``, or everyone's) hold for the trials they
    have not queued yet: a TPE sweep reserves all its trials at submit, and each child it queues turns one reservation
    into a queued job. Each trial takes its base spec's training processes (``PLACES_SQL``). Counted with the waiting
    jobs wherever a queue limit is checked (``store.queued_places``)."""
    left = "MAX(s.trials - (SELECT COUNT(*) FROM sweep_children c WHERE c.sweep_id = s.id), 0)"
    query = (
        f"SELECT COALESCE(SUM({left}), 0), COALESCE(SUM({left} * ({PLACES_SQL})), 0) "
        "FROM sweeps s WHERE s.search = 'tpe' AND s.active = 1 AND s.cancelled = 0"
    )
    args: tuple[str, ...] = () if owner is None else (owner,)
    trials, places = con.execute(query + ("" if owner is None else " AND s.owner = ?"), args).fetchone()
    return int(trials), int(places)


def queued_places(con: sqlite3.Connection, owner: str | None = None) -> tuple[int, int]:
    """(waiting jobs, the places they take) for ``owner``, or everyone: a job of N training processes takes N places
    in the queue limits, as it takes N processes of the machine once it runs; an active TPE sweep's trials not queued
    yet count as waiting jobs of its base spec's processes."""
    query = f"SELECT COUNT(*), COALESCE(SUM({PLACES_SQL}), 0) FROM jobs WHERE status = 'queued'"
    args: tuple[str, ...] = ()
    if owner is not None:
        query, args = query + " AND owner = ?", (owner,)
    jobs, places = con.execute(query, args).fetchone()
    trials, held = reserved_trials(con, owner)  # a TPE sweep's trials not queued yet wait too, each its processes
    return int(jobs) + trials, int(places) + held


def refuse_sweep_over_limits(
    con: sqlite3.Connection,
    owner: str,
    count: int,
    per_owner: int | None,
    total: int | None,
    tpe: bool,
    places: int | None = None,
) -> None:
    """Refuse (SpecError, nothing stored) a sweep whose ``count`` children (a TPE sweep's: its trials, each holding
    its place until it is queued) the limits cannot take: they take ``places`` places (one per training process;
    ``count`` when not given), and so do the jobs already waiting and other TPE sweeps' trials not queued yet."""
    places = count if places is None else places
    if tpe:
        takes = f"this TPE sweep holds a place for each of its {count} trials"
        if places != count:
            takes = f"this TPE sweep holds places for its {count} trials ({places}: one per training process)"
    else:
        takes = f"this sweep queues {count} job(s)"
        if places != count:
            takes += f" taking {places} places (one per process)"
    fewer = "ask for fewer trials" if tpe else "vary fewer values"
    if per_owner is not None:
        jobs, taken = queued_places(con, owner)
        if taken + places > per_owner:
            held = f"{taken} waiting" if taken == jobs else f"{jobs} job(s) waiting that take {taken} places"
            raise SpecError(
                [
                    f"{takes} and you already have {held}; the limit per user is {per_owner}: {fewer}, or wait "
                    "for some jobs to start"
                ]
            )
    if total is not None:
        jobs, taken = queued_places(con)
        if taken + places > total:
            held = f"{taken} are waiting" if taken == jobs else f"the {jobs} waiting job(s) take {taken} places"
            raise SpecError(
                [
                    f"{takes} and {held}, the most this Space holds is {total} (STUDIO_MAX_QUEUED_TOTAL): {fewer}, "
                    "or try again once some have started"
                ]
            )
