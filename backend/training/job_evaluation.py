"""A job's evaluations once it has trained, as the worker runs them: the before/after scores on held-out rows, the
environment's episodes on every side, the benchmarks and the learning verdict, each written to the job's folder and
artifacts. A failed evaluation is recorded and logged; it never fails the job (the adapter is saved by then)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from backend.core.artifacts import BenchmarkReport, DriftCheck
from backend.core.learning import drift_text
from backend.core.paths import DataPaths
from backend.core.spec import JobSpec
from backend.jobs.failures import describe_failure
from backend.jobs.reporter import JobReporter
from backend.training.distributed import main_rank

log = logging.getLogger("studio.worker")  # these lines belong to the worker's part of the job log


def recorded_evaluation(name: str, compute, paths: DataPaths, job_id: str) -> dict:
    """Run an evaluation and write ``<name>.json``; a failure is recorded, never a failed job (the adapter is saved)."""
    try:
        result = compute()
    except Exception as exc:  # noqa: BLE001
        log.exception("%s failed", name)
        result = {"error": describe_failure(exc)}
    path = paths.job_dir(job_id) / f"{name}.json"
    if main_rank():  # every rank of a job of several processes evaluates; one writes
        path.write_text(json.dumps(result, indent=2))
    log.info("%s: %s (per-row scores in %s)", name, evaluation_summary(result), path.name)
    return result


def evaluation_summary(result: dict, limit: int = 400) -> str:
    """One short line of an evaluation's result for the log: each side's summary scores, without the per-row ones
    (they are in the evaluation's JSON file).

    >>> evaluation_summary({"rows": 2, "tuned": {"exact_match": 0.5}, "base": {"exact_match": 0.0},
    ...                     "per_row": {"tuned": {"exact_match": [1.0, 0.0]}}})
    'rows 2; tuned: exact_match 0.5; base: exact_match 0'
    >>> evaluation_summary({"error": "out of memory"})
    'error: out of memory'
    """
    parts = []
    for key, value in result.items():
        if key == "per_row":
            continue
        if isinstance(value, dict):
            figures = ", ".join(f"{k} {_figure(v)}" for k, v in value.items() if not isinstance(v, (dict, list)))
            parts.append(f"{key}: {figures}")
        elif not isinstance(value, list):
            parts.append(f"{key} {_figure(value)}" if key != "error" else f"error: {value}")
    line = "; ".join(parts)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _figure(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def run_evaluation(
    trainer,
    spec: JobSpec,
    held_out,
    paths: DataPaths,
    job_id: str,
    parent_adapter: Path | None = None,
    callback=None,
) -> dict:
    """Before/after scores on the held-out rows (with where a staged job started: its parent's adapter); the job's
    progress says the rows scored so far (through ``callback``, the job's StoreReportingCallback)."""
    from backend.training.evaluation import evaluate_before_after

    def on_rows(done: int, total: int, sides: str) -> None:
        if callback is not None:
            callback.evaluation_progress(trainer.state, done, total, sides)

    log.info(
        "evaluating the base, %sthe tuned model on %d held-out rows",
        "the parent's adapter and " if parent_adapter else "",
        len(held_out),
    )
    return recorded_evaluation(
        "evaluation", lambda: evaluate_before_after(trainer, spec, held_out, parent_adapter, on_rows), paths, job_id
    )


def run_environment_evaluation(
    trainer,
    spec: JobSpec,
    environment,
    rows,
    paths: DataPaths,
    job_id: str,
    parent_adapter: Path | None = None,
    callback=None,
    rows_held_out: bool = False,
) -> tuple[dict, list]:
    """Success rate and mean reward of base, start (a staged job's parent adapter) and tuned over the same seeded
    episodes: the environment's test split where it has one (``reset(split="test", index=i)``), else ``rows``
    (held out from training or not, as ``rows_held_out`` says); the result says which, and which tasks. The job's
    progress says the episodes played so far (through ``callback``). Returns (the evaluation, the held-out tasks it
    played: the drift answers their prompts where the dataset held none out; empty where it played no such tasks)."""
    from backend.environments.episodes import EpisodeSettings, success_rates
    from backend.environments.runtime import concurrent_episodes
    from backend.environments.tasks import evaluation_episodes
    from backend.training.evaluation import START_ADAPTER, load_start_adapter

    log.info(
        "playing %d evaluation episodes with the base, %sthe tuned model",
        spec.environment.eval_episodes,
        "the parent's adapter and " if parent_adapter else "",
    )
    start = START_ADAPTER if load_start_adapter(trainer.model, parent_adapter) else None

    def on_episodes(done: int, total: int, sides: str) -> None:
        if callback is not None:
            callback.evaluation_progress(trainer.state, done, total, sides, unit="episodes")

    held_out_tasks: list = []

    def compute() -> dict:
        episodes = spec.environment.eval_episodes
        source = evaluation_episodes(
            environment.url, rows, episodes, rows_held_out, timeout_s=min(spec.environment.timeout_s, 30.0)
        )
        log.info("the evaluation episodes are the %s (split %s)", source.episodes, source.split or "none")
        if source.held_out:
            held_out_tasks.extend(source.rows)
        result = success_rates(
            trainer.model,
            trainer.processing_class,
            environment.factory,
            source.rows,
            EpisodeSettings.from_spec(spec),
            episodes,
            spec.training.seed,
            compare_base=spec.eval.compare_base,
            start_adapter=start,
            sessions=concurrent_episodes(spec),
            on_episodes=on_episodes,
        )
        return {**source.record(), **result}

    return recorded_evaluation("environment_evaluation", compute, paths, job_id), held_out_tasks


def without_rows(evaluation: dict) -> dict:
    """An evaluation as the job's artifacts keep it: the per-row scores stay in its JSON file only."""
    return {key: value for key, value in evaluation.items() if key != "per_row"}


def record_learning(
    store: JobReporter,
    job_id: str,
    spec: JobSpec,
    evaluation: dict | None,
    environment_evaluation: dict | None,
    benchmarks: BenchmarkReport | None = None,
    drift: DriftCheck | None = None,
) -> None:
    """Judge whether training helped (the ``learning`` artifact), say it in the log; never fails the job. The
    benchmarks' report (lm-eval, tuned against start) is stored beside it, and a skill it lost is a guard that fell;
    the drift from the start goes into the verdict as a caution where it is beyond healthy."""
    from backend.core.learning import with_drift
    from backend.training.evaluation import benchmark_guards, learning_verdict
    from backend.training.signal import no_signal_reason

    if benchmarks is not None:
        store.merge_artifacts(job_id, benchmarks=benchmarks)
    try:
        job = store.get(job_id)
        reason = no_signal_reason(job.artifacts.signal)
        learning = learning_verdict(
            spec, evaluation, environment_evaluation, no_signal=reason, extra_guards=benchmark_guards(benchmarks)
        )
    except Exception:  # noqa: BLE001 - the adapter is saved; a verdict that cannot be made is only logged
        log.exception("the learning verdict could not be made")
        return
    if learning is None:
        log.info("learning verdict: none (no held-out rows were scored on two sides)")
        return
    learning = with_drift(learning, drift)
    store.merge_artifacts(job_id, learning=learning.model_dump())
    log.info("learning verdict: %s: %s", learning.verdict, learning.sentence)


def evaluate_trained(
    trainer,
    spec: JobSpec,
    held_out,
    environment,
    paths: DataPaths,
    job_id: str,
    store: JobReporter,
    parent_adapter: Path | None,
    callback,
) -> None:
    """After training: score the held-out rows and play the environment's episodes on every side, run the
    benchmarks, and record each result and the learning verdict; a failed evaluation is recorded, never a failed job.
    In a job of several processes every rank evaluates (the trainer's evaluation gathers over them) and rank 0 alone
    writes and runs the benchmarks."""
    from backend.training.benchmark_jobs import benchmark_trained

    evaluation = environment_evaluation = None
    test_tasks: list = []  # the environment's held-out tasks the evaluation played, where it had a test split
    if held_out is not None and (environment is None or spec.rollout.rewards):
        evaluation = run_evaluation(trainer, spec, held_out, paths, job_id, parent_adapter, callback)
        store.merge_artifacts(job_id, evaluation=without_rows(evaluation))
    if environment is not None and spec.environment.eval_episodes:
        rows = held_out if held_out is not None else trainer.train_dataset
        rows = [rows[i] for i in range(len(rows))]
        environment_evaluation, test_tasks = run_environment_evaluation(
            trainer,
            spec,
            environment,
            rows,
            paths,
            job_id,
            parent_adapter,
            callback,
            rows_held_out=held_out is not None,
        )
        store.merge_artifacts(job_id, environment_evaluation=without_rows(environment_evaluation))
    drift = run_drift(trainer, spec, held_out if held_out is not None else test_tasks, environment, parent_adapter)
    benchmarks = benchmark_trained(trainer, spec, paths, job_id, store, parent_adapter) if main_rank() else None
    record_learning(store, job_id, spec, evaluation, environment_evaluation, benchmarks, drift)


def run_drift(trainer, spec: JobSpec, held_out, environment, parent_adapter: Path | None) -> DriftCheck | None:
    """The tuned model's drift from where it started on the held-out prompts (the dataset's held-out rows, or the
    environment's test tasks; an environment job's shown its tools); a drift that cannot be measured is logged,
    never a failed job (None)."""
    from backend.training.drift import drift_check, environment_tool_schemas
    from backend.training.evaluation import START_ADAPTER, load_start_adapter

    try:
        start = START_ADAPTER if load_start_adapter(trainer.model, parent_adapter) else None
        rows = [held_out[i] for i in range(len(held_out))] if held_out is not None else []
        tools = environment_tool_schemas(environment.info) if environment is not None else None
        drift = drift_check(spec, trainer.model, trainer.processing_class, rows, tools, start)
    except Exception:  # noqa: BLE001 - the adapter is saved; a drift that cannot be measured is only logged
        log.exception("the drift from the start could not be measured")
        return None
    log.info("drift: %s (%s s)", drift_text(drift), drift.seconds)
    return drift
