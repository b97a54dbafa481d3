"""The built-in environment servers share one skeleton (environments/builtin/serving.py) and keep only their game."""

from __future__ import annotations

import ast
import importlib

import pytest

from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS
from backend.environments.builtin.serving import EnvironmentServer, ServedEnvironment
from tests.helpers import ROOT
from tests.helpers.source import functions

SKELETON = {"build_app", "main", "__getattr__", "state", "get_metadata"}


@pytest.mark.parametrize("name", list(BUILTIN_ENVIRONMENTS))
def test_each_server_is_its_game_on_the_shared_skeleton(name):
    module_name = BUILTIN_ENVIRONMENTS[name].module
    module = importlib.import_module(module_name)
    tree = ast.parse((ROOT / (module_name.replace(".", "/") + ".py")).read_text(encoding="utf-8"))
    written = {node.name for node in functions(tree)}
    assert not written & SKELETON, f"{module_name} writes its own {sorted(written & SKELETON)}"
    server = module.SERVER
    assert isinstance(server, EnvironmentServer) and issubclass(server.environment, ServedEnvironment)
    assert module.build_app == server.build_app and module.main == server.main
    environment = server.environment()
    assert environment.get_metadata().name == name == server.environment.NAME
    assert isinstance(environment.state, server.state) and environment.SUPPORTS_CONCURRENT_SESSIONS
    assert type(module.app).__name__ == "FastAPI"
    with pytest.raises(AttributeError, match=f"module '{module_name}' has no attribute 'nothing'"):
        module.nothing  # noqa: B018


def test_the_command_line_is_checked_before_anything_is_served():
    server = importlib.import_module("backend.environments.builtin.echo").SERVER
    with pytest.raises(SystemExit):
        server.main(["--port", "1", "--max-sessions", "0"])
