"""The app starts without the training stack: torch, transformers, TRL, peft and datasets load on first use (a chat,
a pre-flight), not while a Space boots or a test starts an app. Importing transformers alone cost each start 0.8 s
of its 5 s (2026-12-07, `python -X importtime -c "import app"`)."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT

TRAINING_STACK = ("torch", "transformers", "trl", "peft", "datasets", "bitsandbytes", "lm_eval")


def test_importing_the_app_loads_none_of_the_training_stack():
    probe = f"import sys, app; print(' '.join(m for m in {TRAINING_STACK!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [], f"the app imported {done.stdout.split()} at start"
