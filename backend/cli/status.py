"""The ``status`` command: where the data lives (local disk, a network filesystem with its durable copy, or nowhere
that survives a restart), the last snapshot, and what the last start restored."""

from __future__ import annotations

import argparse
import json
from typing import Any

from backend.api import StudioAPI
from backend.cli.common import EXIT_OK, timestamp


def cmd_status(api: StudioAPI, args: argparse.Namespace) -> int:
    """``status``: where the data lives (local disk, a network filesystem with its durable copy, or nowhere that
    survives a restart), the last snapshot, and what the last start restored."""
    status = api.storage_status()
    if args.json:
        print(json.dumps(status, indent=2))
        return EXIT_OK
    print(status["description"])
    if status["durable"]:
        when = timestamp(status["last_snapshot_at"]) if status["last_snapshot_at"] else "none yet"
        print(f"Last snapshot of the store in {status['durable']}: {when}")
    mib = 2**20
    print(f"Exports: {status['export_bytes'] / mib:.1f} MiB; downloads: {status['download_bytes'] / mib:.1f} MiB")
    for line in [status["warning"], status["last_error"], *status["restore_notes"], *status["set_aside"]]:
        if line:
            print(line)
    return EXIT_OK


def add_status(sub: Any) -> None:
    """The ``status`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("status", help="where the data lives and how its durable copy is doing")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
