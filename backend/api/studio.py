"""``StudioAPI``: the facade, composed of its parts by concern over one shared core, and its own life and status."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from backend.api.arena import ArenaOperations
from backend.api.benchmarks import BenchmarkOperations
from backend.api.chat import ChatOperations
from backend.api.common import SchedulerMode
from backend.api.core import StudioCore
from backend.api.datasets import DatasetOperations
from backend.api.environments import EnvironmentOperations
from backend.api.export import ExportOperations
from backend.api.guards import GuardReading, guard_readings
from backend.api.hub import HubOperations
from backend.api.jobs import JobOperations
from backend.api.sweeps import SweepOperations
from backend.core.paths import DataPaths
from backend.jobs.scheduler import Scheduler, SchedulerHealth
from backend.platform.mirror import Mirror, MirrorStatus, restore
from backend.platform.snapshot_rescue import set_aside_notes
from backend.platform.storage import DB_NAME, StoragePlan, storage_plan


class StudioAPI:
    """The facade: its parts by concern (``jobs``, ``sweeps``, ``datasets``, ``environments``, ``chat``, ``arena``,
    ``hub``, ``benchmarks``, ``export``), each built on one ``core`` (backend/api/core.py), and the facade's own life
    and status (closing, where data lives, the scheduler's health).

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
    ) -> None:
        # Where the live store is, and on a network filesystem the durable copy (backend/platform/storage.py).
        storage = storage or storage_plan(data_dir)
        paths = DataPaths(storage.live).ensure()
        self.mirror_status = MirrorStatus()
        if storage.mode == "network" and not Scheduler.is_running(paths):  # the owner of the queue restores
            restore(storage, self.mirror_status)
        self.core = core = StudioCore(storage, paths, scheduler)  # may set a mismatched store aside first
        # Damaged snapshots and mismatched stores kept aside, until someone deletes them (each has its note).
        kept_in = dict.fromkeys(d for d in (storage.durable, paths.root) if d is not None)
        self.mirror_status.set_aside = [note for d in kept_in for note in set_aside_notes(d, DB_NAME)]
        if core.store_notice and core.store_notice not in self.mirror_status.set_aside:  # its note not written
            self.mirror_status.set_aside.append(core.store_notice)
        self.jobs = JobOperations(core)
        self.sweeps = SweepOperations(core, self.jobs)
        self.datasets = DatasetOperations(core)
        self.environments = EnvironmentOperations(core, self.jobs)
        self.chat = ChatOperations(core, self.jobs)
        self.arena = ArenaOperations(core, self.jobs, self.chat)
        self.hub = HubOperations(core, self.jobs)
        self.benchmarks = BenchmarkOperations(core, self.jobs)
        self.export = ExportOperations(core, self.jobs)
        self.mirror: Mirror | None = None
        if scheduler == "thread":
            if storage.mode == "network" and storage.durable is not None:  # a network plan always has its copy
                scheduler_kwargs.setdefault("resume_interrupted", True)  # the machine went away: carry on by itself
                self.mirror = Mirror(
                    storage.live, storage.durable, status=self.mirror_status, owns=self._serves_queue
                ).start()
            core.scheduler = Scheduler(
                paths, secret_env=core.secret_env, sweep_door=core.sweep_door, **scheduler_kwargs
            ).start()

    def close(self) -> None:
        """Stop the scheduler this API started, and the pools behind the reward bench and dry runs."""
        served = self._serves_queue()
        if self.core.scheduler is not None:
            self.core.scheduler.stop()
        if self.mirror is not None:  # a last snapshot and copy: a shutdown leaves the newest state durable
            self.mirror.stop(last_cycle=served)
        self.datasets.close()
        self.environments.close()
        self.chat.close()
        self.core.store.close()

    def _serves_queue(self) -> bool:
        """Whether this process's scheduler holds the data dir's lock (it alone keeps the durable copy)."""
        return self.core.scheduler is not None and self.core.scheduler.health().owns_queue

    def storage_notice(self) -> str | None:
        """Sentences for the header about where data lives, when something needs saying: a read-only data folder, a
        Space with no storage (everything vanishes at the next restart), a durable copy that cannot be written, or
        what the start-up restore did. None when all is well."""
        storage, found = self.core.storage, []
        if not self.core.store.writable():
            found.append(
                f"The studio’s data folder ({self.core.paths.root}) is read-only: jobs, logs and adapters can be read, "
                "but nothing can be queued, cancelled, uploaded or saved until it is writable again."
            )
        if warning := storage.warning():
            found.append(warning)
        if self.mirror_status.last_error:
            found.append(f"The durable copy is behind: {self.mirror_status.last_error}; the studio keeps retrying.")
        found.extend(self.mirror_status.warnings)
        found.extend(self.mirror_status.set_aside)
        return " ".join(found) or None

    def storage_summary(self) -> str:
        """A few words for the header line: where the data lives, and on a network filesystem where its durable copy
        is and when the last snapshot was taken."""
        storage = self.core.storage
        if storage.mode == "none":
            return "Data: not kept across restarts"
        if storage.mode == "local":
            return f"Data: {storage.live} (local disk)"
        when = self.storage_status()["last_snapshot_at"]
        stamp = time.strftime("%H:%M:%S UTC", time.gmtime(when)) if when else "none yet"
        return f"Data: copied to {storage.durable} (network filesystem; last snapshot {stamp})"

    def storage_status(self) -> dict[str, Any]:
        """Where data lives and how the durable copy is doing: the mode, the live and durable folders, the last
        snapshot's time, the last error, what the start-up restore did and the damaged snapshots kept aside
        (``python -m backend status``)."""
        storage = self.core.storage
        snapshot = storage.durable / DB_NAME if storage.durable else None
        return {
            "mode": storage.mode,
            "description": storage.describe(),
            "live": str(storage.live),
            "durable": str(storage.durable) if storage.durable else None,
            "filesystem": storage.fstype,
            "last_snapshot_at": snapshot.stat().st_mtime if snapshot and snapshot.exists() else None,
            "last_error": self.mirror_status.last_error,
            "restore_notes": list(self.mirror_status.notes),
            "set_aside": list(self.mirror_status.set_aside),
            "warning": storage.warning(),
            **self.export_bytes(),
        }

    def export_bytes(self) -> dict[str, int]:
        """The bytes exports take on disk (every job's merged and GGUF folders) and downloads (``downloads/``)."""
        from backend.core.paths import folder_bytes

        jobs = self.core.paths.root / "jobs"
        exports = sum(folder_bytes(folder) for kind in ("merged", "gguf") for folder in jobs.glob(f"*/{kind}"))
        return {"export_bytes": exports, "download_bytes": folder_bytes(self.core.paths.downloads)}

    def guards(self) -> list[GuardReading]:
        """The facade's guards (backend/api/guards.py), each with its setting, its value read from the environment now
        as the limiters read it at start, its default, what it limits, its kind and its refusal's sentences
        (``python -m backend status``). A setting changed since this facade started applies at the next start."""
        return guard_readings()

    def scheduler_health(self) -> SchedulerHealth | None:
        """The in-process scheduler's health for the header (alive, last error, failures in a row, jobs running);
        None when this process runs no scheduler (``detached``/``none`` modes: another process owns the queue)."""
        return self.core.scheduler.health() if self.core.scheduler is not None else None
