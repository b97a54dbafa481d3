"""The worker pool: a process that imports the training stack once, then forks a worker per job on request.

    python -m backend.worker_pool --socket PATH     # then STUDIO_WORKER_POOL=PATH for the scheduler

A fresh worker spends most of its first seconds importing torch, transformers and TRL
(``benchmarks/fork_launch.py``); a child forked from here starts with them imported. The pool answers one JSON
line per connection on a Unix socket (``describe``, ``fork``, ``poll``), reaps its children and keeps their exit
codes for the scheduler, which decides what may be forked (``backend.jobs.launchers.PoolLauncher``). The pool never
initialises CUDA, never starts a thread, and its children run ``backend.worker`` exactly as ``python -m`` would,
in their own process session, named ``launchers.worker_comm(job_id)``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import logging
import os
import selectors
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path

from backend.jobs.launchers import NVML_CHECK_VAR, OWN_POOL_PREFIX, worker_comm
from backend.methods.table import METHOD_MODULES, table

log = logging.getLogger("studio.worker_pool")

# What a worker imports on its way to the first step, in the order it does; trackio, vLLM and bitsandbytes are left
# out (trackio reads its folder from the job's environment when first imported; the others touch the GPU). The
# methods and their TRL classes come from the method table, so a new method is pre-imported without a line here.
PREIMPORTS = (
    "torch",
    "transformers",
    "peft",
    "datasets",
    "trl",
    "trl.rewards",
    "trl.data_utils",
    "trl.chat_template_utils",
    "backend.worker",
    "backend.training.callbacks",
    "backend.training.autotune",
    "backend.training.evaluation",
    *(module.__name__ for module in METHOD_MODULES),
    "backend.models.loading",
)
# TRL and transformers import these lazily, on first attribute access.
LAZY_ATTRIBUTES = {
    "trl": tuple(name for row in table().values() for name in row.trl_classes),
    "transformers": (
        *dict.fromkeys(row.head.auto_class for row in table().values()),  # each method's model class, once
        "AutoTokenizer",
        "AutoConfig",
        "Qwen3ForCausalLM",
        "GenerationConfig",
    ),
    "peft": ("PeftModel", "LoraConfig"),
}


def preimport() -> None:
    """Import what a worker needs (see ``PREIMPORTS``), without touching a GPU; raises if CUDA got initialised (a
    forked child could not use it)."""
    # Libraries ask torch whether CUDA is available while importing: NVML answers that without initialising CUDA.
    os.environ[NVML_CHECK_VAR] = "1"
    for name in PREIMPORTS:
        importlib.import_module(name)
    for name, attributes in LAZY_ATTRIBUTES.items():
        module = sys.modules[name]
        for attribute in attributes:
            getattr(module, attribute)
    if sys.modules["torch"].cuda.is_initialized():
        raise RuntimeError("importing the training stack initialised CUDA, so a forked worker could not use the GPU")


class Pool:
    """The serving loop: forks workers, reaps them, answers for their exit codes."""

    def __init__(self, socket_path: Path, parent: int | None = None):
        self.socket_path = socket_path
        self.children: dict[int, str] = {}  # pid -> job id, while it runs
        self.codes: dict[int, int] = {}  # pid -> exit code (negative: the signal), once reaped
        self.stopping = False
        self.listener: socket.socket | None = None
        # The pool ends with the scheduler or session that started it: the pid it was started by, given on the
        # command line (read now, after the imports, getppid() would already be init's for an app killed meanwhile).
        self.parent = os.getppid() if parent is None else parent

    def serve(self) -> None:
        """Listen on the socket (created only now, so that it exists means the pool is ready) until SIGTERM or until
        the process that started it ends. Its workers run on either way, as fresh ones outlive their scheduler."""
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        signal.signal(signal.SIGINT, lambda *_: setattr(self, "stopping", True))
        self.socket_path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.socket_path))
        listener.listen(64)
        self.listener = listener
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        log.info("worker pool %d ready on %s", os.getpid(), self.socket_path)
        try:
            while not self.stopping and os.getppid() == self.parent:
                for _ in selector.select(timeout=0.2):
                    conn, _addr = listener.accept()
                    with conn:
                        self._answer(conn)
                self._reap()
        finally:
            selector.close()
            listener.close()
            self.socket_path.unlink(missing_ok=True)
            if self.socket_path.parent.name.startswith(OWN_POOL_PREFIX):  # a launcher's own folder: nothing else
                with contextlib.suppress(OSError):
                    self.socket_path.parent.rmdir()

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children.pop(pid, None)
            self.codes[pid] = os.waitstatus_to_exitcode(status)

    def _answer(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        try:
            request = json.loads(conn.makefile("rb").readline())
            reply = self._handle(request)
        except Exception as exc:  # noqa: BLE001 - a bad request gets a sentence, the pool keeps serving
            reply = {"error": f"the worker pool could not answer: {exc}"}
        try:
            conn.sendall(json.dumps(reply).encode() + b"\n")
        except OSError:
            pass  # the asker went away

    def _handle(self, request: dict) -> dict:
        op = request.get("op")
        if op == "describe":
            return {"python": sys.executable, "env": dict(os.environ), "pid": os.getpid()}
        if op == "fork":
            return {"pid": self._fork(list(request["args"]), dict(request["env"]), str(request["log"]))}
        if op == "poll":
            self._reap()
            pid = int(request["pid"])
            if pid in self.codes:
                return {"running": False, "code": self.codes[pid]}
            if pid in self.children:
                return {"running": True, "code": None}
            return {"error": f"process {pid} is not a worker of this pool"}
        return {"error": f"unknown request {op!r}"}

    def _fork(self, args: list[str], env: dict[str, str], log_path: str) -> int:
        job_id = args[args.index("--job-id") + 1]
        pid = os.fork()
        if pid == 0:
            _become_worker(job_id, args, env, log_path, self.listener)
        self.children[pid] = job_id
        log.info("forked worker %d for job %s", pid, job_id)
        return pid


def _reread_import_time_settings() -> None:
    """What a library read from the environment at import and a job may change (``launchers.RUNTIME_ONLY_VARIABLES``),
    read again from the job's environment."""
    from huggingface_hub import constants

    constants.HF_HUB_DISABLE_TELEMETRY = any(
        constants._is_true(os.environ.get(name))
        for name in ("HF_HUB_DISABLE_TELEMETRY", "DISABLE_TELEMETRY", "DO_NOT_TRACK")
    )
    for name in ("OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_SCOPES", "OPENID_PROVIDER_URL"):
        setattr(constants, name, os.environ.get(name))


def _become_worker(job_id: str, args: list[str], env: dict[str, str], log_path: str, listener) -> None:
    """In the forked child: become ``python -m backend.worker ARGS`` with ``env``, output to ``log_path``; never
    returns."""
    code = 1
    try:
        os.setsid()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        if listener is not None:
            listener.close()
        out = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        os.close(null)
        sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True)
        sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True)
        os.environ.clear()
        os.environ.update(env)
        tempfile.tempdir = None  # the job's TMPDIR, not the folder the pool found at its start
        _reread_import_time_settings()
        Path("/proc/self/comm").write_text(worker_comm(job_id))
        for handler in list(logging.root.handlers):
            logging.root.removeHandler(handler)
        from backend import worker

        sys.argv = [worker.__file__, *args]
        code = worker.main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the child reports and ends; it must never return into the pool's loop
        traceback.print_exc()
    finally:
        from backend.worker import end_process

        end_process(code)


def main(argv: list[str] | None = None) -> int:
    """``python -m backend.worker_pool --socket PATH``: import, then serve until SIGTERM."""
    parser = argparse.ArgumentParser(description="Fork pre-imported Post-Training Studio workers on request.")
    parser.add_argument("--socket", required=True, help="the Unix socket to listen on (created once imports are done)")
    parser.add_argument("--parent", type=int, help="the pid that started it: the pool ends when that process does")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.parent is not None and os.getppid() != args.parent:
        log.info("the process that started the pool (%d) has already ended; not starting", args.parent)
        return 0
    preimport()
    if args.parent is not None and os.getppid() != args.parent:  # it died while the pool imported (15 s on a CPU)
        log.info("the process that started the pool (%d) ended while it imported; not serving", args.parent)
        return 0
    Pool(Path(args.socket), args.parent).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
