"""Header: who is signed in (Hugging Face on a Space, the local user elsewhere), the device and the Hub."""

from __future__ import annotations

import os
from dataclasses import dataclass

import gradio as gr

from backend.hardware import detect_device
from backend.hub_status import hub_status
from backend.space_runtime import ZERO_GPU_REFUSAL, on_zero_gpu
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
    return f"{who} · Device: {where} · {hub_status()}" + "".join(f"\n\n⚠️ {n}" for n in notices(user, device))


def notices(user, device) -> list[str]:
    """What a visitor should know before training here: ZeroGPU, a CPU-only Space, or someone else's Space."""
    found = []
    if on_zero_gpu():
        found.append(ZERO_GPU_REFUSAL)
    elif on_space() and device.kind == "cpu":
        found.append("This Space has no GPU: only the demo model and tiny runs are practical. Duplicate it onto "
                     "GPU hardware (Settings -> Hardware) to train real models.")
    owner = os.environ.get("SPACE_AUTHOR_NAME")
    if on_space() and owner and (user is None or user.name != owner):
        found.append(f"This is {owner}'s Space, shared by everyone who opens it: jobs wait in one queue. Duplicate it "
                     "to train on your own hardware, privately.")
    return found


def build() -> HeaderHandles:
    with gr.Row(equal_height=True):
        gr.Markdown("# Post-Training Studio\nSFT, DPO and GRPO (with OpenEnv environments) for open LLMs, "
                    "with LoRA and 4-bit loading.", elem_id="title")
        if on_space():
            gr.DuplicateButton("Duplicate this Space", size="sm")
        login = gr.LoginButton() if on_space() else None
    status = gr.Markdown(elem_id="header-status")
    return HeaderHandles(status=status, login=login)
