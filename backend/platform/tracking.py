"""Optional experiment tracking with trackio (Hugging Face's local-first tracker): where its data lives (under the
data dir, one project per user, one run per job) and the command that opens its dashboard."""

from __future__ import annotations

import importlib.util
import shlex
from pathlib import Path
from typing import Any

from backend.core.paths import DataPaths, safe_name, user_folder

TRACKIO_DIR_ENV = "TRACKIO_DIR"  # trackio reads it once, when imported: the worker sets it before training starts


def trackio_dir(paths: DataPaths) -> Path:
    """Where trackio keeps its SQLite projects for this data dir (never ~/.cache/huggingface/trackio)."""
    return paths.root / "trackio"


def trackio_project(owner: str) -> str:
    """The trackio project of a user's jobs: all of one user's runs on one dashboard."""
    return f"studio-{user_folder(owner)}"


def trackio_run(job_id: str, run_name: str | None) -> str:
    """The job's run in that project; the job id keeps it unique (a resumed job continues the same run).

    >>> trackio_run("3f2a", "my run"), trackio_run("3f2a", None)
    ('my_run-3f2a', '3f2a')
    """
    return f"{safe_name(run_name)}-{job_id}" if run_name else job_id


def trackio_unavailable() -> str | None:
    """Why this interpreter cannot log to trackio, or None. The CUDA trainer environment cannot have it: trackio
    0.43 needs pillow<13 and vLLM needs pillow>=13 (requirements-trainer-gpu.txt)."""
    if importlib.util.find_spec("trackio") is None:
        return "trackio is not installed in the trainer's environment (pip install trackio==0.43.0 there)"
    return None


def trackio_training_kwargs(owner: str, job_id: str, run_name: str | None) -> dict[str, Any]:
    """TrainingArguments that log to trackio locally only: no Space, no static snapshot pushed to the Hub."""
    return dict(
        report_to=["trackio"],
        project=trackio_project(owner),
        run_name=trackio_run(job_id, run_name),
        trackio_space_id=None,
        trackio_static_space_id=False,
    )


def dashboard_command(paths: DataPaths, owner: str) -> str:
    """The shell command that serves the dashboard of ``owner``'s runs (trackio's own ``trackio show``, on
    127.0.0.1), run where the studio runs."""
    return (
        f"{TRACKIO_DIR_ENV}={shlex.quote(str(trackio_dir(paths)))} trackio show "
        f"--project {shlex.quote(trackio_project(owner))}"
    )
