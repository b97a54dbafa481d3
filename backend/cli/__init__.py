"""Command line for power users and scripts: submit, evaluate, list, show, cancel and export jobs without a
running app.

One module per group of commands (``jobs``, ``environments``, ``status``, ``export``, ``forecast``, ``sweep``), each
registering its subcommands; ``common`` and ``records`` are what they share. Like the UI, the CLI reaches the backend
only through its facade, ``backend.api`` (tests/unit/repo/test_layers.py)."""

from __future__ import annotations

import argparse
import os
import sys

from backend.api import (
    EnvironmentStartError,
    EnvironmentUnavailable,
    InvalidTransition,
    JobNotFound,
    SpecError,
    StorageError,
    StoreError,
    StudioAPI,
)
from backend.cli import environments, export, forecast, jobs, status, sweep
from backend.cli.common import EXIT_USAGE

QUEUEING = ("submit", "warm-up", "eval", "sweep")  # the commands whose refusal means nothing was queued
EXIT_BROKEN_PIPE = 128 + 13  # SIGPIPE's number: what a shell reports for a tool whose reader went away

# The subcommands, in the order ``--help`` lists them: each adds its parser, arguments and handler.
COMMANDS = (
    jobs.add_submit,
    environments.add_dry_run,
    environments.add_warm_up,
    jobs.add_eval,
    jobs.add_list,
    jobs.add_show,
    status.add_status,
    export.add_export,
    forecast.add_forecast,
    jobs.add_cancel,
    sweep.add_sweep,
    sweep.add_sweep_show,
    sweep.add_sweep_cancel,
)


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m backend`` argument parser: one subcommand per job operation."""
    parser = argparse.ArgumentParser(
        prog="python -m backend",
        description="Post-Training Studio jobs from the command line (data dir: $STUDIO_DATA_DIR or ./data).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub)
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
