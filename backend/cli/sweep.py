"""The command line's sweeps: ``sweep SPEC --vary PATH=V1,V2 ...`` queues one, ``sweep-show ID`` reads it (``--wait``
follows it to the end), ``sweep-cancel ID`` stops it with its children."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from backend.api import OBJECTIVES_HELP, SEARCHES, StudioAPI, SweepReport
from backend.cli.common import EXIT_JOB_FAILED, EXIT_OK, spec_from_args

POLL_S = 1.0


def _value_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def print_report(report: SweepReport) -> None:
    """The sweep as a table: one row per child (its values, status, verdict and score), the best marked."""
    s = report.sweep
    print(
        f"sweep {s.id}: {report.status} ({s.search}, {len(report.children)}/{s.trials} children, "
        f"objective {s.objective})"
    )
    for dimension in s.dimensions:
        print(f"  vary {dimension.describe()}")
    for child in report.children:
        values = ", ".join(f"{path.rsplit('.', 1)[-1]}={_value_text(v)}" for path, v in child.child.params.items())
        learning = child.job.artifacts.learning if child.job is not None else None
        score = "" if child.value is None else f"  {child.value:.4g}"
        verdict = f"  {learning.word}" if learning is not None else ""
        error = f"  ({child.job.error})" if child.job is not None and child.job.error else ""
        mark = "*" if child.best else " "
        print(f"{mark} {child.child.job_id}  {values}  {child.status}{verdict}{score}{error}")
    if s.stopped:
        print(s.stopped)
    if report.best is not None:
        print(f"best: {report.best.child.job_id} ({report.best.value:.4g})")
    elif any(child.ranked_out for child in report.children):
        print("best: none yet (every child with a score got worse, or a guard fell)")


def _follow(api: StudioAPI, sweep_id: str, quiet: bool) -> SweepReport:
    seen: dict[str, str] = {}
    try:
        while True:
            report = api.sweeps.get(sweep_id)
            for child in report.children:
                if not quiet and seen.get(child.child.job_id) != child.status:
                    seen[child.child.job_id] = child.status
                    print(f"{child.child.job_id}: {child.status}", file=sys.stderr)
            if report.finished:
                return report
            time.sleep(POLL_S)
    except KeyboardInterrupt:
        print(
            f"\nStopped waiting; sweep {sweep_id} keeps running. Cancel it with: "
            f"python -m backend sweep-cancel {sweep_id}",
            file=sys.stderr,
        )
        raise SystemExit(130) from None


def _finish(api: StudioAPI, report: SweepReport, args: argparse.Namespace) -> int:
    if args.wait:
        report = _follow(api, report.sweep.id, quiet=args.json)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print_report(report)
    if args.wait and report.status != "succeeded":
        return EXIT_JOB_FAILED
    return EXIT_OK


def cmd_sweep(api: StudioAPI, args: argparse.Namespace) -> int:
    """``sweep``: queue the spec once per point of the varied fields; ``--wait`` follows every child to the end."""
    if args.search is None:
        args.search = "random" if args.trials is not None else "grid"
    submitted = api.sweeps.submit(spec_from_args(args), args.vary, args.search, args.trials, args.objective)
    for warning in submitted.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return _finish(api, submitted.report, args)


def cmd_sweep_show(api: StudioAPI, args: argparse.Namespace) -> int:
    """``sweep-show``: a sweep's children with their verdicts and scores, and its best."""
    return _finish(api, api.sweeps.get(args.sweep_id), args)


def cmd_sweep_cancel(api: StudioAPI, args: argparse.Namespace) -> int:
    """``sweep-cancel``: cancel a sweep; its queued children are cancelled and its running ones stopped."""
    report = api.sweeps.cancel(args.sweep_id)
    print(f"cancelled sweep {args.sweep_id} ({len(report.children)} children)")
    return EXIT_OK


def add_sweep(sub: Any) -> None:
    """The ``sweep`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("sweep", help="queue a spec several times with fields varied (a grid, a random sample, TPE)")
    p.add_argument("spec_file")
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        required=True,
        metavar="PATH=V1,V2|LO..HI",
        help="a field and its values (or a numeric range, for --search random or tpe); repeat for a grid",
    )
    p.add_argument("--search", choices=SEARCHES, default=None, help="grid (default), random (with --trials) or tpe")
    p.add_argument("--trials", type=int, default=None, help="children to try: sampled at random, or proposed by TPE")
    p.add_argument("--objective", default="learning", help=f"what ranks the children: {OBJECTIVES_HELP}")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="a setting over the file's")
    p.add_argument("--wait", action="store_true", help="wait for every child; exit 1 unless the sweep succeeds")
    p.add_argument("--json", action="store_true", help="print {sweep, children, best} as JSON")
    p.set_defaults(func=cmd_sweep)


def add_sweep_show(sub: Any) -> None:
    """The ``sweep-show`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("sweep-show", help="show a sweep: its children, their verdicts and the best")
    p.add_argument("sweep_id")
    p.add_argument("--wait", action="store_true", help="wait for every child; exit 1 unless the sweep succeeds")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep_show)


def add_sweep_cancel(sub: Any) -> None:
    """The ``sweep-cancel`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("sweep-cancel", help="cancel a sweep and its children")
    p.add_argument("sweep_id")
    p.set_defaults(func=cmd_sweep_cancel)
