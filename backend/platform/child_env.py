"""The environment a child process of the app starts with: an allow-list of what it needs, so the Space owner's
secrets (``HF_TOKEN``, ``OAUTH_CLIENT_SECRET``, whatever else the platform injects) never reach a process that reads
a user's file or serves a user's environment."""

from __future__ import annotations

import os
import re

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
