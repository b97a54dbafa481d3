"""Chat tab: a finished job's base and tuned models answer side by side (picks and thumbs kept as DPO and KTO rows),
and, for a job trained in an environment, the agent arena where both play its episodes.

``layout.py`` / ``arena_layout.py`` lay the widgets out, ``handlers.py`` / ``arena_handlers.py`` hold and wire the
behaviour, ``views.py`` / ``arena_views.py`` shape answers and episodes into what is shown (no Gradio there).
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from backend.api import StudioAPI
from components.chat import arena_handlers, arena_layout, handlers, layout
from components.chat.arena_layout import ARENA_CSS
from components.chat.layout import EXPORT_CSS, EXPORT_HOLD_JS

__all__ = ["ARENA_CSS", "EXPORT_CSS", "EXPORT_HOLD_JS", "ChatHandles", "build"]


@dataclass
class ChatHandles:
    """What the page needs of the Chat tab."""

    job: gr.Dropdown
    base: gr.Chatbot
    tuned: gr.Chatbot


def build(api: StudioAPI) -> ChatHandles:
    """Lay the Chat tab out (the chat, then the arena under it) and wire it."""
    chat = layout.lay_out()
    handlers.wire(api, chat)
    arena = arena_layout.lay_out()
    arena_handlers.wire(api, arena, chat.job)
    return ChatHandles(job=chat.job, base=chat.chats["base"], tuned=chat.chats["tuned"])
