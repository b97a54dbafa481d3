"""The ``export`` command: queue an export job of a finished job (merged, GGUF or its adapter), follow its phases and
say what it made; exit 1 when it failed or its push did."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from typing import Any

from backend.api import GGUF_TYPES, JobRecord, JobStatus, StudioAPI
from backend.cli.common import EXIT_JOB_FAILED, EXIT_OK, EXIT_USAGE
from backend.cli.records import follow_job


def _format(args: argparse.Namespace) -> str | None:
    """The one format asked (merged, gguf, adapter), or None when none or several were."""
    asked = [name for name, on in (("merged", args.merged), ("gguf", args.gguf), ("adapter", args.adapter)) if on]
    return asked[0] if len(asked) == 1 else None


def _follow(api: StudioAPI, export_id: str, quiet: bool) -> JobRecord:
    """Wait for the export job to end, its phases said on stderr as they come."""
    said = None

    def seen(job: JobRecord) -> None:
        nonlocal said
        phase = (job.progress or {}).get("phase")
        if phase and phase != said and not quiet:
            print(f"{export_id}: {phase}…", file=sys.stderr)
            said = phase

    stopped = f"Stopped waiting; export {export_id} keeps running (python -m backend cancel {export_id})"
    return follow_job(api, export_id, seen, stopped)


def cmd_export(api: StudioAPI, args: argparse.Namespace) -> int:
    """``export``: queue the export, wait for it (unless ``--no-wait``) and print what it made."""
    format = _format(args)
    if format is None:
        print("error: say what to export, once: --merged, --gguf TYPE or --adapter", file=sys.stderr)
        return EXIT_USAGE
    submitted = api.export.submit(
        args.job_id,
        format=format,
        gguf_type=args.gguf or "q8_0",
        push=args.push is not None,
        repo_id=args.push or None,
        private=not args.public,
        out=args.out if format != "adapter" else None,
        download=format == "adapter",
    )
    export = submitted.job
    if args.no_wait:
        print(json.dumps({"id": export.id, "status": export.status.value}) if args.json else f"queued {export.id}")
        return EXIT_OK
    done = _follow(api, export.id, args.json)
    outcome = done.artifacts.export
    if done.status is not JobStatus.succeeded or outcome is None:
        print(
            f"error: export {done.id} {done.status.value}: {done.error or done.artifacts.cancel_note}", file=sys.stderr
        )
        return EXIT_JOB_FAILED
    if format == "adapter" and args.out and outcome.download:  # the zip, where the person at this machine asked
        shutil.copyfile(outcome.download, args.out)
        outcome = outcome.model_copy(update={"download": args.out})
    record: dict[str, Any] = {"export_id": done.id, **outcome.model_dump(mode="json")}
    print(json.dumps(record, indent=2) if args.json else outcome.sentence)
    return EXIT_JOB_FAILED if outcome.push_error else EXIT_OK


def add_export(sub: Any) -> None:
    """The ``export`` subcommand on the CLI's subparsers."""
    p = sub.add_parser(
        "export",
        help="export a succeeded job's model as an export job: --merged, --gguf TYPE (llama.cpp, LM Studio, Ollama) "
        "or --adapter",
    )
    p.add_argument("job_id")
    p.add_argument("--merged", action="store_true", help="the adapter merged into its base, as a whole model")
    p.add_argument(
        "--gguf", choices=GGUF_TYPES, default=None, help="the merged model as one GGUF file, with a Modelfile"
    )
    p.add_argument("--adapter", action="store_true", help="the adapter folder as a zip")
    p.add_argument(
        "--out",
        default=None,
        help="where to write (default: the job's folder, jobs/<id>/merged or jobs/<id>/gguf; --adapter: the zip)",
    )
    p.add_argument(
        "--push",
        nargs="?",
        const="",
        default=None,
        metavar="REPO_ID",
        help="also push it, inside the job (default repo from the run name; token: HF_TOKEN)",
    )
    p.add_argument("--public", action="store_true", help="make the pushed repository public (default: private)")
    p.add_argument("--no-wait", action="store_true", help="queue it and return (follow it with `show`)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_export)
