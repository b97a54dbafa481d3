"""The house's import rules, checked on the source: packages stacked in tiers, imports only downward, no cycles, and
processes started only on the modules meant to be run.

Every import counts, at module level or inside a function or class, and so does ``importlib.import_module`` (or
``__import__``) of a literal name or an f-string's literal prefix; ``from package import name`` is an import of the
module ``package.name`` where there is one, else of the package's ``__init__`` (a module importing its own package
included, so a loop through an ``__init__`` is a cycle). A module may import its own package's modules and anything in
a lower tier; a package of the same tier is a sideways import and anything higher an upward one, and a loop between
modules is a cycle even inside one package. The UI (``components/``, ``app.py``) stands on top and reaches the backend
only through its facade, ``backend.api``; so does the other door, the command line (``backend/cli/``). A process
started on one of the project's modules (``python -m``, a launcher's module name) starts on one of ``PROCESS_SEAMS``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import ROOT
from tests.helpers.source import functions

# Bottom-up, in tiers read off the import graph: a package imports only packages of lower tiers, never one of its own
# tier. A module belongs to the longest package its dotted name starts with.
TIERS: tuple[tuple[str, ...], ...] = (
    ("backend.core",),
    ("backend.platform", "backend.models", "backend.environments.builtin"),
    ("backend.jobs", "backend.methods", "backend.environments"),
    ("backend.data", "backend.chat"),
    ("backend.training",),
    ("backend.hub",),
    ("backend.workflows",),
    ("backend.api",),
    ("backend.cli",),  # the command line: through the facade only, like the UI (DOORS)
    ("backend",),  # the entry points: worker, worker_pool, remote_job, __main__
)
PACKAGES: tuple[str, ...] = tuple(package for tier in TIERS for package in tier)
# The modules the project starts processes on, and why: anything else run as a process is a new seam to name here.
PROCESS_SEAMS: dict[str, str] = {
    "backend.worker": "one training job, started by the scheduler (fresh, forked by the pool, or under accelerate)",
    "backend.worker_pool": "the pool that forks pre-imported workers",
    "backend.jobs.scheduler": "the detached scheduler that serves the queue when no app does",
    "backend.remote_job": "a job on Hugging Face Jobs (which re-executes itself under the job's interpreter)",
    "backend.workflows.gguf_child": "llama.cpp's GGUF converter, in the trainer's interpreter with a time limit",
    "backend.data.uploads": "an uploaded dataset read under memory and time limits",
    "backend.training.reward_checks": "a reward model loaded for a check or the bench, under memory and time limits",
    "backend.environments.builtin": "the entry that serves one of the three below, with Gradio unimportable",
    "backend.environments.builtin.echo": "a built-in OpenEnv server",
    "backend.environments.builtin.wordle": "a built-in OpenEnv server",
    "backend.environments.builtin.arithmetic": "a built-in OpenEnv server",
}
FACADE = "backend.api"
UI = ("components", "app")
# The doors, whose modules reach the backend only through FACADE (and their own package): the UI and the command line.
DOORS: dict[str, str] = {"components": "the UI", "app": "the UI", "backend.cli": "the CLI"}


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

    ``from a import b`` yields ``a.b`` (b may be a module) and the caller resolves it to the longest known module, so
    a name from a package's ``__init__`` is an import of the package.
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
            # ``a.b`` resolves to the module ``a.b`` where there is one, else to ``a`` (a name from its ``__init__``).
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


def package_of(module: str) -> str:
    """The entry of ``PACKAGES`` a backend module belongs to (the longest its name starts with), or its UI top."""
    if module.split(".")[0] in UI:
        return module.split(".")[0]
    return max((entry for entry in PACKAGES if module == entry or module.startswith(entry + ".")), key=len)


def tier_of(module: str) -> int:
    """Index of the module's tier in ``TIERS`` (UI modules sit above all)."""
    package = package_of(module)
    return len(TIERS) if package in UI else next(i for i, tier in enumerate(TIERS) if package in tier)


def door_of(module: str) -> str | None:
    """The door (``DOORS``) a module belongs to, or None for the rest of the backend."""
    return next((door for top, door in DOORS.items() if module == top or module.startswith(f"{top}.")), None)


def import_graph(known: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the project modules it imports (itself left out; its own package's ``__init__`` counts)."""
    graph: dict[str, set[str]] = {}
    for module, path in known.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = {resolve(name, known) for name in imported_names(path.read_text(encoding="utf-8"), package)}
        graph[module] = {t for t in targets if t and t != module}
    return graph


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of a higher tier, and of the backend past its facade by a door (the UI, the CLI)."""
    found = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if tier_of(target) > tier_of(module):
                found.append(f"{module} -> {target}")
            elif (door := door_of(module)) and target.startswith("backend") and target != FACADE:
                if door_of(target) != door:
                    found.append(f"{module} -> {target} ({door} reaches the backend through {FACADE} only)")
    return found


def sideways_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import of another package of the same tier."""
    return [
        f"{module} -> {target} (both in tier {tier_of(module)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if module.split(".")[0] not in UI
        and tier_of(target) == tier_of(module)
        and package_of(target) != package_of(module)
    ]


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def process_targets(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) for every literal module name ``source`` hands to a new process: after ``-m`` or ``--module``
    in an argv list, as a launcher call's first argument or ``module=``, as a ``*_MODULE`` constant, or as the first
    item of a returned ``(module, args)``. Names given to ``import_module`` / ``__import__`` are imports, not runs."""
    for node in ast.walk(ast.parse(source)):
        candidates: list[ast.expr] = []
        if isinstance(node, (ast.List, ast.Tuple)):
            candidates = [cur for prev, cur in zip(node.elts, node.elts[1:]) if _string(prev) in ("-m", "--module")]
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name not in ("import_module", "__import__"):
                candidates = [kw.value for kw in node.keywords if kw.arg == "module"] + node.args[:1]
        elif isinstance(node, ast.Assign):
            if any(isinstance(target, ast.Name) and target.id.endswith("MODULE") for target in node.targets):
                candidates = [node.value]
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Tuple) and node.value.elts:
            candidates = node.value.elts[:1]
        for candidate in candidates:
            name = _string(candidate)
            if name and name.split(".")[0] in ("backend", *UI):
                yield candidate.lineno, name


def unlisted_processes(known: dict[str, Path]) -> list[str]:
    """``where: module`` for every process started on a project module that is not one of ``PROCESS_SEAMS``."""
    return [
        f"{module}:{line} starts {target}"
        for module, path in sorted(known.items())
        for line, target in sorted(process_targets(path.read_text(encoding="utf-8")))
        if target not in PROCESS_SEAMS
    ]


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
            assert top in PACKAGES or module.count(".") == 1, f"{module}: its package is not in TIERS"
    entry_points = sorted(m for m in graph if package_of(m) == "backend" and m != "backend")
    assert entry_points == [
        "backend.__main__",
        "backend.remote_job",
        "backend.worker",
        "backend.worker_pool",
    ]


def test_imports_only_run_downward(graph):
    assert upward_imports(graph) == []


def test_no_package_imports_one_of_its_own_tier(graph):
    assert sideways_imports(graph) == []


def test_no_import_cycles(graph):
    assert cycles(graph) == []


def test_processes_start_only_on_the_listed_seams():
    known = sources("backend", *UI)
    assert unlisted_processes(known) == []
    started = {target for path in known.values() for _, target in process_targets(path.read_text(encoding="utf-8"))}
    assert started == set(PROCESS_SEAMS), "a seam no code starts any more leaves the list"
    for seam in PROCESS_SEAMS:
        path = known[seam]
        if path.name == "__init__.py":  # a package runs as -m through its __main__
            path = path.with_name("__main__.py")
        assert 'if __name__ == "__main__"' in path.read_text(encoding="utf-8"), f"{seam} cannot run as -m"


def test_no_tab_imports_another_tab(graph):
    """What crosses tabs is wired by the page (app.py) or goes through a Gradio-free module (the job pickers, a tab's
    views or form): no module of one tab's folder imports another tab's Gradio side (its package, layout, handlers)."""
    tabs = {m for m in graph if m.startswith("components.") and f"{m}.layout" in graph}
    assert tabs == {"components.train", "components.jobs", "components.chat"}
    known = sources(*UI)

    def tab_of(module: str) -> str | None:
        return next((tab for tab in tabs if module == tab or module.startswith(f"{tab}.")), None)

    gradio_side = {m for m in graph if tab_of(m) and "import gradio" in known[m].read_text(encoding="utf-8")}
    assert {f"{tab}.{part}" for tab in tabs for part in ("layout", "handlers")} | tabs <= gradio_side
    crossings = {
        (module, other)
        for module in graph
        if tab_of(module)
        for other in graph[module] & gradio_side
        if tab_of(other) != tab_of(module)
    }
    assert crossings == set()


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
        "backend.cli.jobs": {"backend.api", "backend.cli.common", "backend.core.spec"},  # the CLI, past the facade
        "components.jobs.views": {"backend.cli.records"},  # one door through the other
    }
    assert upward_imports(graph) == [
        "backend.cli.jobs -> backend.core.spec (the CLI reaches the backend through backend.api only)",
        "backend.core.spec -> backend.jobs.store",
        "components.jobs.views -> backend.cli.records (the UI reaches the backend through backend.api only)",
        "components.train_tab -> backend.jobs.store (the UI reaches the backend through backend.api only)",
    ]
    assert cycles(graph) == [["backend.methods.sft", "backend.methods.table"]]


def test_the_checker_fails_on_a_sideways_import():
    graph = {
        "backend.jobs.store": {"backend.methods.table"},  # jobs and methods share a tier
        "backend.methods.table": {"backend.methods.sft", "backend.core.spec"},  # its own package, a lower tier
        "backend.environments.adapter": {"backend.environments.builtin.registry"},  # a lower tier inside a package
    }
    assert sideways_imports(graph) == ["backend.jobs.store -> backend.methods.table (both in tier 2)"]
    assert upward_imports(graph) == []


def test_the_checker_fails_on_a_process_started_off_the_seams(tmp_path):
    (tmp_path / "backend").mkdir()
    (tmp_path / "backend" / "rogue.py").write_text(
        """
import subprocess, sys
subprocess.run([sys.executable, "-m", "backend.chat.feedback"])
subprocess.run([sys.executable, "-m", "backend.worker"])
spawn_backend_process("backend.hub.publish", [], log)
importlib.import_module("backend.chat.feedback")  # an import, not a run
"""
    )
    known = {"backend.rogue": tmp_path / "backend" / "rogue.py"}
    assert unlisted_processes(known) == [
        "backend.rogue:3 starts backend.chat.feedback",
        "backend.rogue:5 starts backend.hub.publish",
    ]


def test_the_checker_counts_an_import_of_the_own_package(tmp_path):
    package = tmp_path / "backend" / "methods"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from backend.methods.table import table\n\nNAMES = ('sft',)\n")
    (package / "table.py").write_text("from backend.methods import sft\n\ndef table(): ...\n")
    (package / "sft.py").write_text("from backend.methods import NAMES  # a name of its own package's __init__\n")
    known = {
        "backend.methods": package / "__init__.py",
        "backend.methods.table": package / "table.py",
        "backend.methods.sft": package / "sft.py",
    }
    graph = import_graph(known)
    assert graph["backend.methods.table"] == {"backend.methods.sft"}  # a module of the package, not its __init__
    assert graph["backend.methods.sft"] == {"backend.methods"}
    assert cycles(graph) == [["backend.methods", "backend.methods.sft", "backend.methods.table"]]


# The size of a room: a module a reader holds in their head, a function they read on one screen and a half.
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 120


def oversized(paths: dict[str, Path]) -> list[str]:
    """Every module over ``MAX_MODULE_LINES`` lines and every function over ``MAX_FUNCTION_LINES``, by name."""
    found = []
    for name, path in sorted(paths.items()):
        text = path.read_text()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{name}: {lines} lines")
        for node in functions(ast.parse(text)):
            if (length := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                found.append(f"{name}.{node.name}: {length} lines")
    return found


def test_no_room_is_too_big():
    assert oversized(sources("backend", "components")) == []


def test_the_size_check_names_a_long_function_and_a_long_module(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def handler():\n{body}\n" + "\n" * MAX_MODULE_LINES)
    assert oversized({"long": tmp_path / "long.py"}) == [
        f"long: {MAX_FUNCTION_LINES + 1 + MAX_MODULE_LINES} lines",
        f"long.handler: {MAX_FUNCTION_LINES + 1} lines",
    ]
