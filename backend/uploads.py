"""Uploaded dataset files: checked for the chosen method before they are kept, so a bad upload leaves nothing behind.

A file that reads well but whose columns are named differently is kept (UnmappedUpload): filling the Column mapping
afterwards makes it usable without uploading it again (``check_upload``).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from backend.access import upload_display_name
from backend.data import FILE_LOADERS, ColumnsMismatch, load_training_dataset
from backend.paths import safe_name
from backend.spec import DatasetSpec, Method, SpecError

MAX_UPLOAD_BYTES = 512 * 2**20


class UnmappedUpload(SpecError):
    """The file was kept (it reads well) but its columns need a mapping for the method; ``problems`` say which."""

    def __init__(self, problems: list[str], upload_id: str, summary: str):
        super().__init__(problems)
        self.upload_id, self.summary = upload_id, summary


def _checked(upload_id: str, display: str, method: Method, uploads_dir: Path, columns: dict[str, str] | None) -> str:
    """Load a kept upload as the trainer would (with ``columns``); its one-line summary, or the loader's SpecError."""
    # The check's Arrow copy would otherwise stay in the shared datasets cache, as large as the file.
    with tempfile.TemporaryDirectory(prefix="studio-upload-check-") as cache_dir:
        dataset, fmt = load_training_dataset(
            DatasetSpec(source="upload", name=upload_id, columns=columns or {}), method, uploads_dir=uploads_dir,
            cache_dir=Path(cache_dir),
        )
        summary = f"{display}: {len(dataset)} rows, {fmt} format, columns {', '.join(dataset.column_names)}"
        del dataset
    return summary


def check_upload(upload_id: str, method: Method, uploads_dir: Path, columns: dict[str, str] | None = None) -> str:
    """Check a kept upload again (after the Column mapping or the method changed): its summary, or SpecError."""
    display = upload_display_name(upload_id)
    try:
        return _checked(upload_id, display, method, uploads_dir, columns)
    except SpecError as exc:
        raise SpecError([p.replace(upload_id, display) for p in exc.problems]) from None


def keep_upload(source: Path, original_name: str, method: Method, uploads_dir: Path,
                columns: dict[str, str] | None = None) -> tuple[str, str]:
    """Copy an uploaded file into ``uploads_dir`` (one user's folder) if it loads as a dataset for ``method``.

    ``columns`` is the Column mapping (expected -> the file's column) to check it with. Returns (upload id, a
    one-line summary); the id is what ``dataset.name`` holds with ``source: upload``. A readable file whose columns
    do not fit is kept and UnmappedUpload says what to map. Raises SpecError with the reason otherwise, keeping
    nothing: no copy, and no Arrow files in the datasets cache.
    """
    suffix = Path(original_name).suffix.lower()
    if suffix not in FILE_LOADERS:
        raise SpecError([f"dataset: {original_name} is not a dataset file; upload .jsonl, .json, .csv or .parquet"])
    if source.stat().st_size == 0:
        raise SpecError([f"dataset: {original_name} is empty"])
    if source.stat().st_size > MAX_UPLOAD_BYTES:
        raise SpecError([f"dataset: {original_name} is larger than {MAX_UPLOAD_BYTES // 2**20} MB; use a Hub dataset"])
    stem = safe_name(Path(original_name).stem)[:64] or "data"
    upload_id = f"{uuid.uuid4().hex[:12]}-{stem}{suffix}"
    target = uploads_dir / upload_id
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    try:
        summary = _checked(upload_id, original_name, method, uploads_dir, columns)
    except ColumnsMismatch as exc:
        problems = [p.replace(upload_display_name(upload_id), original_name) for p in exc.problems]
        summary = f"{original_name}: kept; usable for {method.value.upper()} once its columns are mapped"
        raise UnmappedUpload(problems, upload_id, summary) from None
    except SpecError as exc:
        target.unlink(missing_ok=True)
        problems = [p.replace(upload_display_name(upload_id), original_name) for p in exc.problems]
        raise SpecError(problems) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix, with the reason
        target.unlink(missing_ok=True)
        raise SpecError([f"dataset: {original_name} could not be read ({exc})"]) from None
    return upload_id, summary
