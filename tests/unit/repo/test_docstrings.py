"""Every public class and function of the backend says in one line what it is (an AST walk of backend/)."""

import ast
from pathlib import Path

from tests.helpers import ROOT

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_accessor(node: ast.AST) -> bool:
    # A property's setter or deleter shares the getter's docstring; a typing overload, the implementation's.
    return any(
        (isinstance(d, ast.Attribute) and d.attr in ("setter", "deleter"))
        or (isinstance(d, ast.Name) and d.id == "overload")
        for d in getattr(node, "decorator_list", [])
    )


def public_definitions(path: Path, root: Path = ROOT) -> list[tuple[str, ast.AST]]:
    """The module's public top-level classes and functions and the public methods of its public classes."""
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    found = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if not isinstance(node, _DEFS) or node.name.startswith("_") or _is_accessor(node):
            continue
        found.append((f"{module}:{node.name}", node))
        if isinstance(node, ast.ClassDef):
            found += [
                (f"{module}:{node.name}.{item.name}", item)
                for item in node.body
                if isinstance(item, _DEFS[:2]) and not item.name.startswith("_") and not _is_accessor(item)
            ]
    return found


def undocumented(paths, root: Path = ROOT) -> list[str]:
    """module:name of every public definition in ``paths`` without a docstring."""
    return [name for path in paths for name, node in public_definitions(path, root) if ast.get_docstring(node) is None]


def test_every_public_definition_of_the_backend_has_a_docstring():
    missing = undocumented(sorted((ROOT / "backend").rglob("*.py")))
    listing = "\n".join(missing)
    assert not missing, f"public definitions without a docstring (say in one line what each does or is):\n{listing}"


def test_the_walk_finds_functions_classes_and_methods_but_not_private_ones(tmp_path):
    source = tmp_path / "pkg" / "mod.py"
    source.parent.mkdir()
    source.write_text('''
def bare(): pass
def told():
    """Told."""
def _private(): pass
class Thing:
    def method(self): pass
    def _helper(self): pass
    @property
    def size(self):
        """Size."""
    @size.setter
    def size(self, value): pass
class _Hidden:
    def method(self): pass
''')
    assert [name for name, _ in public_definitions(source, tmp_path)] == [
        "pkg.mod:bare",
        "pkg.mod:told",
        "pkg.mod:Thing",
        "pkg.mod:Thing.method",
        "pkg.mod:Thing.size",
    ]
    assert undocumented([source], tmp_path) == ["pkg.mod:bare", "pkg.mod:Thing", "pkg.mod:Thing.method"]
