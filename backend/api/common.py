"""What the facade's parts share: its answers (``Submitted``, ``WarmUp``, ``MetricsPage``), its limits and the check
that a number from a browser is whole and in range."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from backend.core.spec import SpecError
from backend.core.users import User
from backend.jobs.records import JobRecord

SQLITE_MAX_INT = 2**63 - 1


# Space-wide limits (settings of the same names, STUDIO_...): see the README's security section.
DEFAULT_MAX_QUEUED_TOTAL = 30


def whole_number(value: Any, what: str, low: int, high: int, optional: bool = False) -> int | None:
    """``value`` when it is a whole number in ``low..high`` (or None where ``optional``); else SpecError with a
    sentence: a number from a browser or a script reaches the store, a file or a loop only in range."""
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "\u2026"
        raise SpecError([f"{what} must be a whole number from {low:,} to {high:,}, not {shown}"])
    return value


def name_of(user: User | None) -> str:
    """The name a caller's jobs and files go under: no user (the CLI, tests) is "local", as JobSpec.owner defaults."""
    return user.name if user is not None else "local"


@dataclass(frozen=True)
class MetricsPage:
    """Metric rows logged after a cursor, and the cursor to ask with next time (unchanged when none are new)."""

    rows: list[dict[str, Any]]
    cursor: int


@dataclass(frozen=True)
class Submitted:
    """A job just queued: its row, its place in the queue, warnings worth reading before it runs, and how many
    workers were free when it was queued (None: not known), so that "starting now" is said only when it is.
    ``repeated``: nothing new was queued, this is the job the same user queued with the same spec a moment ago."""

    job: JobRecord
    queue_position: int | None
    warnings: list[str] = field(default_factory=list)
    free_workers: int | None = None
    repeated: bool = False


@dataclass(frozen=True)
class WarmUp:
    """A tool-use warm-up: the demonstrations written (summary, upload id), the SFT job and the GRPO job after it."""

    demonstrations: str
    upload_id: str
    sft: Submitted
    grpo: Submitted


SchedulerMode = Literal["thread", "detached", "none"]
