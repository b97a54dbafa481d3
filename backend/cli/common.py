"""What the CLI's commands share: their exit codes, a spec file read as the CLI reads it (with ``--set`` over it), and
a time as the CLI prints it."""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import Any

from backend.api import SpecError, load_spec_text, with_settings

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE = 0, 1, 2


def load_spec_file(path: str) -> dict[str, Any]:
    """A spec file (JSON or YAML) as a dict; a missing or unreadable file is a ``SpecError`` naming it."""
    file = Path(path)
    if not file.is_file():
        raise SpecError([f"spec file {path} does not exist"])
    try:
        data = load_spec_text(file.read_bytes(), where=path)  # JSON or YAML
    except OSError as exc:
        raise SpecError([f"spec file {path} cannot be read ({exc.strerror})"]) from None
    # Relative dataset paths in a spec file are relative to the file, so examples run from any directory.
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and dataset.get("source") == "file" and isinstance(dataset.get("name"), str):
        candidate = Path(dataset["name"]).expanduser()
        if not candidate.is_absolute():
            dataset["name"] = str((file.parent / candidate).resolve())
    return data


def spec_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The command's ``spec_file`` with its ``--set PATH=VALUE`` settings over it."""
    return with_settings(load_spec_file(args.spec_file), args.set)


def timestamp(value: float | None) -> str:
    """A stored time as the CLI prints it, ``-`` when there is none."""
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"
