"""How the studio words counts and progress for people: "3 rows" (never "1 rows"), "evaluating: 64 / 256 rows"."""

from __future__ import annotations


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one (``plural`` where adding "s" is wrong).

    >>> counted(1, "row"), counted(3, "row"), counted(0, "episode"), counted(2, "match", "matches")
    ('1 row', '3 rows', '0 episodes', '2 matches')
    >>> counted(12345, "row")
    '12,345 rows'
    """
    return f"{count:,} {noun if count == 1 else (plural or noun + 's')}"


# The progress's phase while the before/after evaluation scores the held-out rows (after the last training step).
EVALUATING = "evaluating"


def progress_text(progress: dict | None, live: bool = True) -> str:
    """A job's progress in a few words, as the table, ``list`` and the CLI's bar say it: the training steps, or,
    while the evaluation runs (``live``: the job is running), the held-out rows scored so far.

    >>> progress_text({"step": 3, "total_steps": 10})
    '3/10'
    >>> progress_text({"step": 10, "total_steps": 10, "phase": "evaluating", "eval_done": 64, "eval_rows": 256})
    'evaluating: 64 / 256 rows (base and tuned)'
    >>> progress_text({"phase": "evaluating", "eval_done": 8, "eval_rows": 256, "eval_unit": "episodes",
    ...                "eval_sides": "tuned, then base"})
    'evaluating: 8 / 256 episodes (tuned, then base)'
    >>> progress_text({"step": 10, "total_steps": 10, "phase": "evaluating"}, live=False)  # a finished job
    '10/10'
    >>> progress_text({})
    ''
    """
    p = progress or {}
    if live and p.get("phase") == EVALUATING:
        sides = p.get("eval_sides") or "base and tuned"
        unit = p.get("eval_unit") or "rows"
        return f"evaluating: {p.get('eval_done', 0)} / {p.get('eval_rows', 0)} {unit} ({sides})"
    return f"{p['step']}/{p['total_steps']}" if p.get("total_steps") else ""
