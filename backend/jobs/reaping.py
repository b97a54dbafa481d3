"""The scheduler's workers once started: reaping those that exited (recording how each job ended), stopping cancelled
and lingering ones, and, after a restart, adopting live workers and marking jobs whose worker is gone interrupted."""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from backend.core.paths import DataPaths
from backend.jobs.failures import (
    describe_exit,
    disk_full_reason,
    disk_full_sentence,
    oom_evidence,
    tail_lines,
    with_log_tail,
)
from backend.jobs.launchers import WorkerProcess, worker_alive
from backend.jobs.lineage import numbered_checkpoints
from backend.jobs.multiprocess import dead_rank_sentence
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store import JobStore
from backend.platform.resource_errors import looks_like_disk_full, looks_like_oom

log = logging.getLogger("studio.scheduler")

FINAL_STATUSES = [JobStatus.succeeded, JobStatus.failed, JobStatus.cancelled, JobStatus.interrupted]
# After SIGTERM, how long a lingering worker gets before SIGKILL: its job is already recorded, nothing is lost.
LINGERING_TERM_TO_KILL_S = 2.0
# A data disk with less free than this is full for a job that just failed (its log may not have been written).
DISK_FULL_BELOW_BYTES = 2**20


@dataclass
class RunningWorker:
    """A worker the scheduler watches: its job, process, slot and log, and how far stopping it has gone."""

    job_id: str
    pid: int
    slot: int
    popen: WorkerProcess | None  # None for a worker adopted from a previous scheduler
    log_path: Path
    term_sent_at: float | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)
    gpus: int = 1  # training processes (ranks) of the job
    launched_monotonic: float | None = None  # kernel-log timestamps are compared with this
    oom_kills_at_launch: int | None = None  # the cgroup's oom_kill counter when the worker started
    final_seen_at: float | None = None  # when the job row was first seen final while the process lived on
    lingering_term_sent: bool = False
    export: bool = False  # an export job: its own lane, on the CPU, no slot number (backend/jobs/scheduler.py)

    def exit_code(self) -> tuple[bool, int | None]:
        """(whether the worker has exited, its exit code when known)."""
        if self.popen is not None:
            return self.popen.outcome()  # a pooled worker whose pool is gone ends with no exit code
        return not worker_alive(self.pid, self.job_id), None


def free_slot(running: Mapping[str, RunningWorker]) -> int:
    """The lowest slot number no running training worker holds (a slot is a GPU index when each job has one)."""
    used = {r.slot for r in running.values() if not r.export}
    return next(i for i in itertools.count() if i not in used)


class Reaper:
    """Watches the scheduler's running workers (``running``, the table the scheduler launches into) and records each
    job's end; ``finish`` writes an end even on a full disk."""

    def __init__(
        self,
        store: JobStore,
        paths: DataPaths,
        running: dict[str, RunningWorker],
        *,
        cancel_grace_s: float,
        final_grace_s: float,
        push_grace_s: float,
        resume_interrupted: bool,
    ):
        self.store = store
        self.paths = paths
        self.running = running
        self.cancel_grace_s = cancel_grace_s
        self.final_grace_s = final_grace_s
        self.push_grace_s = push_grace_s
        self.resume_interrupted = resume_interrupted

    def reconcile(self, max_concurrent: int) -> None:
        """After a restart: adopt workers still alive, mark jobs whose worker is gone as interrupted.

        A live worker of a job that already ended is adopted too, so it is stopped after the grace period rather
        than holding its GPU memory unseen.
        """
        for job in self.store.list(statuses=[JobStatus.running]):
            if job.pid and worker_alive(job.pid, job.id) and len(self.running) < max_concurrent:
                self._adopt(job)
                continue
            reason = "the app stopped while this job was running and its worker is gone; resume it to continue"
            at_step = self.store.last_logged_step(job.id)
            if self.resume_interrupted:
                self._drop_checkpoints_past_record(job, at_step)
            if self.finish(job.id, JobStatus.interrupted, reason + self._checkpoint_note(job.id)):
                log.info("job %s marked interrupted at step %s", job.id, at_step)
                self._note_interruption(job, at_step)
        for job in self.store.list(statuses=FINAL_STATUSES):
            if job.pid and job.id not in self.running and worker_alive(job.pid, job.id):
                self._adopt(job)

    def _note_interruption(self, job: JobRecord, at_step: int | None) -> None:
        """Record where the restart caught the job, and with ``resume_interrupted`` queue it again."""
        record = {"at_step": at_step, "at": time.time(), "resumed": self.resume_interrupted}
        self.store.merge_artifacts(job.id, interruptions=[*(job.artifacts.interruptions or []), record])
        if self.resume_interrupted:
            self.store.requeue_for_resume(job.id)
            log.info("job %s queued again: it resumes from its last checkpoint", job.id)

    def _drop_checkpoints_past_record(self, job: JobRecord, at_step: int | None) -> None:
        """A store brought back from a snapshot may be older than the newest checkpoint brought back with it. Resuming
        from such a checkpoint would leave the steps logged in between missing from the plots, so a checkpoint past
        the next logging step after the last logged one is set aside (the one before it is used)."""
        last = at_step or 0
        limit = last + job.spec.training.logging_steps
        for step, checkpoint in numbered_checkpoints(self.paths.job_output(job.id)):
            if step >= limit:
                log.info("job %s: %s is newer than its record (step %d); resuming before it", job.id, checkpoint, last)
                shutil.rmtree(checkpoint, ignore_errors=True)

    def _adopt(self, job: JobRecord) -> None:
        assert job.pid is not None  # reconcile adopts only jobs with a live worker pid
        log.info("adopting worker %d of %s job %s", job.pid, job.status.value, job.id)
        self.running[job.id] = RunningWorker(
            job.id,
            job.pid,
            free_slot(self.running),
            None,
            self.paths.job_log(job.id),
            gpus=job.spec.training.num_processes,
            export=job.spec.export is not None,
        )

    def _checkpoint_note(self, job_id: str) -> str:
        return " from its last checkpoint" if any(self.paths.job_output(job_id).glob("checkpoint-*")) else ""

    def reap(self) -> None:
        """Record how each exited worker ended and free its slot; stop cancelled workers and lingering ones."""
        for job_id, run in list(self.running.items()):
            exited, code = run.exit_code()
            if exited:
                if run.log_file is not None:
                    run.log_file.close()
                self._record_exit(run, code)  # if this raises, the entry stays and the next tick tries again
                del self.running[job_id]
                continue
            job = self.store.get(job_id)
            if job.status.finished:
                self._stop_lingering_worker(run, job)
            elif job.cancel_requested:
                self._stop_worker(run)

    def _stop_lingering_worker(self, run: RunningWorker, job: JobRecord) -> None:
        """The job has its final status but the process lives on: SIGTERM after the grace period, SIGKILL soon after.

        The recorded status stands; only the slot is freed.
        """
        now = time.monotonic()
        if run.final_seen_at is None:
            run.final_seen_at = now
        pushing = (
            job.status is JobStatus.succeeded
            and job.spec.output.push_to_hub
            and job.artifacts.hub is None
            and job.artifacts.hub_error is None
        )
        grace = max(self.final_grace_s, self.push_grace_s) if pushing else self.final_grace_s
        lingered = now - run.final_seen_at
        try:
            if lingered > grace + LINGERING_TERM_TO_KILL_S:
                os.killpg(run.pid, signal.SIGKILL)
                log.warning(
                    "job %s is %s but worker %d did not exit; killed it to free slot %d",
                    run.job_id,
                    job.status.value,
                    run.pid,
                    run.slot,
                )
            elif lingered > grace and not run.lingering_term_sent:
                os.killpg(run.pid, signal.SIGTERM)
                run.lingering_term_sent = True
                log.warning(
                    "job %s is %s but worker %d is still running after %.0fs; stopping it",
                    run.job_id,
                    job.status.value,
                    run.pid,
                    grace,
                )
        except ProcessLookupError:
            pass

    def _stop_worker(self, run: RunningWorker) -> None:
        now = time.monotonic()
        try:
            if run.term_sent_at is None:
                os.killpg(run.pid, signal.SIGTERM)
                run.term_sent_at = now
                log.info("asked job %s to stop", run.job_id)
            elif now - run.term_sent_at > self.cancel_grace_s:
                os.killpg(run.pid, signal.SIGKILL)
                log.warning("job %s did not stop within %.0fs; killed", run.job_id, self.cancel_grace_s)
        except ProcessLookupError:
            pass

    def _record_exit(self, run: RunningWorker, code: int | None) -> None:
        job = self.store.get(run.job_id)
        if job.status is not JobStatus.running:
            if run.final_seen_at is not None:
                log.info("worker %d of job %s is gone; slot %d is free", run.pid, run.job_id, run.slot)
            return  # the worker recorded its own end
        log_text = "\n".join(tail_lines(run.log_path))
        evidence = None
        if code == -signal.SIGKILL:
            evidence = oom_evidence(run.pid, log_text, run.oom_kills_at_launch, run.launched_monotonic)
        status, reason = describe_exit(code, job.cancel_requested, evidence)
        if status is JobStatus.interrupted:
            reason += self._checkpoint_note(run.job_id)
        dead_rank = dead_rank_sentence(log_text, run.gpus) if run.gpus > 1 else None
        if status is JobStatus.failed:
            if dead_rank is not None:
                reason = dead_rank
            elif self._disk_full(log_text):
                reason = disk_full_sentence(self.paths.root)
            elif looks_like_oom(log_text):
                reason = "Out of memory: " + reason
            reason = with_log_tail(reason, run.log_path)
        if status is JobStatus.cancelled:  # not an error: how it stopped is a note beside the step it reached
            self.finish(
                run.job_id, status, None, {"cancelled_at_step": job.progress.get("step", 0), "cancel_note": reason}
            )
        else:
            self.finish(run.job_id, status, reason)
        log.info("job %s ended %s: %s", run.job_id, status.value, reason.splitlines()[0])

    def _disk_full(self, log_text: str) -> bool:
        """Whether a worker that just failed met a full data disk: its log says so, or the disk has no room left
        (then the log could not say it)."""
        try:
            nearly_full = shutil.disk_usage(self.paths.root).free < DISK_FULL_BELOW_BYTES
        except OSError:
            nearly_full = False
        return nearly_full or looks_like_disk_full(log_text)

    def finish(self, job_id: str, status: JobStatus, reason: str | None, artifacts: dict | None = None) -> bool:
        """``store.finish``; on a full disk, delete the space reserve and try once more, so a job's end is recorded
        while the disk is still full (and the queue can move on)."""
        try:
            return self.store.finish(job_id, status, reason, artifacts)
        except Exception as exc:
            if disk_full_reason(exc) is None or not self.paths.release_space_reserve():
                raise
            log.warning("the data disk is full: freed the space reserve to record that job %s %s", job_id, status.value)
            return self.store.finish(job_id, status, reason, artifacts)
