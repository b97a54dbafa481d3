"""The examples in the backend's docstrings hold: doctest runs every backend module that has one."""

import doctest
import importlib

import pytest

from tests.helpers import ROOT

BACKEND = ROOT / "backend"


def _modules_with_examples() -> list[str]:
    # Only modules whose source has an example are imported: the built-in environment servers import openenv (and
    # with it gradio), and a module without examples has nothing to run.
    names = []
    for path in sorted(BACKEND.rglob("*.py")):
        if path.name != "__main__.py" and ">>> " in path.read_text(encoding="utf-8"):
            names.append(".".join(path.relative_to(BACKEND.parent).with_suffix("").parts))
    return names


MODULES = _modules_with_examples()


def test_the_backend_has_examples_to_run():
    assert len(MODULES) >= 10, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_the_examples_hold(name):
    results = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert results.attempted > 0, f"{name} has '>>> ' in its source but no example doctest can find"
    assert results.failed == 0, f"{results.failed} example(s) of {name} failed (doctest printed them above)"
