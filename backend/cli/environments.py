"""The environment commands, for a GRPO environment spec: ``dry-run`` plays one episode and prints its transcript,
``warm-up`` queues SFT on played tool-call demonstrations, then the GRPO job from that adapter."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from backend.api import JobStatus, StudioAPI
from backend.cli.common import EXIT_JOB_FAILED, EXIT_OK, load_spec_file
from backend.cli.records import print_record, record_json, wait_for_job


def cmd_dry_run(api: StudioAPI, args: argparse.Namespace) -> int:
    """``dry-run``: play one episode of a GRPO environment spec and print its transcript."""
    episode = api.environments.dry_run(load_spec_file(args.spec_file), row=args.row, seed=args.seed)
    if args.json:
        print(json.dumps(episode.to_dict(), indent=2, default=str))
    else:
        print(episode.transcript())
    return EXIT_OK


def cmd_warm_up(api: StudioAPI, args: argparse.Namespace) -> int:
    """``warm-up``: queue an SFT warm-up on generated tool-call demonstrations, then GRPO from it."""
    warm = api.environments.warm_up(load_spec_file(args.spec_file), rows=args.rows, steps=args.steps)
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
    done = [wait_for_job(api, job_id, quiet=args.json) for job_id in (sft.id, grpo.id)]
    if args.json:
        print(json.dumps([record_json(api, job) for job in done], indent=2))
    else:
        for job in done:
            print_record(record_json(api, job))
    return EXIT_OK if all(job.status is JobStatus.succeeded for job in done) else EXIT_JOB_FAILED


def add_dry_run(sub: Any) -> None:
    """The ``dry-run`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("dry-run", help="play one episode of a GRPO environment spec and print the transcript")
    p.add_argument("spec_file")
    p.add_argument("--row", type=int, default=0, help="dataset row whose columns start the episode")
    p.add_argument("--seed", type=int, default=None, help="sampling seed (default: training.seed)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_dry_run)


def add_warm_up(sub: Any) -> None:
    """The ``warm-up`` subcommand on the CLI's subparsers."""
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
