"""The facade's benchmarks: the tasks a user can pick, and "Evaluate": an eval-only job on a finished job or a model,
queued like any other (store, scheduler, worker)."""

from __future__ import annotations

from typing import Any

from backend.api.common import Submitted
from backend.api.core import StudioCore
from backend.api.jobs import JobOperations
from backend.core.benchmarks import BUILTIN_TASKS, PRESETS, BenchmarkTask
from backend.core.spec import SpecError
from backend.core.users import User
from backend.jobs.records import JobStatus
from backend.jobs.store_errors import JobNotFound
from backend.training.named_jobs import require_generating
from backend.training.preflight import check_model


def benchmark_choices() -> list[tuple[str, str]]:
    """(label, task name) for a task picker: the demo models' offline tasks first, then the presets."""

    def label(task: BenchmarkTask) -> str:
        timed = f"; {task.seconds_per_100:g} s per 100 on the demo model, 2 CPUs" if task.seconds_per_100 else ""
        return f"{task.name}: {task.skill} ({task.default_limit} items; {task.cost}{timed})"

    return [(label(task), task.name) for task in (*BUILTIN_TASKS.values(), *PRESETS.values())]


class BenchmarkOperations:
    """Evaluate (``api.benchmarks``), over the facade's core and its jobs."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs

    def evaluate(self, target: str, tasks: list[str], limit: int | None = None, user: User | None = None) -> Submitted:
        """Queue an eval-only job scoring ``tasks`` on ``target``: a finished job (its base, its parent's adapter when
        staged, and its adapter) or a base model's name. SpecError with a sentence per field; nothing is queued then."""
        target = (target or "").strip()
        if not target:
            raise SpecError(["evaluate: name a finished job or a model to evaluate"])
        data: dict[str, Any] = {"benchmarks": {"tasks": [t.strip() for t in tasks if t.strip()], "limit": limit}}
        try:
            job = self.jobs.get_job(target, user)
        except JobNotFound:
            job = None
        if job is not None:
            require_generating(job, "be scored on lm-eval benchmarks")
            if job.status is not JobStatus.succeeded or not job.artifacts.adapter_dir:
                raise SpecError([f"evaluate.job_id: job {job.id} has no adapter to evaluate ({job.status.value})"])
            data |= {
                "model": job.spec.model.model_copy(update={"parent_job_id": None}).model_dump(),
                "quantization": job.spec.quantization.model_dump(),
                "evaluate": {"job_id": job.id},
                "output": {"run_name": f"benchmarks of {job.spec.output.run_name or job.id}"[:96]},
            }
        else:
            data |= {
                "model": {"name_or_path": target},
                "evaluate": {},
                "output": {"run_name": f"benchmarks of {target}"[:96]},
            }
        spec = self.core.prepare(data, user=user)
        if job is None:
            check_model(spec.model)  # a name that is neither a job nor a model is said now, not by a failed job
        queue_limit, total_limit = self.core.queue_limits(user)
        record = self.core.store.add(spec, max_queued_for_owner=queue_limit, max_queued_total=total_limit)
        self.core.kick()
        return Submitted(record, self.core.store.queue_position(record.id))
