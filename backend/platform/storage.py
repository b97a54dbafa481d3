"""Where the studio's data lives, by what its filesystem can do (the durable copy itself: ``backend.platform.mirror``).

A Space's own disk is wiped at every restart; what survives is the volume mounted at ``/data`` (a Storage Bucket, or
the older persistent disk). A bucket is a network filesystem: files are fetched lazily, and POSIX locks and shared
memory do not behave as on a local disk, so SQLite's WAL must not live there. Three modes:

- ``local``: ``$STUDIO_DATA_DIR`` is a local disk; everything lives there (today's layout).
- ``network``: ``$STUDIO_DATA_DIR`` is on a network filesystem (nfs, fuse, 9p, virtiofs, ...). The live store and
  every file live on a local disk (``$STUDIO_LOCAL_DIR``), and a ``Mirror`` keeps a durable copy on the data dir: a
  consistent snapshot of the store taken with SQLite's online backup API (at most one every few seconds after a
  change, at every finished job, at shutdown) and each file (adapters, checkpoints, logs, uploads, feedback),
  always written under a temporary name and renamed, never half. ``restore`` there brings them back at start.
- ``none``: a Space with no storage at all: everything vanishes at the next restart, and the header says so.

``STUDIO_DATA_FS=auto|network|local`` overrides the detection (``auto``: read the mount type).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from backend.core.paths import DATA_DIR_ENV, SPACE_DATA_DIR, default_data_dir

LOCAL_DIR_ENV = "STUDIO_LOCAL_DIR"
DATA_FS_ENV = "STUDIO_DATA_FS"
DB_NAME = "studio.sqlite3"
STORAGE_HELP = (
    "attach storage in the Space's Settings (a Storage Bucket mounted at /data, or persistent storage) and restart"
)

# Filesystems whose files live on another machine (or behind a userspace daemon): SQLite's WAL and POSIX locks are
# not to be trusted there. ``fuse.*`` covers bucket and object-store mounts (s3fs, gcsfuse, hf-mount ...).
NETWORK_FS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "virtiofs", "ceph", "glusterfs", "lustre", "gpfs", "afs", "fuse"}
)
LOCAL_FUSE = frozenset({"fuseblk"})  # a local block device through FUSE (ntfs-3g): a disk, not a network


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
