"""Sweeps: one spec trained several times with some fields varied, each try an ordinary job (a child) in the same
queue, under the same limits; the best child is picked by the objective (the learning verdict's tuned metric, or a
benchmark's tuned score) among the children whose verdict is neither worse nor regressed: a score that rose while a
guard on the model's real capability fell does not make a best.

A sweep is a row of the ``sweeps`` table (its base spec, its dimensions, how it searches, its objective) and one
row of ``sweep_children`` per child (the job's id and the values it tried). Its status is read off its children's.
A grid or random sweep queues all its children at once; a TPE sweep one at a time, each after the last has ended,
driven by :func:`SweepStore.advance` (the scheduler's tick calls it), with Optuna's study in the data dir: both
survive a restart.
"""

from __future__ import annotations

import builtins
import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.core.spec import JobSpec, SpecError
from backend.jobs.queue_places import refuse_sweep_over_limits
from backend.jobs.records import JobRecord, JobStatus, json_text, new_job_id, storable_spec_json
from backend.jobs.store import JobStore
from backend.jobs.store_errors import JobNotFound
from backend.jobs.sweep_door import ChildDoor, Rights, user_of
from backend.jobs.sweep_search import Dimension, child_spec, tpe_ask, tpe_tell, value_at

SWEEP_PREFIX = "sweep-"
OBJECTIVES_HELP = "learning (the verdict's tuned metric) or benchmark:TASK (a benchmark's tuned score)"
# A TPE child that ended any of these ways is told to Optuna (a failed, cancelled or interrupted one as FAIL).
_ENDED = frozenset({JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted})


def new_sweep_id() -> str:
    """A new sweep's id: ``sweep-`` and a job-like id (sorts by creation time)."""
    return SWEEP_PREFIX + new_job_id()


def is_sweep_id(name: str) -> bool:
    """Whether ``name`` reads as a sweep's id rather than a job's."""
    return name.startswith(SWEEP_PREFIX)


def check_objective(objective: str) -> str:
    """``objective`` when it is one a sweep can rank by; SpecError otherwise."""
    if objective == "learning" or (objective.startswith("benchmark:") and objective.partition(":")[2].strip()):
        return objective
    raise SpecError([f"--objective {objective}: choose {OBJECTIVES_HELP}"])


def objective_problems(spec: JobSpec, objective: str) -> list[str]:
    """Why a child trained on ``spec`` would have no score to rank by ``objective`` (none: it would), each a sentence
    that starts with the field to change, so the Train form says it there."""
    if objective.startswith("benchmark:"):
        task = objective.partition(":")[2]
        if task in spec.benchmarks.tasks:
            return []
        scored = ", ".join(spec.benchmarks.tasks) or "none"
        return [
            f"--objective {objective}: the spec scores {'no benchmarks' if scored == 'none' else scored}, not "
            f"{task}; add {task} to benchmarks.tasks for the children to be ranked by it"
        ]
    ranked = "a sweep ranks its children by their learning verdicts"
    if spec.environment.name:
        if spec.environment.eval_episodes == 0:
            return [f"environment.eval_episodes: {ranked}, and with no evaluation episodes none would have one"]
    elif spec.eval.holdout_fraction == 0 and spec.eval.holdout_rows is None:
        return [f"eval.holdout_rows: {ranked}, and with no held-out rows none would have one; hold some out"]
    if not spec.eval.compare_base and not spec.model.parent_job_id:
        return [f"eval.compare_base: {ranked}, and a verdict compares with the base model; turn it on"]
    return []


# A child whose verdict is one of these is never the best, whatever its score: its own metric fell, or a guard on
# what the user cares about did (the reference answers grew unlikelier, a benchmark skill was lost).
RANKED_OUT = frozenset({"worse", "regressed"})


def may_be_best(job: JobRecord) -> bool:
    """Whether a child's verdict lets it be the best (a child with no verdict is judged by its score alone)."""
    learning = job.artifacts.learning
    return learning is None or learning.verdict not in RANKED_OUT


def objective_value(job: JobRecord | None, objective: str) -> tuple[float, bool] | None:
    """(the child's score, whether higher is better), or None when the job is gone, has not succeeded, or has none."""
    if job is None or job.status is not JobStatus.succeeded:
        return None
    if objective == "learning":
        learning = job.artifacts.learning
        if learning is not None and learning.after is not None:
            return float(learning.after), learning.higher_is_better
        return None
    report = job.artifacts.benchmarks
    score = report.tasks.get(objective.partition(":")[2]) if report is not None else None
    if score is not None and score.tuned is not None:
        return float(score.tuned), score.higher_is_better
    return None


@dataclass(frozen=True)
class SweepChild:
    """One child as the sweep recorded it: its job, its place, the values it tried, its Optuna trial."""

    job_id: str
    position: int
    params: dict[str, Any]
    trial: int | None = None
    told: bool = False


@dataclass(frozen=True)
class Sweep:
    """A sweep's row and its children's."""

    id: str
    owner: str
    spec: dict[str, Any]  # the base spec, as JSON data
    dimensions: list[Dimension]
    search: str
    trials: int
    objective: str
    created_at: float
    cancelled: bool
    active: bool
    children: list[SweepChild] = field(default_factory=list)
    rights: str = "user"  # its submitter's (backend/jobs/sweep_door.py)
    stopped: str | None = None  # why a TPE sweep stopped before its trials were spent (a sentence), if it did

    @property
    def varied(self) -> list[str]:
        """The varied fields' paths, in the order given."""
        return [d.path for d in self.dimensions]


@dataclass(frozen=True)
class ChildResult:
    """A child with its job read now: status, score (None until it has one), and whether it is the best."""

    child: SweepChild
    job: JobRecord | None
    value: float | None = None
    higher_is_better: bool = True
    best: bool = False

    @property
    def ranked_out(self) -> bool:
        """Whether the child has a score but may not be the best (its verdict: worse, or a guard fell)."""
        return self.value is not None and self.job is not None and not may_be_best(self.job)

    @property
    def status(self) -> str:
        """The child job's status (``missing`` when its row is gone)."""
        return self.job.status.value if self.job is not None else "missing"

    def to_dict(self) -> dict[str, Any]:
        """The child as ``--json`` prints it."""
        job = self.job
        learning = job.artifacts.learning if job is not None else None
        return {
            "id": self.child.job_id,
            "position": self.child.position,
            "params": self.child.params,
            "status": self.status,
            "verdict": learning.verdict if learning is not None else None,
            "sentence": learning.sentence if learning is not None else None,
            "value": self.value,
            "higher_is_better": self.higher_is_better,
            "error": job.error if job is not None else None,
            "ranked_out": self.ranked_out,
            "best": self.best,
        }


@dataclass(frozen=True)
class SweepReport:
    """A sweep read now: its row, its children's results, its status and its best child."""

    sweep: Sweep
    children: list[ChildResult]
    status: str
    best: ChildResult | None

    @property
    def finished(self) -> bool:
        """Whether nothing more will run."""
        return self.status in ("succeeded", "failed", "cancelled")

    def to_dict(self) -> dict[str, Any]:
        """``{sweep, children, best}``: what ``python -m backend sweep --json`` prints."""
        s = self.sweep
        return {
            "sweep": {
                "id": s.id,
                "owner": s.owner,
                "status": self.status,
                "search": s.search,
                "vary": [d.to_dict() for d in s.dimensions],
                "trials": s.trials,
                "objective": s.objective,
                "created_at": s.created_at,
                "cancelled": s.cancelled,
                "stopped": s.stopped,
                "spec": s.spec,
            },
            "children": [c.to_dict() for c in self.children],
            "best": self.best.to_dict() if self.best is not None else None,
        }


def _signed(value: float, higher_is_better: bool) -> float:
    """A score turned so that higher is better (what ranks children, and what Optuna is told)."""
    return value if higher_is_better else -value


def _more_to_come(sweep: Sweep) -> bool:
    return sweep.search == "tpe" and sweep.active and not sweep.cancelled and len(sweep.children) < sweep.trials


def report_of(sweep: Sweep, jobs: dict[str, JobRecord]) -> SweepReport:
    """The sweep's status and best child from its children's jobs (``jobs`` by id; a missing one is skipped)."""
    results = []
    for child in sweep.children:
        job = jobs.get(child.job_id)
        scored = objective_value(job, sweep.objective)
        value, higher = scored if scored is not None else (None, True)
        results.append(ChildResult(child, job, value, higher))
    scored_results = [r for r in results if r.value is not None and not r.ranked_out]
    best = max(scored_results, key=lambda r: _signed(r.value or 0.0, r.higher_is_better), default=None)
    if best is not None:
        results = [ChildResult(r.child, r.job, r.value, r.higher_is_better, r is best) for r in results]
        best = next(r for r in results if r.best)
    statuses = [r.job.status for r in results if r.job is not None]
    # A TPE sweep goes on until the tick has told its last child's result and set it inactive: until then its best
    # may still change and its study is not whole.
    untold = sweep.search == "tpe" and sweep.active and not sweep.cancelled
    if untold or any(s in (JobStatus.queued, JobStatus.running) for s in statuses):
        started = any(s is not JobStatus.queued for s in statuses)
        status = "running" if started else "queued"
    elif sweep.cancelled:
        status = "cancelled"
    else:
        status = "succeeded" if JobStatus.succeeded in statuses else "failed"
    return SweepReport(sweep, results, status, best)


def _insert_child(
    con: sqlite3.Connection, sweep_id: str, spec: JobSpec, position: int, varied: list[str], trial: int | None
) -> str:
    job_id = new_job_id()
    while con.execute("SELECT 1 FROM jobs WHERE id = ?", (job_id,)).fetchone():
        job_id = new_job_id()
    con.execute(
        "INSERT INTO jobs (id, owner, spec, status, created_at) VALUES (?, ?, ?, ?, ?)",
        (job_id, spec.owner, storable_spec_json(spec), JobStatus.queued.value, time.time()),
    )
    params = {path: value_at(spec, path) for path in varied}
    con.execute(
        "INSERT INTO sweep_children (job_id, sweep_id, position, params, trial) VALUES (?, ?, ?, ?, ?)",
        (job_id, sweep_id, position, json_text(params), trial),
    )
    return job_id


class SweepStore:
    """The sweeps' tables in the job store's file (declared in backend/jobs/migrations.py)."""

    def __init__(self, store: JobStore):
        self.store = store

    def create(
        self,
        sweep_id: str,
        base: JobSpec,
        dimensions: list[Dimension],
        search: str,
        trials: int,
        objective: str,
        children: list[JobSpec],
        max_queued_for_owner: int | None = None,
        max_queued_total: int | None = None,
        rights: Rights = "user",
    ) -> Sweep:
        """Store a sweep and queue its first children in one transaction; SpecError (nothing stored) when the queue
        limits cannot take them all (a TPE sweep: all its trials). ``rights``: its submitter's, which a TPE child
        queued later is judged by (backend/jobs/sweep_door.py)."""
        varied = [d.path for d in dimensions]
        base_json = storable_spec_json(base)
        with self.store.writing() as con:
            self.check_room(base, search, trials, children, max_queued_for_owner, max_queued_total, con)
            con.execute(
                "INSERT INTO sweeps (id, owner, spec, vary, search, trials, objective, created_at, active, rights) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    sweep_id,
                    base.owner,
                    base_json,
                    json_text([d.to_dict() for d in dimensions]),
                    search,
                    trials,
                    objective,
                    time.time(),
                    int(search == "tpe"),
                    rights,
                ),
            )
            for position, spec in enumerate(children):
                _insert_child(con, sweep_id, spec, position, varied, None)
        return self.get(sweep_id)

    def check_room(
        self,
        base: JobSpec,
        search: str,
        trials: int,
        children: builtins.list[JobSpec],
        max_queued_for_owner: int | None,
        max_queued_total: int | None,
        con: sqlite3.Connection | None = None,
    ) -> None:
        """SpecError when the queue limits cannot take the sweep: asked before the slow pre-flight (the same sentence
        ``create`` gives, which asks again in its transaction)."""
        if max_queued_for_owner is None and max_queued_total is None:
            return
        tpe = search == "tpe"
        count = trials if tpe else max(1, len(children))
        # a place per training process: each trial its base's, each planned child its own
        places = (
            count * base.training.num_processes if tpe else sum(c.training.num_processes for c in children or [base])
        )
        limits = (max_queued_for_owner, max_queued_total, tpe, places)
        if con is not None:
            refuse_sweep_over_limits(con, base.owner, count, *limits)
            return
        with self.store.reading() as reading:
            refuse_sweep_over_limits(reading, base.owner, count, *limits)

    def get(self, sweep_id: str) -> Sweep:
        """One sweep with its children; JobNotFound when there is none."""
        with self.store.reading() as con:
            con.row_factory = sqlite3.Row
            row = con.execute("SELECT * FROM sweeps WHERE id = ?", (sweep_id,)).fetchone()
            if row is None:
                raise JobNotFound(sweep_id)
            kids = con.execute(
                "SELECT * FROM sweep_children WHERE sweep_id = ? ORDER BY position", (sweep_id,)
            ).fetchall()
        return Sweep(
            id=row["id"],
            owner=row["owner"],
            spec=json.loads(row["spec"]),
            dimensions=[Dimension.from_dict(d) for d in json.loads(row["vary"])],
            search=row["search"],
            trials=row["trials"],
            objective=row["objective"],
            created_at=row["created_at"],
            cancelled=bool(row["cancelled"]),
            active=bool(row["active"]),
            children=[
                SweepChild(k["job_id"], k["position"], json.loads(k["params"]), k["trial"], bool(k["told"]))
                for k in kids
            ],
            rights=row["rights"],
            stopped=row["stopped"],
        )

    def list(self, owner: str | None = None) -> builtins.list[Sweep]:
        """The sweeps (of one owner, if given), oldest first."""
        query = "SELECT id FROM sweeps" + (" WHERE owner = ?" if owner is not None else "")
        args = (owner,) if owner is not None else ()
        with self.store.reading() as con:
            ids = [r[0] for r in con.execute(query + " ORDER BY created_at", args)]
        return [self.get(sweep_id) for sweep_id in ids]

    def sweep_of(self, job_id: str) -> str | None:
        """The sweep a job is a child of, or None."""
        with self.store.reading() as con:
            row = con.execute("SELECT sweep_id FROM sweep_children WHERE job_id = ?", (job_id,)).fetchone()
        return row[0] if row else None

    def report(self, sweep_id: str) -> SweepReport:
        """The sweep read now, with its children's jobs."""
        sweep = self.get(sweep_id)
        jobs = {}
        for child in sweep.children:
            try:
                jobs[child.job_id] = self.store.get(child.job_id)
            except (JobNotFound, SpecError, LookupError):
                continue
        return report_of(sweep, jobs)

    def mark_cancelled(self, sweep_id: str) -> Sweep:
        """Record that the sweep was cancelled (no new child will be queued); the caller cancels the children."""
        with self.store.writing() as con:
            if con.execute("UPDATE sweeps SET cancelled = 1 WHERE id = ?", (sweep_id,)).rowcount != 1:
                raise JobNotFound(sweep_id)
        return self.get(sweep_id)

    # --- TPE: one child at a time ------------------------------------------------------------------------------
    def advance(self, sweeps_dir: Path, door: ChildDoor | None = None) -> builtins.list[str]:
        """Drive every active TPE sweep one step: tell Optuna each ended child's result, and queue the next child
        when none is waiting or running. Returns the ids of the jobs queued (the scheduler's tick calls this).

        Each child passes ``door`` (the facade's, a submit's) as the sweep's submitter, with the rights recorded at
        submit, before it is stored; one it refuses stops its sweep with a sentence (SpecError), and stores no job.
        Without a door (a scheduler started apart from the app), only a trusted caller's sweep (the CLI's) moves on:
        a signed-in user's waits for a scheduler that has the door."""
        with self.store.reading() as con:
            ids = [r[0] for r in con.execute("SELECT id FROM sweeps WHERE active = 1 AND search = 'tpe'")]
        queued: builtins.list[str] = []
        for sweep_id in ids:
            job_id = self._advance_one(sweeps_dir, self.get(sweep_id), door)
            if job_id is not None:
                queued.append(job_id)
        return queued

    def _stop(self, sweeps_dir: Path, sweep: Sweep, trial: int, problem: str) -> SpecError:
        """Stop a sweep whose next child cannot be queued: its trial told as failed, the sweep no longer active."""
        sentence = f"sweep {sweep.id} stopped: {problem}"
        tpe_tell(sweeps_dir, sweep.id, trial, None, sweep.trials)
        with self.store.writing() as con:
            con.execute("UPDATE sweeps SET active = 0, stopped = ? WHERE id = ?", (sentence, sweep.id))
        return SpecError([sentence])

    def _advance_one(self, sweeps_dir: Path, sweep: Sweep, door: ChildDoor | None = None) -> str | None:
        pending = False
        for child in sweep.children:
            try:
                job = self.store.get(child.job_id)
            except (JobNotFound, LookupError):
                job = None
            if job is not None and job.status not in _ENDED:
                pending = True
                continue
            if child.trial is None or child.told:
                continue
            scored = objective_value(job, sweep.objective)
            # a worse or regressed child is told as failed
            signed = _signed(*scored) if scored is not None and job is not None and may_be_best(job) else None
            tpe_tell(sweeps_dir, sweep.id, child.trial, signed, sweep.trials)
            with self.store.writing() as con:
                con.execute("UPDATE sweep_children SET told = 1 WHERE job_id = ?", (child.job_id,))
        if pending:
            return None
        if not _more_to_come(sweep):
            with self.store.writing() as con:
                con.execute("UPDATE sweeps SET active = 0 WHERE id = ?", (sweep.id,))
            return None
        user = user_of(sweep.owner, sweep.rights)
        if door is None and user is not None:
            return None  # judged only by the facade's door: left for a scheduler that has it
        trial, point = tpe_ask(sweeps_dir, sweep.id, sweep.dimensions, sweep.trials, len(sweep.children))
        position = len(sweep.children)
        try:
            spec = child_spec(sweep.spec, point, position)
            if door is not None:  # as a submit by the sweep's owner would be: authorized, lineage read
                spec = door(spec, user)
        except SpecError as exc:  # a proposal its field refuses, or the door (an upload gone since): stop, say why
            raise self._stop(sweeps_dir, sweep, trial, exc.problems[0]) from None
        with self.store.writing() as con:
            row = con.execute("SELECT cancelled FROM sweeps WHERE id = ?", (sweep.id,)).fetchone()
            if row is None or row[0]:
                return None  # cancelled meanwhile: the trial stays unfinished in the study, which is harmless
            return _insert_child(con, sweep.id, spec, position, sweep.varied, trial)
