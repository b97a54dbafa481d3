"""Who may read what: the one ownership rule for the jobs, uploads, files, Hub names and parent jobs a request names.

``user=None`` is a trusted caller in this process (the CLI, scripts, tests) and keeps the full reach it always had.
The local admin (``User.local``: the person at this machine) may also name files and folders on it. Everyone else,
a Space admin included, reads only the built-in assets, their own uploads (by upload id, never by path) and the Hub.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Protocol

from backend.core.benchmarks import task_problem
from backend.core.hub_names import BUILTIN_MODELS, is_local_path, is_repo_id
from backend.core.paths import DataPaths
from backend.core.spec import DatasetSpec, JobSpec, ModelSpec, SpecError, quote_input
from backend.core.uploads import UPLOAD_INSTEAD, looks_like_file_path, upload_file
from backend.core.users import User
from backend.jobs.records import JobRecord, is_job_id
from backend.jobs.store_errors import JobNotFound


def may_name_server_paths(user: User | None) -> bool:
    """Trusted in-process callers and the person at this machine may point the studio at files on it."""
    return user is None or user.local


_PROJECT_ROOT = Path(__file__).resolve().parents[2]


def server_paths_hidden(text: str, data_root: Path) -> str:
    """``text`` (a job's error, a log line, a sentence) as a stranger may read it: a job's folder named by the job's
    id, and the data folder, the Python installation and the app's own folder by what they are, never where.

    >>> server_paths_hidden("No such file: /srv/data/jobs/ab12/adapter/x.json", Path("/srv/data"))
    "No such file: adapter/x.json in job ab12's folder"
    >>> server_paths_hidden("disk full under /srv/data/uploads", Path("/srv/data"))
    'disk full under <data folder>/uploads'
    """
    root = re.escape(str(data_root).rstrip("/"))

    def job_folder(match: re.Match[str]) -> str:
        inside = (match.group(2) or "").strip("/")
        return f"{inside} in job {match.group(1)}'s folder" if inside else f"job {match.group(1)}'s folder"

    text = re.sub(root + r"/jobs/([A-Za-z0-9_.-]+)(/[^\s'\"():,]*)?", job_folder, text)
    for folder, name in (
        (str(data_root), "<data folder>"),
        (sys.prefix, "<python>"),
        (sys.base_prefix, "<python>"),
        (str(_PROJECT_ROOT), "<app>"),
    ):
        if len(folder) > 1:
            text = text.replace(folder.rstrip("/"), name)
    return text


# --- jobs --------------------------------------------------------------------------------------------------------


class JobReads(Protocol):
    """What reading a job needs of a store: the store itself, a running job's reporter, or a spec's reads of its jobs
    (``training.named_jobs``)."""

    def get(self, job_id: str) -> JobRecord:
        """The job as stored (JobNotFound when there is none)."""
        ...


def readable_job(store: JobReads, job_id: str, user: User | None) -> JobRecord:
    """The job if ``user`` may read it; another user's job is JobNotFound (its existence is not theirs to know)."""
    job = store.get(job_id)
    if user is not None and not user.can_access(job.owner):
        raise JobNotFound(job_id)
    return job


# --- specs -------------------------------------------------------------------------------------------------------


def authorize_spec(spec: JobSpec, user: User | None, paths: DataPaths) -> JobSpec:
    """The spec as ``user`` may run it (owned by them), or SpecError naming every field they may not use; the jobs
    it names are read (as ``user`` may see them) by backend/training/named_jobs.py."""
    if user is not None and spec.owner != user.name:
        spec = spec.model_copy(update={"owner": user.name})
    problems = [
        *dataset_problems(spec.dataset, user, paths.uploads(spec.owner)),
        *model_problems(spec.model, user),
        *reward_model_problems(spec.rollout.rewards, user),
        *benchmark_problems(spec, user, paths.uploads(spec.owner)),
    ]
    if problems:
        raise SpecError(problems)
    return spec


def benchmark_problems(spec: JobSpec, user: User | None, uploads_dir: Path) -> list[str]:
    """Whether each benchmark task is one ``user`` may run: a known task, their own upload, a path if local."""
    problems = (task_problem(task, uploads_dir, may_name_server_paths(user)) for task in spec.benchmarks.tasks)
    return [problem for problem in problems if problem]


def dataset_problems(dataset: DatasetSpec, user: User | None, uploads_dir: Path) -> list[str]:
    """Whether ``user`` may read the dataset: built-ins, their own uploads, the Hub, and paths only if local."""
    if dataset.source == "upload":
        try:
            upload_file(uploads_dir, dataset.name)
        except SpecError as exc:
            return exc.problems
        return []
    if may_name_server_paths(user) or dataset.source == "builtin":
        return []
    if dataset.source == "file":
        return [f"dataset.name: {quote_input(dataset.name)} is a path on the server; {UPLOAD_INSTEAD}"]
    problem = hub_name_problem("dataset.name", dataset.name, "dataset", UPLOAD_INSTEAD)
    return [problem] if problem else []


def model_problems(model: ModelSpec, user: User | None) -> list[str]:
    """What forbids ``user`` this model: a server path or Hub-invalid name, or remote code on a shared Space."""
    if may_name_server_paths(user):
        return []
    problems = []
    if model.name_or_path not in BUILTIN_MODELS:
        problem = hub_name_problem(
            "model.name_or_path", model.name_or_path, "model", "push the model to the Hub and give its id"
        )
        if problem:
            problems.append(problem)
    if model.trust_remote_code and user is not None and not user.is_admin:
        # A repository's own modelling code would run in this process, with every user's data in reach.
        problems.append(
            "model.trust_remote_code: running a model repository's own code is not allowed on a shared Space; "
            "pick a model transformers supports natively"
        )
    return problems


def reward_model_problems(rewards, user: User | None) -> list[str]:
    """What forbids ``user`` a reward model named by Hub id or folder (a job id is judged by
    ``training.named_jobs``): the same rule as the base model's."""
    if may_name_server_paths(user):
        return []
    named = [(i, r.model) for i, r in enumerate(rewards) if r.model and not is_job_id(r.model)]
    problems = [
        hub_name_problem(
            f"rollout.rewards[{i}].model", name, "model", "push the reward model to the Hub and give its id"
        )
        for i, name in named
        if name not in BUILTIN_MODELS
    ]
    return [problem for problem in problems if problem]


def hub_name_problem(field: str, name: str, what: str, instead: str) -> str | None:
    """None when ``name`` can only mean a Hub repo; else why not, in one sentence."""
    if not is_repo_id(name):
        if looks_like_file_path(name):
            return f"{field}: {quote_input(name)} is a path on the server; {instead}"
        return f"{field}: {quote_input(name)} is not a Hub {what} id; give one like owner/name"
    # datasets and transformers read a local folder of the same name before asking the Hub.
    if is_local_path(name):
        return (
            f"{field}: {quote_input(name)} names a folder on the server, not a Hub {what}; give its Hub id (owner/name)"
        )
    return None
