"""Serve one environment of the OpenEnv catalogue (its folder of the OpenEnv repository's ``envs/``, extracted by
``tests/helpers/openenv_envs.py``) on 127.0.0.1 with as many sessions as a test needs.

Many catalogue servers hard-code their session limit (``create_app(..., max_concurrent_envs=1)``, or no argument at
all, which openenv turns into 1). This wraps ``create_app`` before the environment's ``server/app.py`` is imported,
so the environment's code runs unchanged with ``--max-sessions N``. This is what a user does on their own copy of a
Space, written as code: raise ``max_concurrent_envs``, and where the environment class does not declare
``SUPPORTS_CONCURRENT_SESSIONS = True`` (openenv then refuses N > 1 at start-up) declare it with
``--mark-concurrent``, which is only correct for an environment that keeps all its state on the instance.

    python tests/helpers/env_servers/openenv_serve.py /tmp/studio-openenv/<commit>/connect4_env --max-sessions 8 \
        --mark-concurrent --port 8001
"""

from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import sys
from pathlib import Path


def wrap_create_app(max_sessions: int, mark_concurrent: bool) -> None:
    """Make every later ``create_app`` call (under either import path) use ``max_sessions`` sessions."""
    import openenv.core.env_server as env_server
    import openenv.core.env_server.http_server as http_server

    original = http_server.create_app
    signature = inspect.signature(original)

    @functools.wraps(original)  # keeps the signature: textarena/repl check it for `gradio_builder`
    def create_app(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.arguments["max_concurrent_envs"] = max_sessions
        bound.arguments.pop("concurrency_config", None)
        factory = bound.arguments["env"]
        # Without the mark, openenv refuses N > 1 for such a class itself (ConcurrencyConfigurationError).
        if mark_concurrent and max_sessions > 1 and not getattr(factory, "SUPPORTS_CONCURRENT_SESSIONS", False):
            if not inspect.isclass(factory):
                raise SystemExit(f"--mark-concurrent needs an environment class, got the factory {factory!r}")
            factory.SUPPORTS_CONCURRENT_SESSIONS = True  # set on the class itself: /metadata keeps its name
        return original(*bound.args, **bound.kwargs)

    http_server.create_app = create_app
    env_server.create_app = create_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("env_dir", help="the environment's folder; its name is the package name (connect4_env)")
    parser.add_argument("--app", default="server.app", help="module inside the package that defines `app`")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument(
        "--mark-concurrent",
        action="store_true",
        help="declare SUPPORTS_CONCURRENT_SESSIONS on an environment class that does not",
    )
    args = parser.parse_args(argv)

    env_dir = Path(args.env_dir).resolve()
    if not (env_dir / "__init__.py").is_file():
        raise SystemExit(f"{env_dir} is not an environment package (no __init__.py)")
    # Imported as a package (connect4_env.server.app) so its relative imports resolve; never put the folder itself
    # on sys.path, or `models` would be imported twice under two names (two Action classes, failed isinstance).
    sys.path.insert(0, str(env_dir.parent))
    os.environ["ENABLE_WEB_INTERFACE"] = "false"  # no Gradio playground on /web: the tests talk the protocol
    wrap_create_app(args.max_sessions, args.mark_concurrent)
    module = importlib.import_module(f"{env_dir.name}.{args.app}")

    import uvicorn

    uvicorn.run(module.app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
