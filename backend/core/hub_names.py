"""The Hub's names and switches in one place: its endpoint, the offline flag, and what a name means (a Hub repo id,
a folder on this machine, or a ``builtin:`` asset).

Ground floor: imports nothing from the backend (``backend/core/spec/`` builds on it), and reads the environment at
call time, never at import, so a test or a self-hosted Hub can change ``HF_ENDPOINT``/``HF_HUB_OFFLINE`` later.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DEFAULT_ENDPOINT = "https://huggingface.co"
BUILTIN_PREFIX = "builtin:"
# The built-in models' names (backend/models/demo.py builds and describes them): the random tiny model, resolved to a
# directory under the data dir, and the arithmetic one that ships pre-trained.
DEMO_MODEL_ID = "builtin:tiny-qwen3"
ARITH_MODEL_ID = "builtin:tiny-qwen3-arith"
BUILTIN_MODELS = (DEMO_MODEL_ID, ARITH_MODEL_ID)
_TRUE = ("1", "true", "yes", "on")

# One part of a Hub id (owner or name), by the Hub's rules: letters, digits, '-', '_', '.'; no '--' or '..'; not
# starting or ending with '-' or '.'; at most 96 characters.
HUB_NAME_PART = r"(?![-.])(?!.*(?:--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])"
_REPO_ID = re.compile(rf"(?:{HUB_NAME_PART}/)?{HUB_NAME_PART}")
_NAMESPACED_REPO_ID = re.compile(rf"{HUB_NAME_PART}/{HUB_NAME_PART}")
HUB_REPO_ID_RULE = (
    "owner/name, each part 1-96 letters, digits, '-', '_' or '.', without '--' or '..' and not starting or "
    "ending with '-' or '.'"
)


# --- endpoint and offline flag -------------------------------------------------------------------------------------


def hub_endpoint() -> str:
    """``$HF_ENDPOINT`` read now (huggingface_hub reads it once, at import), else the public Hub; no trailing slash."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` asks never to go online, read now: the studio's own checks ask this."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in _TRUE


def client_offline() -> bool:
    """Whether huggingface_hub in this process refuses to go online (it read ``HF_HUB_OFFLINE`` at import).

    A push asks this rather than :func:`hub_offline`: what matters there is whether the client's calls will be
    refused, and the client decided that when it was imported.
    """
    from huggingface_hub import constants

    return constants.is_offline_mode()


# --- what a name means ---------------------------------------------------------------------------------------------


def is_builtin(name: str) -> bool:
    """Whether ``name`` names an asset that ships with the studio (``builtin:tiny-qwen3``, ``builtin:echo``).

    >>> is_builtin("builtin:echo"), is_builtin("openenv/echo_env")
    (True, False)
    """
    return name.startswith(BUILTIN_PREFIX)


def is_repo_id(name: str) -> bool:
    """Whether ``name`` is a Hub model or dataset id: ``owner/name``, or a bare ``name`` (the Hub's old ids).

    >>> is_repo_id("Qwen/Qwen3-0.6B"), is_repo_id("gpt2")
    (True, True)
    >>> is_repo_id("./models/x"), is_repo_id("a/b/c"), is_repo_id("owner/na--me"), is_repo_id("builtin:echo")
    (False, False, False, False)
    """
    return _REPO_ID.fullmatch(name) is not None


def is_namespaced_repo_id(name: str) -> bool:
    """Whether ``name`` is ``owner/name`` by the Hub's rules (``HUB_REPO_ID_RULE``): a repo one can create or a Space.

    >>> is_namespaced_repo_id("you/my-adapter"), is_namespaced_repo_id("gpt2"), is_namespaced_repo_id("-x/y")
    (True, False, False)
    """
    return _NAMESPACED_REPO_ID.fullmatch(name) is not None


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is written as a path on this machine, whatever is there: it starts with ``/``, ``.`` or
    ``~``, holds a backslash or ``..``, or has more than one ``/``.

    >>> looks_like_path("/data/model"), looks_like_path("~/m"), looks_like_path("a/b/c"), looks_like_path("a/b")
    (True, True, True, False)
    """
    return name.startswith(("/", ".", "~")) or "\\" in name or name.count("/") > 1 or ".." in name


def is_local_path(name: str) -> bool:
    """Whether ``name`` means a file or folder on this machine: written as a path, or something of that name exists
    here (transformers and datasets read a local folder before asking the Hub).

    >>> is_local_path("./models/x"), is_local_path("Qwen/Qwen3-0.6B")
    (True, False)
    """
    return looks_like_path(name) or Path(name).expanduser().exists()


def hub_model_id(name: str) -> str | None:
    """The Hub id a model name refers to, or None for a built-in model and for a folder on this machine.

    >>> hub_model_id("Qwen/Qwen3-0.6B"), hub_model_id("builtin:tiny-qwen3"), hub_model_id("/models/mine")
    ('Qwen/Qwen3-0.6B', None, None)
    """
    if is_builtin(name) or is_local_path(name) or not is_repo_id(name):
        return None
    return name


def slug(text: str) -> str:
    """A repo- and folder-safe name: letters, digits, dots, dashes and underscores; at most 96 characters.

    >>> slug("my run/1 (final)")
    'my-run-1-final'
    """
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return cleaned[:96] or "adapter"


def run_repo_name(run_name: str | None, method: str, job_id: str) -> str:
    """The Hub repo name a job's adapter and checkpoints get when none is given: its run name, else method and id."""
    return slug(run_name or f"{method}-{job_id}")
