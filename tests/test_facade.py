"""The facade is the only door: no component (nor app.py) imports a backend module other than ``backend.api``."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
UI_FILES = sorted((ROOT / "components").glob("*.py")) + [ROOT / "app.py"]


def package_imports(source: str, package: str) -> list[str]:
    """Every module of ``package`` a source imports, at any depth (functions, TYPE_CHECKING blocks, try blocks).

    ``from backend import x`` counts as ``backend.x``: x may be a module.
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] == package]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == package:
                found += [f"{package}.{alias.name}" for alias in node.names]
            elif node.module.split(".")[0] == package:
                found.append(node.module)
    return found


def backend_imports(source: str) -> list[str]:
    """Every backend module a source imports (``package_imports`` of ``backend``)."""
    return package_imports(source, "backend")


def test_the_checker_sees_every_form_of_backend_import():
    source = """
import os
import backend.store
from backend import spec
from backend.api import StudioAPI
from backend.environments.registry import BUILTIN_ENVIRONMENTS
from . import sibling

def handler():
    from backend.hf_jobs import RemoteJobError
    import backend.chat as chat

class Tab:
    def method(self):
        from backend import publish, users
"""
    assert sorted(backend_imports(source)) == sorted(
        [
            "backend.store",
            "backend.spec",
            "backend.api",
            "backend.environments.registry",
            "backend.hf_jobs",
            "backend.chat",
            "backend.publish",
            "backend.users",
        ]
    )


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: p.name)
def test_the_ui_imports_only_the_facade(path):
    others = [name for name in backend_imports(path.read_text()) if name != "backend.api"]
    assert not others, f"{path.relative_to(ROOT)} imports {others}: export what it needs from backend/api.py"


def test_the_facade_exports_what_it_lists():
    import backend.api as api

    missing = [name for name in api.__all__ if not hasattr(api, name)]
    lazy = {name: getattr(api, name) for name in api._LAZY_EXPORTS}  # imported on first use, each resolves
    assert not missing and all(lazy.values())
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018 - the module's __getattr__ refuses unknown names


def test_the_chat_tab_imports_no_other_tab():
    """The finished-job picker both tabs show lives in components/form.py, not in the Train tab."""
    imported = {
        node.module
        for node in ast.walk(ast.parse((ROOT / "components" / "chat.py").read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not imported & {"components.train", "components.jobs", "components.header"}


def test_the_ui_modules_import_each_other_in_no_circle():
    """Tabs may use shared UI modules (form, session, job views), never each other round a circle: type-only and
    in-function imports count too. What crosses tabs is wired by the page (app.py) or through a protocol."""
    graph = {
        f"components.{path.stem}": set(package_imports(path.read_text(), "components")) - {"components"}
        for path in (ROOT / "components").glob("*.py")
    }

    def circle_from(start: str, node: str, path: list[str]) -> list[str] | None:
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return [*path, nxt]
            if nxt not in path:
                found = circle_from(start, nxt, [*path, nxt])
                if found:
                    return found
        return None

    circles = [c for name in sorted(graph) if (c := circle_from(name, name, [name]))]
    assert not circles, f"UI modules import each other in a circle: {' -> '.join(circles[0])}"
