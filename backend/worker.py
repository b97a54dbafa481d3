"""The worker process: runs one job's TRL trainer, reports to the store and records how it ended.

Started by the scheduler as ``python -m backend.worker --job-id ID --data-dir DIR`` in its own process session,
with stdout and stderr going to the job's log file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import ExitStack
from pathlib import Path
from typing import NoReturn

from backend.core.paths import DataPaths
from backend.core.spec import JobSpec
from backend.data.loading import JobData, split_holdout
from backend.data.user_cache import held_folder
from backend.jobs.failures import describe_failure, with_log_tail
from backend.jobs.lineage import checkpoint_step, last_checkpoint
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.reporter import JobReporter, NullReporter
from backend.jobs.store import JobStore
from backend.training.distributed import die_with_launcher, launched_as_rank, lost_a_peer, whole_spec
from backend.training.job_evaluation import evaluate_trained
from backend.training.named_jobs import NamedJobs, read_named_jobs
from backend.training.prepared import PreparedJob, prepare_job

log = logging.getLogger("studio.worker")

EXIT_OK = 0
EXIT_FAILED = 1


def prepare_stored_job(
    job: JobRecord, named: NamedJobs, paths: DataPaths, store: JobReporter, kept_in: Path | None
) -> PreparedJob:
    """The stored job made ready to train, once (backend/training/prepared.py): with the jobs it names (``named``,
    read as they are now), its rows memory-mapped from ``kept_in`` (a folder of its owner's datasets cache the job
    holds, ``held_folder``), and auto-tune's plan for this machine, logged and kept as ``artifacts.auto_tune``; a
    resumed job keeps its first attempt's choices, so its checkpoint still matches."""
    from backend.training.autotune import record

    first = job.artifacts.auto_tune if job.resume else None
    prepared = prepare_job(named, paths, kept_in, preflight=False, kept_choices=first.settings if first else None)
    if prepared.tuning is None:
        log.info("auto-tune: keeping the first attempt's choices")
        return prepared
    for choice in prepared.tuning.choices:
        log.info("auto-tune: %s", choice)
    store.merge_artifacts(job.id, auto_tune=record(prepared.tuning))
    return prepared


def build_trainer(
    spec: JobSpec,
    paths: DataPaths,
    job_id: str,
    callbacks: list,
    parent_adapter: Path | None,
    data: JobData,
    environment=None,
    reward_models=None,
):
    """The TRL trainer for the job's method on its ``data`` (its rows as ``loading.load_job_data`` loads them), and the
    held-out rows for the before/after evaluation (or None); ``reward_models``: where the reward models its rewards
    name come from (``named_jobs.reward_model_sources``)."""
    dataset, fmt = data
    train, held_out = split_holdout(dataset, spec.eval.holdout_fraction, spec.eval.holdout_rows, spec.training.seed)
    log.info("dataset ready: %d rows to train on, %d held out", len(train), len(held_out) if held_out else 0)
    from backend.methods.table import TrainerInputs, support

    trainer = support(spec.method).build_trainer(
        TrainerInputs(
            spec=spec,
            output_dir=paths.job_output(job_id),
            models_dir=paths.models,
            callbacks=callbacks,
            dataset=train,
            dataset_format=fmt,
            parent_adapter=parent_adapter,
            held_out=held_out,
            environment=environment,
            reward_models=reward_models,
        )
    )
    return trainer, held_out


def build_job_trainer(
    prepared: PreparedJob,
    spec: JobSpec,
    paths: DataPaths,
    job_id: str,
    store: JobReporter,
    callbacks: list,
    environment=None,
):
    """:func:`build_trainer` of the prepared job as ``spec`` runs it (its own, with the Hub's checkpoint settings the
    worker resolved), and with ``output.push_checkpoints`` the watch over its checkpoint pushes (or None).

    A push problem never fails the job: without a token, offline, or when the Hub will not create the repo, the reason
    is logged and recorded (``hub_checkpoint_error``) and the job trains with its checkpoints kept here only.
    """
    from backend.hub.checkpoints import (
        describe_checkpoint_failure,
        push_refusal,
        record_push_failure,
        record_push_target,
        repo_creation_failed,
        without_checkpoint_push,
    )

    named = prepared.named
    spec = named.runnable(spec)  # a distillation teacher named by its job id: that job's adapter folder
    parent_adapter = prepared.parent_adapter

    def build(spec: JobSpec):
        return build_trainer(spec, paths, job_id, callbacks, parent_adapter, prepared.data, environment, named.rewards)

    token = os.environ.get("HF_TOKEN")
    refusal = push_refusal(token) if spec.output.push_checkpoints else None
    if refusal is not None:
        record_push_failure(store, job_id, refusal)
        spec = without_checkpoint_push(spec)
    try:
        trainer, held_out = build(spec)
    except Exception as exc:
        if not (spec.output.push_checkpoints and repo_creation_failed(exc)):
            raise
        from backend.methods.common import checkpoint_training_kwargs

        repo = checkpoint_training_kwargs(spec, job_id)["hub_model_id"]
        record_push_failure(
            store, job_id, describe_checkpoint_failure(exc, repo, paths.job_output(job_id), None, token)
        )
        spec = without_checkpoint_push(spec)
        trainer, held_out = build(spec)
    watch = None
    if spec.output.push_checkpoints and trainer.hub_model_id:  # set on rank 0 only: the one that pushes
        from backend.hub.checkpoint_push import CheckpointPushWatch

        watch = CheckpointPushWatch(trainer, store, job_id, spec.output.private, token)
        trainer.add_callback(watch)
        record_push_target(store, job_id, trainer.hub_model_id, spec.output.private)
    return trainer, held_out, watch


def start_from_hub(spec: JobSpec, output_dir: Path, store: JobReporter, job_id: str) -> None:
    """``training.resume_from_hub``: download the pushed checkpoint into the output dir as ``checkpoint-N``, unless
    this job has a checkpoint there already (an earlier attempt's, newer); SpecError with a sentence when it cannot."""
    if spec.training.resume_from_hub is None or last_checkpoint(output_dir) is not None:
        return
    from backend.core.artifacts import HubCheckpoint
    from backend.hub.checkpoints import CHECKPOINT_FOLDER, fetch_checkpoint

    repo = spec.training.resume_from_hub
    log.info("downloading %s/%s to resume from it", repo, CHECKPOINT_FOLDER)
    checkpoint = fetch_checkpoint(repo, output_dir, os.environ.get("HF_TOKEN"))
    step = checkpoint_step(checkpoint)
    store.merge_artifacts(job_id, resumed_from_hub=HubCheckpoint(repo_id=repo, step=step, at=time.time()))
    log.info("downloaded the checkpoint of step %d from %s", step, repo)


def save_outputs(trainer, spec: JobSpec, paths: DataPaths, job_id: str) -> dict:
    """Save the adapter, tokenizer, spec and final metrics in the job's folder; the artifacts to record."""
    adapter_dir = paths.job_adapter(job_id)
    trainer.save_model(str(adapter_dir))
    trainer.processing_class.save_pretrained(str(adapter_dir))
    (paths.job_dir(job_id) / "spec.json").write_text(spec.model_dump_json(indent=2))
    final = {k: v for k, v in trainer.state.log_history[-1].items() if isinstance(v, (int, float))}
    (paths.job_dir(job_id) / "final_metrics.json").write_text(json.dumps(final, indent=2))
    return {"adapter_dir": str(adapter_dir), "final_metrics": final, "global_step": trainer.state.global_step}


def record_distributed(spec: JobSpec, store: JobReporter, job_id: str) -> None:
    """A job of several processes: record (rank 0) and log how its ranks run, read from torch.distributed once
    the trainer has set it up."""
    import torch

    from backend.training.distributed import run_record

    record = run_record(spec, torch.cuda.is_available())
    if record is not None:
        store.merge_artifacts(job_id, distributed=record)
        log.info("rank %d: %s", process_rank(), record.describe())


def record_performance(store: JobReporter, job_id: str, summary: dict | None) -> None:
    """Keep the run's speed figures as the ``performance`` artifact (a stopped run's too) and say them in the log."""
    if summary is None:
        return
    from backend.training.flops import performance_line

    store.merge_artifacts(job_id, performance=summary)
    log.info("performance: %s", performance_line(summary))


def process_rank() -> int:
    """This process's rank under ``accelerate launch`` (0 when not distributed)."""
    return int(os.environ.get("RANK", "0"))


def reporter_for_rank(paths: DataPaths) -> JobReporter:
    """The store for rank 0; for the other DDP ranks a NullReporter: they read the job and train, and rank 0 alone
    reports metrics, artifacts and the final status."""
    store = JobStore(paths.db)
    return store if process_rank() == 0 else NullReporter(store)


def run_job(job_id: str, paths: DataPaths, stop_event: threading.Event) -> int:
    """Train one stored job to its end and record how it ended; the exit code (EXIT_OK or EXIT_FAILED)."""
    from backend.training.callbacks import StoreReportingCallback

    store = reporter_for_rank(paths)
    job = store.get(job_id)
    announce_job(job, paths, store)
    stack = ExitStack()  # the job's environment server, if it started one, stops with the job
    try:
        if job.spec.evaluate is not None:
            return run_eval_only_job(job.spec, paths, job_id, store, stop_event)
        if job.spec.export is not None:
            return run_export(job, paths, store, stop_event)
        callback = StoreReportingCallback(store, job_id, stop_event)
        if not train_job(job, paths, store, callback, stop_event, stack):
            return EXIT_OK  # cancelled (recorded as such), or a rank other than 0, which records nothing
    except BaseException as exc:  # noqa: BLE001 - every way out must leave the job with a final status
        traceback.print_exc()
        sys.stderr.flush()
        if launched_as_rank() and lost_a_peer(exc):
            # Another rank died: the launcher's summary names it, and the scheduler records that as the job's end.
            log.error("rank %d stops: another rank of the job is gone", process_rank())
            return EXIT_FAILED
        store.finish(job_id, JobStatus.failed, with_log_tail(describe_failure(exc), paths.job_log(job_id)))
        return EXIT_FAILED
    finally:
        stack.close()
    store.finish(job_id, JobStatus.succeeded)
    log.info("job %s succeeded", job_id)
    if job.spec.output.push_to_hub:  # auto-tune changes no output setting: the stored spec says it
        push_to_hub(paths, job_id)
    return EXIT_OK


def announce_job(job: JobRecord, paths: DataPaths, store: JobReporter) -> None:
    """Make the job's output folder, record where its files are, and say in the log what the job is."""
    spec, job_id = job.spec, job.id
    output_dir = paths.job_output(job_id)
    output_dir.mkdir(parents=True, exist_ok=True)
    store.merge_artifacts(
        job_id, job_dir=str(paths.job_dir(job_id)), log_file=str(paths.job_log(job_id)), output_dir=str(output_dir)
    )
    if spec.export is not None:
        log.info(
            "job %s: EXPORT of job %s as %s (attempt %d)", job_id, spec.export.job_id, spec.export.format, job.attempts
        )
        return
    log.info(
        "job %s: %s of %s on %s (attempt %d)",
        job_id,
        "EVAL-ONLY" if spec.evaluate is not None else spec.method.value.upper(),
        spec.model.name_or_path,
        ", ".join(spec.benchmarks.tasks) if spec.evaluate is not None else spec.dataset.name,
        job.attempts,
    )


def run_eval_only_job(
    spec: JobSpec, paths: DataPaths, job_id: str, store: JobReporter, stop_event: threading.Event
) -> int:
    """An eval-only job: its benchmarks scored, nothing trained (backend/training/benchmark_jobs.py); records its
    end (succeeded, or cancelled with a note) and returns EXIT_OK. Raises on a failure, which the caller records."""
    from backend.training.benchmark_jobs import EvaluationCancelled, run_eval_only

    try:
        run_eval_only(spec, paths, job_id, store, stop_event)
    except EvaluationCancelled as stopped:
        store.finish(job_id, JobStatus.cancelled, None, {"cancel_note": str(stopped)})
        log.info("cancelled: %s", stopped)
        return EXIT_OK
    store.finish(job_id, JobStatus.succeeded)
    log.info("job %s succeeded", job_id)
    return EXIT_OK


def run_export(job: JobRecord, paths: DataPaths, store: JobReporter, stop_event: threading.Event) -> int:
    """An export job (backend/workflows/export_job.py): records its end (succeeded with its outcome, or cancelled
    with a note) and returns EXIT_OK. Raises on a failure, which the caller records."""
    from backend.workflows.export import ExportError
    from backend.workflows.export_job import ExportCancelled, run_export_job

    try:
        outcome = run_export_job(job, paths, store, stop_event)
    except ExportError as exc:  # its own sentence, nothing left behind: no traceback or log tail to add
        store.finish(job.id, JobStatus.failed, str(exc))
        log.error("%s", exc)
        return EXIT_FAILED
    except ExportCancelled as stopped:
        store.finish(job.id, JobStatus.cancelled, None, {"cancel_note": str(stopped)})
        log.info("cancelled: %s", stopped)
        return EXIT_OK
    store.finish(job.id, JobStatus.succeeded, None, {"export": outcome})
    log.info("%s", outcome.sentence)
    return EXIT_OK


def train_job(
    job: JobRecord,
    paths: DataPaths,
    store: JobReporter,
    callback,
    stop_event: threading.Event,
    stack: ExitStack,
) -> bool:
    """Train the job (its environment server, if any, opened on ``stack``), then on rank 0 save and evaluate it.

    True when its success is to be recorded; False when it was cancelled (recorded here) or on a rank other than 0.
    ``callback`` is its StoreReportingCallback. Any failure raises, for the caller to record.
    """
    job_id, spec = job.id, job.spec
    output_dir = paths.job_output(job_id)
    named = read_named_jobs(spec, store, stored=True)  # held to their rules at submit; read as they are now
    parent_adapter = named.adapter()
    if parent_adapter is not None:
        store.merge_artifacts(job_id, parent_job_id=spec.model.parent_job_id, parent_adapter=str(parent_adapter))
    environment = open_job_environment(spec, store, job_id, stack)
    # The job's copies of its rows (and the trainer's) lie in its owner's folder until it ends (user_cache.py).
    kept_in = stack.enter_context(held_folder(spec.dataset.source, paths.uploads(spec.owner)))
    prepared = prepare_stored_job(job, named, paths, store, kept_in)
    spec = prepared.spec  # one process's share of the batch, auto-tune's choices applied
    start_from_hub(spec, output_dir, store, job_id)
    trainer, held_out, pushes = build_job_trainer(prepared, spec, paths, job_id, store, [callback], environment)
    log.info("trainer ready: model loaded and data prepared")
    from backend.training.forecast import forecast_first

    if forecast_first(job, spec, trainer, store, stop_event):
        return False  # a forecast-only job, a forecast of no signal or a cancel: recorded
    record_distributed(spec, store, job_id)
    # The ETA counts the evaluations after the last step: base and tuned (and a staged job's start) on the
    # held-out rows, and the environment's episodes on as many sides.
    sides = 1 + spec.eval.compare_base + (parent_adapter is not None)
    if held_out is not None and (environment is None or spec.rollout.rewards):
        callback.expect_evaluation(len(held_out), sides)
    if environment is not None and spec.environment.eval_episodes:
        callback.expect_evaluation(spec.environment.eval_episodes, sides)
    resume_from = resume_point(job, spec, output_dir, store)
    if stop_event.is_set() or store.cancel_requested(job_id):
        # A cancel is not an error: the UI says "Cancelled" (at the checkpoint's step when resumed from one).
        store.finish(
            job_id,
            JobStatus.cancelled,
            None,
            {"cancelled_at_step": checkpoint_step(resume_from) if resume_from else 0},
        )
        log.info("cancelled before training started")
        return False
    trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    if pushes is not None:
        pushes.settle()
    # The studio publishes the adapter itself (output.push_to_hub: adapter, card, records), so saving it below
    # must not start Transformers' own end-of-training push.
    trainer.args.push_to_hub = False
    record_performance(store, job_id, callback.performance.summary())
    if callback.cancelled:
        step = trainer.state.global_step
        store.finish(job_id, JobStatus.cancelled, None, {"cancelled_at_step": step})
        log.info("cancelled by request at step %d", step)
        return False
    main = process_rank() == 0  # rank 0 saves and records the result
    if main:
        outputs = save_outputs(trainer, whole_spec(spec, spec.training.num_processes), paths, job_id)
        log.info("saved the adapter to %s", outputs["adapter_dir"])
        outputs["reporting_overhead_s"] = round(callback.overhead_s, 4)
        store.merge_artifacts(job_id, outputs)
    elif spec.training.distributed != "ddp":  # a sharded model is gathered by every rank; rank 0 writes it
        trainer.save_model(str(paths.job_adapter(job_id)))
    # Every rank evaluates: the trainer's evaluation gathers over all of them (the other ranks write nothing).
    evaluate_trained(trainer, spec, held_out, environment, paths, job_id, store, parent_adapter, callback)
    return main


def open_job_environment(spec: JobSpec, store: JobReporter, job_id: str, stack: ExitStack):
    """The job's environment, opened on ``stack`` (its server stops with the job) and recorded; None without one."""
    if not spec.environment.name:
        return None
    from backend.environments.runtime import open_environment

    environment = stack.enter_context(open_environment(spec))
    store.merge_artifacts(job_id, environment=environment.info.summary(), environment_server_pid=environment.server_pid)
    return environment


def resume_point(job: JobRecord, spec: JobSpec, output_dir: Path, store: JobReporter) -> Path | None:
    """The checkpoint a resumed job continues from (None: a fresh start, or no checkpoint was saved), recorded; the
    steps the earlier attempt logged past it are forgotten, as this attempt logs them again."""
    resuming = job.resume or spec.training.resume_from_hub is not None
    resume_from = last_checkpoint(output_dir) if resuming else None
    if resuming:
        log.info("resuming from %s", resume_from or "the start (no checkpoint was saved)")
        store.merge_artifacts(job.id, resumed_from=str(resume_from) if resume_from else None)
        # The earlier attempt logged steps past the checkpoint that this one logs again: keep each step once.
        store.forget_reports_after(job.id, checkpoint_step(resume_from) if resume_from else 0)
    return resume_from


def push_to_hub(paths: DataPaths, job_id: str) -> None:
    """The spec's auto-push once the job has succeeded (rank 0 only): a failed push is recorded (hub_error), never a
    failed job.

    The token is the submitting user's, handed to this process in HF_TOKEN by the scheduler (memory only).
    """
    from backend.hub.publish import PushError, push_job

    store = JobStore(paths.db)  # a push reads the job's metrics too: the whole store, not the job's reporter
    try:
        result = push_job(store.get(job_id), paths, store, os.environ.get("HF_TOKEN"))
    except PushError as exc:
        log.warning("push to the Hub failed: %s", exc)
        return
    log.info("pushed to %s (%s)", result.url, result.commit_url)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.worker``: run one job the scheduler started, stopping cleanly on SIGTERM."""
    parser = argparse.ArgumentParser(description="Run one Post-Training Studio job (started by the scheduler).")
    parser.add_argument("--job-id", required=True)
    parser.add_argument("--data-dir", required=True)
    args = parser.parse_args(argv)
    die_with_launcher()  # one rank of several: it must not outlive accelerate's launcher
    rank = f"[rank {process_rank()}] " if launched_as_rank() else ""  # the ranks of a job share its log
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format=f"%(asctime)s %(levelname)s {rank}%(name)s: %(message)s"
    )
    # Which environment trains (STUDIO_TRAINER_PYTHON): the first thing a job log says.
    log.info("worker for job %s running under %s (Python %s)", args.job_id, sys.executable, sys.version.split()[0])
    # trackio (output.trackio) reads its folder when first imported: the data dir's, never ~/.cache/huggingface.
    from backend.platform.tracking import TRACKIO_DIR_ENV, trackio_dir

    os.environ[TRACKIO_DIR_ENV] = str(trackio_dir(DataPaths(args.data_dir)))
    stop_event = threading.Event()
    # SIGTERM is the scheduler's cooperative stop: the training callback sees the event at the next step.
    signal.signal(signal.SIGTERM, lambda *_: stop_event.set())
    started = time.monotonic()
    log.info("worker started")  # the job's next line comes once the training libraries are imported
    code = run_job(args.job_id, DataPaths(args.data_dir), stop_event)
    log.info("worker exiting with %d after %.1fs", code, time.monotonic() - started)
    return code


def end_process(code: int) -> NoReturn:
    """End the worker process now, its job's final status recorded.

    A normal exit runs interpreter shutdown, which joins leftover threads and runs __del__ methods (an episode's
    websocket closing joins a reader thread that can no longer run) and was seen hanging for an hour while holding
    the job's slot. Nothing still pending matters once we get here."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    end_process(main())
