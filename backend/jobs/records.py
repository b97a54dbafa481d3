"""A job as the store holds it: its status, its record, and how both are written to and read from a row."""

from __future__ import annotations

import json
import math
import re
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any

from pydantic_core import PydanticSerializationError

from backend.core.artifacts import JobArtifacts
from backend.core.spec import JobSpec, SpecError, parse_spec, shorten
from backend.jobs.store_errors import UnreadableJob


class JobStatus(str, Enum):
    """Where a job is in its life: queued, running, or finished as succeeded, failed, cancelled or interrupted."""

    queued = "queued"
    running = "running"
    succeeded = "succeeded"
    failed = "failed"
    cancelled = "cancelled"
    interrupted = "interrupted"

    @property
    def finished(self) -> bool:
        """Whether the job has ended (for good or, when interrupted, until it is resumed)."""
        return self in {JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted}


# Ended jobs that may be queued again to continue from a checkpoint (the facade checks that one exists).
RESUMABLE_STATUSES = frozenset({JobStatus.interrupted, JobStatus.cancelled, JobStatus.failed})
# Artifacts that describe how an attempt ended: a resumed attempt starts without them.
ATTEMPT_END_ARTIFACTS = ("cancelled_at_step", "cancel_note")


def _finite_or_none(value: Any) -> Any:
    """``value`` with every NaN and infinity (a diverged loss) replaced by None, which JSON can carry."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: _finite_or_none(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(item) for item in value]
    return value


def json_text(value: Any) -> str:
    """Strict JSON for a column: any JSON reader loads it back (Python's own NaN extension is never written)."""
    return json.dumps(_finite_or_none(value), allow_nan=False)


def json_object(text: str) -> dict[str, Any] | None:
    """A stored JSON object, or None when the text is not one (a damaged or hand-edited row)."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def storable_spec_json(spec: JobSpec) -> str:
    """The spec as stored, once it is known to read back as the same spec; SpecError (nothing stored) if not."""
    try:
        text = spec.to_json()
    except PydanticSerializationError as exc:
        raise SpecError([f"spec: cannot be written as JSON ({shorten(str(exc), 200)})"]) from None
    if parse_spec(text) != spec:  # parse_spec raises SpecError itself when the text no longer validates
        raise SpecError(["spec: does not read back unchanged from JSON (a value JSON cannot carry); fix the values"])
    return text


@dataclass
class JobRecord:
    """One job's row: its spec, owner, status, timestamps, error, outputs, progress and worker."""

    id: str
    seq: int
    owner: str
    status: JobStatus
    spec: JobSpec
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    error: str | None = None
    artifacts: JobArtifacts = field(default_factory=JobArtifacts)
    progress: dict[str, Any] = field(default_factory=dict)
    pid: int | None = None
    cancel_requested: bool = False
    resume: bool = False
    attempts: int = 0

    @property
    def cancelled_at_step(self) -> int | None:
        """For a cancelled job, the training step it stopped at (None: it was cancelled before training a step).

        A cancel is not an error: ``error`` stays None and the UI says "Cancelled at step N" from this.
        """
        if self.status is not JobStatus.cancelled:
            return None
        step = self.artifacts.cancelled_at_step
        if step is None:
            step = self.progress.get("step")
        return int(step) if step else None

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data for the CLI and the API."""
        return {
            "id": self.id,
            "owner": self.owner,
            "status": self.status.value,
            "method": self.spec.method.value,
            "model": self.spec.model.name_or_path,
            "dataset": self.spec.dataset.name,
            "created_at": self.created_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "error": self.error,
            "cancelled_at_step": self.cancelled_at_step,
            "artifacts": self.artifacts.stored(),
            "progress": self.progress,
            "attempts": self.attempts,
            "spec": self.spec.model_dump(mode="json"),
        }


def new_job_id() -> str:
    """A new job id: the time it was made, then six random hex digits (sorts by creation time)."""
    return time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]


def is_job_id(name: str) -> bool:
    """Whether ``name`` reads as an id :func:`new_job_id` writes (a Hub id has a slash, a path its own shape).

    >>> is_job_id("20261205-154120-3fa9c2"), is_job_id("owner/reward-model")
    (True, False)
    """
    return re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", name) is not None


@lru_cache(maxsize=4096)
def _stored_spec(text: str) -> JobSpec:
    """A stored spec, parsed once per process: the Jobs tab lists every job every 2 s, and validating 200 specs
    each time was most of the request. Safe because specs are frozen models and the key is the exact text."""
    return parse_spec(text)


def job_record(row: sqlite3.Row) -> JobRecord:
    """The row as a JobRecord; UnreadableJob when any part of it cannot be read back."""
    try:
        spec = _stored_spec(row["spec"])
    except SpecError as exc:
        raise UnreadableJob(row["id"], f"its spec is not valid: {exc.problems[0]}") from None
    try:
        status = JobStatus(row["status"])
    except ValueError:
        raise UnreadableJob(row["id"], f"its status {shorten(repr(row['status']), 40)} is unknown") from None
    artifacts, progress = json_object(row["artifacts"]), json_object(row["progress"])
    if artifacts is None or progress is None:
        raise UnreadableJob(row["id"], f"its {'artifacts' if artifacts is None else 'progress'} are not JSON")
    return JobRecord(
        id=row["id"],
        seq=row["seq"],
        owner=row["owner"],
        status=status,
        spec=spec,
        created_at=row["created_at"],
        started_at=row["started_at"],
        finished_at=row["finished_at"],
        error=row["error"],
        artifacts=JobArtifacts.from_stored(artifacts),
        progress=progress,
        pid=row["pid"],
        cancel_requested=bool(row["cancel_requested"]),
        resume=bool(row["resume"]),
        attempts=row["attempts"],
    )


# The places one waiting row takes in the queue limits: its training processes, read from the stored spec (``num_gpus``
# in a spec stored before the rename), between 1 and 64; 1 for a row whose spec is not JSON (it never blocks a count).
# A column ``spec`` of spec JSON: the jobs' rows, and a sweep's base spec for the trials it has yet to queue.
PLACES_SQL = (
    "CASE WHEN json_valid(spec) THEN MIN(64, MAX(1, COALESCE("
    "CAST(json_extract(spec, '$.training.num_processes') AS INTEGER), "
    "CAST(json_extract(spec, '$.training.num_gpus') AS INTEGER), 1))) ELSE 1 END"
)

# Whether a row is an export job (``export`` in its stored spec): exports have their own lane in the scheduler.
EXPORT_SQL = "(json_valid(spec) AND json_extract(spec, '$.export') IS NOT NULL)"


def export_sql(column: str) -> str:
    """``EXPORT_SQL`` over another column name (``q.spec`` in a self-join)."""
    return EXPORT_SQL.replace("spec", column)
