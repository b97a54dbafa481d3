"""``StudioAPI``: the facade's state (data folder, store, scheduler, limits) and the parts it is made of, by concern."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from pathlib import Path
from typing import Any

from backend.api.arena import ArenaOperations
from backend.api.benchmarks import BenchmarkOperations
from backend.api.chat import ChatOperations, ChatToolRuns
from backend.api.common import (
    BENCH_CALLS_PER_MINUTE,
    BENCH_TIME_LIMIT_S,
    DEFAULT_MAX_CHAT_STREAMS,
    DEFAULT_MAX_CHAT_STREAMS_PER_USER,
    DEFAULT_MAX_DRY_RUNS,
    DEFAULT_MAX_ENVIRONMENT_CHECKS,
    DRY_RUN_TIME_LIMIT_S,
    DRY_RUNS_PER_MINUTE,
    ENVIRONMENT_CHECKS_PER_USER,
    SchedulerMode,
)
from backend.api.datasets import DatasetOperations, upload_check_slots
from backend.api.environments import EnvironmentOperations
from backend.api.export import ExportOperations, export_slots
from backend.api.hub import HubOperations
from backend.api.jobs import JobOperations
from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, SpecError, parse_spec
from backend.core.users import User
from backend.data.upload_store import SharedSources, UploadQuota
from backend.jobs.access import authorize_spec
from backend.jobs.lineage import Lineage, resolve_lineage
from backend.jobs.remote_registry import RemoteRegistry
from backend.jobs.scheduler import Scheduler, SchedulerHealth, spawn_detached
from backend.jobs.store import JobStore
from backend.platform.limits import InFlight, RateLimiter, TimeLimit, int_setting
from backend.platform.mirror import Mirror, MirrorStatus, restore
from backend.platform.snapshot_rescue import set_aside_notes
from backend.platform.space_runtime import on_space
from backend.platform.storage import DB_NAME, StoragePlan, storage_plan


class StudioAPI(
    JobOperations,
    DatasetOperations,
    EnvironmentOperations,
    ChatOperations,
    ArenaOperations,
    HubOperations,
    BenchmarkOperations,
    ExportOperations,
):
    """The facade over the store and a scheduler (its Hub operations are in backend/api/hub.py).

    ``scheduler`` says who runs the queue: ``"thread"`` runs one inside this process (the app), ``"detached"``
    starts a background scheduler process when none is running (the CLI and scripts), ``"none"`` leaves it to
    someone else (tests that start their own).
    """

    def __init__(
        self,
        data_dir: Path | str | None = None,
        scheduler: SchedulerMode = "detached",
        storage: StoragePlan | None = None,
        **scheduler_kwargs: Any,
    ):
        # Where the live store is, and on a network filesystem the durable copy (backend/platform/storage.py).
        self.storage = storage or storage_plan(data_dir)
        self.paths = DataPaths(self.storage.live).ensure()
        self.mirror_status = MirrorStatus()
        if self.storage.mode == "network" and not Scheduler.is_running(self.paths):  # the owner of the queue restores
            restore(self.storage, self.mirror_status)
        if self.storage.durable is not None:  # damaged snapshots kept aside, until someone deletes them
            self.mirror_status.set_aside = set_aside_notes(self.storage.durable, DB_NAME)
        self.store = JobStore(self.paths.db)
        self.remote = RemoteRegistry(self.store)
        with contextlib.suppress(OSError):  # tried again at the next start
            self.paths.move_user_folders(self.store.owners())
            self._sweep_half_files()
        self.mode = scheduler
        self.scheduler: Scheduler | None = None
        self._chat_models = None  # loaded on the first chat
        self._chat_lock = threading.Lock()
        self._chat_tools = ChatToolRuns()  # each user's environment for their chat's tool calls, and its limits
        # job id -> the submitting user's Hub token, for jobs that push when they finish: memory only.
        self._tokens: dict[str, str] = {}
        self._bench_calls = RateLimiter("reward bench", BENCH_CALLS_PER_MINUTE)
        self._bench_time = TimeLimit(
            "reward bench", BENCH_TIME_LIMIT_S, advice="use fewer or shorter completions, or simpler patterns"
        )
        self._dry_run_calls = RateLimiter("dry run", DRY_RUNS_PER_MINUTE)
        # Space-wide, beside the per-user limits: work one process can hold at once (settings read at start).
        self._dry_runs = InFlight(
            "dry run", 1, int_setting("STUDIO_MAX_DRY_RUNS", DEFAULT_MAX_DRY_RUNS), "STUDIO_MAX_DRY_RUNS"
        )
        # The arena plays an environment with a model, as a dry run does: the same limits, under its own name.
        self._arena_calls = RateLimiter("arena play", DRY_RUNS_PER_MINUTE)
        self._arena_plays = InFlight(
            "arena play", 1, int_setting("STUDIO_MAX_DRY_RUNS", DEFAULT_MAX_DRY_RUNS), "STUDIO_MAX_DRY_RUNS"
        )
        self._chat_streams = InFlight(
            "chat",
            int_setting("STUDIO_MAX_CHAT_STREAMS_PER_USER", DEFAULT_MAX_CHAT_STREAMS_PER_USER),
            int_setting("STUDIO_MAX_CHAT_STREAMS", DEFAULT_MAX_CHAT_STREAMS),
            "STUDIO_MAX_CHAT_STREAMS",
        )
        self._dry_run_time = TimeLimit(
            "dry run",
            DRY_RUN_TIME_LIMIT_S,
            workers=self._dry_runs.total,  # each dry run let in has its own thread: a slow server holds only its own
            advice="lower environment.max_tool_calling_iterations or "
            "rollout.max_completion_length, or try a smaller model",
        )
        # A remote environment's pre-flight talks to a stranger's server: a few at once per user and on the Space,
        # so slow servers hold only a few of Gradio's submit slots and never anyone else's.
        self._environment_checks = InFlight(
            "environment checks",
            ENVIRONMENT_CHECKS_PER_USER,
            int_setting("STUDIO_MAX_ENVIRONMENT_CHECKS", DEFAULT_MAX_ENVIRONMENT_CHECKS),
            "STUDIO_MAX_ENVIRONMENT_CHECKS",
        )
        self._exports = export_slots()  # merged exports: each holds a whole model in memory
        self._upload_checks = upload_check_slots()  # each check may take over 2 GB: as many as the memory holds
        self._upload_quota = UploadQuota()
        self._upload_sources = SharedSources()
        self.mirror: Mirror | None = None
        if scheduler == "thread":
            if self.storage.mode == "network":
                scheduler_kwargs.setdefault("resume_interrupted", True)  # the machine went away: carry on by itself
                self.mirror = Mirror(
                    self.storage.live, self.storage.durable, status=self.mirror_status, owns=self._serves_queue
                ).start()
            self.scheduler = Scheduler(self.paths, secret_env=self._secret_env, **scheduler_kwargs).start()

    def _sweep_half_files(self) -> None:
        """What a killed process left half-written: staged uploads, partial adapter zips and merged exports (never
        handed out)."""
        from backend.data.uploads import LEFTOVER_AGE_S, sweep_staging

        sweep_staging(self.paths.root / "uploads")
        from backend.workflows.archive import PARTIAL_MERGED, PARTIAL_ZIP

        for partial in self.paths.downloads.glob(f"*/{PARTIAL_ZIP}*"):
            if time.time() - partial.stat().st_mtime > LEFTOVER_AGE_S:  # not one another process is writing now
                shutil.rmtree(partial.parent, ignore_errors=True)
        for partial in (self.paths.root / "jobs").glob(f"*/{PARTIAL_MERGED}*"):
            if time.time() - partial.stat().st_mtime > LEFTOVER_AGE_S:
                shutil.rmtree(partial, ignore_errors=True)

    def close(self) -> None:
        """Stop the scheduler this API started, and the pools behind the reward bench and dry runs."""
        served = self._serves_queue()
        if self.scheduler is not None:
            self.scheduler.stop()
        if self.mirror is not None:  # a last snapshot and copy: a shutdown leaves the newest state durable
            self.mirror.stop(last_cycle=served)
        self._bench_time.close()
        self._dry_run_time.close()
        self._chat_tools.close()
        self.store.close()

    def _serves_queue(self) -> bool:
        """Whether this process's scheduler holds the data dir's lock (it alone keeps the durable copy)."""
        return self.scheduler is not None and self.scheduler.health().owns_queue

    def storage_notice(self) -> str | None:
        """Sentences for the header about where data lives, when something needs saying: a read-only data folder, a
        Space with no storage (everything vanishes at the next restart), a durable copy that cannot be written, or
        what the start-up restore did. None when all is well."""
        found = []
        if not self.store.writable():
            found.append(
                f"The studio’s data folder ({self.paths.root}) is read-only: jobs, logs and adapters can be read, but "
                "nothing can be queued, cancelled, uploaded or saved until it is writable again."
            )
        if warning := self.storage.warning():
            found.append(warning)
        if self.mirror_status.last_error:
            found.append(f"The durable copy is behind: {self.mirror_status.last_error}; the studio keeps retrying.")
        found.extend(self.mirror_status.warnings)
        found.extend(self.mirror_status.set_aside)
        return " ".join(found) or None

    def storage_summary(self) -> str:
        """A few words for the header line: where the data lives, and on a network filesystem where its durable copy
        is and when the last snapshot was taken."""
        if self.storage.mode == "none":
            return "Data: not kept across restarts"
        if self.storage.mode == "local":
            return f"Data: {self.storage.live} (local disk)"
        when = self.storage_status()["last_snapshot_at"]
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(when)) if when else "none yet"
        return f"Data: copied to {self.storage.durable} (network filesystem; last snapshot {stamp})"

    def storage_status(self) -> dict[str, Any]:
        """Where data lives and how the durable copy is doing: the mode, the live and durable folders, the last
        snapshot's time, the last error, what the start-up restore did and the damaged snapshots kept aside
        (``python -m backend status``)."""
        snapshot = self.storage.durable / DB_NAME if self.storage.durable else None
        return {
            "mode": self.storage.mode,
            "description": self.storage.describe(),
            "live": str(self.storage.live),
            "durable": str(self.storage.durable) if self.storage.durable else None,
            "filesystem": self.storage.fstype,
            "last_snapshot_at": snapshot.stat().st_mtime if snapshot and snapshot.exists() else None,
            "last_error": self.mirror_status.last_error,
            "restore_notes": list(self.mirror_status.notes),
            "set_aside": list(self.mirror_status.set_aside),
            "warning": self.storage.warning(),
        }

    def scheduler_health(self) -> SchedulerHealth | None:
        """The in-process scheduler's health for the header (alive, last error, failures in a row, jobs running);
        None when this process runs no scheduler (``detached``/``none`` modes: another process owns the queue)."""
        return self.scheduler.health() if self.scheduler is not None else None

    def _prepare(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> JobSpec:
        """The parsed spec, owned by ``user`` and holding only what they may read (backend/jobs/access.py), parent
        resolved. ``user=None`` is a trusted caller in this process (the CLI, tests)."""
        return self._prepare_lineage(spec, owner, user).spec

    def _prepare_lineage(
        self, spec: JobSpec | dict[str, Any] | str, owner: str | None = None, user: User | None = None
    ) -> Lineage:
        """:meth:`_prepare`, with the parent job read on the way (backend/jobs/lineage.py)."""
        if not isinstance(spec, JobSpec):
            spec = parse_spec(spec)
        if owner is not None and owner != spec.owner:
            spec = spec.model_copy(update={"owner": owner})
        spec = authorize_spec(spec, user, self.paths)
        return resolve_lineage(spec, self.store, user)

    def _uploads_of(self, spec: JobSpec) -> Path:
        return self.paths.uploads(spec.owner)

    def _require_user(self, user: User | None, what: str) -> None:
        """Actions that run user code or a model are for signed-in users; None is trusted only off a Space."""
        if user is None and on_space():
            raise SpecError([f"{what}: sign in with Hugging Face first (button at the top right)"])

    def _secret_env(self, job_id: str) -> dict[str, str]:
        """What the scheduler adds to a worker's environment: the token of the user who asked it to push."""
        token = self._tokens.pop(job_id, None)
        return {"HF_TOKEN": token} if token else {}

    def _kick(self) -> None:
        """Make sure some scheduler will pick the queue up."""
        if self.scheduler is not None:
            self.scheduler.notify()
        elif self.mode == "detached" and not Scheduler.is_running(self.paths):
            spawn_detached(self.paths)
