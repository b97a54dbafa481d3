"""The jobs a spec names, each read once under the one ownership rule, and the rule for each: the parent it continues
(``model.parent_job_id``), the finished job an eval-only spec scores (``evaluate.job_id``), a method's settings that
name a finished job (its part's ``job_fields``: distillation's teacher) and the reward jobs its rewards name
(``rollout.rewards[i].model``).

These rules live here and only here. A job a spec names must be one its user may read (another user's job is "not
found", as everywhere). A parent trained an adapter and succeeded with it saved, or is still queued or running (the
child then waits in the queue, see ``store.claim_next``). A job a method setting names succeeded with its adapter saved
and writes text (a reward model's score head cannot teach). A reward job is a score-head model that succeeded with its
model saved. A job id is what ``records.new_job_id`` writes (``records.is_job_id``); what lies on disk (an adapter, a
checkpoint) is ``jobs/lineage.py``'s question. The facade reads a spec's jobs at submit (``StudioCore.named``), the
worker before it trains (``backend/worker.py``), each once, through :func:`read_named_jobs`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from backend.core.spec import JobSpec, ModelSpec, SpecError, online_methods, quote_input
from backend.core.users import User
from backend.jobs.access import JobReads, hub_name_problem, may_name_server_paths, readable_job
from backend.jobs.lineage import FIELD as PARENT
from backend.jobs.lineage import adapter_to_continue, saved_adapter
from backend.jobs.records import JobRecord, JobStatus, is_job_id
from backend.jobs.store_errors import JobNotFound, UnreadableJob
from backend.methods.reward import SCORE_HEAD
from backend.methods.table import support
from backend.training.reward_models import RewardModelSource


@dataclass(frozen=True)
class FieldJob:
    """A finished job a method setting names (``path``: ``distillation.teacher``), with its saved adapter."""

    path: str
    job: JobRecord
    adapter: Path


@dataclass(frozen=True)
class NamedJobs:
    """A spec with every job it names, each read once: the spec as stored (a parent's base model and LoRA in place,
    every job by its id), the parent it continues (None: a fresh start), the job an eval-only spec scores, the jobs
    its method's settings name, and where each reward model its rewards name loads from (by the name given)."""

    spec: JobSpec
    parent: JobRecord | None = None
    target: JobRecord | None = None
    fields: tuple[FieldJob, ...] = ()
    rewards: dict[str, RewardModelSource] = field(default_factory=dict)

    def adapter(self) -> Path | None:
        """The parent's saved adapter to start from (None for a fresh start); SpecError while it has none."""
        return None if self.parent is None else adapter_to_continue(self.parent)

    def runnable(self, spec: JobSpec | None = None) -> JobSpec:
        """``spec`` (the stored one by default) with each job a method setting names as that job's adapter folder:
        what the trainer and pre-flight load. The stored spec keeps the id: a folder on the server is not the user's
        to name, so a clone of the job submitted again would be refused."""
        spec = self.spec if spec is None else spec
        if not self.fields:
            return spec
        updates = {named.path.split(".", 1)[1]: str(named.adapter) for named in self.fields}
        return spec.model_copy(update={spec.method.value: spec.method_part.model_copy(update=updates)})

    def said(self, text: str) -> str:
        """``text`` (a pre-flight sentence) naming each job a method setting names by its id, not by its folder on the
        server."""
        for named in self.fields:
            text = text.replace(str(named.adapter), f"job {named.job.id}")
        return text


class _ReadOnce:
    """The store as one spec's reads see it: each job read once, however many settings name it."""

    def __init__(self, store: JobReads) -> None:
        self.store = store
        self.jobs: dict[str, JobRecord] = {}

    def get(self, job_id: str) -> JobRecord:
        if job_id not in self.jobs:
            self.jobs[job_id] = self.store.get(job_id)
        return self.jobs[job_id]


def read_named_jobs(spec: JobSpec, store: JobReads, user: User | None = None, *, stored: bool = False) -> NamedJobs:
    """Every job ``spec`` names, each read once and only if ``user`` may read it (``None``: a trusted caller), held to
    its rule: SpecError, sentences naming the field, when one is not a job the spec may name.

    A new spec (a submit) comes back with its parent's base model and LoRA shape, so the stored spec says what really
    runs, and a parent still queued or running is a staged pair. A ``stored`` spec (the worker's) was held to every
    rule at submit: its jobs are read as they are now, and its parent's adapter must be there to start from."""
    reads = _ReadOnce(store)
    target = None if stored else evaluation_target(spec, reads, user)
    parent = parent_job(spec, reads, user)
    if parent is not None and stored:
        adapter_to_continue(parent)
    elif parent is not None:
        spec = continued(spec, parent)
    rewards = model_sources(reads, spec.rollout.rewards if spec.method in online_methods() else (), user)
    if parent is not None and not stored and (spec.evaluate is not None or spec.method != parent.spec.method):
        # a score head continues only as the same method: another method (or a benchmark) needs a language model
        require_generating(parent, "be scored on lm-eval benchmarks" if spec.evaluate else "be trained further")
    fields = method_jobs(spec, reads, user)
    for named in fields if not stored else ():
        require_generating(named.job, f"teach ({named.path})")  # a reward model's score head cannot teach
    return NamedJobs(spec, parent, target, fields, rewards)


# --- the parent a spec continues, and the job an eval-only spec scores ----------------------------------------------


def parent_job(spec: JobSpec, store: JobReads, user: User | None = None) -> JobRecord | None:
    """The job ``spec`` continues, read only if ``user`` may read it (``None``: a trusted caller)."""
    parent_id = spec.model.parent_job_id
    if parent_id is None:
        return None
    try:
        return readable_job(store, parent_id, user)
    except JobNotFound:
        raise SpecError([f"{PARENT}: there is no job {quote_input(parent_id)}"]) from None
    except UnreadableJob as exc:
        raise SpecError([f"{PARENT}: {exc}"]) from None


def continued(spec: JobSpec, parent: JobRecord) -> JobSpec:
    """For a staged job, the spec with the parent's base model and LoRA shape (so the stored spec says what really
    runs); SpecError when the parent cannot be continued."""
    # A queued or running parent is a staged pair: this job waits for it in the queue (store.claim_next).
    staged = parent.status in (JobStatus.queued, JobStatus.running)
    if not staged:
        if parent.status is not JobStatus.succeeded:
            raise SpecError(
                [
                    f"{PARENT}: job {parent.id} is {parent.status.value}; only the adapter of a job that "
                    f"succeeded, or is queued or running, can be trained further"
                ]
            )
        adapter_to_continue(parent)
    if not parent.spec.lora.enabled:
        raise SpecError(
            [f"{PARENT}: job {parent.id} trained all weights, not an adapter; start from its output folder instead"]
        )
    model = parent.spec.model.model_copy(update={"parent_job_id": parent.id})
    return spec.model_copy(update={"model": model, "lora": parent.spec.lora})


def evaluation_target(spec: JobSpec, store: JobReads, user: User | None = None) -> JobRecord | None:
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


def require_generating(job: JobRecord, what: str) -> None:
    """Refuse, with a sentence, to ``what`` (chat with, export, benchmark, continue, teach) a job whose model does not
    generate text: a reward model puts a score head on its base, which scores answers and writes none."""
    if not support(job.spec.method).head.generates:
        raise SpecError(
            [
                f"job {job.id} trained a {job.spec.method.value} model, which scores answers and writes none: "
                f"it cannot {what}; pick a job that trained a language model"
            ]
        )


# --- a method's setting that names a finished job (distillation's teacher) -----------------------------------------


def method_jobs(spec: JobSpec, store: JobReads, user: User | None = None) -> tuple[FieldJob, ...]:
    """Each of the spec's method part's ``job_fields`` that holds a job id, as that job with its adapter folder. The
    job must be one ``user`` may read that succeeded with its adapter saved; a name that is not a job id is a model,
    and a folder on the server only for those who may name one."""
    part = spec.method_part
    found = []
    for name in getattr(part, "job_fields", ()):
        path, value = f"{spec.method.value}.{name}", getattr(part, name).strip()
        if not is_job_id(value):
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
        found.append(FieldJob(path, job, adapter))
    return tuple(found)


# --- reward models: a Hub id or folder, or a finished reward job -----------------------------------------------------


def reward_model_sources(store: JobReads, spec: JobSpec, user: User | None = None) -> dict[str, RewardModelSource]:
    """:func:`model_sources` of an online job's rewards (none for other methods)."""
    return model_sources(store, spec.rollout.rewards if spec.method in online_methods() else (), user)


def model_sources(store: JobReads, rewards, user: User | None = None) -> dict[str, RewardModelSource]:
    """Each reward model ``rewards`` name, by the name given: a job id must be ``user``'s own reward job that
    succeeded with its adapter saved (SpecError, one sentence per entry, naming its field); any other name is a
    sequence-classification model to load as it is (``access.reward_model_problems`` has judged the name)."""
    sources: dict[str, RewardModelSource] = {}
    problems: list[str] = []
    for index, reward in enumerate(rewards):
        if reward.model is None or reward.model in sources:
            continue
        field_name = f"rollout.rewards[{index}].model"
        if not is_job_id(reward.model):
            sources[reward.model] = RewardModelSource(ModelSpec(name_or_path=reward.model))
            continue
        try:
            sources[reward.model] = reward_job_source(store, reward.model, user)
        except (JobNotFound, UnreadableJob):
            problems.append(f"{field_name}: there is no job {quote_input(reward.model)} of yours")
        except SpecError as exc:
            problems += [f"{field_name}: {problem}" for problem in exc.problems]
    if problems:
        raise SpecError(problems)
    return sources


def reward_job_source(store: JobReads, job_id: str, user: User | None = None) -> RewardModelSource:
    """Where ``user``'s finished reward job ``job_id`` is loaded from: its base model with the score-head adapter on
    top, or the saved folder alone when it trained all weights. A job that is no reward model, or did not succeed
    with its model saved, is a SpecError of one sentence; another user's or a missing job is JobNotFound."""
    job = readable_job(store, job_id, user)
    if support(job.spec.method).head != SCORE_HEAD:
        raise SpecError(
            [f"job {job.id} trained a {job.spec.method.value} model, not a reward model; pick a job of method reward"]
        )
    saved = saved_adapter(job)
    if job.status is not JobStatus.succeeded or saved is None:
        raise SpecError(
            [
                f"job {job.id} is {job.status.value}; only a reward job that succeeded (its model saved) can score "
                "completions"
            ]
        )
    max_length = job.spec.training.max_length
    if job.spec.lora.enabled:
        return RewardModelSource(job.spec.model, saved, max_length)
    # all weights trained: the folder is the model
    return RewardModelSource(ModelSpec(name_or_path=str(saved)), max_length=max_length)
