"""How the studio words counts for people: "1 row", "3 rows" (never "1 rows")."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one (``plural`` where adding "s" is wrong).

    >>> counted(1, "row"), counted(3, "row"), counted(0, "episode"), counted(2, "match", "matches")
    ('1 row', '3 rows', '0 episodes', '2 matches')
    >>> counted(12345, "row")
    '12,345 rows'
    """
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"
