"""The chat's tool calls run in the picked job's environment: one environment per (user, job), holding one episode
per chat side, each started from the job's first dataset row on its first run; closed when the user clears the chat
or picks another job, after an idle timeout, and when the app closes.

A call runs the way TRL's tool loop runs it (``episodes._call_tool``: a tool that raises answers ``{"error": ...}``);
a server that stopped answering is a sentence (a ValueError), and its environment is closed so the next run starts
afresh (a built-in server is started again)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.chat.tool_calls import ToolCall, tool_calls_from
from backend.core.spec import JobSpec, SpecError

if TYPE_CHECKING:
    from backend.environments.adapter import OpenEnvEpisode
    from backend.environments.runtime import ActiveEnvironment

log = logging.getLogger("studio.chat")

SIDES = ("base", "tuned")
DEFAULT_IDLE_S = 600.0  # an environment nobody ran a call in for this long is closed
DEFAULT_MAX_SESSIONS = 4  # environments open at once in this process (each built-in one is a server process)
HEALTH_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class ToolResult:
    """What one call got: the tool's answer as the model would read it, and whether the call failed."""

    name: str
    arguments: Any
    content: str
    failed: bool = False


@dataclass(frozen=True)
class ToolRun:
    """One side's calls run in its episode: the answers in order, the new episode's first observation when this run
    started one (from the job's first dataset row), and whether the episode is over (with its reward then)."""

    side: str
    results: tuple[ToolResult, ...]
    started: str | None = None
    done: bool = False
    reward: float | None = None


@dataclass
class _Session:
    """One user's environment for one job, and an episode per chat side."""

    owner: str
    job_id: str
    spec: JobSpec
    uploads_dir: Path | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    environment: ActiveEnvironment | None = None
    episodes: dict[str, OpenEnvEpisode] = field(default_factory=dict)
    row: dict[str, Any] | None = None
    last_used: float = 0.0
    closed: bool = False
    shut: bool = False

    def shut_down(self) -> None:
        """Close the episodes and the environment (a built-in server stops); idempotent. The caller holds ``lock``."""
        if self.shut:
            return
        self.shut = True
        for episode in self.episodes.values():
            with contextlib.suppress(Exception):
                episode._close()
        self.episodes.clear()
        try:
            self.stack.close()
        except Exception as exc:  # noqa: BLE001 - closing must not fail the handler that closes
            log.warning("closing the chat's environment for job %s: %s", self.job_id, exc)


def _first_row(spec: JobSpec, uploads_dir: Path | None) -> dict[str, Any]:
    """The job's first dataset row, every column kept (the environment's ``reset`` reads them), as the dry run does."""
    from backend.data.loading import load_training_dataset

    dataset, _ = load_training_dataset(spec.dataset, spec.method, keep_all=True, uploads_dir=uploads_dir)
    if len(dataset) == 0:
        raise SpecError([f"the job's dataset {spec.dataset.name} has no rows to start an episode from"])
    return dict(dataset[0])


class ChatToolSessions:
    """The open environments of the chat's tool calls, by (user, job); safe to use from the UI's handler threads.

    A user has one open at a time: running a call for another job closes theirs for the first. At most
    ``max_sessions`` are open in the process; one unused for ``idle_s`` seconds is closed by a background sweep.
    The thread that opens an environment starts its built-in server, which dies with that thread's process: call
    :meth:`run` from long-lived threads (the facade's pool).
    """

    def __init__(
        self,
        idle_s: float = DEFAULT_IDLE_S,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_s, self.max_sessions, self.clock = idle_s, max_sessions, clock
        self._sessions: dict[tuple[str, str], _Session] = {}
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None
        self._stop = threading.Event()

    def open_sessions(self) -> list[tuple[str, str]]:
        """The (user, job id) pairs with an environment open now."""
        with self._lock:
            return sorted(self._sessions)

    def run(
        self,
        owner: str,
        job_id: str,
        spec: JobSpec,
        side: str,
        calls: Sequence[ToolCall | dict[str, Any]],
        uploads_dir: Path | None = None,
    ) -> ToolRun:
        """Run ``calls`` (one side's last answer's) in that side's episode of the job's environment, opening the
        environment and starting the episode from the job's first row on the first run (and again once an episode
        is over). ValueError sentences: no environment, a bad side, no calls, too many open, a server that does not
        answer."""
        if side not in SIDES:
            raise SpecError([f"the side is 'base' or 'tuned', not {str(side)[:40]!r}"])
        calls = tool_calls_from(calls)
        if not spec.environment.name:
            raise SpecError([f"job {job_id} plays no environment, so there is nothing to run its tool calls in"])
        self.close_idle()
        session = self._session(owner, job_id, spec, uploads_dir)
        with session.lock:
            try:
                if session.closed:
                    raise SpecError(["the chat's environment was closed meanwhile (the chat was cleared); run again"])
                return self._run_in(session, side, calls)
            except Exception:
                if session.environment is None or session.closed:  # never opened, or closed meanwhile: let it go
                    self._forget(session)
                    session.shut_down()
                raise
            finally:
                session.last_used = self.clock()
                if session.closed:
                    session.shut_down()

    def _session(self, owner: str, job_id: str, spec: JobSpec, uploads_dir: Path | None) -> _Session:
        others: list[_Session] = []
        with self._lock:
            session = self._sessions.get((owner, job_id))
            if session is None:
                others = [s for (user, _), s in self._sessions.items() if user == owner]
                for other in others:  # one environment per user: their other job's goes
                    self._sessions.pop((other.owner, other.job_id), None)
                if len(self._sessions) >= self.max_sessions:
                    for other in others:
                        self._sessions[(other.owner, other.job_id)] = other
                    raise SpecError(
                        [
                            f"tool calls: {len(self._sessions)} chat environments are open on this Space, the most it "
                            "allows; try again in a few minutes"
                        ]
                    )
                session = _Session(owner, job_id, spec, uploads_dir, last_used=self.clock())
                self._sessions[(owner, job_id)] = session
                self._start_sweeper()
        for other in others:
            self._close(other)
        return session

    def _run_in(self, session: _Session, side: str, calls: tuple[ToolCall, ...]) -> ToolRun:
        from backend.environments.adapter import tool_methods
        from backend.environments.connection import EnvironmentUnavailable, get_json
        from backend.environments.episodes import _call_tool

        environment = self._environment(session)
        try:
            get_json(environment.url, "/health", HEALTH_TIMEOUT_S)
        except EnvironmentUnavailable as exc:
            raise self._gone(session, exc) from None
        episode, started = session.episodes.get(side), None
        try:
            if episode is None or episode.done:  # the side's first run, or its last episode is over: start one
                if episode is None:
                    episode = environment.factory()
                started = (episode.reset(**(session.row or {})) or "").strip()
                session.episodes[side] = episode
        except EnvironmentUnavailable as exc:
            raise self._gone(session, exc) from None
        tools = {method.__name__: method for method in tool_methods(episode)}
        results = []
        for call in calls:
            name, result, failed = _call_tool(tools, call.as_message_call())
            results.append(ToolResult(name, call.arguments, _answer_text(result), failed))
        try:
            reward = episode.get_reward() if episode.done else None
        except EnvironmentUnavailable as exc:  # the connection dropped mid-call and a reconnect failed
            raise self._gone(session, exc) from None
        return ToolRun(side, tuple(results), started, episode.done, reward)

    def _environment(self, session: _Session) -> ActiveEnvironment:
        """The session's environment, opened (a built-in server started) and its first row read on first use."""
        if session.environment is not None:
            return session.environment
        from backend.environments.runtime import INTERACTIVE_BUDGET_S, open_environment

        if session.row is None:
            session.row = _first_row(session.spec, session.uploads_dir)
        try:
            opened = open_environment(session.spec, sessions=1, budget_s=INTERACTIVE_BUDGET_S)
            session.environment = session.stack.enter_context(opened)
        except SpecError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever kept it from starting is said in a sentence
            raise SpecError(
                [f"the job's environment {session.spec.environment.name} could not be opened: {_cause(exc)}"]
            ) from exc
        log.info("chat tool calls: %s opened %s for job %s", session.owner, session.environment.url, session.job_id)
        return session.environment

    def _gone(self, session: _Session, exc: BaseException) -> SpecError:
        """The sentence for an environment that stopped answering; it is closed, so the next run opens it again."""
        url = session.environment.url if session.environment is not None else session.spec.environment.name
        session.closed = True
        self._forget(session)
        again = "starts it again" if (session.spec.environment.name or "").startswith("builtin:") else "tries it again"
        return SpecError(
            [
                f"the environment server at {url} stopped answering ({_cause(exc)}); its episodes are closed, and "
                f"running the calls again {again} with a new episode"
            ]
        )

    def _forget(self, session: _Session) -> None:
        with self._lock:
            if self._sessions.get((session.owner, session.job_id)) is session:
                del self._sessions[(session.owner, session.job_id)]

    def _close(self, session: _Session) -> None:
        """Close ``session`` now, or, while a run holds it, as soon as that run ends."""
        session.closed = True
        if session.lock.acquire(blocking=False):
            try:
                session.shut_down()
            finally:
                session.lock.release()

    def close(self, owner: str, job_id: str | None = None) -> int:
        """Close ``owner``'s environment for ``job_id`` (all of theirs when None); how many were open."""
        with self._lock:
            mine = [
                self._sessions.pop(key) for key in list(self._sessions) if key[0] == owner and job_id in (None, key[1])
            ]
        for session in mine:
            self._close(session)
        return len(mine)

    def close_idle(self) -> int:
        """Close every environment unused for ``idle_s`` seconds; how many."""
        now = self.clock()
        with self._lock:
            idle = [
                self._sessions.pop(key)
                for key, session in list(self._sessions.items())
                if now - session.last_used >= self.idle_s and not session.lock.locked()
            ]
        for session in idle:
            log.info("chat tool calls: closing %s's idle environment for job %s", session.owner, session.job_id)
            self._close(session)
        return len(idle)

    def close_all(self) -> None:
        """Close every environment and stop the sweep (the app is closing)."""
        self._stop.set()
        with self._lock:
            every = list(self._sessions.values())
            self._sessions.clear()
        for session in every:
            self._close(session)

    def _start_sweeper(self) -> None:
        """The idle sweep, while any environment is open (the caller holds ``_lock``)."""
        if self._sweeper is not None and self._sweeper.is_alive():
            return
        self._sweeper = threading.Thread(target=self._sweep, name="chat-tools-idle", daemon=True)
        self._sweeper.start()

    def _sweep(self) -> None:
        interval = max(min(self.idle_s / 4, 30.0), 0.05)
        while not self._stop.wait(interval):
            self.close_idle()
            with self._lock:
                if not self._sessions:
                    self._sweeper = None
                    return


def _answer_text(result: Any) -> str:
    """A tool's answer as the model reads it (TRL's tool loop: a list as is, anything else as ``str``)."""
    if isinstance(result, list):
        return "\n".join(str(part.get("text", part)) if isinstance(part, dict) else str(part) for part in result)
    return str(result)


def _cause(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:299] + "\u2026"
