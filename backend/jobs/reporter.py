"""What a running job may do to the store: the JobReporter protocol, and the NullReporter of secondary DDP ranks.

A worker, its training callback and auto-tune see the store only through these six methods. The SQLite
:class:`~backend.jobs.store.JobStore` is the reporter of rank 0; ranks other than 0 (``accelerate launch``) get a
:class:`NullReporter`, which reads the job like rank 0 and writes nothing.
tests/unit/jobs/test_reporter_contract.py runs the same contract against both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from backend.core.artifacts import artifact_update
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store import JobStore

MetricRow = tuple[int | None, float, dict[str, Any]]  # (step, timestamp, values)
SampleRow = tuple[int | None, dict[str, Any]]  # (step, one sampled completion with its rewards)


@runtime_checkable
class JobReporter(Protocol):
    """The store as a running job sees it: read the job and its cancel flag, report, record artifacts, finish."""

    def get(self, job_id: str) -> JobRecord:
        """The job as stored (JobNotFound when there is none)."""

    def cancel_requested(self, job_id: str) -> bool:
        """Whether someone asked the running job to stop."""

    def report(
        self, job_id: str, rows: Sequence[MetricRow], progress: dict[str, Any] | None, samples: Sequence[SampleRow] = ()
    ) -> None:
        """Append metric rows and samples and replace the progress, in one transaction."""

    def forget_reports_after(self, job_id: str, step: int) -> None:
        """Drop the metrics and samples logged after ``step`` (a resumed attempt logs them again)."""

    def merge_artifacts(self, job_id: str, update: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        """Record some artifacts (JobArtifacts fields), leaving the others as they are; a key that is not a
        field raises UnknownArtifact."""

    def finish(
        self, job_id: str, status: JobStatus, error: str | None = None, artifacts: Mapping[str, Any] | None = None
    ) -> bool:
        """Move the running job to a final status (with artifacts, in the same transaction); False when it was
        no longer running and nothing was written."""


class NullReporter:
    """The reporter of DDP ranks other than 0: reads the job from the store, writes nothing (rank 0 reports
    metrics, artifacts and the final status). Updates are still checked, so a misspelled artifact fails here too."""

    def __init__(self, store: JobStore):
        self._store = store

    def get(self, job_id: str) -> JobRecord:
        """The job as stored: every rank trains the same spec."""
        return self._store.get(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        """The store's cancel flag: every rank stops at the same step."""
        return self._store.cancel_requested(job_id)

    def report(
        self, job_id: str, rows: Sequence[MetricRow], progress: dict[str, Any] | None, samples: Sequence[SampleRow] = ()
    ) -> None:
        """Nothing: rank 0 reports."""

    def forget_reports_after(self, job_id: str, step: int) -> None:
        """Nothing: rank 0 forgets."""

    def merge_artifacts(self, job_id: str, update: Mapping[str, Any] | None = None, /, **fields: Any) -> None:
        """Nothing, once the update is known to be a valid one."""
        artifact_update({**(update or {}), **fields})

    def finish(
        self, job_id: str, status: JobStatus, error: str | None = None, artifacts: Mapping[str, Any] | None = None
    ) -> bool:
        """False (nothing written), once the status and artifacts are known to be valid ones: rank 0 finishes."""
        if not status.finished:
            raise ValueError(f"{status.value} is not a final status")
        artifact_update(artifacts or {})
        return False
