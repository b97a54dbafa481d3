"""The job commands: ``submit`` a spec file, ``eval`` a finished job or a model, ``list`` and ``show`` jobs, ``cancel``
one. ``submit --wait`` and ``eval --wait`` follow the job and exit 1 unless it succeeds."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.api import JobRecord, JobStatus, StudioAPI, methods, progress_text, status_text
from backend.cli.common import EXIT_JOB_FAILED, EXIT_OK, spec_from_args, timestamp
from backend.cli.records import print_record, record_json, wait_for_job


def cmd_submit(api: StudioAPI, args: argparse.Namespace) -> int:
    """``submit``: queue a job from a spec file (``--set`` settings over it); ``--wait`` follows it to the end."""
    submitted = api.jobs.submit(spec_from_args(args))
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
    job = wait_for_job(api, job.id, quiet=args.json)
    if args.json:
        print(json.dumps(record_json(api, job), indent=2))
    else:
        print_record(record_json(api, job))
    return EXIT_OK if job.status is JobStatus.succeeded else EXIT_JOB_FAILED


def cmd_eval(api: StudioAPI, args: argparse.Namespace) -> int:
    """``eval``: queue an eval-only job (lm-eval benchmarks) on a finished job or a base model; ``--wait`` follows it
    and ``--json`` prints its record (scores under ``artifacts.benchmarks``)."""
    submitted = api.benchmarks.evaluate(args.target, args.tasks.split(","), args.limit)
    job = submitted.job
    if not args.wait:
        shown = {"id": job.id, "status": job.status.value, "queue_position": submitted.queue_position}
        print(json.dumps(shown) if args.json else f"queued {job.id} (#{submitted.queue_position} in queue)")
        return EXIT_OK
    job = wait_for_job(api, job.id, quiet=args.json)
    record = record_json(api, job)
    if args.json:
        print(json.dumps(record, indent=2))
    else:
        print_record(record)
    return EXIT_OK if job.status is JobStatus.succeeded else EXIT_JOB_FAILED


def _warn_unreadable(api: StudioAPI) -> None:
    unreadable = api.jobs.unreadable_jobs()
    if unreadable:
        print(f"warning: {len(unreadable)} job row(s) could not be read and are not listed:", file=sys.stderr)
        for job_id, reason in unreadable:
            print(f"  - {job_id}: {reason}", file=sys.stderr)


def cmd_list(api: StudioAPI, args: argparse.Namespace) -> int:
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
            f"{timestamp(job.created_at):<19}  {run:<{run_width}}  {job.spec.model.name_or_path}"
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


def cmd_show(api: StudioAPI, args: argparse.Namespace) -> int:
    """``show``: one job: status, learning verdict, no-signal warning, place in the queue, progress, outputs,
    evaluation and last metrics."""
    data = record_json(api, api.jobs.get_job(args.job_id))
    if args.json:
        print(json.dumps(data, indent=2))
    else:
        print_record(data)
    return EXIT_OK


def cmd_cancel(api: StudioAPI, args: argparse.Namespace) -> int:
    """``cancel``: stop a job (at once if queued, at the next training step if running)."""
    status = api.jobs.cancel(args.job_id)
    if status is JobStatus.cancelled:
        print(f"cancelled {args.job_id}")
    else:
        print(f"asked {args.job_id} to stop; it ends at the next training step")
    return EXIT_OK


def add_submit(sub: Any) -> None:
    """The ``submit`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("submit", help=f"queue a job from a YAML or JSON spec file (method: {', '.join(methods())})")
    p.add_argument("spec_file")
    p.add_argument(
        "--wait", action="store_true", help="wait for the job, with a progress bar; exit 1 unless it succeeds"
    )
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="a setting over the file's")
    p.set_defaults(func=cmd_submit)


def add_eval(sub: Any) -> None:
    """The ``eval`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("eval", help="score lm-eval benchmarks on a finished job (base, start, tuned) or a model")
    p.add_argument("target", help="a finished job's id, or a base model's name (builtin:tiny-qwen3-arith, a Hub id)")
    p.add_argument("--tasks", required=True, help="comma-separated: arc_easy,studio_arith,... or a .jsonl path")
    p.add_argument("--limit", type=int, default=None, help="items per task, the same on every side")
    p.add_argument("--wait", action="store_true", help="wait for the job; exit 1 unless it succeeds")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.set_defaults(func=cmd_eval)


def add_list(sub: Any) -> None:
    """The ``list`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("list", help="list jobs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)


def add_show(sub: Any) -> None:
    """The ``show`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("show", help="show one job: status, error, timestamps, artifacts, last metrics")
    p.add_argument("job_id")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_show)


def add_cancel(sub: Any) -> None:
    """The ``cancel`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("cancel", help="cancel a queued job or stop a running one")
    p.add_argument("job_id")
    p.set_defaults(func=cmd_cancel)
