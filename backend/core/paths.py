"""Where the app keeps its data: the SQLite store, job folders and built models."""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import shutil
from collections.abc import Iterable
from pathlib import Path

DATA_DIR_ENV = "STUDIO_DATA_DIR"
SPACE_DATA_DIR = Path("/data/studio")  # on a Space with a /data volume (backend/platform/storage.py decides the mode)
# What ships with the code: built-in datasets, the arithmetic model, word lists.
ASSETS_DIR = Path(__file__).resolve().parents[1] / "assets"
BUILTIN_DATASETS_DIR = ASSETS_DIR / "datasets"
# Inside a user's uploads folder, both transient (a dot: never an upload id; never mirrored to durable storage):
DATASETS_CACHE = ".datasets-cache"  # datasets' copies of the user's rows while a read or a job uses them
STAGING = ".staging"  # uploads being checked (backend/data/uploads.py)
TRANSIENT_FOLDERS = frozenset({DATASETS_CACHE, STAGING})


def on_space() -> bool:
    """Whether the app runs on a Hugging Face Space (the platform sets ``SPACE_ID``)."""
    return bool(os.environ.get("SPACE_ID"))


def default_data_dir() -> Path:
    """``$STUDIO_DATA_DIR``, else a Space's persistent volume (``/data``) when mounted, else ``./data``."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    if on_space() and Path("/data").is_dir() and os.access("/data", os.W_OK):
        return SPACE_DATA_DIR
    return Path("data").resolve()


DOWNLOAD_MAX_AGE_S = 24 * 3600  # a download folder older than a day is swept (exports keep their own copy)


def folder_bytes(folder: Path) -> int:
    """The bytes of the files under ``folder`` (0 when it is gone); links are not followed."""
    total = 0
    for path in folder.rglob("*") if folder.is_dir() else ():
        try:
            if path.is_file() and not path.is_symlink():
                total += path.stat().st_size
        except OSError:
            continue
    return total


class DataPaths:
    """The layout of one data directory."""

    def __init__(self, root: Path | str | None = None):
        self.root = Path(root).resolve() if root is not None else default_data_dir()

    @property
    def db(self) -> Path:
        """The job store's SQLite database."""
        return self.root / "studio.sqlite3"

    @property
    def models(self) -> Path:
        """Where the studio keeps models it builds itself (the demo model)."""
        return self.root / "models"

    @property
    def scheduler_lock(self) -> Path:
        """The lock file that lets one scheduler at a time serve this data directory."""
        return self.root / "scheduler.lock"

    def job_dir(self, job_id: str) -> Path:
        """A job's own folder: its log, checkpoints and outputs."""
        return self.root / "jobs" / job_id

    def job_log(self, job_id: str) -> Path:
        """A job's training log (the worker's stdout and stderr)."""
        return self.job_dir(job_id) / "train.log"

    def job_output(self, job_id: str) -> Path:
        """Trainer output_dir: checkpoints live here."""
        return self.job_dir(job_id) / "output"

    def job_adapter(self, job_id: str) -> Path:
        """Where a job saves its final LoRA adapter."""
        return self.job_dir(job_id) / "adapter"

    def uploads(self, owner: str) -> Path:
        """The folder holding one user's kept uploads; an upload id resolves only inside it."""
        return self.root / "uploads" / user_folder(owner)

    def feedback(self, kind: str, owner: str) -> Path:
        """One user's feedback log of one kind (one of ``FEEDBACK_KINDS``: ``preferences``, ``thumbs``, ...)."""
        return self.root / kind / f"{user_folder(owner)}.jsonl"

    def move_user_folders(self, owners: Iterable[str]) -> list[str]:
        """Once per data dir: move each known owner's uploads and feedback from the folder names of layout 1 (lossy,
        so two users could share one) to ``user_folder``'s. A layout-1 folder that two known owners map to belongs
        to neither for sure, so it stays where it is. The moves made, as "old -> new" lines."""
        marker = self.root / USER_LAYOUT_MARKER
        if marker.exists():
            return []
        claims: dict[str, list[str]] = {}
        for owner in set(owners):
            claims.setdefault(_layout1_folder(owner), []).append(owner)
        moved = []
        for old, claimants in claims.items():
            if len(claimants) != 1 or old == user_folder(claimants[0]):
                continue
            for source, target in (
                (self.root / "uploads" / old, self.uploads(claimants[0])),
                *((self.root / kind / f"{old}.jsonl", self.feedback(kind, claimants[0])) for kind in FEEDBACK_KINDS),
            ):
                if source.exists() and not target.exists():
                    os.replace(source, target)
                    moved.append(f"{source.relative_to(self.root)} -> {target.relative_to(self.root)}")
        marker.write_text("2\n")
        return moved

    @property
    def downloads(self) -> Path:
        """Files handed to a browser (adapter zips, exports): the only part of the data dir the web server may read.

        The app passes this folder, not the data dir, to Gradio's ``allowed_paths``: the store, uploads and other
        users' jobs stay unreachable by URL.
        """
        return self.root / "downloads"

    def new_download(self, name: str) -> Path:
        """A fresh path ``downloads/<random>/<name>`` for one file handed to one browser (its folder is created).

        The random folder makes the URL unguessable by other users and keeps two requests for the same file apart.
        """
        folder = self.downloads / secrets.token_hex(16)
        folder.mkdir(parents=True, exist_ok=True)
        return folder / safe_name(name)

    def sweep_downloads(self, older_than_s: float = DOWNLOAD_MAX_AGE_S, now: float | None = None) -> int:
        """Remove the download folders made more than ``older_than_s`` ago (a day: a browser has long fetched its
        file); the bytes freed."""
        import time

        freed, cutoff = 0, (time.time() if now is None else now) - older_than_s
        for folder in self.downloads.glob("*") if self.downloads.is_dir() else ():
            try:
                if not folder.is_dir() or folder.stat().st_mtime > cutoff:
                    continue
                freed += folder_bytes(folder)
            except OSError:
                continue
            shutil.rmtree(folder, ignore_errors=True)
        return freed

    @property
    def space_reserve(self) -> Path:
        """A file of zeros held on the data disk so that, when the disk fills up, deleting it leaves room to record
        how the jobs ended (the store cannot say "failed" on a disk with no free byte)."""
        return self.root / ".space-reserve"

    def keep_space_reserve(self, size: int) -> bool:
        """Write a reserve of ``size`` bytes if it is missing and the disk has room for it several times over;
        whether it is there."""
        reserve = self.space_reserve
        if reserve.exists():
            return True
        try:
            if size == 0 or shutil.disk_usage(self.root).free < 8 * size:
                return False
            with open(reserve, "wb") as fh:
                fh.write(b"\0" * size)
                fh.flush()
                os.fsync(fh.fileno())
            return True
        except OSError:
            reserve.unlink(missing_ok=True)
            return False

    def release_space_reserve(self) -> bool:
        """Delete the reserve to free its space now; whether there was one."""
        try:
            self.space_reserve.unlink()
            return True
        except OSError:
            return False

    def ensure(self) -> DataPaths:
        """Create the data directory's folders if missing; returns self."""
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        self.models.mkdir(parents=True, exist_ok=True)
        self.downloads.mkdir(parents=True, exist_ok=True)
        return self


USER_LAYOUT_MARKER = ".user-folders-v2"
FEEDBACK_KINDS = ("preferences", "thumbs", "arena-preferences")
_PLAIN = re.compile(r"[A-Za-z0-9-]")


def user_folder(name: str) -> str:
    """A user's name as one folder name, injectively: two different names never share a folder.

    Letters, digits and ``-`` stay as they are; every other character becomes ``_`` and the hex of its UTF-8 bytes
    (so ``_`` itself is escaped, and no name can be ``.`` or ``..``). An empty name is ``_``; one whose folder name
    would pass 200 characters is ``~`` and its SHA-256 (no escape makes ``~``).

    >>> user_folder("ada-lovelace"), user_folder("ada lovelace"), user_folder("ada_lovelace"), user_folder("..")
    ('ada-lovelace', 'ada_20lovelace', 'ada_5Flovelace', '_2E_2E')
    >>> user_folder("zoë") != user_folder("zoé")
    True
    """
    if not name:
        return "_"
    folder = "".join(c if _PLAIN.fullmatch(c) else "".join(f"_{b:02X}" for b in c.encode("utf-8")) for c in name)
    if len(folder) > 200:
        return "~" + hashlib.sha256(name.encode("utf-8")).hexdigest()
    return folder


def _layout1_folder(owner: str) -> str:
    """The folder name layout 1 gave a user (``safe_name``; "." or ".." with dots replaced): lossy."""
    folder = safe_name(owner)
    return folder if folder.strip(".") else folder.replace(".", "_")


def safe_name(text: str) -> str:
    """``text`` usable as one path component (user names, uploaded file stems): anything else becomes ``_``.

    >>> safe_name("ada lovelace/../x")
    'ada_lovelace_.._x'
    """
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)


def storage_problem(exc: OSError) -> str:
    """What went wrong writing to the data dir, in words a person can act on (no errno numbers).

    >>> import errno; storage_problem(OSError(errno.ENOSPC, "No space left on device"))
    'the disk that holds the studio’s data is full; free some space and try again'
    """
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return "the disk that holds the studio’s data is full; free some space and try again"
    if exc.errno == errno.EROFS:
        return "the studio’s data folder is read-only just now, so nothing can be written; try again later"
    return f"the studio’s data folder could not be written ({exc.strerror or type(exc).__name__}); try again"
