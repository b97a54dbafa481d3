"""Where the studio's data lives, by what its filesystem can do, and the durable copy kept on a network filesystem.

A Space's own disk is wiped at every restart; what survives is the volume mounted at ``/data`` (a Storage Bucket, or
the older persistent disk). A bucket is a network filesystem: files are fetched lazily, and POSIX locks and shared
memory do not behave as on a local disk, so SQLite's WAL must not live there. Three modes:

- ``local``: ``$STUDIO_DATA_DIR`` is a local disk; everything lives there (today's layout).
- ``network``: ``$STUDIO_DATA_DIR`` is on a network filesystem (nfs, fuse, 9p, virtiofs, ...). The live store and
  every file live on a local disk (``$STUDIO_LOCAL_DIR``), and a :class:`Mirror` keeps a durable copy on the data dir:
  a consistent snapshot of the store taken with SQLite's online backup API (at most one every few seconds after a
  change, at every finished job, at shutdown) and each file (adapters, checkpoints, logs, uploads, feedback),
  always written under a temporary name and renamed, never half. :func:`restore` brings them back at start.
- ``none``: a Space with no storage at all: everything vanishes at the next restart, and the header says so.

``STUDIO_DATA_FS=auto|network|local`` overrides the detection (``auto``: read the mount type).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import shutil
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from backend.core.paths import DATA_DIR_ENV, SPACE_DATA_DIR, default_data_dir, storage_problem
from backend.platform.snapshot_rescue import is_set_aside, rescue_snapshot

log = logging.getLogger(__name__)

LOCAL_DIR_ENV = "STUDIO_LOCAL_DIR"
DATA_FS_ENV = "STUDIO_DATA_FS"
SNAPSHOT_INTERVAL_ENV = "STUDIO_SNAPSHOT_INTERVAL_S"
DB_NAME = "studio.sqlite3"
PART = ".part-"  # the infix of a file or folder being written under its temporary name
STORAGE_HELP = (
    "attach storage in the Space's Settings (a Storage Bucket mounted at /data, or persistent storage) and restart"
)

# Filesystems whose files live on another machine (or behind a userspace daemon): SQLite's WAL and POSIX locks are
# not to be trusted there. ``fuse.*`` covers bucket and object-store mounts (s3fs, gcsfuse, hf-mount ...).
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "virtiofs", "ceph", "glusterfs", "lustre", "gpfs", "afs", "fuse"}
)
LOCAL_FUSE = frozenset({"fuseblk"})  # a local block device through FUSE (ntfs-3g): a disk, not a network

# What the mirror leaves out: the live store (snapshotted instead), locks, logs of this process, files handed to a
# browser, the disk-full reserve and models the studio builds again at start.
SKIPPED_TOP = frozenset({"downloads", "models", ".space-reserve", "scheduler.lock", "scheduler.log", "worker-pool.log"})
STORE_FILES = (DB_NAME, f"{DB_NAME}-wal", f"{DB_NAME}-shm", f"{DB_NAME}-journal")


class StorageError(RuntimeError):
    """A storage setting that cannot work, as a sentence naming the variable."""


def is_network_fs(fstype: str) -> bool:
    """Whether a mount of type ``fstype`` (as /proc/self/mountinfo names it) is a network filesystem.

    >>> [is_network_fs(t) for t in ("ext4", "overlay", "tmpfs", "nfs4", "fuse.s3fs", "9p", "virtiofs", "fuseblk")]
    [False, False, False, True, True, True, True, False]
    """
    if fstype in LOCAL_FUSE:
        return False
    return fstype in NETWORK_FS or fstype.split(".", 1)[0] in NETWORK_FS


def _unescape(field_text: str) -> str:
    r"""mountinfo escapes space, tab, newline and backslash as octal (``\040``)."""
    return field_text.encode("utf-8").decode("unicode_escape").encode("latin-1").decode("utf-8")


def mount_type(path: Path | str, mountinfo: str | None = None) -> str | None:
    r"""The filesystem type of the mount holding ``path`` (its nearest existing folder), from /proc/self/mountinfo
    (or the ``mountinfo`` text given, read as it is).

    >>> info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:50 / /data rw - fuse.hf-mount hf rw\n"
    >>> mount_type("/data/studio/jobs", info), mount_type("/home/user", info), mount_type("/database", info)
    ('fuse.hf-mount', 'ext4', 'ext4')
    """
    target = Path(os.path.abspath(path))
    if mountinfo is None:  # the live system: the nearest folder that exists, links resolved
        while not target.exists() and target != target.parent:
            target = target.parent
        target = target.resolve()
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text()
        except OSError:
            return None
    best: tuple[int, str] | None = None
    for line in mountinfo.splitlines():
        before, sep, after = line.partition(" - ")
        fields = before.split()
        if not sep or len(fields) < 5 or not after.split():
            continue
        point = Path(_unescape(fields[4]))
        if (target == point or point in target.parents) and (best is None or len(point.parts) >= best[0]):
            best = (len(point.parts), after.split()[0])
    return best[1] if best else None


@dataclass(frozen=True)
class StoragePlan:
    """Where the studio works (``live``, the DataPaths root) and where its durable copy is (``durable``)."""

    mode: str  # "local", "network" or "none"
    live: Path
    durable: Path | None  # network mode: the data dir the mirror keeps; None: ``live`` is all there is
    fstype: str | None
    decided_by: str  # how the mode was chosen, for the status line

    def describe(self) -> str:
        """One line for ``python -m backend status`` and the header."""
        if self.mode == "network":
            return (
                f"Storage: network filesystem ({self.decided_by}): the live store is on local disk at {self.live}; "
                f"a snapshot and every file are copied to {self.durable}"
            )
        if self.mode == "none":
            return f"Storage: none: everything is in {self.live} and vanishes at the next restart"
        return f"Storage: local disk ({self.decided_by}) at {self.live}"

    def warning(self) -> str | None:
        """The header's sentence for a Space without storage; None otherwise."""
        if self.mode != "none":
            return None
        return (
            "This Space has no persistent storage: jobs, adapters, uploads and feedback vanish at its next restart "
            f"(settings change, sleep, update). To keep them, {STORAGE_HELP}; until then, push adapters to the Hub "
            "(on by default here)."
        )


def _on_space() -> bool:
    return bool(os.environ.get("SPACE_ID"))


def default_local_dir(durable: Path) -> Path:
    """A local-disk folder for the live store of ``durable`` (one per data dir, so two studios never share one)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    digest = hashlib.sha256(str(durable).encode("utf-8")).hexdigest()[:10]
    return cache / "post-training-studio" / f"live-{digest}"


def storage_plan(data_dir: Path | str | None = None) -> StoragePlan:
    """Decide the storage mode from the settings and the data dir's mount type (see the module docstring).

    ``data_dir`` stands for ``$STUDIO_DATA_DIR``. Raises StorageError for an unknown ``STUDIO_DATA_FS``.
    """
    choice = os.environ.get(DATA_FS_ENV, "auto").strip().lower() or "auto"
    if choice not in ("auto", "network", "local"):
        raise StorageError(f"{DATA_FS_ENV} must be auto, network or local (got {choice!r})")
    durable = Path(data_dir).expanduser().resolve() if data_dir is not None else default_data_dir()
    if data_dir is None and _on_space() and not os.environ.get(DATA_DIR_ENV) and durable != SPACE_DATA_DIR:
        return StoragePlan("none", durable, None, mount_type(durable), "no /data volume on this Space")
    fstype = mount_type(durable)
    if choice == "auto":
        network = fstype is not None and is_network_fs(fstype)
        decided_by = f"{fstype or 'unknown'} mount"
    else:
        network = choice == "network"
        decided_by = f"{DATA_FS_ENV}={choice}"
    if not network:
        return StoragePlan("local", durable, None, fstype, decided_by)
    local = os.environ.get(LOCAL_DIR_ENV, "").strip()
    live = Path(local).expanduser().resolve() if local else default_local_dir(durable)
    if live == durable:
        raise StorageError(f"{LOCAL_DIR_ENV} must be a folder on local disk other than {DATA_DIR_ENV} ({durable})")
    return StoragePlan("network", live, durable, fstype, decided_by)


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
            if entry.name.startswith(".snapshot-"):
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
    before S is published, so S never names an adapter that is not there whole. A thread runs a cycle when
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
                self._sync_files()
                if snapshot:
                    backup_store(self.live / DB_NAME, pending)
                    after = self._finished_jobs()
                    if after != before:  # a job ended meanwhile: its adapter again, so the snapshot names none half
                        self._sync_files(deletions=False)
                    copy_file_atomically(pending, self.durable / DB_NAME)
                    self.status.last_snapshot_at = time.time()
                    self._finished = after
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

    def _sync_files(self, deletions: bool = True) -> None:
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
        if not deletions:
            return
        for rel in self._seen - present:  # deleted on the live side since the last cycle (a job, a rotated checkpoint)
            target = self.durable / rel
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
            self._copied.pop(rel, None)
            self._checkpoints.pop(rel, None)
            _prune_empty(target.parent, self.durable)
        self._seen = present


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
