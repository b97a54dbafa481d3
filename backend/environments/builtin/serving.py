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
from backend.environments.builtin.splits import SPLITS, builtin_splits, reset_arguments

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

    # OpenEnv's Task API (its server serves these as /<name>/splits, /tasks, /num_tasks, /task and /task_range).

    def list_splits(self) -> list[str]:
        """The environment's splits: ``train`` and ``test``."""
        return list(SPLITS)

    def list_tasks(self, split: str) -> list[dict[str, Any]]:
        """Every task of ``split``."""
        return list(builtin_splits(self.NAME).tasks(split))

    def num_tasks(self, split: str) -> int:
        """How many tasks ``split`` holds."""
        return len(builtin_splits(self.NAME).tasks(split))

    def get_task(self, split: str, index: int) -> dict[str, Any]:
        """Task ``index`` of ``split``: its reset arguments and the prompt that poses it."""
        return builtin_splits(self.NAME).task(split, index)

    def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[dict[str, Any]]:
        """The tasks ``start:stop`` of ``split``."""
        return list(builtin_splits(self.NAME).tasks(split)[start:stop])

    def task_arguments(self, split: str | None, index: int | None) -> dict[str, Any]:
        """What ``reset(split=..., index=...)`` poses: the task's reset arguments; nothing when no split is named."""
        if split is None:
            if index is not None:
                raise ValueError("index names a task of a split: give split='train' or split='test' with it")
            return {}
        if index is None:
            raise ValueError(f"split={split!r} needs the index of one of its tasks")
        return reset_arguments(builtin_splits(self.NAME).task(split, index))


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
