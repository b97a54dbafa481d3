"""A job prepared once per process and handed on whole (:class:`PreparedJob`): the facade prepares it at submit (with
every pre-flight check), the worker before it trains, both through :func:`prepare_job`.

A job is prepared in one pass: the jobs it names, read once (``training.named_jobs``); its rows, loaded once as the
trainer reads them (``data.loading.load_job_data``); auto-tune's plan for this machine; and, at submit, the
pre-flight's refusals and warnings. What reads the rows after that (the pre-flight's advisories, the preview,
auto-tune, the trainer) is handed them; nothing loads them a second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, SpecError, online_methods
from backend.data.loading import JobData, load_job_data
from backend.training.distributed import per_process_spec
from backend.training.named_jobs import NamedJobs

if TYPE_CHECKING:
    from backend.training.autotune import Tuning


@dataclass(frozen=True)
class PreparedJob:
    """A job made ready to run: the spec as stored and the spec to run, every job it names, its rows, auto-tune's plan
    and the pre-flight's warnings.

    ``stored`` names jobs by their ids, with a parent's base model and LoRA in place (what the store keeps).
    ``spec`` is the job as one of its processes runs it on this machine: its share of the batch, auto-tune's choices
    applied; it still names jobs by their ids, as the job's records do. :attr:`runnable` is what the trainer loads.
    """

    stored: JobSpec
    spec: JobSpec
    named: NamedJobs  # every job the spec names, read once under the ownership rule
    data: JobData  # the rows as the trainer reads them (memory-mapped from the folder the caller holds, if any)
    tuning: Tuning | None  # auto-tune's plan here; None for a resumed job, which keeps its first attempt's choices
    warnings: tuple[str, ...] = ()  # the pre-flight's (at submit), a job named by its id, never by its folder

    @property
    def runnable(self) -> JobSpec:
        """:attr:`spec` with each job a method setting names (distillation's teacher) as that job's adapter folder."""
        return self.named.runnable(self.spec)

    @property
    def parent_adapter(self) -> Path | None:
        """The parent's saved adapter the run starts from (None: a fresh start); SpecError while it has none."""
        return self.named.adapter()


def prepare_job(
    named: NamedJobs,
    paths: DataPaths,
    kept_in: Path | None = None,
    *,
    preflight: bool = True,
    token: str | bool | None = None,
    kept_choices: dict[str, Any] | None = None,
) -> PreparedJob:
    """The job ``named`` (its spec with the jobs it names, read once: ``named_jobs.read_named_jobs``) made ready here.

    Its rows are loaded once, memory-mapped from ``kept_in`` when the caller holds such a folder for as long as it
    uses them (``user_cache.held_folder``). With ``preflight`` (a submit, a Check), every reason it cannot run is a
    SpecError first (the Hub's reward models read with ``token``: ``api.core.hub_token``, before anything is
    downloaded), and the pre-flight's warnings come with it; a sentence names a job by its id, not by its folder on
    the server. Without (the worker: the job passed them at submit), a resumed job keeps its first attempt's auto-tune
    choices, ``kept_choices`` (its checkpoint must still match), and any other is planned afresh."""
    from backend.training.autotune import plan, with_choices

    stored = named.spec
    uploads = paths.uploads(stored.owner)  # the owner the job is stored under: whose upload the id names
    # Several processes share the spec's global batch: auto-tune plans each process's share.
    share = per_process_spec(stored, stored.training.num_processes)
    warnings: list[str] = []
    if preflight:
        data, tuning, warnings = _checked(named, paths.models, uploads, kept_in, token)
    else:
        data = load_job_data(stored, uploads, kept_in)
        tuning = None if kept_choices is not None else plan(share, paths.models, data)
    spec = with_choices(share, tuning.settings if tuning is not None else kept_choices or {})
    return PreparedJob(stored, spec, named, data, tuning, tuple(warnings))


def _checked(
    named: NamedJobs, models_dir: Path, uploads: Path, kept_in: Path | None, token: str | bool | None
) -> tuple[JobData, Tuning, list[str]]:
    """The pre-flight of the job as it will run (a job it names read as its adapter folder): (its rows, auto-tune's
    plan, the warnings), or SpecError with every problem."""
    from backend.training.preflight import advisories, checked_data, hub_push_warnings
    from backend.training.reward_checks import job_memory_budget, reward_model_hub_problems

    spec = named.spec
    if spec.method in online_methods():
        problems = reward_model_hub_problems(spec.rollout.rewards, token, job_memory_budget(spec))
        if problems:
            raise SpecError(problems)
    runnable = named.runnable()
    try:
        data = checked_data(runnable, models_dir, uploads, kept_in)
        warnings, tuning = advisories(runnable, models_dir, data)
    except SpecError as exc:
        raise SpecError([named.said(problem) for problem in exc.problems]) from None
    return data, tuning, [named.said(warning) for warning in warnings + hub_push_warnings(runnable)]
