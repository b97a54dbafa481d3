"""A job as the CLI prints it (its record as rows or JSON, the learning verdict, the no-signal warning) and the wait
that follows a job to its end with a progress bar."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from backend.api import (
    EVALUATING,
    JobArtifacts,
    JobRecord,
    JobStatus,
    LearningVerdict,
    SignalWatch,
    StudioAPI,
    drift_text,
    progress_text,
    status_text,
)
from backend.cli.common import timestamp


def learning_text(learning: LearningVerdict | None) -> str | None:
    """The learning verdict as the CLI prints it: its word, then its sentence (None before the job has one).

    >>> learning_text(LearningVerdict(metric="exact_match", label="held-out accuracy", verdict="no_change",
    ...                               sentence="Held-out accuracy 50% -> 50% (+0 points, ±9) on 32 rows."))
    'no change: Held-out accuracy 50% -> 50% (+0 points, ±9) on 32 rows.'
    """
    if learning is None:
        return None
    return f"{learning.word}: {learning.sentence}"


def signal_text(signal: SignalWatch | None) -> str | None:
    """GRPO's no-signal warning as the CLI prints it, saying whether it stopped the run (None while there is none).

    >>> signal_text(SignalWatch(warning="Every group scored the same.", since_step=2, consecutive=3,
    ...                         stopped_early=True))
    'no learning signal (since step 2, 3 logged steps in a row): Every group scored the same. Training stopped early.'
    """
    if signal is None or not signal.shown:
        return None
    text = "no learning signal"
    if signal.held:
        text += f" ({signal.held})"
    if signal.warning:
        text += f": {signal.warning}"
    return text + (" Training stopped early." if signal.stopped_early else "")


def record_json(api: StudioAPI, job: JobRecord) -> dict[str, Any]:
    """The job's record as ``show --json`` prints it: the stored record, with its status in words, its learning,
    drift, signal and forecast beside the artifacts, its place in the queue and its last metrics."""
    data = job.to_dict()
    data["status_text"] = status_text(job.status.value, job.artifacts.learning)
    data["learning"] = data["artifacts"].get("learning")  # as stored (None until recorded), beside the others
    data["drift"] = (data["learning"] or {}).get("drift")  # the verdict's drift from the start, beside it
    data["signal"] = data["artifacts"].get("signal")
    data["forecast"] = data["artifacts"].get("forecast")
    data["queue_position"] = api.jobs.queue_position(job.id)
    metrics = api.jobs.metrics(job.id)
    data["last_metrics"] = next((m for m in reversed(metrics) if "loss" in m), metrics[-1] if metrics else None)
    return data


def print_record(data: dict[str, Any]) -> None:
    """A ``record_json`` as ``show`` prints it: one ``label  value`` row per thing the job has."""
    artifacts = JobArtifacts.from_stored(data["artifacts"])
    status = status_text(data["status"], artifacts.learning)
    rows = [
        ("id", data["id"]),
        ("status", status + (f" (#{data['queue_position']} in queue)" if data.get("queue_position") else "")),
    ]
    forecast = artifacts.forecast and artifacts.forecast.sentence()
    drift = drift_text(artifacts.learning.drift) if artifacts.learning is not None else None
    for label, text in (
        ("learning", learning_text(artifacts.learning)),
        ("drift", drift),
        ("signal", signal_text(artifacts.signal)),
        ("forecast", forecast),
    ):
        if text:
            rows.append((label, text))
    rows += [
        ("method", data["method"]),
        ("model", data["model"]),
        ("dataset", data["dataset"]),
    ]
    evaluated = (data.get("spec") or {}).get("evaluate")
    if evaluated is not None:  # an eval-only job: its method and dataset are unused defaults
        target = f"job {evaluated['job_id']}" if evaluated.get("job_id") else "the model alone"
        rows[-3:] = [("method", "eval"), ("model", data["model"]), ("evaluates", target)]
    rows += [
        ("owner", data["owner"]),
        ("created", timestamp(data["created_at"])),
        ("started", timestamp(data["started_at"])),
        ("finished", timestamp(data["finished_at"])),
    ]
    progress = data.get("progress") or {}
    if progress.get("phase") == EVALUATING and data.get("status") == JobStatus.running.value:
        rows.append(("progress", progress_text(progress)))
    elif progress.get("total_steps"):
        rows.append(("progress", f"step {progress['step']}/{progress['total_steps']}"))
    for label, value in (
        ("adapter dir", artifacts.adapter_dir),
        ("output dir", artifacts.output_dir),
        ("log file", artifacts.log_file),
        ("parent job id", artifacts.parent_job_id),
        ("merged model", artifacts.merged and (artifacts.merged.repo_id or artifacts.merged.path)),
        ("gguf", artifacts.gguf and (artifacts.gguf.repo_id or artifacts.gguf.path)),
        ("quant check", artifacts.gguf and artifacts.gguf.quant_check and artifacts.gguf.quant_check.sentence),
        ("export", artifacts.export and artifacts.export.sentence),
    ):
        if value:
            rows.append((label, value))
    evaluation = artifacts.evaluation or {}
    for side in ("base", "tuned"):
        if evaluation.get(side):
            scores = ", ".join(f"{k}={v:.4g}" for k, v in evaluation[side].items())
            rows.append((f"eval {side}", f"{scores} ({evaluation['rows']} held-out rows)"))
    for name, score in (artifacts.benchmarks.tasks if artifacts.benchmarks else {}).items():
        rows.append((f"bench {name}", score.sentence))
    last = data.get("last_metrics")
    if last:
        shown = {k: v for k, v in last.items() if k not in {"id", "ts"} and isinstance(v, (int, float))}
        rows.append(("last metrics", ", ".join(f"{k}={v:.4g}" for k, v in shown.items())))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    if data.get("error"):
        print(f"{'error':<{width}}  {data['error']}")


def follow_job(api: StudioAPI, job_id: str, seen: Callable[[JobRecord], None], stopped: str) -> JobRecord:
    """Poll a job every half second until it ends, handing each reading to ``seen``; Ctrl-C stops the wait (not the
    job) with exit code 130 after saying ``stopped`` on stderr."""
    try:
        while True:
            job = api.jobs.get_job(job_id)
            seen(job)
            if job.status.finished:
                return job
            time.sleep(0.5)
    except KeyboardInterrupt:
        print(f"\n{stopped}", file=sys.stderr)
        raise SystemExit(130) from None


def wait_for_job(api: StudioAPI, job_id: str, quiet: bool) -> JobRecord:
    """Follow a job to its end: a progress bar of its steps, then of its evaluation's rows (none when ``quiet``), and
    its no-signal warning once, when it first appears. Ctrl-C stops the wait with 130, not the job."""
    from tqdm import tqdm

    bar = None
    warned = False  # the no-signal warning is said once, when it first appears

    def seen(job: JobRecord) -> None:
        nonlocal bar, warned
        warning = signal_text(job.artifacts.signal)
        if warning and not warned:
            warned = True
            tqdm.write(f"warning: {job_id}: {warning}", file=sys.stderr)
        progress = job.progress
        evaluating = progress.get("phase") == EVALUATING and not job.status.finished
        if not quiet and evaluating:
            if bar is None or bar.unit != "row":  # the training bar ends; the evaluation's rows follow
                if bar is not None:  # training is over: its bar ends full, even if a poll missed the last steps
                    bar.n = bar.total
                    bar.refresh()
                    bar.close()
                bar = tqdm(total=progress.get("eval_rows") or 0, desc=job_id, unit="row", dynamic_ncols=True)
            bar.n = progress.get("eval_done", 0)
            bar.set_postfix_str(progress_text(progress), refresh=False)
            bar.refresh()
        elif not quiet and progress.get("total_steps") and (bar is None or bar.unit == "step"):
            if bar is None:
                bar = tqdm(total=progress["total_steps"], desc=job_id, unit="step", dynamic_ncols=True)
            bar.n = progress["step"]
            if progress.get("loss") is not None:
                bar.set_postfix(loss=f"{progress['loss']:.4f}", refresh=False)
            bar.refresh()

    stopped = f"Stopped waiting; job {job_id} keeps running. Cancel it with: python -m backend cancel {job_id}"
    try:
        return follow_job(api, job_id, seen, stopped)
    finally:
        if bar is not None:
            bar.close()
