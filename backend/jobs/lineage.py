"""What a run continues from: the parent job a staged spec names (and its adapter), an eval-only job's target, or a
job's own last checkpoint.

The parent rule lives here and only here: a job may continue a parent that is yours (another user's job is "not
found"), that trained an adapter, and that succeeded with it saved (or is still queued or running: the child then
waits in the queue, see ``store.claim_next``). The facade, pre-flight and the worker all ask these functions; each
reads the parent row once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from backend.core.spec import JobSpec, SpecError, quote_input
from backend.core.users import User
from backend.jobs.access import hub_name_problem, may_name_server_paths, readable_job
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.reporter import JobReporter
from backend.jobs.store import JobStore
from backend.jobs.store_errors import JobNotFound, UnreadableJob

FIELD = "model.parent_job_id"


@dataclass(frozen=True)
class Lineage:
    """A spec with its parent resolved: the spec as it will run, and the job it continues (None: a fresh start)."""

    spec: JobSpec
    parent: JobRecord | None

    def adapter(self) -> Path | None:
        """The parent's saved adapter to start from (None for a fresh start); SpecError while it has none."""
        return None if self.parent is None else adapter_to_continue(self.parent)


def parent_job(store: JobStore | JobReporter, spec: JobSpec, user: User | None = None) -> JobRecord | None:
    """The job ``spec`` continues, read once and only if ``user`` may read it (``None``: a trusted caller)."""
    parent_id = spec.model.parent_job_id
    if parent_id is None:
        return None
    try:
        return readable_job(store, parent_id, user)
    except JobNotFound:
        raise SpecError([f"{FIELD}: there is no job {quote_input(parent_id)}"]) from None
    except UnreadableJob as exc:
        raise SpecError([f"{FIELD}: {exc}"]) from None


def saved_adapter(job: JobRecord) -> Path | None:
    """The adapter folder of a job that succeeded and saved one (it is still on disk), else None."""
    adapter = job.artifacts.adapter_dir
    if job.status is JobStatus.succeeded and adapter and Path(adapter).is_dir():
        return Path(adapter)
    return None


def adapter_to_continue(parent: JobRecord) -> Path:
    """``parent``'s saved adapter, or SpecError saying it has none to start from."""
    adapter = saved_adapter(parent)
    if adapter is None:
        raise SpecError([f"{FIELD}: job {parent.id} has no saved adapter to start from"])
    return adapter


def evaluation_target(store: JobStore | JobReporter, spec: JobSpec, user: User | None = None) -> JobRecord | None:
    """The finished job an eval-only spec scores (``evaluate.job_id``), read only if ``user`` may read it, with its
    adapter saved; None when the spec scores a model or trains. Another user's job is "not found", as everywhere."""
    target_id = spec.evaluate.job_id if spec.evaluate is not None else None
    if target_id is None:
        return None
    try:
        target = readable_job(store, target_id, user)
    except (JobNotFound, UnreadableJob):
        raise SpecError([f"evaluate.job_id: there is no job {quote_input(target_id)}"]) from None
    if saved_adapter(target) is None:
        raise SpecError([f"evaluate.job_id: job {target.id} has no saved adapter to evaluate ({target.status.value})"])
    return target


def resolve_lineage(spec: JobSpec, store: JobStore, user: User | None = None) -> Lineage:
    """For a staged job, the spec with the parent's base model and LoRA shape (so the stored spec says what really
    runs), and the parent itself; SpecError when the parent cannot be continued (or an eval-only job's target is not
    the user's finished job)."""
    evaluation_target(store, spec, user)
    parent = parent_job(store, spec, user)
    if parent is None:
        return Lineage(spec, None)
    # A queued or running parent is a staged pair: this job waits for it in the queue (store.claim_next).
    staged = parent.status in (JobStatus.queued, JobStatus.running)
    if not staged:
        if parent.status is not JobStatus.succeeded:
            raise SpecError(
                [
                    f"{FIELD}: job {parent.id} is {parent.status.value}; only the adapter of a job that "
                    f"succeeded, or is queued or running, can be trained further"
                ]
            )
        adapter_to_continue(parent)
    if not parent.spec.lora.enabled:
        raise SpecError(
            [f"{FIELD}: job {parent.id} trained all weights, not an adapter; start from its output folder instead"]
        )
    model = parent.spec.model.model_copy(update={"parent_job_id": parent.id})
    return Lineage(spec.model_copy(update={"model": model, "lora": parent.spec.lora}), parent)


def resolve_parent(spec: JobSpec, store: JobStore, user: User | None = None) -> JobSpec:
    """:func:`resolve_lineage`'s spec: what a staged job will really run."""
    return resolve_lineage(spec, store, user).spec


def starting_adapter(store: JobReporter, spec: JobSpec) -> Path | None:
    """The adapter a stored job starts from (the worker's question, on any rank): None for a fresh start."""
    return Lineage(spec, parent_job(store, spec)).adapter()


# --- a method's setting that names a finished job (distillation's teacher) -----------------------------------------
# What backend/jobs/records.py's new_job_id makes: 20261205-154336-934a11.
JOB_ID = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")


def named_jobs(
    spec: JobSpec, store: JobStore | JobReporter, user: User | None = None
) -> tuple[JobSpec, list[tuple[str, JobRecord]]]:
    """The spec with each of its method part's ``job_fields`` that holds a job id turned into that job's adapter
    folder (what the trainer and pre-flight load), and (spec path, job) for each. The stored spec keeps the id: a
    folder on the server is not the user's to name, so a clone of the job submitted again would be refused.

    The job must be one ``user`` may read (another user's is "not found") that succeeded with its adapter saved; a
    name that is not a job id is a model, and a folder on the server only for those who may name one."""
    part = spec.method_part
    found: list[tuple[str, JobRecord]] = []
    updates = {}
    for name in getattr(part, "job_fields", ()):
        path, value = f"{spec.method.value}.{name}", getattr(part, name).strip()
        if not JOB_ID.fullmatch(value):
            problem = None
            if value and not may_name_server_paths(user) and not value.startswith("builtin:"):
                problem = hub_name_problem(path, value, "model", "name a job of yours, a Hub id or a built-in model")
            if problem:
                raise SpecError([problem])
            continue
        try:
            job = readable_job(store, value, user)
        except (JobNotFound, UnreadableJob):
            raise SpecError([f"{path}: there is no job {quote_input(value)}"]) from None
        adapter = saved_adapter(job)
        if adapter is None:
            raise SpecError(
                [f"{path}: job {job.id} is {job.status.value}; only a job that succeeded can be named here"]
                if job.status is not JobStatus.succeeded
                else [f"{path}: job {job.id} has no saved adapter"]
            )
        updates[name] = str(adapter)
        found.append((path, job))
    if not updates:
        return spec, found
    return spec.model_copy(update={spec.method.value: part.model_copy(update=updates)}), found


def runnable_spec(store: JobStore | JobReporter, spec: JobSpec) -> JobSpec:
    """The spec as it runs: :func:`named_jobs`' folders in place of the job ids it names, read from the store now
    (the jobs were checked for their owner at submit)."""
    return named_jobs(spec, store)[0]


# --- a job's own earlier attempt ------------------------------------------------------------------------------------


def checkpoint_step(checkpoint: Path) -> int:
    """N of a ``checkpoint-N`` folder: the global step training continues from."""
    return int(checkpoint.name.rsplit("-", 1)[-1])


def numbered_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder of ``output_dir`` with its N, complete or not."""
    return [
        (checkpoint_step(child), child)
        for child in output_dir.glob("checkpoint-*")
        if child.name.rsplit("-", 1)[-1].isdigit()
    ]


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder, or None."""
    candidates = [
        (step, child) for step, child in numbered_checkpoints(output_dir) if (child / "trainer_state.json").is_file()
    ]
    return max(candidates)[1] if candidates else None
