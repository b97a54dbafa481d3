"""The ``forecast`` command: will this job learn? The starting model plays a few prompts through the job's own
rollout in a worker (a forecast-only job), and the forecast, its cause and the first thing to change are printed;
exit 1 when the forecast job failed, 3 when it forecast no signal."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.api import FORECAST_NO_SIGNAL, JobStatus, StudioAPI
from backend.cli.common import EXIT_JOB_FAILED, EXIT_OK, spec_from_args
from backend.cli.records import wait_for_job

EXIT_NO_SIGNAL = 3


def cmd_forecast(api: StudioAPI, args: argparse.Namespace) -> int:
    """``forecast``: queue the spec's forecast, wait for it and print it (``--json``: the job's record)."""
    submitted = api.jobs.forecast(spec_from_args(args), prompts=args.prompts)
    for warning in submitted.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    job_id = submitted.job.id
    if not args.json:
        print(f"queued forecast {job_id}; waiting for it (Ctrl-C stops waiting, not the job)", file=sys.stderr)
    job = wait_for_job(api, job_id, quiet=True)
    forecast = job.artifacts.forecast
    if args.json:
        record = {"id": job.id, "status": job.status.value, "error": job.error}
        record["forecast"] = forecast.model_dump(mode="json") if forecast is not None else None
        print(json.dumps(record, indent=2))
    elif forecast is not None:
        print(forecast.sentence())
        for sample in forecast.samples:
            reward = "-" if sample.reward is None else f"{sample.reward:.3g}"
            print(f"  [{reward}] {sample.prompt[:80]!r} -> {sample.completion[:160]!r}")
    else:
        print(f"{job.id} {job.status.value}: {job.error or 'no forecast was recorded'}", file=sys.stderr)
    if job.status is not JobStatus.succeeded or forecast is None:
        return EXIT_JOB_FAILED
    return EXIT_NO_SIGNAL if forecast.forecast == FORECAST_NO_SIGNAL else EXIT_OK


def add_forecast(sub: Any) -> None:
    """The ``forecast`` subcommand on the CLI's subparsers."""
    p = sub.add_parser(
        "forecast",
        help="will this rollout job (GRPO, RLOO) learn? play a few prompts of the starting model first; exit 3 on "
        "no signal",
    )
    p.add_argument("spec_file")
    p.add_argument("--prompts", type=int, default=None, help="prompts to play (default: the spec's forecast.prompts)")
    p.add_argument("--json", action="store_true", help="print machine-readable JSON")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE", help="a setting over the file's")
    p.set_defaults(func=cmd_forecast)
