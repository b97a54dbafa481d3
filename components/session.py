"""The user behind a Gradio request: the OAuth profile on a Space, the local user elsewhere."""

from __future__ import annotations

import gradio as gr

from backend.space_runtime import on_space
from backend.users import User, hub_user, local_user


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
        raise gr.Error("Sign in with Hugging Face first (button at the top right).")
    return user
