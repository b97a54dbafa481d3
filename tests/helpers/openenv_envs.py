"""Real environments of the OpenEnv repository, served on 127.0.0.1 for the conformance tests.

The environments are folders of the OpenEnv repository's ``envs/`` (https://github.com/meta-pytorch/OpenEnv). They
are not published as packages, and the project never copies third-party code, so the tests take them from a local
git repository of OpenEnv at test time: ``OPENENV_REPO`` names it (a bare git dir or a work tree with ``.git``;
default ``/work/.mirror/meta-pytorch+OpenEnv/repo`` when that exists), ``OPENENV_REVISION`` the commit (default
``HEAD``). ``envs/<name>`` of that commit is extracted with ``git archive`` into a cache outside the project
(``<tmp>/studio-openenv/<commit>/<name>``) the first time it is needed and reused after. Without a repository, the
plain folder of environments beside the project is used (``OPENENV_DIR``, default ``../shared/openenv``: eight
environments of a pinned commit with OpenEnv's LICENSE, laid out for the developers and CI), copied the same way into
``<tmp>/studio-openenv/shared/<name>`` (it may be read-only). Without either the tests skip with ``CHECKOUT_MISSING``.

Each runs unchanged under ``tests/helpers/env_servers/openenv_serve.py``, which raises its session limit by wrapping
``create_app``. Their Python dependencies come from PyPI (``requirements-dev.txt``); an environment whose
dependencies are missing is reported by ``missing_modules`` so a test can skip it with the reason, and
``skip_reason`` says either.

    OPENENV_REPO=~/src/OpenEnv python -m tests.helpers.openenv_envs echo_env connect4_env   # what the adapter sees
"""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from backend.environments.launcher import RunningEnvironment, start_server_process

HELPERS = Path(__file__).resolve().parent
SERVE = HELPERS / "env_servers" / "openenv_serve.py"
DEFAULT_OPENENV_REPO = Path("/work/.mirror/meta-pytorch+OpenEnv/repo")
DEFAULT_OPENENV_DIR = HELPERS.parents[2] / "shared" / "openenv"
CHECKOUT_MISSING = (
    "set OPENENV_REPO to a clone of meta-pytorch/OpenEnv (https://github.com/meta-pytorch/OpenEnv; "
    "a bare git dir or a work tree with .git) to run the OpenEnv catalogue environments"
)


class OpenEnvCheckoutMissing(RuntimeError):
    """No OpenEnv git repository to take the environments from (see ``CHECKOUT_MISSING``)."""


@dataclass(frozen=True)
class CatalogEnv:
    """One environment of the catalogue and how to serve it here."""

    name: str
    modules: tuple[str, ...] = ()  # imported by the server beyond the studio's own requirements
    # Its class keeps state per instance but does not declare SUPPORTS_CONCURRENT_SESSIONS.
    mark_concurrent: bool = False
    environ: Mapping[str, str] = field(default_factory=dict)
    # A legal and an illegal call, as (tool or None for the only tool, arguments), for probes and tests.
    valid: tuple[str | None, dict] = (None, {})
    invalid: tuple[str | None, dict] = (None, {})
    slow: dict | None = None  # arguments of the only tool that make one step take about 3 s
    note: str = ""

    @property
    def folder(self) -> Path:
        """The environment's folder, extracted from the OpenEnv repository (OpenEnvCheckoutMissing without one)."""
        return env_folder(self.name)


CATALOG_ENVS: dict[str, CatalogEnv] = {
    env.name: env
    for env in (
        CatalogEnv(
            "echo_env",
            valid=("echo_message", {"message": "hi"}),
            invalid=("echo_message", {"message": 5}),
            note="MCP: tools echo_message, echo_with_length; reward always 0.0",
        ),
        CatalogEnv(
            "connect4_env",
            ("numpy",),
            mark_concurrent=True,
            valid=(None, {"column": 3}),
            invalid=(None, {"column": "three"}),
            note="typed: column:int with no bounds in the schema (column 9 reaches the server, which ends the game "
            "with -1); no max_concurrent_envs (openenv's default is 1), class not marked concurrent",
        ),
        CatalogEnv(
            "maze_env",
            ("numpy",),
            valid=(None, {"action": 1}),
            invalid=(None, {"action": "up"}),
            note="typed: action:int (0-3); app.py hard-codes max_concurrent_envs=1",
        ),
        CatalogEnv(
            "grid_world_env",
            mark_concurrent=True,
            valid=(None, {"action": "UP"}),
            invalid=(None, {"action": "NORTH"}),
            note="typed: action is a str Enum -> $ref into $defs; default 1 session, class not marked",
        ),
        CatalogEnv(
            "reasoning_gym_env",
            ("reasoning_gym",),
            valid=(None, {"answer": "4"}),
            invalid=(None, {}),
            note="typed: answer:str; one step per episode; app.py hard-codes max_concurrent_envs=1",
        ),
        CatalogEnv(
            "textarena_env",
            ("textarena", "nltk"),
            # Wordle-v0 (the server's default) needs NLTK's `words` corpus, which it downloads at start: not
            # offline. GuessTheNumber-v0 (1..20, 10 turns) uses no data.
            environ={"TEXTARENA_ENV_ID": "GuessTheNumber-v0", "TEXTARENA_DOWNLOAD_NLTK": "0"},
            valid=(None, {"message": "[10]"}),
            invalid=(None, {"message": 3}),
            note="typed: message:str; the game's log grows inside one message, sent twice (messages, "
            "metadata.raw_messages); reset ignores seed; any game by env var",
        ),
        CatalogEnv(
            "coding_env",
            ("smolagents",),
            mark_concurrent=True,
            valid=(None, {"code": "print(6 * 7)"}),
            invalid=(None, {"code": 42}),
            slow={"code": "import time\ntime.sleep(3)\nprint('late')"},
            note="typed: code:str; stdout/stderr/exit_code; safety/quality transforms set the reward",
        ),
        CatalogEnv(
            "repl_env",
            ("smolagents", "gradio"),
            environ={"HF_TOKEN": ""},
            valid=(None, {"code": "print(6 * 7)"}),
            invalid=(None, {"is_final": "yes"}),
            note="typed: code, is_final, final_answer; nested CodeBlockResult; `state` before reset raises",
        ),
    )
}


def catalog_env(name: str) -> CatalogEnv:
    try:
        return CATALOG_ENVS[name]
    except KeyError:
        raise KeyError(f"no catalogue environment {name!r}; known: {', '.join(CATALOG_ENVS)}") from None


def missing_modules(name: str) -> list[str]:
    """The modules the environment's server imports that this interpreter cannot find (skip the test with them)."""
    return [module for module in catalog_env(name).modules if importlib.util.find_spec(module) is None]


def start_catalog_env(
    name: str, *, max_sessions: int = 8, timeout_s: float = 120.0, wait: bool = True, log_dir: Path | None = None
) -> RunningEnvironment:
    """Start ``name`` (from the OpenEnv repository, see ``env_folder``) on 127.0.0.1 (a free port) with
    ``max_sessions`` sessions; stop it with ``stop()``. With ``wait=False`` call ``wait_until_ready`` yourself (to
    start several side by side).

    Raises OpenEnvCheckoutMissing without an OpenEnv repository (``skip_reason`` tells beforehand) and
    EnvironmentStartError with the server's log tail when the server exits or stays silent.
    """
    env = catalog_env(name)
    argv = [sys.executable, str(SERVE), str(env_folder(name)), "--max-sessions", str(max_sessions)]
    if env.mark_concurrent:
        argv.append("--mark-concurrent")
    return start_server_process(
        argv, name=name, timeout_s=timeout_s, wait=wait, log_dir=log_dir, extra_env=dict(env.environ)
    )


@contextmanager
def served_catalog_env(name: str, *, max_sessions: int = 8) -> Iterator[RunningEnvironment]:
    """``name`` served for the block (a test's fixture), stopped after; the test is skipped where it cannot be."""
    import pytest

    reason = skip_reason(name)
    if reason:
        pytest.skip(reason)
    server = start_catalog_env(name, max_sessions=max_sessions)
    try:
        yield server
    finally:
        server.stop()


def _git_dir(path: Path) -> Path | None:
    """``path`` as a git dir: itself when bare, its ``.git`` when a work tree (a ``.git`` file, as in a linked work
    tree, is read by git itself); None when it is neither."""
    if (path / ".git").exists():
        return path / ".git"
    if (path / "HEAD").is_file() and (path / "objects").is_dir():
        return path
    return None


def _git(git_dir: Path, *args: str) -> bytes:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True, timeout=120
    ).stdout


def openenv_checkout() -> Path | None:
    """The git dir of the local OpenEnv repository (``OPENENV_REPO``, else the default mirror when it exists), or
    None when there is none or it has no ``envs/`` at ``OPENENV_REVISION``."""
    configured = os.environ.get("OPENENV_REPO", "").strip()
    path = Path(configured).expanduser() if configured else DEFAULT_OPENENV_REPO
    git_dir = _git_dir(path) if path.is_dir() else None
    if git_dir is None:
        return None
    try:
        _git(git_dir, "rev-parse", "--verify", "--quiet", f"{_revision()}:envs")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError):
        return None
    return git_dir


def openenv_folder() -> Path | None:
    """The plain folder of OpenEnv environments (``OPENENV_DIR``, else ``../shared/openenv``) when it has ``envs/``."""
    configured = os.environ.get("OPENENV_DIR", "").strip()
    path = Path(configured).expanduser() if configured else DEFAULT_OPENENV_DIR
    return path if (path / "envs").is_dir() else None


def _copy_whole(source: Path, target: Path) -> Path:
    """``source`` copied to ``target`` whole or not at all (beside it, then renamed)."""
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copytree(source, staging / "tree", ignore=shutil.ignore_patterns("__pycache__"))
        try:
            (staging / "tree").rename(target)
        except OSError:
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _revision() -> str:
    return os.environ.get("OPENENV_REVISION", "").strip() or "HEAD"


def cache_root() -> Path:
    """Where extracted environments are kept, outside the project: ``<tmp>/studio-openenv``."""
    return Path(tempfile.gettempdir()) / "studio-openenv"


def env_folder(name: str) -> Path:
    """``envs/<name>`` of the OpenEnv repository's commit, extracted once into ``cache_root()/<commit>/<name>``.

    The folder appears whole or not at all (extracted beside it, then renamed), so concurrent test processes and an
    interrupted run never leave half an environment. Raises OpenEnvCheckoutMissing without a repository.
    """
    catalog_env(name)
    git_dir = openenv_checkout()
    if git_dir is None:
        folder = openenv_folder()
        if folder is None or not (folder / "envs" / name).is_dir():
            raise OpenEnvCheckoutMissing(CHECKOUT_MISSING)
        return _copy_whole(folder / "envs" / name, cache_root() / "shared" / name)
    commit = _git(git_dir, "rev-parse", f"{_revision()}^{{commit}}").decode().strip()
    target = cache_root() / commit / name
    if target.is_dir():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=target.parent))
    try:
        # The tree itself (<commit>:envs/<name>), not a pathspec: a partial clone may lack other folders' blobs.
        archive = _git(git_dir, "archive", "--format=tar", f"{commit}:envs/{name}")
        with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
            tar.extractall(staging, filter="data")
        try:
            staging.rename(target)
        except OSError:
            if not target.is_dir():  # anything but another process having put it there first
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def skip_reason(name: str) -> str | None:
    """Why ``name`` cannot be served here (no OpenEnv repository, or modules missing), or None."""
    folder = openenv_folder()
    if openenv_checkout() is None and (folder is None or not (folder / "envs" / name).is_dir()):
        configured = os.environ.get("OPENENV_REPO", "").strip()
        if configured:
            return f"OPENENV_REPO={configured} is not a git repository with envs/ at {_revision()}: {CHECKOUT_MISSING}"
        return CHECKOUT_MISSING
    missing = missing_modules(name)
    return (
        f"{name} needs the Python modules {', '.join(missing)} (pip install -r requirements-dev.txt)"
        if missing
        else None
    )


def _report(name: str) -> None:
    """Start one environment, print what the studio's adapter makes of it (describe, an episode with a legal and an
    illegal call, the session probe), stop it. A probe for people, not a test."""
    import json
    import time

    from backend.environments.adapter import environment_class
    from backend.environments.connection import get_json, probe_capacity
    from backend.environments.discovery import describe

    env = catalog_env(name)
    reason = skip_reason(name)
    if reason:
        print(f"## {name}: SKIPPED, {reason}")
        return
    began = time.monotonic()
    server = start_catalog_env(name, max_sessions=4)
    try:
        print(f"## {name} at {server.url} (pid {server.pid}, healthy after {time.monotonic() - began:.1f} s)")
        schema = get_json(server.url, "/schema")
        action = schema.get("action") or {}
        print(
            f"  /schema action: fields {sorted(action.get('properties') or {})}, required {action.get('required')},"
            f" $defs {sorted(action.get('$defs') or {})}"
        )
        print(f"  /schema observation fields: {sorted((schema.get('observation') or {}).get('properties') or {})}")
        try:
            info = describe(server.url)
        except Exception as exc:  # noqa: BLE001 - a report, not a test
            print(f"  describe FAILED: {type(exc).__name__}: {exc}")
            return
        print(f"  describe: {info.summary()}")
        for tool in info.tools:
            print(f"    tool {tool.name}: required={list(tool.required)} parameters={json.dumps(tool.parameters)}")
            print(f"      description={tool.description[:200]!r}")
        try:
            episode = environment_class(info, timeout_s=30)()
            print(f"  reset -> {(episode.reset() or '')[:300]!r}")
        except Exception as exc:  # noqa: BLE001
            print(f"  opening an episode FAILED: {type(exc).__name__}: {exc}")
        else:
            for label, (tool_name, arguments) in (("invalid", env.invalid), ("valid", env.valid)):
                method = getattr(episode, tool_name or info.tools[0].name)
                try:
                    text = method(**arguments)
                    print(f"  {label} {arguments} -> {text[:300]!r} rewards={episode.rewards} done={episode.done}")
                except Exception as exc:  # noqa: BLE001
                    print(f"  {label} {arguments} raised {type(exc).__name__}: {str(exc)[:300]}")
            print(f"  get_reward() = {episode.get_reward()}")
            episode._close()
        if env.slow is not None:
            episode = environment_class(info, timeout_s=1)()
            episode.reset()
            try:
                text = getattr(episode, info.tools[0].name)(**env.slow)
                print(f"  slow step with timeout_s=1 -> {text[:200]!r}")
            except Exception as exc:  # noqa: BLE001
                print(f"  slow step with timeout_s=1 raised {type(exc).__name__}: {exc}")
            try:
                print(f"  then get_reward() = {episode.get_reward()}")
            except Exception as exc:  # noqa: BLE001
                print(f"  then get_reward() raised {type(exc).__name__}: {exc}")
            episode._close()
        try:
            print(f"  sessions accepted of 4: {probe_capacity(server.url, 4)}")
        except Exception as exc:  # noqa: BLE001
            print(f"  probe_capacity FAILED: {type(exc).__name__}: {exc}")
    finally:
        print("  server log tail:\n    " + server.log_tail(6).replace("\n", "\n    "))
        server.stop()


if __name__ == "__main__":
    for argument in sys.argv[1:] or list(CATALOG_ENVS):
        _report(argument)
