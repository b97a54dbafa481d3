"""The facade's jobs: submit and check, list and read, cancel and resume, metrics, logs, samples and the adapter zip."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from backend.api.common import SQLITE_MAX_INT, MetricsPage, Submitted, whole_number
from backend.api.core import StudioCore, hub_token
from backend.api.guards import ENVIRONMENT_CHECKS, build
from backend.core.hub_names import BUILTIN_PREFIX
from backend.core.spec import JobSpec, SpecError, load_spec_text
from backend.core.users import User
from backend.hub.checkpoints import hub_token_warnings, wants_hub_token
from backend.jobs.access import may_name_server_paths, readable_job, server_paths_hidden
from backend.jobs.failures import tail_lines
from backend.jobs.lineage import last_checkpoint
from backend.jobs.records import RESUMABLE_STATUSES, JobRecord, JobStatus, storable_spec_json
from backend.jobs.scheduler import default_max_concurrent
from backend.jobs.store_errors import InvalidTransition, JobNotFound
from backend.platform.hardware import detect_device
from backend.platform.once import OnceWithin
from backend.platform.space_runtime import ZERO_GPU_REFUSAL, on_zero_gpu
from backend.training.named_jobs import NamedJobs
from backend.training.prepared import PreparedJob
from backend.training.process_limit import process_ceiling_problems
from backend.training.reward_checks import flat_group_warnings

# A user's second submit of the same spec within this many seconds of the first's answer (a double click, a retried
# request) is answered with the first job, and nothing new is queued.
SUBMIT_ONCE_WINDOW_S = 10.0
MAX_FORECAST_PROMPTS = 256  # forecast.prompts' own bound


def submission_key(spec: JobSpec) -> tuple[str, str]:
    """What makes two submits the same: the owner and the digest of the spec's canonical JSON (sorted keys). Raises
    SpecError, as the store would, for a spec that cannot be stored."""
    canonical = json.dumps(json.loads(storable_spec_json(spec)), sort_keys=True, separators=(",", ":"))
    return spec.owner, hashlib.sha256(canonical.encode()).hexdigest()


def _being_queued() -> Submitted:
    """The answer to a repeat that comes while the first submit of the same spec is still checked: a sentence, at
    once. (Waiting for the first would hold one of the server's slots, which another user's request needs: issue 47's
    rule that nothing one user does makes another wait.)"""
    raise SpecError(
        [
            "spec: the same job is being checked and queued from your submit a moment ago; its answer comes there, "
            "and nothing is queued twice"
        ]
    )


def refuse_processes(spec: JobSpec, user: User | None) -> None:
    """SpecError (a sentence naming training.num_processes) when the job would start more processes than this machine
    has cores for (no GPU) or this Space lets ``user`` start: asked before anything slow, so nothing starts."""
    if problems := process_ceiling_problems(spec, user):
        raise SpecError(problems)


def _token_warnings(spec: JobSpec, user: User | None) -> list[str]:
    """Pre-flight's word on a job that needs the Hub without a token: the signed-in user's, else (no user: the CLI,
    a script) the HF_TOKEN this process hands its workers."""
    token = user.token if user is not None else os.environ.get("HF_TOKEN")
    return hub_token_warnings(spec, token)


class JobOperations:
    """Jobs (``api.jobs``): queue, read and stop them, over the facade's core; it owns the limit on remote
    environments' pre-flights."""

    def __init__(self, core: StudioCore) -> None:
        self.core = core
        # A remote environment's pre-flight talks to a stranger's server: a few at once per user and on the Space,
        # so slow servers hold only a few of Gradio's submit slots and never anyone else's.
        self._environment_checks = build(ENVIRONMENT_CHECKS)
        # In memory, not in the store: the window is seconds, one process serves the UI and the API, and a restart
        # forgets only what would have expired anyway; no column to migrate, and a repeat is answered before any
        # pre-flight work. An identical submit that arrives while the first is checked is refused at once
        # (``_being_queued``).
        self.once: OnceWithin[Submitted] = OnceWithin(SUBMIT_ONCE_WINDOW_S)

    def submit(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> Submitted:
        """Validate, pre-flight and queue a job. Raises SpecError (nothing is queued) when it cannot run.

        With ``user`` the job is theirs, a parent job must be theirs too, and their queued jobs are capped
        (QuotaExceeded, unless they are an admin). A user's second submit of the same spec within
        ``SUBMIT_ONCE_WINDOW_S`` of the first, while that job is still queued or running, queues nothing: the answer
        is the first job's, ``repeated``. A trusted caller (``user=None``: the CLI, a script) queues what it asks.
        """
        if on_zero_gpu():
            raise SpecError([f"spec: {ZERO_GPU_REFUSAL}"])
        if user is not None:
            owner = user.name
        named = self.core.named(spec, owner, user)
        refuse_processes(named.spec, user)
        if user is None:
            return self._queue(named, user)
        key = submission_key(named.spec)
        return self.once.run(key, lambda: self._queue(named, user), self._still_queued, _being_queued)[0]

    def forecast(
        self, spec: JobSpec | dict[str, Any] | str, prompts: int | None = None, user: User | None = None
    ) -> Submitted:
        """Queue the job's learnability forecast alone (a forecast-only job: the starting model plays ``prompts``
        prompts, ``forecast.prompts`` by default, through the job's own rollout in a worker, and nothing is
        trained); its ``forecast`` artifact is the answer. Raises SpecError, as submit does, for a job that cannot
        run or is not a rollout job (GRPO, RLOO)."""
        if isinstance(spec, JobSpec):
            data = spec.model_dump(mode="json")
        else:
            data = dict(load_spec_text(spec) if isinstance(spec, str) else spec)
        count = whole_number(prompts, "forecast.prompts", 1, MAX_FORECAST_PROMPTS, optional=True)
        given = data.get("forecast")
        data["forecast"] = {
            **(given if isinstance(given, dict) else {}),
            "only": True,
            "train_anyway": False,
            **({"prompts": count} if count is not None else {}),
        }
        return self.submit(data, user=user)

    def train_anyway(self, job_id: str, user: User | None = None) -> Submitted:
        """Queue again a job its forecast stopped (or forecast alone), to train this time whatever the forecast
        says (``forecast.train_anyway``). Raises JobNotFound for a job that is not ``user``'s, SpecError for a job
        with no forecast to override."""
        job = readable_job(self.core.store, job_id, user)
        if job.artifacts.forecast is None:
            raise SpecError([f"forecast: job {job_id} made no forecast, so there is nothing to train anyway"])
        data = job.spec.model_dump(mode="json")
        data["forecast"] = {**data["forecast"], "only": False, "train_anyway": True}
        return self.submit(data, user=user)

    def suggested_spec(self, job_id: str, user: User | None = None) -> tuple[JobSpec, str]:
        """The job's spec with its forecast's suggested change made (a forecast-only job's: the job it forecast),
        and the change in words; a change that is a step (warm up first) changes no field and says so. Raises
        JobNotFound for a job that is not ``user``'s, SpecError for a job whose forecast suggests nothing."""
        job = readable_job(self.core.store, job_id, user)
        forecast = job.artifacts.forecast
        if forecast is None or forecast.change is None:
            raise SpecError([f"forecast: job {job_id} has no suggested change"])
        data = job.spec.model_dump(mode="json")
        data["forecast"] = {**data["forecast"], "only": False, "train_anyway": False}
        change = forecast.change
        if change.path is not None and change.value is not None:
            head, _, leaf = change.path.rpartition(".")
            part = data
            for key in head.split(".") if head else []:
                part = part[key]
            part[leaf] = change.value
        return JobSpec.from_dict(data), change.says()

    def _still_queued(self, first: Submitted) -> Submitted | None:
        """A repeat's answer: the first job as it stands now, or None once it has ended (cancelled, failed, done),
        when the same spec may be queued again at once."""
        try:
            job = self.core.store.get(first.job.id)
        except JobNotFound:
            return None
        if job.status not in (JobStatus.queued, JobStatus.running):
            return None
        return dataclasses.replace(first, job=job, queue_position=self.core.store.queue_position(job.id), repeated=True)

    def _queue(self, named: NamedJobs, user: User | None) -> Submitted:
        """Prepare the job (its pre-flight, backend/training/prepared.py) and queue it."""
        spec = named.spec
        queue_limit, total_limit = self.core.queue_limits(user)
        if queue_limit is not None:  # answered before the slow pre-flight; a job of N processes takes N places
            self.core.store.check_queue_room(spec.owner, queue_limit, total_limit, spec.training.num_processes)
        with self.environment_check(spec, user), self.core.prepared(named, hub_token(user)) as prepared:
            warnings = [*prepared.warnings, *_token_warnings(spec, user), *self._reward_model_warnings(prepared, user)]
        free = self._free_workers()  # counted before adding: the scheduler may start this job at once
        job = self.core.store.add(spec, max_queued_for_owner=queue_limit, max_queued_total=total_limit)
        if wants_hub_token(spec) and user is not None and user.token:
            self.core.tokens[job.id] = user.token
        if warnings:
            self.core.store.merge_artifacts(job.id, preflight_warnings=warnings)
        self.core.kick()
        return Submitted(job, self.core.store.queue_position(job.id), warnings, free)

    def _reward_model_warnings(self, prepared: PreparedJob, user: User | None) -> list[str]:
        """Pre-flight's word on each reward model the rewards name whose scores barely vary within a group: in a
        child with limits (``training.reward_checks``), counted in the limits on such checks while it runs."""
        sources, spec = prepared.named.rewards, prepared.stored
        if not sources:
            return []
        with self.core.model_check(user):
            return flat_group_warnings(
                spec, sources, self.core.paths.models, self.core.uploads_of(spec), hub_token(user)
            )

    def _free_workers(self) -> int:
        """How many more jobs could start now: the scheduler's slots less the jobs running."""
        slots = self.core.scheduler.max_concurrent if self.core.scheduler is not None else default_max_concurrent()
        return max(0, slots - len(self.core.store.list(statuses=[JobStatus.running])))

    def check(self, spec: JobSpec | dict[str, Any] | str, user: User | None = None) -> tuple[list[str], str]:
        """Pre-flight without queueing: (warnings, the memory estimate and auto-tune's choices for this machine, as
        text). Raises SpecError like submit would."""
        named = self.core.named(spec, user=user)
        spec = named.spec
        refuse_processes(spec, user)
        with self.environment_check(spec, user), self.core.prepared(named, hub_token(user)) as prepared:
            warnings = [*prepared.warnings, *self._reward_model_warnings(prepared, user)]
        warnings += _token_warnings(spec, user)
        tuning = prepared.tuning
        assert tuning is not None  # a pre-flight always plans
        estimate = tuning.estimate
        text = f"Estimated peak memory on {detect_device().describe()}: {estimate.describe()}"
        if estimate.advice:
            text += "\nTo need less: " + "; ".join(estimate.advice)
        return warnings, text + "\nAuto-tune on this machine:\n" + tuning.describe()

    @contextmanager
    def environment_check(self, spec: JobSpec, user: User | None) -> Iterator[None]:
        """Count a remote environment's pre-flight in the per-user and Space-wide limits while it runs (Busy, a
        sentence, when either is reached); a trusted caller or a job without a remote environment counts nothing."""
        name = spec.environment.name or ""
        if user is None or not name or name.startswith(BUILTIN_PREFIX):
            yield
            return
        release = self._environment_checks.hold(user.name)
        try:
            yield
        finally:
            release()

    def list_jobs(self, owner: str | None = None, user: User | None = None) -> list[JobRecord]:
        """Jobs, oldest first; a non-admin ``user`` gets only their own."""
        if user is not None and not user.is_admin:
            owner = user.name
        return [self._as_shown(job, user) for job in self.core.store.list(owner=owner)]

    def _as_shown(self, job: JobRecord, user: User | None) -> JobRecord:
        """``job`` as ``user`` may read it: its error names jobs by id and no folder of this machine, unless they may
        name such folders themselves (the person at this machine, a trusted caller)."""
        outcome = job.artifacts.export
        if (not job.error and outcome is None) or may_name_server_paths(user):
            return job
        root = self.core.paths.root
        if outcome is not None:  # an export's sentence names where it wrote
            said = {"sentence": server_paths_hidden(outcome.sentence, root)}
            if outcome.push_error:
                said["push_error"] = server_paths_hidden(outcome.push_error, root)
            artifacts = job.artifacts.model_copy(update={"export": outcome.model_copy(update=said)})
            job = dataclasses.replace(job, artifacts=artifacts)
        return dataclasses.replace(job, error=server_paths_hidden(job.error, root) if job.error else job.error)

    def unreadable_jobs(self, user: User | None = None) -> list[tuple[str, str]]:
        """(job id, reason) of the rows ``list_jobs`` leaves out because they cannot be read, for a notice."""
        owner = user.name if user is not None and not user.is_admin else None
        return self.core.store.unreadable_rows(owner=owner)

    def get_job(self, job_id: str, user: User | None = None) -> JobRecord:
        """One job; another user's job is reported as not found (its existence is not theirs to know)."""
        return self._as_shown(readable_job(self.core.store, job_id, user), user)

    def queue_position(self, job_id: str) -> int | None:
        """A job's place in the queue (1: next to start), or None when it is not queued."""
        return self.core.store.queue_position(job_id)

    def cancel(self, job_id: str, user: User | None = None) -> JobStatus:
        """Queued jobs are cancelled at once; running ones are asked to stop (then killed after a grace period)."""
        self.get_job(job_id, user)
        status = self.core.store.request_cancel(job_id)
        if status is JobStatus.running:
            self.core.kick()
        return status

    def resume_refusal(self, job: JobRecord) -> str | None:
        """Why ``job`` cannot be resumed, as a sentence for the UI; None when it can.

        Interrupted, cancelled and failed jobs resume from their last ``checkpoint-N`` folder. An interrupted job
        without one may start again from the beginning (as before); a cancelled or failed one needs a checkpoint.
        """
        if job.status not in RESUMABLE_STATUSES:
            if job.status is JobStatus.succeeded:
                return "This job finished; clone it to train again."
            return f"This job is {job.status.value}; only an interrupted, cancelled or failed job can be resumed."
        if job.status is JobStatus.interrupted or last_checkpoint(self.core.paths.job_output(job.id)) is not None:
            return None
        return (
            f"This job is {job.status.value} and saved no checkpoint before it stopped, so there is nothing to "
            "resume from; clone it to start again (a smaller training.save_steps saves checkpoints sooner)."
        )

    def resumable(self, job: JobRecord) -> bool:
        """Whether ``job`` can be resumed now (the Jobs tab enables its Resume button from this)."""
        return self.resume_refusal(job) is None

    def resume(self, job_id: str, user: User | None = None) -> JobRecord:
        """Queue an interrupted, cancelled or failed job again; it continues from its last checkpoint.

        Raises InvalidTransition with ``resume_refusal``'s sentence when it cannot, SpecError when it would start
        more processes than this machine or Space allows now.
        """
        job = self.get_job(job_id, user)
        refusal = self.resume_refusal(job)
        if refusal is not None:
            raise InvalidTransition(refusal)
        refuse_processes(job.spec, user)  # a job stored before the ceiling, or under a higher one, starts no more
        job = self.core.store.requeue_for_resume(job_id)
        self.core.kick()
        return job

    def trackio_dashboard(self, job_id: str, user: User | None = None) -> str | None:
        """For a job that logs to trackio (``output.trackio``), the command that opens trackio's dashboard of its
        owner's runs (the Jobs tab shows it); None for a job without trackio."""
        from backend.platform.tracking import dashboard_command

        job = self.get_job(job_id, user)
        return dashboard_command(self.core.paths, job.owner) if job.spec.output.trackio else None

    def metrics(self, job_id: str, after_id: int = 0, user: User | None = None) -> list[dict[str, Any]]:
        """A job's logged metrics rows, those after ``after_id`` only (to poll without re-reading)."""
        whole_number(after_id, "the metrics cursor", 0, SQLITE_MAX_INT)
        self.get_job(job_id, user)
        return self.core.store.metrics(job_id, after_id)

    def metrics_since(self, job_id: str, cursor: int = 0, user: User | None = None) -> MetricsPage:
        """Incremental metrics: the rows logged after ``cursor`` and the cursor for the next call (a live view
        keeps the rows it has and asks only for new ones)."""
        whole_number(cursor, "the metrics cursor", 0, SQLITE_MAX_INT)
        rows = self.metrics(job_id, cursor, user)
        return MetricsPage(rows, rows[-1]["id"] if rows else cursor)

    def finished_jobs(self, user: User | None = None, generates: bool | None = None) -> list[JobRecord]:
        """The user's succeeded jobs that kept an adapter, newest first: what a chat or a next stage can start from.
        With ``generates``, only the jobs whose model writes text (True: a chat's) or only those that score (False: a
        reward model's)."""
        from backend.methods.table import support

        return [
            job
            for job in reversed(self.list_jobs(user=user))
            if job.status is JobStatus.succeeded
            and job.artifacts.adapter_dir
            and generates in (None, support(job.spec.method).head.generates)
        ]

    def adapter_archive(self, job_id: str, user: User | None = None) -> Path:
        """A succeeded job's adapter as a zip in an unguessable ``downloads/<random>/`` path (the only folder the web
        server may serve); the file appears whole or not at all (written beside it, renamed). The job keeps one
        adapter download: a click again hands out the same zip while it is there and newer than the adapter.

        Raises JobNotFound for a job that is not the user's, ValueError with a sentence when it has no adapter.
        """
        job = self.get_job(job_id, user)
        adapter = job.artifacts.adapter_dir if job.status is JobStatus.succeeded else None
        if not adapter or not Path(adapter).is_dir():
            raise ValueError(f"job {job.id} has no saved adapter to download (only a succeeded job has one)")
        from backend.workflows.archive import kept_download, zip_adapter

        if (kept := kept_download(job, "adapter", Path(adapter))) is not None:
            return kept
        zipped = zip_adapter(self.core.paths, Path(adapter), f"adapter-{job.spec.output.run_name or job.id}.zip")
        old = (self.core.store.get(job.id).artifacts.downloads or {}).get("adapter")
        downloads = {**(self.core.store.get(job.id).artifacts.downloads or {}), "adapter": str(zipped)}
        self.core.store.merge_artifacts(job.id, downloads=downloads)
        if old and Path(old).parent.parent == self.core.paths.downloads and Path(old).parent != zipped.parent:
            shutil.rmtree(Path(old).parent, ignore_errors=True)  # one adapter download per job
        return zipped

    def samples(self, job_id: str, user: User | None = None) -> list[dict[str, Any]]:
        """GRPO's kept completions with their rewards."""
        self.get_job(job_id, user)
        return self.core.store.samples(job_id)

    def log_tail(self, job_id: str, lines: int = 50, user: User | None = None) -> list[str]:
        """The last ``lines`` lines of a job's training log (1 to 10,000)."""
        whole_number(lines, "the number of log lines", 1, 10_000)
        self.get_job(job_id, user)
        tail = tail_lines(self.core.paths.job_log(job_id), lines)
        return tail if may_name_server_paths(user) else [server_paths_hidden(t, self.core.paths.root) for t in tail]
