"""Header: who is signed in (Hugging Face on a Space, the local user elsewhere), the device and the Hub."""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from backend.hardware import detect_device
from backend.hub_status import hub_status
from components.session import on_space, user_from


@dataclass
class HeaderHandles:
    status: gr.Markdown
    login: gr.LoginButton | None


def status_text(profile: gr.OAuthProfile | None = None, token: gr.OAuthToken | None = None) -> str:
    user = user_from(profile, token)
    who = (f"Signed in as **{user.name}**" + (" (admin)" if user.is_admin and on_space() else "")) if user else \
        "Not signed in: sign in with Hugging Face to train"
    device = detect_device()
    where = device.describe() if device.kind == "cuda" else f"{device.describe()}: small models and the demo model only"
    shared = " · shared Space: duplicate it to train on your own GPU" if on_space() and os.environ.get(
        "SPACE_AUTHOR_NAME") and not user else ""
    return f"{who} · Device: {where} · {hub_status()}{shared}"


def build() -> HeaderHandles:
    with gr.Row(equal_height=True):
        gr.Markdown("# Post-Training Studio\nSFT, DPO and GRPO (with OpenEnv environments) for open LLMs, "
                    "with LoRA and 4-bit loading.", elem_id="title")
        login = gr.LoginButton() if on_space() else None
    status = gr.Markdown(elem_id="header-status")
    return HeaderHandles(status=status, login=login)
