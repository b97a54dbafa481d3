"""The repository keeps its habits: `ruff check` (pycodestyle, pyflakes, bugbear, import order, pyupgrade),
`ruff format --check` and mypy over the ground floor and the job machinery, with the settings in pyproject.toml."""

import importlib.util
import subprocess
import sys

import pytest

from tests.helpers import ROOT


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


def test_mypy_finds_no_type_errors_in_the_files_it_checks():
    """mypy over pyproject.toml's ``[tool.mypy] files`` (about 6 s; the training stack is not followed)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.fail("mypy is not installed: pip install -r requirements-dev.txt")
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"mypy (files in pyproject.toml) found:\n{result.stdout}{result.stderr}"
