"""A finished job's adapter as one zip in a fresh, unguessable ``downloads/<random>/`` folder, whole or not at all."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from backend.core.paths import DataPaths, storage_problem
from backend.jobs.records import JobRecord

PARTIAL_ZIP = ".partial"  # an adapter zip being written, beside where it will be renamed to
PARTIAL_MERGED = ".partial-merged-"  # a merged export being written (backend/workflows/export.py), likewise
PARTIAL_GGUF = ".partial-gguf-"  # a GGUF export being written (backend/workflows/gguf.py), likewise


def zip_adapter(paths: DataPaths, adapter: Path, name: str, what: str = "adapter") -> Path:
    """Zip ``adapter`` as ``name`` into a new download folder (the only folder the web server may serve); the file is
    written beside its name and renamed, so it appears whole. ValueError with a sentence (naming ``what`` is zipped)
    when the disk refuses."""
    try:
        target = paths.new_download(name)
    except OSError as exc:
        raise ValueError(f"the {what} could not be zipped: {storage_problem(exc)}") from None
    try:
        partial = shutil.make_archive(str(target.parent / PARTIAL_ZIP), "zip", adapter)
        Path(partial).replace(target)
    except OSError as exc:
        shutil.rmtree(target.parent, ignore_errors=True)  # nothing half-written stays in downloads/
        raise ValueError(f"the {what} could not be zipped: {storage_problem(exc)}") from None
    return target


def kept_download(job: JobRecord, format: str, source: Path) -> Path | None:
    """The job's download of ``format`` when it is still on disk and newer than what it packs (``source``), else
    None: a click again hands out the same file rather than another copy."""
    kept = (job.artifacts.downloads or {}).get(format)
    if not kept or not Path(kept).is_file():
        return None
    newest = max((p.stat().st_mtime for p in source.rglob("*") if p.is_file()), default=0.0)
    return Path(kept) if Path(kept).stat().st_mtime >= newest else None


def swap_into(partial: Path, out: Path, prefix: str) -> None:
    """Rename the finished ``partial`` folder to ``out``; the previous export there (moved aside under ``prefix``,
    which a later sweep knows) goes only after that, so a crash never leaves ``out`` missing or half-written."""
    old = None
    if out.exists():
        old = out.parent / f"{prefix}old-{out.name}-{secrets.token_hex(4)}"
        out.rename(old)
    partial.rename(out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
