"""The user behind a Gradio request: the OAuth profile on a Space, the local user elsewhere."""

from __future__ import annotations

import inspect
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
    user = user_from(profile, token)
    if user is None:
        raise gr.Error(SIGN_IN_FIRST)
    return user


def as_user(handler: Callable[..., Any] | None = None, *, signed_in: bool = True):
    """Turn ``handler(user, *inputs)`` into a Gradio handler that receives the request's user.

    Gradio injects ``gr.OAuthProfile`` / ``gr.OAuthToken`` only into *positional* parameters; a handler that takes
    the form as ``*args`` and the profile keyword-only after it always saw ``None`` (so on a Space every signed-in
    user was told to sign in). The wrapper puts both first, where Gradio fills them, and resolves the user once.
    ``signed_in=True`` refuses visitors with a sentence; ``False`` hands them in as ``None`` (views that show less).
    """

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        def resolve(profile, token) -> User | None:
            return require_user(profile, token) if signed_in else user_from(profile, token)

        if inspect.isgeneratorfunction(fn):

            def call(profile: gr.OAuthProfile | None, token: gr.OAuthToken | None, *inputs):
                yield from fn(resolve(profile, token), *inputs)
        else:

            def call(profile: gr.OAuthProfile | None, token: gr.OAuthToken | None, *inputs):
                return fn(resolve(profile, token), *inputs)

        # Name and doc only: copying __wrapped__ would make Gradio read the inner signature again.
        call.__name__, call.__doc__ = fn.__name__, fn.__doc__
        return call

    return wrap(handler) if handler is not None else wrap
