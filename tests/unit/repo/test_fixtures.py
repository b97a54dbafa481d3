"""One facade fixture: ``api`` (and ``make_api`` for a variant) live in tests/conftest.py and close what they build; no
test file declares its own ``api``, every fixture that builds a ``StudioAPI`` closes it, and a test file's own
``store`` says in its docstring why the shared one does not serve (an AST walk of tests/).

Thirteen files and more had copied the ``api`` fixture, and several never closed it: each such test left the facade's
threads, sockets and pools running into the tests after it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.helpers import ROOT
from tests.helpers.source import FunctionNode, functions

SHARED = "conftest.py"


def fixtures(tree: ast.AST) -> Iterator[FunctionNode]:
    """Every function (nested ones too) decorated with ``pytest.fixture`` or ``fixture``, called or not."""
    for node in functions(tree):
        for decorator in node.decorator_list:
            named = decorator.func if isinstance(decorator, ast.Call) else decorator
            if ast.unparse(named) in ("pytest.fixture", "fixture"):
                yield node
                break


def unclosed_facades(fixture: FunctionNode) -> list[int]:
    """The lines of each ``StudioAPI(...)`` in the fixture that is not bound to a name whose ``close`` the fixture
    calls or hands on (``name.close()``, ``request.addfinalizer(name.close)``)."""
    closed = {
        node.value.id
        for node in ast.walk(fixture)
        if isinstance(node, ast.Attribute) and node.attr == "close" and isinstance(node.value, ast.Name)
    }
    bound: dict[int, str] = {}  # id of the call: the name it is bound to
    for node in ast.walk(fixture):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            bound[id(node.value)] = node.targets[0].id
    return [
        node.lineno
        for node in ast.walk(fixture)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).split(".")[-1] == "StudioAPI"
        and bound.get(id(node)) not in closed
    ]


def fixture_faults(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line what`` for each fault of the file's fixtures."""
    where = path.relative_to(root).as_posix()
    found: list[tuple[int, str]] = []
    for fixture in fixtures(ast.parse(path.read_text(encoding="utf-8"))):
        if path.name != SHARED and fixture.name == "api":
            found.append((fixture.lineno, "declares its own `api` fixture"))
        if path.name != SHARED and fixture.name == "store" and not ast.get_docstring(fixture):
            found.append((fixture.lineno, "declares its own `store` fixture without a docstring saying why"))
        found += [(line, f"{fixture.name} builds a StudioAPI it never closes") for line in unclosed_facades(fixture)]
    return [f"{where}:{line} {said}" for line, said in sorted(found)]


def suite_files(root: Path = ROOT) -> list[Path]:
    return sorted((root / "tests").rglob("*.py"))


def test_the_facade_fixture_is_declared_once_and_every_facade_a_fixture_builds_is_closed():
    found = [fault for path in suite_files() for fault in fixture_faults(path)]
    listing = "\n".join(found)
    assert not found, (
        "use the `api` fixture of tests/conftest.py, or `make_api(...)` for a variant (it closes each facade it "
        f"builds); close a facade a module fixture builds; say in a file's own `store` why it differs:\n{listing}"
    )


def test_the_walk_finds_copies_unclosed_facades_and_unexplained_stores(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    source = tmp_path / "tests" / "unit" / "test_x.py"
    source.write_text("""
import pytest
from pytest import fixture
from backend import api as backend_api

@pytest.fixture()
def api(paths):
    studio = StudioAPI(paths.root, scheduler="none")
    yield studio
    studio.close()

@fixture(scope="module")
def facade(tmp_path_factory):
    return backend_api.StudioAPI(tmp_path_factory.mktemp("x"))

@pytest.fixture
def job(make_api, request):
    first = StudioAPI("a")
    request.addfinalizer(first.close)
    second = StudioAPI("b")
    yield first, second, make_api()

@pytest.fixture
def store(app):
    return app.store

@pytest.fixture
def store_of_the_app(app):
    return app.store

def helper():
    return StudioAPI("c")
""")
    assert fixture_faults(source, tmp_path) == [
        "tests/unit/test_x.py:7 declares its own `api` fixture",
        "tests/unit/test_x.py:14 facade builds a StudioAPI it never closes",
        "tests/unit/test_x.py:20 job builds a StudioAPI it never closes",
        "tests/unit/test_x.py:24 declares its own `store` fixture without a docstring saying why",
    ]
    conftest = tmp_path / "tests" / SHARED
    conftest.write_text(source.read_text().replace("def store(app):\n", 'def store(app):\n    """The app\'s."""\n'))
    assert fixture_faults(conftest, tmp_path) == [
        "tests/conftest.py:14 facade builds a StudioAPI it never closes",
        "tests/conftest.py:20 job builds a StudioAPI it never closes",
    ]
