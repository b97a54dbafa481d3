"""Uploaded dataset files: checked for the chosen method before they are kept, so a bad upload leaves nothing behind."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

from backend.access import upload_display_name
from backend.data import FILE_LOADERS, load_training_dataset
from backend.paths import safe_name
from backend.spec import DatasetSpec, Method, SpecError

MAX_UPLOAD_BYTES = 512 * 2**20


def keep_upload(source: Path, original_name: str, method: Method, uploads_dir: Path) -> tuple[str, str]:
    """Copy an uploaded file into ``uploads_dir`` (one user's folder) if it loads as a dataset for ``method``.

    Returns (upload id, a one-line summary); the id is what ``dataset.name`` holds with ``source: upload``.
    Raises SpecError with the reason otherwise, keeping nothing: no copy, and no Arrow files in the datasets cache.
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
        # The check's Arrow copy would otherwise stay in the shared datasets cache, as large as the file.
        with tempfile.TemporaryDirectory(prefix="studio-upload-check-") as cache_dir:
            dataset, fmt = load_training_dataset(
                DatasetSpec(source="upload", name=upload_id), method, uploads_dir=uploads_dir, cache_dir=Path(cache_dir)
            )
            summary = f"{original_name}: {len(dataset)} rows, {fmt} format, columns {', '.join(dataset.column_names)}"
            del dataset
    except SpecError as exc:
        target.unlink(missing_ok=True)
        problems = [p.replace(upload_display_name(upload_id), original_name) for p in exc.problems]
        raise SpecError(problems) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix, with the reason
        target.unlink(missing_ok=True)
        raise SpecError([f"dataset: {original_name} could not be read ({exc})"]) from None
    return upload_id, summary
