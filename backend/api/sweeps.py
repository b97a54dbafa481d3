"""The facade's sweeps (``api.sweeps``): queue one spec with some fields varied, read a sweep with its children and
its best, cancel it. The CLI's ``sweep`` command and the Train form's "Queue sweep" both come here."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from backend.api.core import StudioCore, hub_token
from backend.api.jobs import JobOperations, _token_warnings, refuse_processes
from backend.core.spec import JobSpec, SpecError
from backend.core.users import User
from backend.jobs.store_errors import InvalidTransition, JobNotFound
from backend.jobs.sweep_door import rights_of
from backend.jobs.sweep_search import (
    check_dimensions,
    check_size,
    child_spec,
    parse_dimensions,
    planned_points,
)
from backend.jobs.sweeps import SweepReport, SweepStore, check_objective, new_sweep_id, objective_problems
from backend.platform.space_runtime import ZERO_GPU_REFUSAL, on_zero_gpu
from backend.training.process_limit import process_ceiling_problems


@dataclass(frozen=True)
class SweepSubmitted:
    """A sweep just stored: its report (children queued so far) and pre-flight's warnings on its base spec."""

    report: SweepReport
    warnings: list[str] = field(default_factory=list)


class SweepOperations:
    """Sweeps (``api.sweeps``), over the facade's core and its jobs (a child is cancelled as any job is)."""

    def __init__(self, core: StudioCore, jobs: JobOperations) -> None:
        self.core = core
        self.jobs = jobs
        self.store = SweepStore(core.store)

    def submit(
        self,
        spec: JobSpec | dict[str, Any] | str,
        vary: list[str],
        search: str = "grid",
        trials: int | None = None,
        objective: str = "learning",
        user: User | None = None,
    ) -> SweepSubmitted:
        """Validate every child, pre-flight the base spec and queue the sweep (a grid's or random sample's children
        at once, a TPE sweep's first child when the scheduler next ticks). SpecError, nothing stored, when a value
        does not fit its field, a field is one no sweep varies, a child fails the door a submit passes, or the
        user's queue cannot take the children (a TPE sweep's: all its trials), which is said before the pre-flight.
        """
        if on_zero_gpu():
            raise SpecError([f"spec: {ZERO_GPU_REFUSAL}"])
        named = self.core.named(spec, user=user)
        base = named.spec
        refuse_processes(base, user)  # a TPE sweep's children all start from the base
        dimensions = parse_dimensions(vary)
        size = check_size(dimensions, search, trials)
        objective = check_objective(objective)
        if problems := objective_problems(base, objective):
            raise SpecError(problems)
        base_data = base.model_dump(mode="json")
        # every listed value through the door now: a TPE sweep may try any of them long after this request
        check_dimensions(base_data, dimensions, lambda child: self.core.prepare(child, user=user))
        sweep_id = new_sweep_id()
        points = planned_points(dimensions, search, trials, sweep_id)
        children = [self.core.prepare(child_spec(base_data, point, i), user=user) for i, point in enumerate(points)]
        for prepared, point in zip(children, points):  # a varied field may take the score away (holdout_rows ...)
            if problems := objective_problems(prepared, objective) + process_ceiling_problems(prepared, user):
                values = ", ".join(f"{path} = {text}" for path, text in point.items())
                raise SpecError([f"{problem} (the child with {values})" for problem in problems])
        queue_limit, total_limit = self.core.queue_limits(user)
        self.store.check_room(base, search, size, children, queue_limit, total_limit)  # before the slow part
        with self.jobs.environment_check(base, user), self.core.prepared(named, hub_token(user)) as ready:
            warnings = [*ready.warnings, *_token_warnings(base, user)]
        self.store.create(
            sweep_id, base, dimensions, search, size, objective, children, queue_limit, total_limit, rights_of(user)
        )
        report = self.store.report(sweep_id)
        if warnings:
            for child in report.children:
                self.core.store.merge_artifacts(child.child.job_id, preflight_warnings=warnings)
        self.core.kick()
        return SweepSubmitted(report, warnings)

    def get(self, sweep_id: str, user: User | None = None) -> SweepReport:
        """A sweep read now: its children with their verdicts and scores, its status and its best child; another
        user's sweep is JobNotFound."""
        report = self.store.report(sweep_id)
        if user is not None and not user.can_access(report.sweep.owner):
            raise JobNotFound(sweep_id)
        return report

    def list_sweeps(self, user: User | None = None) -> list[SweepReport]:
        """The sweeps ``user`` may see (a non-admin: their own), oldest first."""
        owner = user.name if user is not None and not user.is_admin else None
        return [self.store.report(s.id) for s in self.store.list(owner)]

    def sweep_of(self, job_id: str, user: User | None = None) -> str | None:
        """The sweep a job the user may read is a child of, or None."""
        self.jobs.get_job(job_id, user)
        return self.store.sweep_of(job_id)

    def cancel(self, sweep_id: str, user: User | None = None) -> SweepReport:
        """Cancel the sweep: no child is queued after this, queued children are cancelled and running ones stopped."""
        self.get(sweep_id, user)
        sweep = self.store.mark_cancelled(sweep_id)
        for child in sweep.children:
            try:
                self.jobs.cancel(child.job_id, user)
            except (InvalidTransition, JobNotFound):
                continue  # it had ended already
        self.core.kick()
        return self.store.report(sweep_id)

    def best_spec(self, sweep_id: str, user: User | None = None) -> JobSpec:
        """The spec of the sweep's best child (what "Clone the best into Train" loads); SpecError when no child has a
        score yet."""
        report = self.get(sweep_id, user)
        if report.best is None:
            raise SpecError([f"sweep {sweep_id}: no child has succeeded with a score yet, so none is the best"])
        return self.jobs.get_job(report.best.child.job_id, user).spec
