"""The spec is the ground floor: it imports no backend module above it, so every other module may build on it.

Allowed below it (the ground floor): ``backend.hub`` (Hub names and switches), ``backend.demo_model`` (the built-in
model's name) and what those import themselves, ``backend.builtin_datasets`` (the shipped samples' catalogue). None
of them imports a backend module outside this set, which the test checks too, so nothing above leaks in through them.
"""

from __future__ import annotations

import ast
from pathlib import Path

from backend.environments.registry import BUILTIN_ENVIRONMENTS
from backend.spec import BUILTIN_ENVIRONMENT_NAMES, SpecError, parse_spec
from tests.conftest import tiny_spec

ROOT = Path(__file__).resolve().parent.parent
GROUND_FLOOR = {"backend.hub", "backend.demo_model", "backend.builtin_datasets"}


def backend_imports(module: str) -> set[str]:
    """Every backend module ``module`` imports, at the top or inside a function, by the AST of its file."""
    tree = ast.parse((ROOT / (module.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                found.add(f"relative import of {node.module}")  # the backend uses absolute imports only
            elif node.module == "backend":
                found |= {f"backend.{alias.name}" for alias in node.names}
            else:
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return {name for name in found if name.startswith(("backend", "relative"))}


def test_spec_imports_only_the_ground_floor():
    assert backend_imports("backend.spec") <= GROUND_FLOOR, backend_imports("backend.spec") - GROUND_FLOOR


def test_the_ground_floor_imports_nothing_above_it():
    for module in GROUND_FLOOR:
        assert backend_imports(module) <= GROUND_FLOOR, (module, backend_imports(module) - GROUND_FLOOR)


def test_the_walk_sees_imports_inside_functions():
    # The old spec imported backend.environments inside its validators; the walk must catch that form.
    tree_text = "def f():\n    from backend.environments.registry import X\n"
    tree = ast.parse(tree_text)
    assert any(isinstance(n, ast.ImportFrom) and n.module == "backend.environments.registry" for n in ast.walk(tree))


def test_the_registry_and_the_spec_name_the_same_built_in_environments():
    assert tuple(BUILTIN_ENVIRONMENTS) == BUILTIN_ENVIRONMENT_NAMES


def test_environment_names_are_judged_as_before():
    def problems(name: str, **environment) -> list[str]:
        try:
            parse_spec(
                tiny_spec(
                    method="grpo",
                    dataset={"source": "builtin", "name": "echo-demo"},
                    training={"batch_size": 4},
                    grpo={"num_generations": 2},
                    environment={"name": name, **environment},
                )
            )
        except SpecError as exc:
            return exc.problems
        return []

    assert problems("builtin:echo") == [] and problems("openenv/echo_env") == []
    assert problems("http://127.0.0.1:8000") == [] and problems("  builtin:wordle ") == []
    assert problems("builtin:chess") == [
        "environment.name: unknown built-in environment; the built-ins are builtin:echo, builtin:wordle, "
        "builtin:arithmetic (got 'builtin:chess')"
    ]
    assert problems("a/b/c") == [
        "environment.name: 'a/b/c' is not an environment: give a Hub Space id (owner/name), an http(s) URL, or a "
        "built-in name such as builtin:echo (got 'a/b/c')"
    ]
    assert problems("builtin:echo", observation_template="{board!r}") == [
        "environment.observation_template: {board} is not a plain field name: use {board}, {message} and the like "
        "(got '{board!r}')"
    ]
