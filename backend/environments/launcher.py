"""Starts environment servers as separate processes on 127.0.0.1 and waits until they answer ``/health``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from backend.environments.address import trust, untrust
from backend.environments.builtin.registry import DEFAULT_MAX_SESSIONS, builtin_environment
from backend.platform.child_env import child_environment
from backend.platform.interpreters import PROJECT_ROOT, InterpreterError, app_python

HOST = "127.0.0.1"
LOG_TAIL_LINES = 30


class EnvironmentStartError(RuntimeError):
    """An environment server exited or stayed silent instead of answering ``/health``."""


def _die_with_parent() -> None:
    """In the child: ask Linux to kill it when the process that started it dies (a killed worker leaves no server).

    The server has its own session, so a cooperative SIGTERM to the worker's group does not reach it mid-episode.
    """
    if sys.platform.startswith("linux"):
        import ctypes

        PR_SET_PDEATHSIG = 1
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def free_port(host: str = HOST) -> int:
    """A TCP port that is free right now (the OS picks it when binding port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _is_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2.0) as response:
            body = json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError):
        return False
    return str(body.get("status", "")).lower() == "healthy"


@dataclass
class RunningEnvironment:
    """An environment server process started by this module; stop it (or use ``with``) when done."""

    name: str
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    owned_log_dir: Path | None = field(default=None, repr=False)  # removed on stop when the launcher made it
    _untrusted: bool = field(default=False, repr=False)

    @property
    def pid(self) -> int:
        """The server process's id."""
        return self.process.pid

    def is_running(self) -> bool:
        """Whether the server process is still alive."""
        return self.process.poll() is None

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the server's stdout and stderr."""
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:]) or "(the log is empty)"

    def wait_until_ready(self, timeout_s: float = 60.0, poll_s: float = 0.1) -> RunningEnvironment:
        """Block until ``/health`` answers; on exit or timeout stop the server and raise EnvironmentStartError."""
        deadline = time.monotonic() + timeout_s
        while True:
            if _is_healthy(self.url):
                return self
            code = self.process.poll()
            if code is not None:
                problem = f"exited with code {code} before answering {self.url}/health"
                break
            if time.monotonic() >= deadline:
                problem = f"did not answer {self.url}/health within {timeout_s:g} s"
                break
            time.sleep(poll_s)
        tail = self.log_tail()
        self.stop()
        raise EnvironmentStartError(
            f"the {self.name} environment server (`{' '.join(map(str, self.process.args))}`) {problem}. "
            f"Last lines of its log:\n{tail}"
        )

    def stop(self, grace_s: float = 5.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace_s``; idempotent."""
        if not self._untrusted:
            self._untrusted = True
            untrust(self.url)  # once: a later server on the same port is another's to trust
        if self.process.poll() is None:
            # Only signal the group while its leader is unreaped, so the group id cannot have been reused.
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.process.wait()
        if self.owned_log_dir is not None:
            shutil.rmtree(self.owned_log_dir, ignore_errors=True)
            self.owned_log_dir = None

    def __enter__(self) -> RunningEnvironment:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def start_server_process(
    argv: Sequence[str],
    *,
    name: str,
    timeout_s: float = 60.0,
    wait: bool = True,
    log_dir: Path | None = None,
    cwd: Path = PROJECT_ROOT,
    extra_env: Mapping[str, str] | None = None,
) -> RunningEnvironment:
    """Run ``argv + ["--port", N]`` (N a free port) in its own process group, logging to ``log_dir``/server.log.

    The server must listen on 127.0.0.1:N and serve OpenEnv's ``/health``. With ``wait`` (the default) this returns
    once ``/health`` answers; otherwise call ``wait_until_ready`` yourself (to start several servers at once).
    """
    port = free_port()
    owned = None
    if log_dir is None:
        log_dir = owned = Path(tempfile.mkdtemp(prefix=f"studio-env-{name}-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / "server.log"
    # An allow-list, not this process's environment: a worker holds its user's HF_TOKEN, the app its owner's secrets.
    env = child_environment({"PYTHONUNBUFFERED": "1", **(extra_env or {})})
    command = [*argv, "--port", str(port)]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    running = RunningEnvironment(
        name=name, url=f"http://{HOST}:{port}", process=process, log_path=log_path, owned_log_dir=owned
    )
    trust(running.url)  # this process's own server on 127.0.0.1: reachable even on a Space (untrusted at stop)
    return running.wait_until_ready(timeout_s) if wait else running


def start_builtin(
    name: str,
    *,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    timeout_s: float = 60.0,
    wait: bool = True,
    log_dir: Path | None = None,
) -> RunningEnvironment:
    """Start the built-in environment ``name`` (see registry.BUILTIN_ENVIRONMENTS) on 127.0.0.1.

    The server runs under the app's interpreter (``interpreters.app_python``): it needs openenv, which the trainer's
    environment, where the worker that calls this may run, does not have.

    Raises KeyError for an unknown name and EnvironmentStartError (with the log tail) if the server fails to start.
    """
    builtin = builtin_environment(name)
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    try:
        python = app_python()
    except InterpreterError as exc:
        raise EnvironmentStartError(str(exc)) from None
    # The package's entry runs builtin.module without Gradio, which openenv would import for a web page never served.
    argv = [
        python,
        "-m",
        "backend.environments.builtin",
        builtin.name,
        "--host",
        HOST,
        "--max-sessions",
        str(max_sessions),
    ]
    return start_server_process(argv, name=name, timeout_s=timeout_s, wait=wait, log_dir=log_dir)
