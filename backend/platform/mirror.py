"""The durable copy kept on a network filesystem (``network`` mode of ``backend.platform.storage``): files copied whole
or not at all, the store snapshotted by SQLite's backup API, and everything brought back at start."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.paths import TRANSIENT_FOLDERS, storage_problem
from backend.platform.snapshot_rescue import is_set_aside, rescue_snapshot
from backend.platform.storage import DB_NAME, StorageError, StoragePlan

log = logging.getLogger(__name__)

SNAPSHOT_INTERVAL_ENV = "STUDIO_SNAPSHOT_INTERVAL_S"
PART = ".part-"  # the infix of a file or folder being written under its temporary name
# What the mirror leaves out: the live store (snapshotted instead), locks, logs of this process, files handed to a
# browser, the disk-full reserve and models the studio builds again at start.
SKIPPED_TOP = frozenset({"downloads", "models", ".space-reserve", "scheduler.lock", "scheduler.log", "worker-pool.log"})
STORE_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal")


# --- atomic writes ---------------------------------------------------------------------------------------------
def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened or synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _part_name(target: Path) -> Path:
    return target.with_name(f".{target.name}{PART}{os.getpid()}-{threading.get_ident()}")


def copy_file_atomically(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` whole or not at all: into a temporary name beside it, synced, then renamed.
    Keeps the modification time (the mirror compares it). Reads ``source`` as a stream (a pipe works too)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_name(target)
    try:
        with open(source, "rb") as src, open(part, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
        with contextlib.suppress(OSError):
            shutil.copystat(source, part)
        os.replace(part, target)
    except BaseException:
        part.unlink(missing_ok=True)
        raise
    _fsync_dir(target.parent)


def copy_tree_atomically(source: Path, target: Path) -> None:
    """Copy the folder ``source`` to ``target`` (which must not exist) as one unit: under a temporary name, renamed."""
    target.parent.mkdir(parents=True, exist_ok=True)
    part = _part_name(target)
    try:
        shutil.copytree(source, part, symlinks=False)
        for file in part.rglob("*"):
            if file.is_file():
                with open(file, "rb+") as fh:
                    os.fsync(fh.fileno())
        os.replace(part, target)
    except BaseException:
        shutil.rmtree(part, ignore_errors=True)
        raise
    _fsync_dir(target.parent)


# --- the store's snapshot --------------------------------------------------------------------------------------
def backup_store(db: Path, target: Path) -> None:
    """A consistent copy of the live SQLite store at ``target`` (local disk), by SQLite's online backup API:
    writers may go on meanwhile; the copy is one committed state."""
    target.unlink(missing_ok=True)
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        dst = sqlite3.connect(target)
        try:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")  # a single file: no -wal beside it to carry
        finally:
            dst.close()
    finally:
        src.close()


def snapshot_ok(path: Path) -> str | None:
    """None when ``path`` is a sound SQLite database, else what is wrong with it (a sentence fragment)."""
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
        try:
            result = con.execute("PRAGMA quick_check").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error as exc:
        return str(exc)
    return None if result == "ok" else str(result)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _signature(stat: os.stat_result) -> tuple[int, int]:
    """What says a live file changed: its size and modification time in nanoseconds (local disk)."""
    return stat.st_size, stat.st_mtime_ns


def _same_copy(live: tuple[int, int], durable: os.stat_result) -> bool:
    """Whether a durable file is the copy of a live one of signature ``live`` (network filesystems keep the
    modification time to the second at best)."""
    return durable.st_size == live[0] and int(durable.st_mtime) == live[1] // 1_000_000_000


def _is_checkpoint(path: Path) -> bool:
    return path.name.startswith("checkpoint-") and path.name.rsplit("-", 1)[-1].isdigit()


def _scan(root: Path) -> tuple[dict[str, tuple[int, int]], dict[str, Path]]:
    """The files under ``root`` the mirror keeps, by relative path, and the complete checkpoint folders apart (a
    checkpoint is copied as one unit once its ``trainer_state.json``, written last, is there). Temporary names,
    symlinks and the skipped top-level entries are left out."""
    files: dict[str, tuple[int, int]] = {}
    checkpoints: dict[str, Path] = {}
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if PART in entry.name or entry.is_symlink():
                continue
            path = Path(entry.path)
            rel = path.relative_to(root).as_posix()
            if folder == root and (
                entry.name in SKIPPED_TOP or entry.name in STORE_FILES or is_set_aside(entry.name, DB_NAME)
            ):
                continue
            if entry.name.startswith(".snapshot-") or entry.name in TRANSIENT_FOLDERS:  # copies gone at the next read
                continue
            try:
                if entry.is_dir():
                    if _is_checkpoint(path):
                        if (path / "trainer_state.json").is_file():
                            checkpoints[rel] = path
                        continue
                    stack.append(path)
                elif entry.is_file():
                    files[rel] = _signature(entry.stat())
            except OSError:
                continue
    return files, checkpoints


@dataclass
class MirrorStatus:
    """What the header and ``status`` say about the durable copy."""

    last_snapshot_at: float | None = None
    last_error: str | None = None
    files_copied: int = 0
    notes: list[str] = field(default_factory=list)  # what the start-up restore did
    warnings: list[str] = field(default_factory=list)  # those of its notes the header shows (a cut snapshot)
    set_aside: list[str] = field(default_factory=list)  # a sentence per damaged snapshot kept aside on the data dir


class Mirror:
    """Keeps ``durable`` a consistent copy of ``live`` (network mode): the store's snapshot and every file.

    Each cycle first copies the files that changed, then backs the store up (state S, by SQLite's backup API) and
    publishes that snapshot under a temporary name, renamed. So S is at least as new as every durable checkpoint
    (the trainer's callback commits a step's metrics before its checkpoint is written): a resume from the newest
    one leaves no step missing. When a job ended between the copy and the backup, its files are copied once more
    before S is published, so S never names an adapter that is not there whole. What the live side deleted (a
    rotated checkpoint) goes from the durable side only after S is published: a cycle cut short between its copies
    and its snapshot leaves the previous S beside the checkpoints it can resume from, not only newer ones the restore
    sets aside (``reaping``). A thread runs a cycle when
    something changed, at most one every ``interval_s``; a job reaching a final status is copied at once; ``stop``
    runs a last cycle.
    """

    def __init__(
        self,
        live: Path,
        durable: Path,
        interval_s: float | None = None,
        status: MirrorStatus | None = None,
        owns: Callable[[], bool] | None = None,
    ):
        self.live = live
        # Whether this process serves the queue now: two app processes on one data dir (a restart's old and new
        # overlapping) must not both write /data, so only the scheduler lock's holder copies.
        self.owns = owns or (lambda: True)
        self.durable = durable
        self.interval_s = (
            interval_s if interval_s is not None else float(os.environ.get(SNAPSHOT_INTERVAL_ENV, "3") or 3)
        )
        self.status = status or MirrorStatus()
        self._copied: dict[str, tuple[int, int]] = {}  # rel -> the live signature last copied (or found equal)
        # checkpoint folder -> the signature of the live trainer_state.json last copied
        self._checkpoints: dict[str, tuple[int, int]] = {}
        # What the live side held at the last cycle (a later absence is a deletion). Before the first cycle, what the
        # durable side holds: the start-up restore brought all of it back, so what the live side lacks by then was
        # deleted there (a checkpoint set aside, a job deleted).
        self._seen: set[str] | None = None
        self._data_version: tuple | None = None
        self._finished: int | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_cycle = 0.0
        self._served = False  # whether a cycle ran while this process served the queue

    # --- lifecycle
    def start(self) -> Mirror:
        """Run the cycles in a background thread; returns self."""
        self._thread = threading.Thread(target=self._serve, name="studio-mirror", daemon=True)
        self._thread.start()
        return self

    def stop(self, last_cycle: bool | None = None) -> None:
        """Stop the thread, then run one more cycle, so a shutdown leaves the newest state durable: when
        ``last_cycle``, or (None) when this process served the queue at any cycle (its lock may be gone by now)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
        if last_cycle or (last_cycle is None and (self._served or self.owns())):
            self.sync(force=True)

    def _serve(self) -> None:
        while not self._stop.wait(min(1.0, self.interval_s)):
            if not self.owns():  # another process serves the queue and keeps the copy
                continue
            finished = self._finished_jobs()
            urgent = finished is not None and finished != self._finished
            if urgent or time.monotonic() - self._last_cycle >= self.interval_s:
                self.sync()

    # --- one cycle
    def _finished_jobs(self) -> int | None:
        """How many jobs have a final status (a change means a job just ended: copy it now)."""
        db = self.live / DB_NAME
        try:
            con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
            try:
                row = con.execute("SELECT COUNT(*) FROM jobs WHERE finished_at IS NOT NULL").fetchone()
            finally:
                con.close()
        except sqlite3.Error:
            return None
        return int(row[0])

    def _store_changed(self) -> bool:
        """Whether the live store (its file or its WAL) changed since the last look, or /data has no snapshot yet."""
        try:
            signature = tuple(
                _signature(os.stat(self.live / name)) if (self.live / name).exists() else None
                for name in STORE_FILES[:2]
            )
        except OSError:
            return True
        changed = signature != self._data_version or not (self.durable / DB_NAME).exists()
        self._data_version = signature
        return changed

    def sync(self, force: bool = False) -> bool:
        """One cycle (see the class docstring); whether it completed. An error is kept in ``status.last_error``
        (the header shows it) and the next cycle tries again. Skipped (False) while another process serves the
        queue, unless ``force``."""
        if not force and not self.owns():
            return False
        self._served = True
        with self._lock:
            self._last_cycle = time.monotonic()
            pending = self.live / ".snapshot-pending.sqlite3"
            try:
                before = self._finished_jobs()
                snapshot = (self.live / DB_NAME).exists() and (self._store_changed() or before != self._finished)
                gone = self._sync_files()
                if snapshot:
                    backup_store(self.live / DB_NAME, pending)
                    after = self._finished_jobs()
                    if after != before:  # a job ended meanwhile: its adapter again, so the snapshot names none half
                        self._sync_files()  # what it finds gone waits for the next cycle
                    copy_file_atomically(pending, self.durable / DB_NAME)
                    self.status.last_snapshot_at = time.time()
                    self._finished = after
                # Only now, with the new snapshot published: until then the durable store is the previous one, and a
                # checkpoint rotated away since may be the newest it can resume from (the restore sets aside every
                # checkpoint past the store's last logged step).
                self._delete_gone(gone)
                self.status.last_error = None
                return True
            except (OSError, sqlite3.Error) as exc:
                self._data_version = None  # the store's change is not on /data yet: the next cycle snapshots it
                why = storage_problem(exc) if isinstance(exc, OSError) else str(exc)
                self.status.last_error = f"the copy on {self.durable} could not be written: {why}"
                log.warning("mirror: %s", self.status.last_error)
                return False
            finally:
                pending.unlink(missing_ok=True)

    def _sync_files(self) -> set[str]:
        """Copy what changed on the live side; what the durable side holds that the live side no longer does (a
        deleted job, a rotated checkpoint), for :meth:`_delete_gone` once the cycle's snapshot is published."""
        if self._seen is None:
            durable_files, durable_checkpoints = _scan(self.durable)
            self._seen = set(durable_files) | set(durable_checkpoints)
        files, checkpoints = _scan(self.live)
        for rel, signature in files.items():
            if self._copied.get(rel) == signature:
                continue
            target = self.durable / rel
            try:
                if target.is_file() and _same_copy(signature, target.stat()):
                    self._copied[rel] = signature
                    continue
            except OSError:
                pass
            try:
                copy_file_atomically(self.live / rel, target)
            except FileNotFoundError:  # deleted while we looked: the next cycle sees it gone
                continue
            self._copied[rel] = signature
            self.status.files_copied += 1
        for rel, folder in checkpoints.items():
            try:
                state = _signature((folder / "trainer_state.json").stat())
            except OSError:
                continue
            if self._checkpoints.get(rel) == state:
                continue
            target = self.durable / rel
            durable_state = target / "trainer_state.json"
            if not (durable_state.is_file() and _same_copy(state, durable_state.stat())):
                if target.exists():  # the step was trained again (a job started over): the old copy goes first
                    shutil.rmtree(target)
                try:
                    copy_tree_atomically(folder, target)
                except (FileNotFoundError, shutil.Error):  # rotated away while we copied: the next cycle sees it gone
                    continue
                self.status.files_copied += 1
            self._checkpoints[rel] = state
        present = set(files) | set(checkpoints)
        gone = self._seen - present
        self._seen |= present  # a cycle cut short still knows what it copied, to delete it once it is gone
        return gone

    def _delete_gone(self, gone: set[str]) -> None:
        """Remove ``gone`` (what :meth:`_sync_files` found deleted on the live side) from the durable side."""
        assert self._seen is not None  # set by the cycle's first _sync_files
        for rel in gone:
            target = self.durable / rel
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            self._copied.pop(rel, None)
            self._checkpoints.pop(rel, None)
            _prune_empty(target.parent, self.durable)
        self._seen -= gone


def _prune_empty(folder: Path, stop: Path) -> None:
    while folder != stop and stop in folder.parents:
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


# --- start-up ----------------------------------------------------------------------------------------------------
def restore(plan: StoragePlan, status: MirrorStatus | None = None) -> list[str]:
    """Network mode, at start, before the store opens: bring the live side back from the durable copy.

    When the live store is missing or older than the snapshot, the snapshot (checked first) replaces it and every
    durable file comes back; otherwise only files missing on the live side come back. Leftovers of a copy cut short
    (a SIGKILL mid-snapshot) are removed: the previous snapshot is the one used. A damaged snapshot is set aside under
    a name of its own before anything can be written over it, and when the live side has no store its rows are
    recovered into one (backend/platform/snapshot_rescue.py). Returns what it did, as sentences;
    ``status`` keeps them, and apart the ones the header should show (``warnings``).
    """
    status = status or MirrorStatus()
    if plan.mode != "network" or plan.durable is None:
        return []
    live, durable = plan.live, plan.durable
    live.mkdir(parents=True, exist_ok=True)
    durable.mkdir(parents=True, exist_ok=True)
    notes, warnings = status.notes, status.warnings
    cut = [p for p in durable.glob(f".{DB_NAME}{PART}*")]
    for leftover in cut:
        leftover.unlink(missing_ok=True)
    snapshot = durable / DB_NAME
    if cut:
        previous = (
            f"the previous one, of {_when(snapshot.stat().st_mtime)}, is used"
            if snapshot.exists()
            else "there is no earlier one"
        )
        warnings.append(f"A snapshot of the store was cut short when the studio last stopped; {previous}.")
        notes.append(warnings[-1])
    restore_store = False
    if snapshot.exists():
        local_db = live / DB_NAME
        local_time = max((os.stat(live / n).st_mtime for n in STORE_FILES[:2] if (live / n).exists()), default=None)
        if local_time is None or local_time < snapshot.stat().st_mtime:
            problem = snapshot_ok(snapshot)
            if problem:  # set aside before the mirror writes a new one there, and its rows recovered if need be
                try:
                    rescue_snapshot(snapshot, problem, local_db if local_time is None else None)
                except OSError as exc:  # not started at all rather than a new snapshot written over the only copy
                    raise StorageError(
                        f"The store's snapshot {snapshot} is damaged ({problem}) and could not be set aside "
                        f"({storage_problem(exc)}), so the studio does not start rather than write over it: move it "
                        "aside by hand (keep it: its jobs can be recovered) and start again."
                    ) from None
            else:
                incoming = live / ".snapshot-restore.sqlite3"
                copy_file_atomically(snapshot, incoming)
                for name in STORE_FILES:
                    (live / name).unlink(missing_ok=True)
                os.replace(incoming, local_db)
                restore_store = True
                notes.append(f"Restored the job store from its snapshot of {_when(snapshot.stat().st_mtime)}.")
    restored = 0
    durable_files, durable_checkpoints = _scan(durable)
    for rel in durable_files:
        target = live / rel
        if target.exists() and (not restore_store or _same_copy(_signature(target.stat()), (durable / rel).stat())):
            continue
        copy_file_atomically(durable / rel, target)
        restored += 1
    for rel, folder in durable_checkpoints.items():
        if not (live / rel).exists():
            copy_tree_atomically(folder, live / rel)
            restored += 1
    for leftover in [*durable.rglob(f".*{PART}*")]:  # copies cut short: never used
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
    if restored:
        notes.append(f"Brought back {restored} files and checkpoints from {durable}.")
    for note in notes:
        log.info("storage: %s", note)
    return notes
