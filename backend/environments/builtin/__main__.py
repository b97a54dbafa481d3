"""Serve one built-in environment: ``python -m backend.environments.builtin NAME --port N [--host H]
[--max-sessions N]`` runs NAME's module (``registry.BUILTIN_ENVIRONMENTS``) as ``python -m`` would, without Gradio.

openenv's ``env_server`` package imports its optional web interface, and with it Gradio: 2.9 s of a server's 4.5 s
start on a 2-core machine (2026-12-07, ``python -X importtime``), paid by every environment job, dry run, arena
play and chat tool run. These servers never mount that interface, and openenv leaves it out when Gradio cannot be
imported, which is what a ``None`` in ``sys.modules`` makes every ``import gradio`` in this process say.
"""

from __future__ import annotations

import runpy
import sys

from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS


def main(argv: list[str]) -> None:
    """Serve the environment ``argv[1]`` names with the rest of ``argv`` as its command line."""
    if len(argv) < 2 or argv[1] not in BUILTIN_ENVIRONMENTS:
        raise SystemExit(f"usage: python -m backend.environments.builtin {{{','.join(BUILTIN_ENVIRONMENTS)}}} --port N")
    module = BUILTIN_ENVIRONMENTS[argv.pop(1)].module
    sys.modules["gradio"] = None  # type: ignore[assignment]  # openenv's web interface: ModuleNotFoundError, skipped
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main(sys.argv)
