"""Uploaded dataset files: checked for the chosen method before they are kept, so a bad upload leaves nothing behind."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from backend.data import FILE_LOADERS, load_training_dataset
from backend.paths import safe_name
from backend.spec import DatasetSpec, Method, SpecError

MAX_UPLOAD_BYTES = 512 * 2**20


def keep_upload(source: Path, original_name: str, method: Method, uploads_dir: Path, owner: str) -> tuple[Path, str]:
    """Copy an uploaded file under ``uploads_dir/<owner>/`` if it loads as a dataset for ``method``.

    Returns (kept path, a one-line summary). Raises SpecError with the reason otherwise, keeping nothing.
    """
    suffix = Path(original_name).suffix.lower()
    if suffix not in FILE_LOADERS:
        raise SpecError([f"dataset: {original_name} is not a dataset file; upload .jsonl, .json, .csv or .parquet"])
    if source.stat().st_size == 0:
        raise SpecError([f"dataset: {original_name} is empty"])
    if source.stat().st_size > MAX_UPLOAD_BYTES:
        raise SpecError([f"dataset: {original_name} is larger than {MAX_UPLOAD_BYTES // 2**20} MB; use a Hub dataset"])
    safe_owner = safe_name(owner)
    stem = safe_name(Path(original_name).stem)[:64] or "data"
    target = uploads_dir / safe_owner / f"{uuid.uuid4().hex[:8]}-{stem}{suffix}"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, target)
    try:
        dataset, fmt = load_training_dataset(DatasetSpec(source="file", name=str(target)), method)
    except SpecError as exc:
        target.unlink(missing_ok=True)
        problems = [p.replace(target.name, original_name) for p in exc.problems]
        raise SpecError(problems) from None
    except Exception as exc:  # noqa: BLE001 - any unreadable file is the user's to fix, with the reason
        target.unlink(missing_ok=True)
        raise SpecError([f"dataset: {original_name} could not be read ({exc})"]) from None
    return target, f"{original_name}: {len(dataset)} rows, {fmt} format, columns {', '.join(dataset.column_names)}"
