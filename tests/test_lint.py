"""The repository keeps its habits: `ruff check` (pycodestyle, pyflakes, bugbear, import order, pyupgrade) and
`ruff format --check`, with the settings in pyproject.toml."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    if importlib.util.find_spec("ruff") is None:
        pytest.fail("ruff is not installed: pip install -r requirements-dev.txt")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--no-cache", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def test_ruff_check_passes():
    result = _ruff("check", "--output-format", "concise")
    assert result.returncode == 0, f"ruff check (rules in pyproject.toml) found:\n{result.stdout}{result.stderr}"


def test_the_code_is_as_ruff_format_writes_it():
    result = _ruff("format", "--check")
    assert result.returncode == 0, f"run `ruff format .` (or `make format`):\n{result.stdout}{result.stderr}"
