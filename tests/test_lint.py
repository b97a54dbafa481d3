"""The repository passes its linter: `ruff check` with the rules in ruff.toml (pycodestyle, pyflakes, bugbear)."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_passes():
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed: pip install -r requirements-dev.txt")
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"ruff check (rules in ruff.toml) found:\n{result.stdout}{result.stderr}"
