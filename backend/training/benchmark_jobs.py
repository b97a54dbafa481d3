"""A job's benchmarks in the worker: after training on the trainer's own model, or as an eval-only job (``evaluate``
in the spec) on a finished job's adapter or on a base model, with progress in the store.

An eval-only job goes through the same store, scheduler and worker as training; the worker sees ``spec.evaluate`` and
takes this path instead of building a trainer. Its spec's method is not used (no method is added to the method table).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from backend.core.artifacts import BenchmarkReport
from backend.core.paths import DataPaths
from backend.core.spec import JobSpec, SpecError
from backend.jobs.failures import describe_failure
from backend.jobs.reporter import JobReporter
from backend.models.mixed_batch import BASE_ADAPTER, adapter_name
from backend.training.evaluation import START_ADAPTER, load_start_adapter

log = logging.getLogger("studio.worker")


class EvaluationCancelled(Exception):
    """A cancel request (or the scheduler's SIGTERM) reached an eval-only job between two task runs."""


def reporting(store: JobReporter, job_id: str, report_progress: bool, stop_event=None):
    """A progress callback: the log always; for an eval-only job also its progress row (training's own progress must
    not be overwritten while its figures are shown) and the cancel check, between two task runs."""

    def progress(done: int, total: int, text: str) -> None:
        log.info("%s (%d/%d)", text, done, total)
        if not report_progress:
            return
        if (stop_event is not None and stop_event.is_set()) or store.cancel_requested(job_id):
            raise EvaluationCancelled(f"stopped by request after {done} of {total} task runs")
        store.report(job_id, [], {"step": done, "total_steps": total, "phase": text, "updated_at": time.time()})

    return progress


def sides_of(model, with_start: bool, compare_base: bool = True) -> dict[str, str | None]:
    """Each side's adapter: tuned (the model's active adapter), start (a parent's adapter, when loaded), base (off);
    a model without an adapter is its base alone."""
    tuned = adapter_name(model)
    if tuned is None:
        return {"base": None}
    sides: dict[str, str | None] = {"tuned": tuned}
    if with_start:
        sides["start"] = START_ADAPTER
    if compare_base:
        sides["base"] = BASE_ADAPTER
    return sides


def scored_benchmarks(
    model,
    tokenizer,
    spec: JobSpec,
    sides: dict[str, str | None],
    paths: DataPaths,
    job_id: str,
    progress,
    scored: str,
) -> BenchmarkReport:
    """Run the spec's benchmarks, each item's scores kept in the job's ``benchmarks.json``; a failure is a report with
    its error (a trained job's adapter is saved already)."""
    from backend.training.benchmarks import run_benchmarks

    try:
        return run_benchmarks(
            model,
            tokenizer,
            list(spec.benchmarks.tasks),
            spec.benchmarks.limit,
            sides,
            uploads_dir=paths.uploads(spec.owner),
            progress=progress,
            scored=scored,
            items_file=paths.job_dir(job_id) / "benchmarks.json",
        )
    except EvaluationCancelled:
        raise
    except Exception as exc:  # noqa: BLE001 - recorded as the report's error, never a failed training job
        log.exception("the benchmarks failed")
        return BenchmarkReport(error=describe_failure(exc), limit=spec.benchmarks.limit, scored=scored)


def benchmark_trained(
    trainer, spec: JobSpec, paths: DataPaths, job_id: str, store: JobReporter, parent_adapter: Path | None
) -> BenchmarkReport | None:
    """The spec's benchmarks on the trained model (tuned, start, base on the same items), or None when it names none."""
    if not spec.benchmarks.tasks:
        return None
    model = trainer.model
    with_start = load_start_adapter(model, parent_adapter)
    sides = sides_of(model, with_start, spec.eval.compare_base)
    log.info("benchmarks %s on %s", ", ".join(spec.benchmarks.tasks), ", ".join(sides))
    report = scored_benchmarks(
        model, trainer.processing_class, spec, sides, paths, job_id, reporting(store, job_id, False), f"job {job_id}"
    )
    for sentence in report.drops:
        log.info("benchmark drop: %s", sentence)
    return report


def run_eval_only(spec: JobSpec, paths: DataPaths, job_id: str, store: JobReporter, stop_event=None) -> BenchmarkReport:
    """An eval-only job: load the finished job's base and adapter (and its parent's adapter, for a staged job), or the
    named base model alone, and score the benchmarks; ValueError with a sentence when the job has nothing to load or
    the benchmarks failed, EvaluationCancelled when asked to stop."""
    from backend.models.inference import load_for_inference

    assert spec.evaluate is not None
    progress = reporting(store, job_id, True, stop_event)
    progress(0, 1, "loading the model")
    target_id = spec.evaluate.job_id
    if target_id is None:
        model, tokenizer = load_for_inference(spec.model, spec.quantization, paths.models)
        scored, parent = f"model {spec.model.name_or_path}", None
    else:
        target = store.get(target_id)
        adapter = target.artifacts.adapter_dir
        if not adapter or not (Path(adapter) / "adapter_config.json").is_file():
            raise ValueError(f"job {target_id} has no saved adapter to evaluate")
        model, tokenizer = load_for_inference(target.spec.model, target.spec.quantization, paths.models, Path(adapter))
        parent = target.artifacts.parent_adapter
        scored = f"job {target_id}"
    with_start = load_start_adapter(model, Path(parent) if parent else None)
    report = scored_benchmarks(model, tokenizer, spec, sides_of(model, with_start), paths, job_id, progress, scored)
    store.merge_artifacts(job_id, benchmarks=report)
    if report.error:  # a sentence already (describe_failure): the job's error says it as it is
        raise SpecError([report.error])
    return report
