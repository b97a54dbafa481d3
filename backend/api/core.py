"""``StudioCore``: what every part of the facade stands on (the data folder, the job store, the remote jobs' registry,
the scheduler, the Hub tokens waiting for their workers) and the steps they share: read a spec for a user, wake the
queue, refuse an anonymous caller on a Space."""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from backend.api.common import DEFAULT_MAX_QUEUED_TOTAL, SchedulerMode
from backend.api.guards import MODEL_CHECKS, build
from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, SpecError, parse_spec
from backend.core.users import User, max_queued_per_user
from backend.data.user_cache import held_folder
from backend.jobs.access import authorize_spec
from backend.jobs.remote_registry import RemoteRegistry
from backend.jobs.scheduler import Scheduler, spawn_detached
from backend.jobs.store_open import open_store
from backend.platform.limits import int_setting
from backend.platform.space_runtime import on_space
from backend.platform.storage import StoragePlan
from backend.training.named_jobs import NamedJobs, read_named_jobs
from backend.training.prepared import PreparedJob, prepare_job
from backend.training.process_limit import process_ceiling_problems


class StudioCore:
    """The facade's shared state, handed to each of its parts (``StudioAPI`` builds it).

    ``scheduler`` is the in-process scheduler when this process runs one (``StudioAPI`` starts it), else None;
    ``mode`` says who runs the queue (see ``StudioAPI``)."""

    def __init__(self, storage: StoragePlan, paths: DataPaths, mode: SchedulerMode) -> None:
        self.storage = storage
        self.paths = paths
        self.store, self.store_notice = open_store(paths.db)  # the notice: a mismatched store set aside
        self.remote = RemoteRegistry(self.store)
        self.mode: SchedulerMode = mode
        self.scheduler: Scheduler | None = None
        # job id -> the submitting user's Hub token, for jobs that push when they finish: memory only.
        self.tokens: dict[str, str] = {}
        # Checks that load the models a user named (a child each): a few at once, so users together cannot take the
        # Space's memory.
        self.model_checks = build(MODEL_CHECKS)
        with contextlib.suppress(OSError):  # tried again at the next start
            paths.move_user_folders(self.store.owners())
            self._sweep_half_files()

    def _sweep_half_files(self) -> None:
        """What a killed process left half-written: staged uploads, copies of files being read, partial adapter zips and
        merged exports (never handed out)."""
        from backend.data.uploads import LEFTOVER_AGE_S, sweep_staging
        from backend.data.user_cache import sweep_all_reads

        sweep_staging(self.paths.root / "uploads")
        sweep_all_reads(self.paths.root / "uploads")  # datasets' copies of files a killed process was reading
        from backend.workflows.archive import PARTIAL_GGUF, PARTIAL_MERGED, PARTIAL_ZIP

        for partial in self.paths.downloads.glob(f"*/{PARTIAL_ZIP}*"):
            if time.time() - partial.stat().st_mtime > LEFTOVER_AGE_S:  # not one another process is writing now
                shutil.rmtree(partial.parent, ignore_errors=True)
        self.paths.sweep_downloads()  # a day old: its browser has long fetched it (an export keeps its own copy)
        partials = [*(self.paths.root / "jobs").glob(f"*/{PARTIAL_MERGED}*")]
        for partial in partials + [*(self.paths.root / "jobs").glob(f"*/{PARTIAL_GGUF}*")]:
            if time.time() - partial.stat().st_mtime > LEFTOVER_AGE_S:
                shutil.rmtree(partial, ignore_errors=True)

    def prepare(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> JobSpec:
        """The parsed spec, owned by ``user`` and holding only what they may read (backend/jobs/access.py), parent
        resolved. ``user=None`` is a trusted caller in this process (the CLI, tests)."""
        return self.named(spec, owner, user).spec

    def named(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> NamedJobs:
        """:meth:`prepare`, with every job the spec names read on the way, once, and held to its rule
        (backend/training/named_jobs.py)."""
        if not isinstance(spec, JobSpec):
            spec = parse_spec(spec)
        if spec.export is not None:  # its own door: api.export.submit checks what an export may name
            raise SpecError(["export: queue an export with the Export panel or `python -m backend export JOB_ID`"])
        if owner is not None and owner != spec.owner:
            spec = spec.model_copy(update={"owner": owner})
        return read_named_jobs(authorize_spec(spec, user, self.paths), self.store, user)

    def sweep_door(self, spec: JobSpec, user: User | None) -> JobSpec:
        """The door a TPE sweep's later child passes in the scheduler's tick (backend/jobs/sweep_door.py): the same
        :meth:`prepare` a submit passes, as the sweep's submitter, and the same ceiling on its training processes."""
        prepared = self.prepare(spec, user=user)
        if problems := process_ceiling_problems(prepared, user):
            raise SpecError(problems)
        return prepared

    @contextlib.contextmanager
    def prepared(self, named: NamedJobs, token: str | bool | None = None) -> Iterator[PreparedJob]:
        """The job ``named`` (:meth:`named`) prepared at submit, with its pre-flight (backend/training/prepared.py):
        SpecError with every problem, or the job with its rows, auto-tune's plan here and the warnings. The Hub reward
        models come first, from the Hub's metadata (read with ``token``: :func:`hub_token`), before anything is
        downloaded. The rows are memory-mapped from a folder of the owner's held while the caller uses them, not held
        in the app's memory (user_cache.py)."""
        spec = named.spec
        with held_folder(spec.dataset.source, self.uploads_of(spec)) as kept_in:
            yield prepare_job(named, self.paths, kept_in, token=token)

    @contextlib.contextmanager
    def model_check(self, user: User | None) -> Iterator[None]:
        """Count a check that loads a user's models in the per-user and Space-wide limits while it runs (Busy, a
        sentence, when either is reached); a trusted caller counts nothing."""
        if user is None:
            yield
            return
        release = self.model_checks.hold(user.name)
        try:
            yield
        finally:
            release()

    def uploads_of(self, spec: JobSpec) -> Path:
        """The uploads folder a spec's ``upload`` datasets resolve in: its owner's."""
        return self.paths.uploads(spec.owner)

    def require_user(self, user: User | None, what: str) -> None:
        """Actions that run user code or a model are for signed-in users; None is trusted only off a Space."""
        if user is None and on_space():
            raise SpecError([f"{what}: sign in with Hugging Face first (button at the top right)"])

    def queue_limits(self, user: User | None) -> tuple[int | None, int | None]:
        """(the user's own queued jobs, the Space's queued jobs) a new job may join: no limits for a trusted caller or
        an admin."""
        if user is None or user.is_admin:
            return None, None
        return max_queued_per_user(), int_setting("STUDIO_MAX_QUEUED_TOTAL", DEFAULT_MAX_QUEUED_TOTAL)

    def secret_env(self, job_id: str) -> dict[str, str]:
        """What the scheduler adds to a worker's environment: the token of the user who asked it to push."""
        token = self.tokens.pop(job_id, None)
        return {"HF_TOKEN": token} if token else {}

    def kick(self) -> None:
        """Make sure some scheduler will pick the queue up."""
        if self.scheduler is not None:
            self.scheduler.notify()
        elif self.mode == "detached" and not Scheduler.is_running(self.paths):
            spawn_detached(self.paths)


def hub_token(user: User | None) -> str | bool | None:
    """The token a Hub lookup for ``user`` reads with: their own, or none (False) for a signed-in user without one;
    None, this machine's own, for a trusted caller (the CLI, a script)."""
    if user is None:
        return None
    return user.token or False
