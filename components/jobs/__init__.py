"""Jobs tab: the user's jobs (all of them for an admin), and for the picked one: status, the learning verdict and
GRPO's no-signal warning (live), progress with ETA, one small-multiple plot per metric family, the training log as
rows (raw log one click away), GRPO samples, the before/after evaluation; cancel, resume, clone, push and download,
each enabled only when it makes sense; and a compare view overlaying several jobs' curves.

``layout.py`` lays the widgets out, ``handlers.py`` holds and wires the behaviour, ``views.py`` and ``monitor.py``
shape records into what is shown (no Gradio there).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gradio as gr

from backend.api import StudioAPI
from components.jobs import handlers, layout
from components.jobs.handlers import TrainForm, follow, pause
from components.jobs.layout import JOBS_CSS
from components.session import as_user
from components.wiring import bind

__all__ = ["JOBS_CSS", "JobsHandles", "build", "follow", "pause"]


@dataclass
class JobsHandles:
    """What the page and the other tabs need of the Jobs tab."""

    table: gr.Dataframe
    picker: gr.Dropdown
    summary: gr.Markdown
    refresh: Callable[..., list]  # the whole tab from one read, given the picker's value (the first view on load)
    refreshed: list  # the components ``refresh`` updates, in its order
    timer: gr.Timer  # the tab's live refresh: ``follow`` starts it, ``pause`` stops it (the page wires the other tabs)


def build(api: StudioAPI, train: TrainForm | None = None) -> JobsHandles:
    """Lay the Jobs tab out and wire it (``train``: the Train tab's form, which Clone fills)."""
    h = layout.lay_out(api)
    handlers.wire(api, h, train)
    return JobsHandles(
        table=h.table,
        picker=h.picker,
        summary=h.summary,
        refresh=as_user(bind(handlers.refresh, api, h), signed_in=False),
        refreshed=h.refreshed,
        timer=h.timer,
    )
