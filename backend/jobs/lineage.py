"""What lies on disk for a run to continue from: a finished job's saved adapter, and a job's own checkpoints.

Which job a spec may name, and its rule (yours, succeeded, an adapter), is ``backend/training/named_jobs.py``'s; the
questions here are about files: is the adapter still there, which checkpoint is the last complete one.
"""

from __future__ import annotations

from pathlib import Path

from backend.core.spec import SpecError
from backend.jobs.records import JobRecord, JobStatus

FIELD = "model.parent_job_id"


def saved_adapter(job: JobRecord) -> Path | None:
    """The adapter folder of a job that succeeded and saved one (it is still on disk), else None."""
    adapter = job.artifacts.adapter_dir
    if job.status is JobStatus.succeeded and adapter and Path(adapter).is_dir():
        return Path(adapter)
    return None


def adapter_to_continue(parent: JobRecord) -> Path:
    """``parent``'s saved adapter, or SpecError saying it has none to start from."""
    adapter = saved_adapter(parent)
    if adapter is None:
        raise SpecError([f"{FIELD}: job {parent.id} has no saved adapter to start from"])
    return adapter


# --- a job's own earlier attempt ------------------------------------------------------------------------------------


def checkpoint_step(checkpoint: Path) -> int:
    """N of a ``checkpoint-N`` folder: the global step training continues from."""
    return int(checkpoint.name.rsplit("-", 1)[-1])


def numbered_checkpoints(output_dir: Path) -> list[tuple[int, Path]]:
    """Every ``checkpoint-N`` folder of ``output_dir`` with its N, complete or not."""
    return [
        (checkpoint_step(child), child)
        for child in output_dir.glob("checkpoint-*")
        if child.name.rsplit("-", 1)[-1].isdigit()
    ]


def last_checkpoint(output_dir: Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder, or None."""
    candidates = [
        (step, child) for step, child in numbered_checkpoints(output_dir) if (child / "trainer_state.json").is_file()
    ]
    return max(candidates)[1] if candidates else None
