"""What the built-in environment servers share: the environment's state and metadata, the openenv app, the lazy
``app`` attribute, the command line and uvicorn serving, and seeded choices. Each server module keeps only its game.

openenv and FastAPI are imported when an app is built, not here, so importing this module stays light.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from backend.environments.builtin.registry import DEFAULT_MAX_SESSIONS

if TYPE_CHECKING:
    from fastapi import FastAPI

T = TypeVar("T")

DEFAULT_HOST = "127.0.0.1"


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


def serve(build_app: Callable[[int], FastAPI], description: str, argv: Sequence[str] | None = None) -> None:
    """Build the app with the requested session limit and serve it with uvicorn until stopped (SIGTERM/Ctrl-C)."""
    import uvicorn

    args = parse_server_args(description, argv)
    app = build_app(args.max_sessions)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


class ServedEnvironment:
    """Mixed into each built-in environment class (before openenv's base): ``state`` is the episode's ``_state``,
    the metadata comes from ``NAME`` and ``DESCRIPTION``, and sessions may run concurrently."""

    NAME: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    SUPPORTS_CONCURRENT_SESSIONS = True
    _state: Any

    @property
    def state(self) -> Any:
        """The running episode's state (an openenv ``State``)."""
        return self._state

    def get_metadata(self) -> Any:
        """What ``/metadata`` answers: the environment's name, description and version."""
        from openenv.core.env_server.types import EnvironmentMetadata

        return EnvironmentMetadata(name=self.NAME, description=self.DESCRIPTION, version="1.0.0")


@dataclass(frozen=True)
class EnvironmentServer:
    """One built-in environment served by openenv's ``create_app``: its app, its module's lazy ``app`` attribute
    and its ``python -m`` command line."""

    environment: type[ServedEnvironment]
    action: type
    observation: type
    state: type
    usage: str  # the command line's description
    reset_observation: type | None = None  # when reset answers with another observation type than step

    def build_app(self, max_sessions: int = DEFAULT_MAX_SESSIONS) -> FastAPI:
        """The server's FastAPI app, allowing ``max_sessions`` simultaneous WebSocket sessions."""
        from openenv.core.env_server import create_app

        extra = {"reset_observation_cls": self.reset_observation} if self.reset_observation else {}
        return create_app(
            self.environment,
            self.action,
            self.observation,
            env_name=self.environment.NAME,
            max_concurrent_envs=max_sessions,
            state_cls=self.state,
            **extra,
        )

    def module_getattr(self, module: str) -> Callable[[str], Any]:
        """The server module's ``__getattr__``: ``app`` is built on first access (``uvicorn <module>:app``), not at
        import."""

        def __getattr__(name: str) -> Any:
            if name == "app":
                return self.build_app()
            raise AttributeError(f"module {module!r} has no attribute {name!r}")

        return __getattr__

    def main(self, argv: Sequence[str] | None = None) -> None:
        """Serve the environment: ``python -m <module> --port N [--host H] [--max-sessions N]``."""
        serve(self.build_app, self.usage, argv)
