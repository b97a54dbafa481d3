"""The environment a child process of the app starts with: an allow-list of what it needs, so the Space owner's
secrets (``HF_TOKEN``, ``OAUTH_CLIENT_SECRET``, whatever else the platform injects) never reach a process that reads
a user's file or serves a user's environment; and the one way such a child is run for one JSON answer
(``run_json_child``: the upload check, the reward model checks)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from backend.platform.interpreters import PROJECT_ROOT

# Named one by one: where programs, libraries, caches and temporary files are, the locale, the Space's mode.
ALLOWED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "LD_LIBRARY_PATH",
        "VIRTUAL_ENV",
        "CONDA_PREFIX",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "XDG_CACHE_HOME",
        "XDG_CONFIG_HOME",
        "XDG_DATA_HOME",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "TOKENIZERS_PARALLELISM",
        "CUDA_VISIBLE_DEVICES",
        "HF_HOME",
        "HF_ENDPOINT",
        "HUGGINGFACE_HUB_CACHE",
        "TRANSFORMERS_CACHE",
        "TRANSFORMERS_OFFLINE",
        "SPACE_ID",
        "SYSTEM",
        "SPACES_ZERO_GPU",
    }
)
# Whole families whose members are settings, not secrets (a secret-looking name among them is still left out).
ALLOWED_PREFIXES = ("LC_", "PYTHON", "HF_HUB_", "HF_DATASETS_", "STUDIO_", "COVERAGE_")
SECRET_LOOKING = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|(?:^|_)KEYS?(?:_|$)|COOKIE|SESSION")


def passes(name: str) -> bool:
    """Whether a variable of the app's environment may reach a child.

    >>> [passes(n) for n in ("PATH", "HF_HUB_OFFLINE", "STUDIO_DATA_DIR", "LC_ALL")]
    [True, True, True, True]
    >>> [passes(n) for n in ("HF_TOKEN", "OAUTH_CLIENT_SECRET", "STUDIO_API_KEY", "AWS_ACCESS_KEY_ID", "HF_HUB_TOKEN")]
    [False, False, False, False, False]
    """
    if SECRET_LOOKING.search(name):
        return False
    return name in ALLOWED_NAMES or name.startswith(ALLOWED_PREFIXES)


def child_environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for a ``python -m backend.<module>`` child: the allowed part of this process's own, the
    project root first on PYTHONPATH (so the child imports this checkout from any working directory), then
    ``extra`` (which the caller vouches for: it may hand one secret on deliberately)."""
    env = {name: value for name, value in os.environ.items() if passes(name)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


@dataclass(frozen=True)
class ChildRun:
    """What a ``python -m`` child asked for one JSON answer did: its answer's kind and value, or ``died`` (no answer:
    a crash, a kill by a limit, a non-zero exit), with its exit code and what it wrote on stderr."""

    kind: str
    value: Any
    returncode: int
    stderr: str

    def how_it_stopped(self) -> str:
        """``signal SIGSEGV`` or ``exit code 3``: for a sentence about a child that died."""
        if self.returncode < 0:
            return f"signal {signal.Signals(-self.returncode).name}"
        return f"exit code {self.returncode}"


def answer_of(stdout: str, kinds: Iterable[str]) -> tuple[str, Any]:
    """A child's answer: its last line that reads as ``[kind, value]`` with a kind of ``kinds`` (a library may print
    around it), else ("died", None).

    >>> answer_of('noise\\n["ok", "a.jsonl: 2 rows"]\\nmore noise', ("ok",)), answer_of("", ("ok",))
    (('ok', 'a.jsonl: 2 rows'), ('died', None))
    """
    kinds = tuple(kinds)
    for line in reversed(stdout.splitlines()):
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, list) and len(answer) == 2 and answer[0] in kinds:
            return answer[0], answer[1]
    return "died", None


def run_json_child(
    module: str, request: dict[str, Any], kinds: Iterable[str], timeout_s: float, env: dict[str, str]
) -> ChildRun:
    """``python -m module`` with ``request`` as JSON on stdin, in its own session (no terminal signal of the app's
    reaches it), from the project root, with ``env`` (``child_environment``'s); its answer read off stdout. The
    child sets its own limits. Raises subprocess.TimeoutExpired (it was killed) or OSError (none could start)."""
    done = subprocess.run(
        [sys.executable, "-m", module],
        input=json.dumps(request),
        text=True,
        capture_output=True,
        timeout=timeout_s,
        cwd=PROJECT_ROOT,
        env=env,
        start_new_session=True,
    )
    kind, value = answer_of(done.stdout, kinds) if done.returncode == 0 else ("died", None)
    return ChildRun(kind, value, done.returncode, done.stderr)
