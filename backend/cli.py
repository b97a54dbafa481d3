"""Command line for power users and scripts: submit, evaluate, list, show, cancel and export jobs without a
running app."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from backend.api import StorageError, StudioAPI, methods
from backend.cli_export import add_export_command
from backend.cli_forecast import add_forecast_command
from backend.cli_sweep import add_sweep_commands
from backend.core.artifacts import JobArtifacts, LearningVerdict, SignalWatch
from backend.core.learning import drift_text, status_text
from backend.core.spec import SpecError, load_spec_text, with_settings
from backend.core.wording import EVALUATING, progress_text
from backend.environments.connection import EnvironmentUnavailable
from backend.environments.launcher import EnvironmentStartError
from backend.jobs.records import JobRecord, JobStatus
from backend.jobs.store_errors import InvalidTransition, JobNotFound, StoreError

EXIT_OK, EXIT_JOB_FAILED, EXIT_USAGE = 0, 1, 2
QUEUEING = ("submit", "warm-up", "eval", "sweep")  # the commands whose refusal means nothing was queued
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE's number: what a shell reports for a tool whose reader went away


def _load_spec_file(path: str) -> dict[str, Any]:
    file = Path(path)
    if not file.is_file():
        raise SpecError([f"spec file {path} does not exist"])
    try:
        data = load_spec_text(file.read_bytes(), where=path)  # JSON or YAML
    except OSError as exc:
        raise SpecError([f"spec file {path} cannot be read ({exc.strerror})"]) from None
    # Relative dataset paths in a spec file are relative to the file, so examples run from any directory.
    dataset = data.get("dataset")
    if isinstance(dataset, dict) and dataset.get("source") == "file" and isinstance(dataset.get("name"), str):
        candidate = Path(dataset["name"]).expanduser()
        if not candidate.is_absolute():
            dataset["name"] = str((file.parent / candidate).resolve())
    return data


def _ts(value: float | None) -> str:
    return datetime.fromtimestamp(value).strftime("%Y-%m-%d %H:%M:%S") if value else "-"


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


def _record_json(api: StudioAPI, job: JobRecord) -> dict[str, Any]:
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


def _print_record(data: dict[str, Any]) -> None:
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
        ("created", _ts(data["created_at"])),
        ("started", _ts(data["started_at"])),
        ("finished", _ts(data["finished_at"])),
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


def _wait(api: StudioAPI, job_id: str, quiet: bool) -> JobRecord:
    from tqdm import tqdm

    bar = None
    warned = False  # the no-signal warning is said once, when it first appears
    try:
        while True:
            job = api.jobs.get_job(job_id)
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
            if job.status.finished:
                return job
            time.sleep(0.5)
    except KeyboardInterrupt:
        print(
            f"\nStopped waiting; job {job_id} keeps running. Cancel it with: python -m backend cancel {job_id}",
            file=sys.stderr,
        )
        raise SystemExit(130) from None
    finally:
        if bar is not None:
            bar.close()


def cmd_submit(api: StudioAPI, args) -> int:
    """``submit``: queue a job from a spec file (``--set`` settings over it); ``--wait`` follows it to the end."""
    submitted = api.jobs.submit(with_settings(_load_spec_file(args.spec_file), args.set))
    job = submitted.job
    for warning in submitted.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not args.wait:
        if args.json:
            print(json.dumps({"id": job.id, "status": job.status.value, "queue_position": submitted.queue_position}))
        else:
            print(f"queued {job.id} (#{submitted.queue_position} in queue)")
        return EXIT_OK
    if not args.json:
        print(f"queued {job.id}; waiting for it to finish (Ctrl-C stops waiting, not the job)", file=sys.stderr)
    job = _wait(api, job.id, quiet=args.json)
    if args.json:
        print(json.dumps(_record_json(api, job), indent=2))
    else:
        _print_record(_record_json(api, job))
    return EXIT_OK if job.status is JobStatus.succeeded else EXIT_JOB_FAILED


def cmd_eval(api: StudioAPI, args) -> int:
    """``eval``: queue an eval-only job (lm-eval benchmarks) on a finished job or a base model; ``--wait`` follows it
    and ``--json`` prints its record (scores under ``artifacts.benchmarks``)."""
    submitted = api.benchmarks.evaluate(args.target, args.tasks.split(","), args.limit)
    job = submitted.job
    if not args.wait:
        shown = {"id": job.id, "status": job.status.value, "queue_position": submitted.queue_position}
        print(json.dumps(shown) if args.json else f"queued {job.id} (#{submitted.queue_position} in queue)")
        return EXIT_OK
    job = _wait(api, job.id, quiet=args.json)
    record = _record_json(api, job)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        _print_record(record)
    return EXIT_OK if job.status is JobStatus.succeeded else EXIT_JOB_FAILED


def _warn_unreadable(api: StudioAPI) -> None:
    unreadable = api.jobs.unreadable_jobs()
    if unreadable:
        print(f"warning: {len(unreadable)} job row(s) could not be read and are not listed:", file=sys.stderr)
        for job_id, reason in unreadable:
            print(f"  - {job_id}: {reason}", file=sys.stderr)


def cmd_list(api: StudioAPI, args) -> int:
    """``list``: one line (or JSON object) per job."""
    jobs = api.jobs.list_jobs()
    _warn_unreadable(api)
    if args.json:
        print(json.dumps([_summary(api, j) for j in jobs], indent=2))
        return EXIT_OK
    if not jobs:
        print("no jobs yet")
        return EXIT_OK
    statuses = [status_text(job.status.value, job.artifacts.learning) for job in jobs]
    width = max(12, *map(len, statuses))
    runs = [job.spec.output.run_name or "-" for job in jobs]
    run_width = min(32, max(3, *map(len, runs)))
    print(f"{'id':<24} {'status':<{width}} {'method':<6} {'progress':<12} {'created':<19}  {'run':<{run_width}}  model")
    for job, status, run in zip(jobs, statuses, runs):
        p = job.progress
        progress = progress_text(p, live=job.status is JobStatus.running) or "-"
        print(
            f"{job.id:<24} {status:<{width}} {job.spec.kind:<6} {progress:<12} "
            f"{_ts(job.created_at):<19}  {run:<{run_width}}  {job.spec.model.name_or_path}"
        )
    return EXIT_OK


def _summary(api: StudioAPI, job: JobRecord) -> dict[str, Any]:
    stored = job.artifacts.stored()
    return {
        "id": job.id,
        "status": job.status.value,
        "status_text": status_text(job.status.value, job.artifacts.learning),
        "method": job.spec.method.value,
        "kind": job.spec.kind,  # eval for an eval-only job, whose method is unused
        "run_name": job.spec.output.run_name,
        "model": job.spec.model.name_or_path,
        "owner": job.owner,
        "created_at": job.created_at,
        "queue_position": api.jobs.queue_position(job.id),
        "progress": job.progress,
        "learning": stored.get("learning"),
        "signal": stored.get("signal"),
    }


def cmd_status(api: StudioAPI, args) -> int:
    """``status``: where the data lives (local disk, a network filesystem with its durable copy, or nowhere that
    survives a restart), the last snapshot, and what the last start restored."""
    status = api.storage_status()
    if args.json:
        print(json.dumps(status, indent=2))
        return EXIT_OK
    print(status["description"])
    if status["durable"]:
        when = _ts(status["last_snapshot_at"]) if status["last_snapshot_at"] else "none yet"
        print(f"Last snapshot of the store in {status['durable']}: {when}")
    mib = 2**20
    print(f"Exports: {status['export_bytes'] / mib:.1f} MiB; downloads: {status['download_bytes'] / mib:.1f} MiB")
    for line in [status["warning"], status["last_error"], *status["restore_notes"], *status["set_aside"]]:
        if line:
            print(line)
    return EXIT_OK


def cmd_show(api: StudioAPI, args) -> int:
    """``show``: one job: status, learning verdict, no-signal warning, place in the queue, progress, outputs,
    evaluation and last metrics."""
    data = _record_json(api, api.jobs.get_job(args.job_id))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        _print_record(data)
    return EXIT_OK


def cmd_cancel(api: StudioAPI, args) -> int:
    """``cancel``: stop a job (at once if queued, at the next training step if running)."""
    status = api.jobs.cancel(args.job_id)
    if status is JobStatus.cancelled:
        print(f"cancelled {args.job_id}")
    else:
        print(f"asked {args.job_id} to stop; it ends at the next training step")
    return EXIT_OK


def cmd_dry_run(api: StudioAPI, args) -> int:
    """``dry-run``: play one episode of a GRPO environment spec and print its transcript."""
    episode = api.environments.dry_run(_load_spec_file(args.spec_file), row=args.row, seed=args.seed)
    if args.json:
        print(json.dumps(episode.to_dict(), indent=2, default=str))
    else:
        print(episode.transcript())
    return EXIT_OK


def cmd_warm_up(api: StudioAPI, args) -> int:
    """``warm-up``: queue an SFT warm-up on generated tool-call demonstrations, then GRPO from it."""
    warm = api.environments.warm_up(_load_spec_file(args.spec_file), rows=args.rows, steps=args.steps)
    for warning in warm.sft.warnings + warm.grpo.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    sft, grpo = warm.sft.job, warm.grpo.job
    if not args.json:
        print(f"wrote {warm.demonstrations} (upload {warm.upload_id})")
        print(f"queued {sft.id} (SFT warm-up), then {grpo.id} (GRPO from its adapter; waits for it)")
    if not args.wait:
        if args.json:
            print(
                json.dumps(
                    {"demonstrations": warm.demonstrations, "upload_id": warm.upload_id, "sft": sft.id, "grpo": grpo.id}
                )
            )
        return EXIT_OK
    done = [_wait(api, job_id, quiet=args.json) for job_id in (sft.id, grpo.id)]
    if args.json:
        print(json.dumps([_record_json(api, job) for job in done], indent=2))
    else:
        for job in done:
            _print_record(_record_json(api, job))
    return EXIT_OK if all(job.status is JobStatus.succeeded for job in done) else EXIT_JOB_FAILED


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m backend`` argument parser: one subcommand per job operation."""
    parser = argparse.ArgumentParser(
        prog="python -m backend",
        description="Post-Training Studio jobs from the command line (data dir: $STUDIO_DATA_DIR or ./data).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("submit", help=f"queue a job from a YAML or JSON spec file (method: {', '.join(methods())})")
    p.add_argument("spec_file")
    p.add_argument(
        "--wait", action="store_true", help="wait for the job, with a progress bar; exit 1 unless it succeeds"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="a setting over the file's")
    p.set_defaults(func=cmd_submit)
    p = sub.add_parser("dry-run", help="play one episode of a GRPO environment spec and print the transcript")
    p.add_argument("spec_file")
    p.add_argument("--row", type=int, default=0, help="dataset row whose columns start the episode")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: training.seed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dry_run)
    p = sub.add_parser(
        "warm-up",
        help="for a GRPO environment spec: write tool-call demonstrations by playing the "
        "environment, queue SFT on them, then the GRPO job from that adapter",
    )
    p.add_argument("spec_file")
    p.add_argument(
        "--rows",
        type=int,
        default=32,
        help="demonstration episodes to train on (default 32); a quarter more are played and held out for its verdict",
    )
    p.add_argument(
        "--steps",
        type=int,
        default=None,
        help="SFT steps (default: 200 for the demo model, else 2 passes over the demonstrations)",
    )
    p.add_argument("--wait", action="store_true", help="wait for both jobs; exit 1 unless both succeed")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_warm_up)
    p = sub.add_parser("eval", help="score lm-eval benchmarks on a finished job (base, start, tuned) or a model")
    p.add_argument("target", help="a finished job's id, or a base model's name (builtin:tiny-qwen3-arith, a Hub id)")
    p.add_argument("--tasks", required=True, help="comma-separated: arc_easy,studio_arith,... or a .jsonl path")
    p.add_argument("--limit", type=int, default=None, help="items per task, the same on every side")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit 1 unless it succeeds")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_eval)
    p = sub.add_parser("list", help="list jobs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)
    p = sub.add_parser("show", help="show one job: status, error, timestamps, artifacts, last metrics")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("status", help="where the data lives and how its durable copy is doing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
    add_export_command(sub)
    add_forecast_command(sub, _load_spec_file, _wait)
    p = sub.add_parser("cancel", help="cancel a queued job or stop a running one")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_cancel)
    add_sweep_commands(sub, lambda args: with_settings(_load_spec_file(args.spec_file), args.set))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one CLI command; a refused spec or a missing job is an exit code and a sentence, not a traceback, and so
    is a reader that stopped reading (``backend show ID | head``): the command ends quietly with 141, as a tool
    killed by SIGPIPE does."""
    try:
        code = _run(argv)
        sys.stdout.flush()  # here, not at exit, where a closed pipe would be reported as an ignored exception
        return code
    except BrokenPipeError:
        # Python flushes stdout again on the way out: pointed at /dev/null, that flush has nowhere to fail.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        api = StudioAPI()
        return args.func(api, args)
    except SpecError as exc:
        refused = "The job was not queued:" if args.command in QUEUEING else "Cannot do that:"
        print(refused, file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (JobNotFound, InvalidTransition, StoreError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except (EnvironmentUnavailable, EnvironmentStartError) as exc:
        # An environment that is down or refuses sessions is the user's to fix (start it, fix the URL), not a bug.
        print(f"error: the environment cannot be used: {exc}", file=sys.stderr)
        return EXIT_USAGE
