"""A user's kept uploads as a whole: what they keep (listed, deleted by its owner), the quota on their bytes, and the
web server's temporary files that identical uploads share until the last check of them is done."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from backend.core.spec import SpecError
from backend.core.uploads import is_upload_id, upload_display_name, upload_file
from backend.data.user_cache import cache_root, cached_bytes, sweep_reads
from backend.platform.limits import count_out, once_under
from backend.platform.space_runtime import on_space

QUOTA_SETTING = "STUDIO_UPLOAD_QUOTA_MB"
DEFAULT_SPACE_QUOTA_MB = 2048  # on a Space, where /data is shared by everyone; unlimited elsewhere unless set
WHERE_TO_DELETE = "delete uploads you no longer need in the Train tab's Dataset section (Your uploads)"


@dataclass(frozen=True)
class StoredUpload:
    """One kept upload: its id (what a spec names), the file's name as uploaded, its size and when it was kept."""

    upload_id: str
    name: str
    size: int
    kept_at: float

    @property
    def size_text(self) -> str:
        """Its size for people (``size_text``)."""
        return size_text(self.size)


def size_text(size: int) -> str:
    """A file's size for people: whole KB below a megabyte, MB with one decimal below ten, whole MB above.

    >>> size_text(1100), size_text(633_000), size_text(int(1.24 * 2**20)), size_text(2047 * 2**20)
    ('1 KB', '618 KB', '1.2 MB', '2,047 MB')
    """
    if size < 2**20:
        return f"{max(1, round(size / 1024)) if size else 0:,} KB"
    return f"{size / 2**20:.1f} MB" if size < 10 * 2**20 else f"{size / 2**20:,.0f} MB"


def megabytes(size: int) -> str:
    """A size in whole megabytes, as the quota is set.

    >>> megabytes(3 * 2**20), megabytes(2048 * 2**20), megabytes(1)
    ('3 MB', '2,048 MB', '1 MB')
    """
    return f"{max(1, round(size / 2**20)) if size else 0:,} MB"


def stored_uploads(uploads_dir: Path) -> list[StoredUpload]:
    """A user's kept uploads, newest first (files still being checked, in the staging folder, are not listed)."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(uploads_dir):
            if not is_upload_id(entry.name):
                continue
            with contextlib.suppress(FileNotFoundError):  # deleted meanwhile
                info = entry.stat(follow_symlinks=False)
                if entry.is_file(follow_symlinks=False):
                    found.append(StoredUpload(entry.name, upload_display_name(entry.name), info.st_size, info.st_mtime))
    return sorted(found, key=lambda u: (-u.kept_at, u.upload_id))


@dataclass(frozen=True)
class UploadShelf:
    """A user's kept uploads with the bytes they take, the quota (None: no limit) and the bytes of their files being
    read now (datasets' Arrow copies in their datasets cache, backend/data/user_cache.py), which count in it too."""

    uploads: list[StoredUpload]
    quota: int | None
    reading: int = 0

    @property
    def used(self) -> int:
        """Bytes counted in the quota: the kept uploads and the copies being read."""
        return sum(u.size for u in self.uploads) + self.reading

    def describe(self) -> str:
        """The shelf in one line for the UI.

        >>> UploadShelf([StoredUpload("0123456789ab-a.jsonl", "a.jsonl", 3 * 2**20, 0.0)], 2048 * 2**20).describe()
        '1 upload, 3.0 MB of your 2,048 MB quota'
        >>> UploadShelf([], None).describe(), UploadShelf([], 2**30, 5 * 2**20).describe()
        ('No uploads kept', 'No uploads kept, 5.0 MB of your 1,024 MB quota (a copy being read now)')
        """
        if not self.uploads and not self.reading:
            return "No uploads kept"
        count = (
            f"{len(self.uploads)} upload{'s' if len(self.uploads) != 1 else ''}" if self.uploads else "No uploads kept"
        )
        of_quota = f" of your {megabytes(self.quota)} quota" if self.quota is not None else ""
        reading = ""
        if self.reading:
            reading = (
                f" ({size_text(self.reading)} of it a copy being read now)"
                if self.uploads
                else " (a copy being read now)"
            )
        return f"{count}, {size_text(self.used)}{of_quota}{reading}"


def delete_stored_upload(uploads_dir: Path, upload_id: str) -> StoredUpload:
    """Delete one of a user's kept uploads (the id resolves in their own folder only): what it was, or SpecError."""
    path = upload_file(uploads_dir, upload_id)
    size = path.stat().st_size
    kept = StoredUpload(upload_id, upload_display_name(upload_id), size, path.stat().st_mtime)
    path.unlink(missing_ok=True)
    sweep_reads(cache_root(uploads_dir))  # and what killed reads of theirs left
    return kept


def upload_quota() -> int | None:
    """The bytes one user may keep in uploads: ``STUDIO_UPLOAD_QUOTA_MB``; by default 2,048 MB on a Space and no
    limit elsewhere (None). A value that is not a whole number of megabytes counts as unset."""
    raw = os.environ.get(QUOTA_SETTING, "").strip()
    try:
        return max(0, int(raw)) * 2**20
    except ValueError:
        return DEFAULT_SPACE_QUOTA_MB * 2**20 if on_space() else None


class UploadQuota:
    """Each user's kept bytes plus the bytes of their uploads still being checked, against ``upload_quota()``: two
    uploads at once can never both fit in the room of one (in memory, per app process)."""

    def __init__(self) -> None:
        self._checking: dict[str, int] = {}
        self._lock = threading.Lock()

    def reserve(self, uploads_dir: Path, size: int, display: str) -> Callable[[], None]:
        """Count ``size`` bytes in for the folder's owner until the release this returns is called, or raise
        SpecError saying how much is used, the quota and how to free room; nothing is counted on refusal."""
        key = str(uploads_dir)
        with self._lock:
            quota = upload_quota()
            if quota is not None:
                used = UploadShelf(stored_uploads(uploads_dir), quota, cached_bytes(uploads_dir)).used
                used += self._checking.get(key, 0)
                if used + size > quota:
                    raise SpecError(
                        [
                            f"dataset: {display} ({size_text(size)}) does not fit in your upload quota: your uploads "
                            f"take {size_text(used)} of the {megabytes(quota)} each person may keep here "
                            f"({QUOTA_SETTING}); {WHERE_TO_DELETE}, then upload it again"
                        ]
                    )
            self._checking[key] = self._checking.get(key, 0) + size
        return once_under(self._lock, lambda: count_out(self._checking, key, size))


class SharedSources:
    """The web server's temporary files that requests are checking. Gradio keeps identical uploads at one path (a
    hash of the content), so twelve identical uploads at once are one file: it is removed when the last request
    holding it is done, not when the first is."""

    def __init__(self) -> None:
        self._holders: dict[str, int] = {}
        self._lock = threading.Lock()

    def hold(self, source: Path) -> Callable[[], None]:
        """Count a request in on ``source``; the release this returns removes the file once nobody holds it."""
        key = os.path.abspath(source)
        with self._lock:
            self._holders[key] = self._holders.get(key, 0) + 1

        def free() -> None:
            if count_out(self._holders, key):
                return
            Path(key).unlink(missing_ok=True)  # under the lock: no new holder finds it half-gone
            with contextlib.suppress(OSError):  # and the folder the web server made for it, once empty
                Path(key).parent.rmdir()

        return once_under(self._lock, free)

    def held(self, source: Path) -> int:
        """How many requests hold ``source`` now."""
        with self._lock:
            return self._holders.get(os.path.abspath(source), 0)
