"""Where the app keeps its data: the SQLite store, job folders and built models."""

from __future__ import annotations

import errno
import os
import re
import secrets
from pathlib import Path

DATA_DIR_ENV = "STUDIO_DATA_DIR"


def default_data_dir() -> Path:
    """``$STUDIO_DATA_DIR``, else a Space's persistent volume (``/data``) when mounted, else ``./data``."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser().resolve()
    if os.environ.get("SPACE_ID") and Path("/data").is_dir() and os.access("/data", os.W_OK):
        return Path("/data/studio")
    return Path("data").resolve()


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
        folder = safe_name(owner)
        # safe_name keeps dots, and "." or ".." as a folder would be the uploads root or the data dir itself.
        return self.root / "uploads" / (folder if folder.strip(".") else folder.replace(".", "_"))

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

    def ensure(self) -> "DataPaths":
        """Create the data directory's folders if missing; returns self."""
        (self.root / "jobs").mkdir(parents=True, exist_ok=True)
        self.models.mkdir(parents=True, exist_ok=True)
        self.downloads.mkdir(parents=True, exist_ok=True)
        return self


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
