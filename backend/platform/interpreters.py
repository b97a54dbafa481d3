"""Which Python runs what: the app's interpreter (gradio, openenv, the built-in environment servers) and the
trainer's (the worker: torch, TRL, vLLM), which may be a separate environment because their pins conflict.

``STUDIO_TRAINER_PYTHON`` names the trainer's interpreter (default: the app's own). The scheduler hands its own
interpreter to each worker as ``STUDIO_APP_PYTHON``, so the worker starts built-in environment servers with the
app's Python, which has openenv.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

TRAINER_PYTHON_VAR = "STUDIO_TRAINER_PYTHON"
APP_PYTHON_VAR = "STUDIO_APP_PYTHON"
PROJECT_ROOT = Path(__file__).resolve().parents[2]


def backend_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a ``python -m backend.<module>`` child: the project root first on PYTHONPATH
    (so the child imports this checkout from any working directory), then ``extra``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.update(extra or {})
    return env


class InterpreterError(RuntimeError):
    """A configured interpreter is not an executable file; the message says which variable and what to do."""


def _configured(variable: str, what: str, remedy: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        return sys.executable
    found = shutil.which(value)  # a path is checked as it is, a bare name ("python3.11") is looked up on PATH
    if found is None:
        raise InterpreterError(
            f"{variable} is set to {value!r}, which is not an executable file, so {what} cannot start; {remedy}"
        )
    return os.path.abspath(found)


def trainer_python() -> str:
    """The interpreter that runs training workers: ``$STUDIO_TRAINER_PYTHON``, else this process's own."""
    return _configured(
        TRAINER_PYTHON_VAR,
        "the training worker",
        "point it at the trainer environment's python (one with requirements-trainer.txt or "
        "requirements-trainer-gpu.txt installed, e.g. /opt/trainer/bin/python) or unset it to train with the app's "
        "own Python.",
    )


def app_python() -> str:
    """The app's interpreter, for processes that need the app's packages (openenv servers): ``$STUDIO_APP_PYTHON``
    (set by the scheduler for its workers), else this process's own."""
    return _configured(
        APP_PYTHON_VAR,
        "the built-in environment server",
        "it should be the app's python (the one with requirements.txt installed); the scheduler sets it for its "
        "workers, so unset it where you set it by hand.",
    )
