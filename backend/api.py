"""The backend facade: the one object the UI and the CLI talk to (submit, list, show, cancel, resume, metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from backend.paths import DataPaths
from backend.preflight import check_spec, resolve_parent
from backend.failures import tail_lines
from backend.scheduler import Scheduler, spawn_detached
from backend.spec import JobSpec, RewardSpec, parse_spec
from backend.store import JobRecord, JobStatus, JobStore

if TYPE_CHECKING:
    from backend.environments.episodes import Episode
    from backend.preview import DatasetPreview


@dataclass(frozen=True)
class Submitted:
    job: JobRecord
    queue_position: int | None
    warnings: list[str] = field(default_factory=list)


SchedulerMode = Literal["thread", "detached", "none"]


class StudioAPI:
    """The facade over the store and a scheduler.

    ``scheduler`` says who runs the queue: ``"thread"`` runs one inside this process (the app), ``"detached"``
    starts a background scheduler process when none is running (the CLI and scripts), ``"none"`` leaves it to
    someone else (tests that start their own).
    """

    def __init__(
        self, data_dir: Path | str | None = None, scheduler: SchedulerMode = "detached", **scheduler_kwargs: Any
    ):
        self.paths = DataPaths(data_dir).ensure()
        self.store = JobStore(self.paths.db)
        self.mode = scheduler
        self.scheduler: Scheduler | None = None
        if scheduler == "thread":
            self.scheduler = Scheduler(self.paths, **scheduler_kwargs).start()

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.stop()

    # --- jobs ----------------------------------------------------------------------------------------
    def _prepare(self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None) -> JobSpec:
        if not isinstance(spec, JobSpec):
            spec = parse_spec(spec)
        if owner is not None and owner != spec.owner:
            spec = spec.model_copy(update={"owner": owner})
        return resolve_parent(spec, self.store)

    def submit(self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None) -> Submitted:
        """Validate, pre-flight and queue a job. Raises SpecError (nothing is queued) when it cannot run."""
        spec = self._prepare(spec, owner)
        warnings = check_spec(spec, self.paths.models)
        job = self.store.add(spec)
        if warnings:
            self.store.merge_artifacts(job.id, {"preflight_warnings": warnings})
        self._kick()
        return Submitted(job, self.store.queue_position(job.id), warnings)

    def _kick(self) -> None:
        """Make sure some scheduler will pick the queue up."""
        if self.scheduler is not None:
            self.scheduler.notify()
        elif self.mode == "detached" and not Scheduler.is_running(self.paths):
            spawn_detached(self.paths)

    def preview(self, spec: JobSpec | dict[str, Any] | str, rows: int = 3) -> "DatasetPreview":
        """The first rows of the job's data rendered exactly as its trainer will see them, with token counts."""
        from backend.preview import preview_dataset
        from backend.training.models import load_tokenizer, resolve_model

        spec = self._prepare(spec)
        tokenizer = load_tokenizer(resolve_model(spec.model, self.paths.models), spec.model)
        return preview_dataset(spec, tokenizer, rows)

    def score_rewards(
        self, rewards: list[RewardSpec | dict[str, Any]], completions: list[str], row: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        """The reward test bench: each reward's score for completions a user typed, before any training."""
        from backend.rewards import score_completions

        specs = [r if isinstance(r, RewardSpec) else RewardSpec.model_validate(r) for r in rewards]
        return score_completions(specs, completions, row)

    def dry_run(self, spec: JobSpec | dict[str, Any] | str, row: int = 0, seed: int | None = None) -> "Episode":
        """One episode of the job's model (base, or its parent job's adapter) in its environment: the transcript
        (turns, tool calls, tool results) and the reward, before anything is queued."""
        from backend.environments.dryrun import dry_run

        spec = self._prepare(spec)
        adapter = None
        if spec.model.parent_job_id:
            adapter = Path(self.store.get(spec.model.parent_job_id).artifacts["adapter_dir"])
        return dry_run(spec, self.paths.models, adapter, row=row, seed=seed)

    def list_jobs(self, owner: str | None = None) -> list[JobRecord]:
        return self.store.list(owner=owner)

    def get_job(self, job_id: str) -> JobRecord:
        return self.store.get(job_id)

    def queue_position(self, job_id: str) -> int | None:
        return self.store.queue_position(job_id)

    def cancel(self, job_id: str) -> JobStatus:
        """Queued jobs are cancelled at once; running ones are asked to stop (then killed after a grace period)."""
        status = self.store.request_cancel(job_id)
        if status is JobStatus.running:
            self._kick()
        return status

    def resume(self, job_id: str) -> JobRecord:
        """Queue an interrupted job again; it continues from its last checkpoint."""
        job = self.store.requeue_for_resume(job_id)
        self._kick()
        return job

    def metrics(self, job_id: str, after_id: int = 0) -> list[dict[str, Any]]:
        return self.store.metrics(job_id, after_id)

    def log_tail(self, job_id: str, lines: int = 50) -> list[str]:
        return tail_lines(self.paths.job_log(job_id), lines)
