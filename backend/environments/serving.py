"""Helpers shared by the built-in environment servers: the command line, uvicorn serving and seeded choices."""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from fastapi import FastAPI

T = TypeVar("T")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_MAX_SESSIONS = 64


def episode_rng(seed: int | None) -> random.Random:
    """A random generator for one episode: reproducible when ``seed`` is given, fresh entropy otherwise."""
    return random.Random(seed)


def seeded_choice(options: Sequence[T], seed: int | None) -> T:
    """Pick one of ``options``; the same seed always picks the same item.

    >>> seeded_choice(["a", "b", "c"], 7) == seeded_choice(["a", "b", "c"], 7)
    True
    """
    if not options:
        raise ValueError("seeded_choice needs at least one option to choose from")
    return episode_rng(seed).choice(list(options))


def parse_server_args(description: str, argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse ``--port N [--host H] [--max-sessions N]``, the command line every environment server takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True, help="TCP port to listen on")
    parser.add_argument("--host", default=DEFAULT_HOST, help=f"interface to bind (default {DEFAULT_HOST})")
    parser.add_argument(
        "--max-sessions",
        type=int,
        default=DEFAULT_MAX_SESSIONS,
        help=f"most simultaneous WebSocket sessions, one environment each (default {DEFAULT_MAX_SESSIONS})",
    )
    args = parser.parse_args(argv)
    if args.max_sessions < 1:
        parser.error("--max-sessions must be at least 1")
    return args


def serve(build_app: Callable[[int], "FastAPI"], description: str, argv: Sequence[str] | None = None) -> None:
    """Build the app with the requested session limit and serve it with uvicorn until stopped (SIGTERM/Ctrl-C)."""
    import uvicorn

    args = parse_server_args(description, argv)
    app = build_app(args.max_sessions)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
