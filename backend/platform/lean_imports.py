"""Keeps transformers from importing scikit-learn, which it loads for a feature the studio never uses.

``transformers.generation.candidate_generator`` imports ``sklearn.metrics`` (and scipy under it) at its top whenever
scikit-learn is installed, to calibrate an assistant model's confidence threshold in assisted generation. Every
process that imports transformers' generation code imports it: an app's first submit (the pre-flight's tokenizer) or
chat, each command-line submit, each worker. lm_eval needs scikit-learn installed, so it is. The studio never runs
assisted generation, and about a second of each such process went to that import (0.4 to 2.4 CPU s over runs of
``benchmarks/imports.py``).

``install`` (run by ``backend/__init__.py``, before anything imports transformers) makes that one module import as
if scikit-learn were absent, which is what transformers does on a machine without it: assisted generation then skips
the calibration. Nothing else changes: ``transformers.utils.is_sklearn_available`` answers as before once the module
is imported, and scikit-learn stays importable for lm_eval, which imports it itself when a task needs it.
"""

from __future__ import annotations

import sys
from importlib.abc import Loader, MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder

# The only module of transformers that imports scikit-learn as it is imported.
SKLEARN_IMPORTER = "transformers.generation.candidate_generator"


def _absent() -> bool:
    return False


class _AsIfAbsent(Loader):
    """Runs the module with ``transformers.utils.is_sklearn_available`` answering False, then puts it back."""

    def __init__(self, loader: Loader) -> None:
        self.loader = loader

    def create_module(self, spec: ModuleSpec):
        return self.loader.create_module(spec)

    def exec_module(self, module) -> None:
        utils = sys.modules.get("transformers.utils")
        real = getattr(utils, "is_sklearn_available", None)
        if real is not None:
            utils.is_sklearn_available = _absent  # type: ignore[union-attr]
        try:
            self.loader.exec_module(module)
        finally:
            if real is not None:
                utils.is_sklearn_available = real  # type: ignore[union-attr]


class _Finder(MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != SKLEARN_IMPORTER:
            return None
        spec = PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _AsIfAbsent(spec.loader)
        return spec


def install() -> None:
    """Import transformers' candidate generator without scikit-learn, from now on in this process (once)."""
    if not any(isinstance(finder, _Finder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
