"""The spec's rules about built-in names: the registry and the spec agree, and names are judged as before. That the
spec, in ``backend/core/``, imports nothing above it is the layer rule of tests/unit/repo/test_layers.py."""

from __future__ import annotations

from backend.core.spec import BUILTIN_ENVIRONMENT_NAMES, SpecError, parse_spec
from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS
from tests.helpers import tiny_spec


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
