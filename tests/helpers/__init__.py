"""What tests share besides fixtures (those are in tests/conftest.py): the repository's root, the command line, a
quick spec, waits."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from backend.jobs.store import JobStatus, JobStore

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 300, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m backend ARGS`` as a user runs it, from the repository's root (the data dir: ``STUDIO_DATA_DIR`` of
    this process's environment, or of ``env``, which is added to it)."""
    return subprocess.run(
        [sys.executable, "-m", "backend", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def tiny_spec(**overrides) -> dict:
    """A spec dict for the demo model that trains in a few seconds; nested keys merge into the defaults."""
    spec = {
        "method": "sft",
        "model": {"name_or_path": "builtin:tiny-qwen3"},
        "dataset": {"source": "builtin", "name": "chat-demo"},
        "training": {"max_steps": 4, "batch_size": 2, "max_length": 128, "learning_rate": 1e-3, "save_steps": 2},
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(spec.get(key), dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    return spec


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """A nested mapping's leaves by dotted path (a list, such as the rewards, is one leaf).

    >>> leaves({"training": {"max_steps": 40, "seed": 42}, "method": "grpo"})
    {'training.max_steps': 40, 'training.seed': 42, 'method': 'grpo'}
    """
    found: dict[str, object] = {}
    for name, value in tree.items():
        path = f"{prefix}{name}"
        found.update(leaves(value, f"{path}.") if isinstance(value, dict) else {path: value})
    return found


def job_data(spec, paths):
    """A job's rows as its worker loads them (``backend.data.loading.load_job_data``, the owner's uploads), for a test
    that builds the trainer itself (``backend.worker.build_trainer``)."""
    from backend.data.loading import load_job_data

    return load_job_data(spec, paths.uploads(spec.owner))


def wait_for(predicate, timeout: float = 120.0, interval: float = 0.1, what: str = "condition", sleep=time.sleep):
    """``predicate()``'s first truthy value, asked every ``interval`` s until ``timeout``, else fail saying ``what``.
    ``sleep`` waits between asks (a browser test passes its page's, so the page delivers its events meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def wait_status(store: JobStore, job_id: str, statuses: set[JobStatus], timeout: float = 180.0):
    return wait_for(
        lambda: (j := store.get(job_id)).status in statuses and j, timeout, what=f"{job_id} to reach {statuses}"
    )
