"""Header: who is signed in (Hugging Face on a Space, the local user elsewhere), the device and the Hub."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from backend.api import ZERO_GPU_REFUSAL, detect_device, hub_status, on_zero_gpu
from components.session import as_user, on_space

STATUS_REFRESH_S = 10


@dataclass
class HeaderHandles:
    status: gr.Markdown
    login: gr.LoginButton | None
    refresh: Callable[..., str]  # the status line's handler, also run on page load (api_name "status")


def status_text(user, health, storage: str | None = None, data: str | None = None) -> str:
    """The header line: who is signed in, the device, the Hub, the job queue's health, where data lives (``data``:
    ``StudioAPI.storage_summary()``); then any notices (``storage``: ``StudioAPI.storage_notice()``: a data folder
    that cannot be written, a Space without storage, a durable copy that is behind)."""
    who = (
        (f"Signed in as **{user.name}**" + (" (admin)" if user.is_admin and on_space() else ""))
        if user
        else "Not signed in: sign in with Hugging Face to train"
    )
    device = detect_device()
    where = device.describe() if device.kind == "cuda" else f"{device.describe()}: small models and the demo model only"
    line = f"{who} · Device: {where} · {hub_status()}"
    queue, problem = queue_status(health)
    line += f" · {queue}" if queue else ""
    line += f" · {data}" if data else ""
    found = [*([storage] if storage else []), *([problem] if problem else []), *notices(user, device)]
    return line + "".join(f"\n\n⚠️ {n}" for n in found)


def queue_status(health) -> tuple[str | None, str | None]:
    """(short queue state for the line, a notice when something is wrong) from ``StudioAPI.scheduler_health()``."""
    if health is None:
        return None, None
    if not health.alive:
        return "Queue: stopped", (
            f"The job queue has stopped ({health.last_error or 'no reason recorded'}). Queued "
            "jobs are kept; restart the app (on a Space: Settings -> Restart) to serve them."
        )
    if not health.owns_queue:
        return "Queue: waiting for another scheduler of this data directory", None
    if health.consecutive_failures:
        return "Queue: retrying", f"The job queue hit an error and keeps retrying: {health.last_error}"
    return f"Queue: ok, {health.running} running", None


def notices(user, device) -> list[str]:
    """What a visitor should know before training here: ZeroGPU, a CPU-only Space, or someone else's Space."""
    found = []
    if on_zero_gpu():
        found.append(ZERO_GPU_REFUSAL)
    elif on_space() and device.kind == "cpu":
        found.append(
            "This Space has no GPU: only the demo model and tiny runs are practical. Duplicate it onto "
            "GPU hardware (Settings -> Hardware) to train real models."
        )
    owner = os.environ.get("SPACE_AUTHOR_NAME")
    if on_space() and owner and (user is None or user.name != owner):
        found.append(
            f"This is {owner}'s Space, shared by everyone who opens it: jobs wait in one queue. Duplicate it "
            "to train on your own hardware, privately."
        )
    return found


def build(api) -> HeaderHandles:
    """The header; its status line is filled on page load and refreshed every STATUS_REFRESH_S."""
    with gr.Row(equal_height=True):
        gr.Markdown(
            "# Post-Training Studio\nSFT, DPO, KTO and GRPO (with OpenEnv environments) for open LLMs, "
            "with LoRA and 4-bit loading.",
            elem_id="title",
        )
        if on_space():
            gr.DuplicateButton("Duplicate this Space", size="sm")
        login = gr.LoginButton() if on_space() else None
    status = gr.Markdown(elem_id="header-status")

    @as_user(signed_in=False)
    def refresh(user) -> str:
        return status_text(user, api.scheduler_health(), api.storage_notice(), api.storage_summary())

    refresh.__name__ = "status"
    gr.on([gr.Timer(STATUS_REFRESH_S).tick], refresh, None, status, api_name=False, show_progress="hidden")
    return HeaderHandles(status=status, login=login, refresh=refresh)
