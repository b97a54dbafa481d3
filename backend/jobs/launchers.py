"""How a worker process starts: a fresh interpreter (production's default), or a fork of a pre-imported pool.

The scheduler asks its launcher for a process and gets back a ``WorkerProcess`` (``pid``, ``poll()``, ``wait()``),
whichever way it started. ``SubprocessLauncher`` runs ``python -m backend.worker`` and pays the imports of torch,
transformers and TRL on every job (about 9-14 s on a CPU). ``PoolLauncher`` asks a running ``backend.worker_pool``
(over a Unix socket) to fork one of its children, which has imported all of that already (about 1 s to the first
step). A pooled child behaves as a fresh worker would only when nothing read at import time differs, so the pool
is used only for the trainer's interpreter, one process per job, no address-space cap, and an environment that
differs from the pool's in ``RUNTIME_ONLY_VARIABLES`` alone; anything else starts a fresh process.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol

from backend.platform.interpreters import PROJECT_ROOT, backend_env

log = logging.getLogger("studio.launchers")

# When set, the path of a worker pool's socket: the scheduler's default launcher forks workers from it.
WORKER_POOL_VAR = "STUDIO_WORKER_POOL"
# Variables that nothing reads at import time, so a pooled child may take the job's value: the project's own
# settings, the user's Hub token (read per call), the device a job gets (read when CUDA starts), unbuffered output
# (the child sets its own streams), the temporary folder (the child forgets the pool's), Gradio's settings (neither
# the pool nor a worker imports Gradio), the terminal's size, pytest's name of the running test, the pool's own
# way of asking whether CUDA is there, a Space's own variables (its id, host and ``SYSTEM``, read per call), and the
# Hub's telemetry switch and a Space's sign-in settings (huggingface_hub reads them at import, so the child sets
# those constants again from the job's values: ``worker_pool``).
RUNTIME_ONLY_PREFIXES = ("STUDIO_", "GRADIO_", "SPACE_", "OAUTH_")
RUNTIME_ONLY_VARIABLES = frozenset(
    {
        "HF_TOKEN",
        "SYSTEM",
        "OPENID_PROVIDER_URL",
        "CUDA_VISIBLE_DEVICES",
        "PYTHONUNBUFFERED",
        "TMPDIR",
        "PYTEST_CURRENT_TEST",
        "COLUMNS",
        "LINES",
        "PYTORCH_NVML_BASED_CUDA_CHECK",
        "HF_HUB_DISABLE_TELEMETRY",
        "DISABLE_TELEMETRY",
        "DO_NOT_TRACK",
        # scikit-learn sets both (os.environ.setdefault) when imported, threadpoolctl the first: in the app, lm_eval's
        # metrics import them. Only an Intel OpenMP runtime reads them as it loads, and a child that imports
        # scikit-learn sets them itself first
        "KMP_DUPLICATE_LIB_OK",
        "KMP_INIT_AT_FORK",
        # app.py sets it before Gradio imports matplotlib; the pool and its workers never import matplotlib (they draw
        # nothing), and a child that did would read it then, from the job's environment
        "MPLBACKEND",
        # datasets sets it around each download (mock.patch.dict of os.environ, which concurrent loads in threads can
        # leave behind); it only stacks progress bars, read at call time
        "HF_DATASETS_STACK_MULTIPROCESSING_DOWNLOAD_PROGRESS_BARS",
    }
)
# Set in the pool before it imports torch (see ``backend.worker_pool.preimport``).
NVML_CHECK_VAR = "PYTORCH_NVML_BASED_CUDA_CHECK"
# "1": the scheduler starts its own pool (``start_pool``) and forks workers from it once it is ready.
PREIMPORT_VAR = "STUDIO_PREIMPORT_WORKERS"
# The temporary folder of a launcher's own pool socket (the pool removes it when it stops).
OWN_POOL_PREFIX = "studio-pool-"
WORKER_MODULE = "backend.worker"
_POOL_TIMEOUT_S = 10.0


class WorkerProcess(Protocol):
    """A started worker: its pid (also its process group), whether it has ended and its exit code."""

    @property
    def pid(self) -> int:
        """Its pid, also its process group's."""
        ...

    def poll(self) -> int | None:
        """The exit code once it has ended (negative: the signal that ended it), else None."""
        ...

    def outcome(self) -> tuple[bool, int | None]:
        """Whether it has ended, and its exit code: None while it runs, and also when it ended unseen."""
        ...

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until it ends (or ``timeout`` passes); its exit code."""
        ...


class Launcher(Protocol):
    """Starts ``python -m module args`` for a job, in its own process session, output appended to ``log_file``."""

    def launch(
        self,
        module: str,
        args: list[str],
        log_file: IO[bytes],
        extra_env: dict[str, str],
        python: str,
        memory_limit_bytes: int | None = None,
    ) -> WorkerProcess:
        """The started process; raises when it could not start."""
        ...

    def close(self) -> None:
        """Let go of what the launcher started for itself (a pool); the workers it launched run on."""
        ...


def _value(env: dict[str, str], variable: str) -> str | None:
    """A variable's value as it acts: PYTHONPATH without repeated folders (the same ``sys.path``)."""
    value = env.get(variable)
    if variable == "PYTHONPATH" and value is not None:
        return os.pathsep.join(dict.fromkeys(value.split(os.pathsep)))
    return value


def _runtime_only(variable: str) -> bool:
    return variable in RUNTIME_ONLY_VARIABLES or variable.startswith(RUNTIME_ONLY_PREFIXES)


def worker_comm(job_id: str) -> str:
    """The process name (``/proc/PID/comm``, 15 characters) a pooled worker of ``job_id`` takes, so that a forked
    worker can be recognised after a restart as a fresh one is by its command line."""
    return "ptw-" + hashlib.sha1(job_id.encode()).hexdigest()[:11]


def worker_alive(pid: int, job_id: str) -> bool:
    """True while ``pid`` is a live (not zombie) worker for ``job_id``; guards against pid reuse.

    A fresh worker has the job id in its command line; a pooled one has the pool's command line and
    ``worker_comm(job_id)`` as its name."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmdline = fh.read().split(b"\0")
        with open(f"/proc/{pid}/stat", "rb") as fh:
            name, rest = fh.read().split(b" (", 1)[1].rsplit(b")", 1)
    except (OSError, IndexError, ValueError):
        return False
    if rest.split()[0] == b"Z":
        return False
    if job_id.encode() in cmdline and WORKER_MODULE.encode() in cmdline:
        return True
    return name == worker_comm(job_id).encode()


def spawn_backend_process(
    module: str,
    args: list[str],
    log_file,
    extra_env: dict[str, str] | None = None,
    preexec_fn=None,
    python: str | None = None,
) -> subprocess.Popen:
    """``python -m module args`` from the project root, in its own process session, output appended to log_file.

    ``python`` defaults to this process's interpreter; workers get the trainer's (``interpreters.trainer_python``).
    """
    return subprocess.Popen(
        [python or sys.executable, "-m", module, *args],  # an argv list, never a shell string
        cwd=PROJECT_ROOT,
        env=backend_env(extra_env),
        stdin=subprocess.DEVNULL,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


def _address_space_cap(limit: int | None):
    if limit is None:
        return None

    def apply() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


@dataclass
class FreshWorker:
    """A worker started as its own interpreter: this process is its parent and reaps it."""

    process: subprocess.Popen

    @property
    def pid(self) -> int:
        """Its pid, also its process group's."""
        return self.process.pid

    def poll(self) -> int | None:
        """Its exit code once it has ended, else None."""
        return self.process.poll()

    def outcome(self) -> tuple[bool, int | None]:
        """Whether it has ended, and its exit code (this process reaps it, so it is always known)."""
        code = self.process.poll()
        return code is not None, code

    def wait(self, timeout: float | None = None) -> int | None:
        """Block until it ends (``subprocess.TimeoutExpired`` after ``timeout`` seconds); its exit code."""
        return self.process.wait(timeout)


class SubprocessLauncher:
    """A fresh interpreter per job: production's launcher, and the tests' wherever the process is the subject."""

    def launch(self, module, args, log_file, extra_env, python, memory_limit_bytes=None) -> WorkerProcess:
        """``python -m module args`` (see ``spawn_backend_process``), capped to ``memory_limit_bytes`` if given."""
        return FreshWorker(
            spawn_backend_process(
                module, args, log_file, extra_env, preexec_fn=_address_space_cap(memory_limit_bytes), python=python
            )
        )

    def close(self) -> None:
        """Nothing to let go of."""


class PoolError(RuntimeError):
    """The worker pool did not answer or refused a request."""


def pool_request(socket_path: str | Path, request: dict, timeout: float = _POOL_TIMEOUT_S) -> dict:
    """One request to a worker pool and its answer (one JSON line each way)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout)
        try:
            conn.connect(str(socket_path))
            conn.sendall(json.dumps(request).encode() + b"\n")
            answer = b""
            while not answer.endswith(b"\n"):
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
        except OSError as exc:
            raise PoolError(f"the worker pool at {socket_path} did not answer ({exc})") from exc
    if not answer:
        raise PoolError(f"the worker pool at {socket_path} closed the connection")
    reply = json.loads(answer)
    if "error" in reply:
        raise PoolError(reply["error"])
    return reply


@dataclass
class PooledWorker:
    """A worker forked by the pool: its exit code comes from the pool, which is its parent and reaps it."""

    pid: int
    job_id: str
    socket_path: str
    _code: int | None = None
    ended: bool = False  # also when its exit code is unknown: the pool went away and so did the worker

    def poll(self) -> int | None:
        """The exit code the pool saw; if the pool is gone, None once the worker is gone too."""
        if self.ended:
            return self._code
        try:
            reply = pool_request(self.socket_path, {"op": "poll", "pid": self.pid})
            self.ended, self._code = not reply["running"], reply["code"]
        except PoolError:
            self.ended = not worker_alive(self.pid, self.job_id)
        return self._code

    def outcome(self) -> tuple[bool, int | None]:
        """Whether it has ended, and the exit code the pool saw (None when the pool went away first)."""
        code = self.poll()
        return self.ended, code

    def wait(self, timeout: float | None = None) -> int | None:
        """Poll until it ends (``subprocess.TimeoutExpired`` after ``timeout`` seconds)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None and not self.ended:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(WORKER_MODULE, timeout or 0)
            time.sleep(0.05)
        return self._code


class PoolLauncher:
    """Forks workers from the pre-imported pool at ``socket_path`` when a fork behaves as a fresh process would
    (see the module docstring); otherwise, and when the pool does not answer, starts a fresh one."""

    def __init__(self, socket_path: str | Path, fallback: Launcher | None = None):
        self.socket_path = str(socket_path)
        self.fallback = fallback or SubprocessLauncher()
        self._pool: dict | None = None  # the pool's interpreter and environment, asked once
        self.refusal: str | None = None  # why the last launch was not forked by the pool
        self._own: subprocess.Popen | None = None  # the pool this launcher started (``own_pool``), if any

    @classmethod
    def own_pool(cls, log_path: Path) -> PoolLauncher:
        """A launcher with a pool of its own, started now (its socket in a new temporary folder, its log at
        ``log_path``); fresh workers run the jobs queued while it imports. ``close()`` stops it."""
        socket_path = Path(tempfile.mkdtemp(prefix=OWN_POOL_PREFIX)) / "pool.sock"
        launcher = cls(socket_path)
        with open(log_path, "ab") as log_file:
            launcher._own = start_pool(socket_path, log_file)
        return launcher

    def close(self) -> None:
        """Stop the pool this launcher started (its workers run on); nothing for a pool someone else runs."""
        if self._own is None:
            return
        self._own.terminate()
        try:
            self._own.wait(10)
        except subprocess.TimeoutExpired:
            self._own.kill()
            self._own.wait()
        self._own = None
        shutil.rmtree(Path(self.socket_path).parent, ignore_errors=True)

    def why_not_pooled(self, module: str, env: dict[str, str], python: str, memory_limit: int | None) -> str | None:
        """Why this launch needs a fresh process (a sentence), or None when the pool may fork it."""
        if module != WORKER_MODULE:
            return f"{module} is not the worker itself"
        if memory_limit is not None:
            return "an address-space cap must apply to a fresh process"
        if self._pool is None:
            try:
                self._pool = pool_request(self.socket_path, {"op": "describe"}, timeout=60)
            except PoolError as exc:
                return str(exc)
        if os.path.abspath(python) != os.path.abspath(self._pool["python"]):  # not realpath: venvs link one binary
            return f"the job runs under {python}, the pool under {self._pool['python']}"
        pool_env = self._pool["env"]
        differing = sorted(k for k in set(env) | set(pool_env) if _value(env, k) != _value(pool_env, k))
        import_time = [k for k in differing if not _runtime_only(k)]
        if import_time:
            return f"the job's environment differs from the pool's in {', '.join(import_time)}"
        return None

    def launch(self, module, args, log_file, extra_env, python, memory_limit_bytes=None) -> WorkerProcess:
        """A pooled worker when ``why_not_pooled`` has no objection, else the fallback's process."""
        env = backend_env(extra_env)
        job_id = args[args.index("--job-id") + 1] if "--job-id" in args else "?"
        self.refusal = self.why_not_pooled(module, env, python, memory_limit_bytes)
        if self.refusal is None:
            try:
                reply = pool_request(
                    self.socket_path, {"op": "fork", "args": args, "env": env, "log": str(log_file.name)}
                )
                return PooledWorker(int(reply["pid"]), job_id, self.socket_path)
            except PoolError as exc:  # the pool went away: a fresh process still runs the job
                self.refusal = str(exc)
        log.warning("job %s starts in a fresh interpreter, not the worker pool: %s", job_id, self.refusal)
        return self.fallback.launch(module, args, log_file, extra_env, python, memory_limit_bytes)


def start_pool(socket_path: str | Path, log_file: IO[bytes]) -> subprocess.Popen:
    """Start ``backend.worker_pool`` on ``socket_path`` with the environment a worker would get; its socket appears
    once it has imported the training stack (about 15 s on a CPU)."""
    args = ["--socket", str(socket_path), "--parent", str(os.getpid())]  # it ends with this process, however it ends
    return spawn_backend_process("backend.worker_pool", args, log_file)


def default_launcher(log_dir: Path) -> Launcher:
    """The pool named by ``STUDIO_WORKER_POOL``; with ``STUDIO_PREIMPORT_WORKERS=1``, a pool of the scheduler's own
    (its log in ``log_dir``); else a fresh interpreter per job, production's default."""
    socket_path = os.environ.get(WORKER_POOL_VAR, "").strip()
    if socket_path:
        return PoolLauncher(socket_path)
    if os.environ.get(PREIMPORT_VAR, "").strip() == "1":
        return PoolLauncher.own_pool(log_dir / "worker-pool.log")
    return SubprocessLauncher()
