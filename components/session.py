"""The user behind a Gradio request: the OAuth profile on a Space, the local user elsewhere.

Every UI handler receives its user one way: it takes ``user`` as its first parameter after what it is bound to, and is
wired through ``as_user`` (tests/unit/repo/test_user_wiring.py holds ``components/`` to that).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from typing import Any

import gradio as gr

from backend.api import User, hub_user, local_user, on_space

SIGN_IN_FIRST = "Sign in with Hugging Face first (button at the top right)."


def user_from(profile: gr.OAuthProfile | None, token: gr.OAuthToken | None = None) -> User | None:
    """The signed-in user; on a Space, None until they sign in (visitors see nothing and can queue nothing)."""
    if profile is not None:
        return hub_user(profile.username, token.token if token is not None else None)
    if on_space():
        return None
    return local_user()


def require_user(profile: gr.OAuthProfile | None, token: gr.OAuthToken | None = None) -> User:
    """The signed-in user, or ``gr.Error`` with the sign-in sentence for a visitor on a Space."""
    user = user_from(profile, token)
    if user is None:
        raise gr.Error(SIGN_IN_FIRST)
    return user


_POSITIONAL = inspect.Parameter.POSITIONAL_OR_KEYWORD
_FILLED = (  # what Gradio fills by annotation, first, before the handler's own parameters
    inspect.Parameter("profile", _POSITIONAL, annotation=gr.OAuthProfile | None),
    inspect.Parameter("token", _POSITIONAL, annotation=gr.OAuthToken | None),
)


def as_user(handler: Callable[..., Any] | None = None, *, signed_in: bool = True):
    """Turn ``handler(user, *inputs)`` into a Gradio handler that receives the request's user.

    Gradio injects ``gr.OAuthProfile`` / ``gr.OAuthToken`` only into *positional* parameters; a handler that takes
    the form as ``*args`` and the profile keyword-only after it always saw ``None`` (so on a Space every signed-in
    user was told to sign in). The wrapper puts both first, where Gradio fills them, and resolves the user once.
    ``signed_in=True`` refuses visitors with a sentence; ``False`` hands them in as ``None`` (views that show less).

    Gradio reads the wrapper's signature as the handler's own after ``user`` (names, defaults, annotations, return
    type): a ``gr.Request`` or ``gr.SelectData`` parameter there is filled too, gradio_client sees a parameter with a
    None default as optional, a generator still streams, and ``inputs_kwargs`` reach the handler by name.
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def resolve(profile, token) -> User | None:
            return require_user(profile, token) if signed_in else user_from(profile, token)

        if inspect.isgeneratorfunction(fn):

            def call(profile, token, *inputs, **named):
                yield from fn(resolve(profile, token), *inputs, **named)
        else:

            def call(profile, token, *inputs, **named):
                return fn(resolve(profile, token), *inputs, **named)

        signature = inspect.signature(fn)
        _user, *own = signature.parameters.values()
        hints = typing.get_type_hints(fn)
        names = {p.name for p in own} | {"return"}
        call.__signature__ = signature.replace(parameters=[*_FILLED, *own])  # type: ignore[attr-defined]
        call.__annotations__ = {
            **{p.name: p.annotation for p in _FILLED},
            **{k: v for k, v in hints.items() if k in names},
        }
        # Name and doc only: copying __wrapped__ would make Gradio read the inner signature, with ``user``, again.
        call.__name__, call.__qualname__, call.__doc__ = fn.__name__, fn.__name__, fn.__doc__
        return call

    return wrap(handler) if handler is not None else wrap
