"""The ``status`` command: where the data lives (local disk, a network filesystem with its durable copy, or nowhere
that survives a restart), the last snapshot, what the last start restored, and the guards with their values."""

from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any

from backend.api import StudioAPI
from backend.cli.common import EXIT_OK, timestamp


def cmd_status(api: StudioAPI, args: argparse.Namespace) -> int:
    """``status``: where the data lives (local disk, a network filesystem with its durable copy, or nowhere that
    survives a restart), the last snapshot, what the last start restored, and every guard with its value now."""
    status = api.storage_status()
    guards = api.guards()
    if args.json:
        print(json.dumps({**status, "guards": [dataclasses.asdict(g) for g in guards]}, indent=2))
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
    print("Guards (each STUDIO_* setting is read when the app starts):")
    for guard in guards:
        print(f"  {guard.line()}")
    return EXIT_OK


def add_status(sub: Any) -> None:
    """The ``status`` subcommand on the CLI's subparsers."""
    p = sub.add_parser("status", help="where the data lives, how its durable copy is doing, and the guards' values")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_status)
