"""The house's one import rule, checked on the source: packages stacked bottom-up, imports only downward, no cycles.

Every import counts, at module level or inside a function or class, and so does ``importlib.import_module`` (or
``__import__``) of a literal name or an f-string's literal prefix. A module may import its own package's modules and
anything in a lower layer; anything higher is an upward import, and a loop between modules is a cycle even inside
one package. The UI (``components/``, ``app.py``) stands on top and reaches the backend only through its facade,
``backend.api``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT

# Bottom-up. A module belongs to the longest entry its dotted name starts with.
LAYERS: tuple[str, ...] = (
    "backend.core",
    "backend.platform",
    "backend.models",
    "backend.jobs",
    "backend.environments.builtin",
    "backend.environments",
    "backend.methods",
    "backend.data",
    "backend.training",
    "backend.hub",
    "backend.chat",
    "backend.workflows",
    "backend.api",
    "backend",  # the entry points: cli, worker, worker_pool, remote_job, __main__
)
FACADE = "backend.api"
UI = ("components", "app")


def module_name(path: Path) -> str:
    """``backend/core/spec.py`` -> ``backend.core.spec``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def sources(*tops: str) -> dict[str, Path]:
    """Every module under the given top-level folders (or ``name.py`` files), by dotted name."""
    found: dict[str, Path] = {}
    for top in tops:
        if (ROOT / f"{top}.py").is_file():
            found[top] = ROOT / f"{top}.py"
        for path in sorted((ROOT / top).rglob("*.py")) if (ROOT / top).is_dir() else ():
            found[module_name(path)] = path
    return found


def _literal_prefix(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
        return str(node.values[0].value).rstrip(".")
    return None


def imported_names(source: str, package: str) -> Iterator[str]:
    """Every dotted name ``source`` (the module ``package``'s code) imports, by any of the forms the rule counts.

    ``from a import b`` yields ``a.b`` (b may be a module) and the caller resolves it to the longest known module.
    """
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                prefix = _literal_prefix(node.args[0])
                if prefix:
                    yield prefix


def resolve(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module ``name`` starts with, or None when it is not ours."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in known:
            return candidate
    return None


def layer_of(module: str) -> int:
    """Index of the module's layer in ``LAYERS`` (UI modules sit above all)."""
    if module.split(".")[0] in UI:
        return len(LAYERS)
    best = max((entry for entry in LAYERS if module == entry or module.startswith(entry + ".")), key=len)
    return LAYERS.index(best)


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (itself and its own package's ``__init__`` left out)."""
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = {resolve(name, known) for name in imported_names(path.read_text(encoding="utf-8"), package)}
        ancestors = {".".join(module.split(".")[:i]) for i in range(1, module.count(".") + 1)}
        graph[module] = {t for t in targets if t and t != module and t not in ancestors}
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a higher layer, and of the backend past its facade by the UI."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if layer_of(target) > layer_of(module):
                found.append(f"{module} -> {target}")
            elif module.split(".")[0] in UI and target.startswith("backend") and target != FACADE:
                found.append(f"{module} -> {target} (the UI reaches the backend through {FACADE} only)")
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(sources("backend", *UI))


def test_every_backend_module_belongs_to_a_declared_layer(graph):
    for module in graph:
        if module.startswith("backend."):
            top = ".".join(module.split(".")[:2])
            assert top in LAYERS or module.count(".") == 1, f"{module}: its package is not in LAYERS"
    entry_points = sorted(m for m in graph if layer_of(m) == LAYERS.index("backend") and m != "backend")
    assert entry_points == [
        "backend.__main__",
        "backend.cli",
        "backend.remote_job",
        "backend.worker",
        "backend.worker_pool",
    ]


def test_imports_only_run_downward(graph):
    assert upward_imports(graph) == []


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_no_tab_imports_another_tab(graph):
    """What crosses tabs is wired by the page (app.py) or goes through a Gradio-free module (the job pickers)."""
    tabs = {m for m in graph if m.startswith("components.") and m.endswith("_tab")}
    assert len(tabs) == 3
    assert {(tab, other) for tab in tabs for other in graph[tab] & tabs} == set()


def test_every_package_says_its_job_in_one_line():
    for init in sorted((ROOT / "backend").rglob("__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8")))
        assert doc, f"{init.relative_to(ROOT)} has no docstring"


def test_the_checker_sees_every_form_of_import(tmp_path):
    source = """
import backend.jobs.store
from backend.core import spec
from . import sibling
from ..data import loading

def handler():
    from backend.hub.hf_jobs import RemoteJobError
    import importlib
    importlib.import_module(f"backend.methods.{name}")
    __import__("backend.chat.feedback")

class Tab:
    def method(self):
        from backend.api import StudioAPI
"""
    names = set(imported_names(source, "backend.training"))
    assert {
        "backend.jobs.store",
        "backend.core.spec",
        "backend.training.sibling",
        "backend.data.loading",
        "backend.hub.hf_jobs.RemoteJobError",
        "backend.methods",
        "backend.chat.feedback",
        "backend.api.StudioAPI",
    } <= names


def test_the_checker_fails_on_an_upward_import_and_a_cycle():
    graph = {
        "backend.core.spec": {"backend.jobs.store"},  # up
        "backend.methods.table": {"backend.methods.sft"},
        "backend.methods.sft": {"backend.methods.table"},  # a loop inside one package
        "components.train_tab": {"backend.jobs.store"},  # past the facade
    }
    assert upward_imports(graph) == [
        "backend.core.spec -> backend.jobs.store",
        "components.train_tab -> backend.jobs.store (the UI reaches the backend through backend.api only)",
    ]
    assert cycles(graph) == [["backend.methods.sft", "backend.methods.table"]]
