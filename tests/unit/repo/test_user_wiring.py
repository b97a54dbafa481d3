"""One way in for the user: no UI handler takes a ``gr.OAuthProfile`` / ``gr.OAuthToken`` or resolves the user itself;
each takes ``user`` and is wired through ``components.session.as_user`` (an AST walk of ``components/`` and app.py).

Gradio injects the profile and token only into positional parameters it finds by annotation, so a handler that took
them itself beside ``*args`` or keyword-only ones was silently told to sign in; two ways in also meant two ways to
refuse a visitor. ``components/session.py`` alone reads the profile.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import ROOT
from tests.helpers.source import functions

OAUTH = ("OAuthProfile", "OAuthToken")
RESOLVERS = ("require_user", "user_from")  # the profile read into a user: session.py's, for as_user
SESSION = Path("components/session.py")


def own_ways_in(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line function`` for each function (nested ones too) with a parameter annotated as an OAuth profile or
    token, or that calls a resolver of the profile itself."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for function in functions(tree):
        arguments = function.args
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
        taken = [
            f"{argument.arg}: {ast.unparse(argument.annotation)}"
            for argument in filter(None, every)
            if argument.annotation is not None and any(name in ast.unparse(argument.annotation) for name in OAUTH)
        ]
        if taken:
            found.append((function.lineno, f"{function.name}({', '.join(taken)})"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            called = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if called in RESOLVERS:
                found.append((node.lineno, f"calls {called}"))
    return [f"{path.relative_to(root)}:{line} {said}" for line, said in sorted(found)]


def ui_sources(root: Path = ROOT) -> list[Path]:
    """The UI's modules (``components/`` and app.py), less session.py, where the profile is read."""
    return [p for p in [root / "app.py", *sorted((root / "components").rglob("*.py"))] if p != root / SESSION]


def test_no_ui_handler_takes_the_profile_or_resolves_the_user_itself():
    found = [way for path in ui_sources() for way in own_ways_in(path)]
    listing = "\n".join(found)
    assert not found, (
        "take `user` first (after what the handler is bound to) and wire it through components.session.as_user "
        f"(signed_in=False where a visitor sees less) instead:\n{listing}"
    )


def test_the_walk_finds_annotated_parameters_and_resolvers_in_nested_functions(tmp_path):
    (tmp_path / "components").mkdir()
    source = tmp_path / "components" / "tab.py"
    source.write_text("""
import gradio as gr
from typing import Optional

def handler(api, selected, profile: gr.OAuthProfile | None = None):
    return selected

def build(api):
    def inner(*args, token: "gr.OAuthToken | None" = None):
        return args
    def resolved(profile):
        return session.require_user(profile)
    def fine(user, request: gr.Request):
        return user
    return inner, resolved, fine

def optional(api, profile: Optional[gr.OAuthProfile]):
    return user_from(profile)
""")
    assert own_ways_in(source, tmp_path) == [
        "components/tab.py:5 handler(profile: gr.OAuthProfile | None)",
        "components/tab.py:9 inner(token: 'gr.OAuthToken | None')",
        "components/tab.py:12 calls require_user",
        "components/tab.py:17 optional(profile: Optional[gr.OAuthProfile])",
        "components/tab.py:18 calls user_from",
    ]
    (tmp_path / "app.py").write_text("")
    (tmp_path / SESSION).write_text(source.read_text())
    assert [p.name for p in ui_sources(tmp_path)] == ["app.py", "tab.py"]
