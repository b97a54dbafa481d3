"""Upload names: what an upload id looks like, the name its owner knows it by, and the kept file it names."""

from __future__ import annotations

import re
from pathlib import Path

from backend.core.hub_names import looks_like_path
from backend.core.spec import DatasetSpec, SpecError, quote_input

UPLOAD_INSTEAD = "upload the file instead (Dataset -> Upload)"
UPLOAD_AGAIN = "upload the file again (Dataset -> Upload)"
UPLOAD_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")

# What keep_upload names a kept file: random hex, the uploaded file's cleaned stem, its suffix. One path component.
UPLOAD_ID = re.compile(r"[0-9a-f]{12}-[A-Za-z0-9_.-]{1,64}\.(?:jsonl|json|csv|parquet)")


def is_upload_id(text: str) -> bool:
    """Whether ``text`` names an upload (a random prefix, a dash and the file's name), not a path.

    >>> is_upload_id("0123456789ab-rows.jsonl"), is_upload_id("../alice/0123456789ab-rows.jsonl")
    (True, False)
    """
    return UPLOAD_ID.fullmatch(text) is not None


def upload_display_name(upload_id: str) -> str:
    """The uploaded file's name as its owner knows it: the id without its random prefix.

    >>> upload_display_name("0123456789ab-rows.jsonl"), upload_display_name("/data/train.csv")
    ('rows.jsonl', 'train.csv')
    """
    return upload_id.split("-", 1)[1] if is_upload_id(upload_id) else Path(upload_id).name


def dataset_file_name(dataset: DatasetSpec) -> str:
    """A file dataset's name without where it lives on this machine (for model cards, commits, CLI configs)."""
    return upload_display_name(dataset.name) if dataset.source == "upload" else Path(dataset.name).name


def upload_file(uploads_dir: Path, upload_id: str) -> Path:
    """The kept file an upload id names inside one user's uploads folder; SpecError for anything else."""
    if not is_upload_id(upload_id):
        if looks_like_file_path(upload_id):
            raise SpecError([f"dataset.name: {quote_input(upload_id)} is a path on the server; {UPLOAD_INSTEAD}"])
        raise SpecError([f"dataset.name: {quote_input(upload_id)} is not an upload id; {UPLOAD_AGAIN}"])
    path = uploads_dir / upload_id
    # The id is one component by its pattern; the resolved check also refuses a link planted in the folder.
    if not path.is_file() or path.resolve().parent != uploads_dir.resolve():
        raise SpecError([f"dataset.name: there is no upload {quote_input(upload_id)} of yours; {UPLOAD_AGAIN}"])
    return path


def looks_like_file_path(text: str) -> bool:
    """Whether a name reads as a path on the server or a data file's name rather than a Hub id or an upload id."""
    return looks_like_path(text) or text.lower().endswith(UPLOAD_SUFFIXES)
