"""The agent arena's widgets, under the chat, held in ``ArenaLayout`` (no behaviour: arena_handlers.py wires it).
Its two transcript panes are built in one loop over the sides, as the chat's are."""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from components.chat.arena_views import transcript_html
from components.chat.views import SIDES

BASE_CHOICES = [("Base model (adapter off)", "base"), ("Parent job's adapter (where this job started)", "parent")]
SAMPLING_CHOICES = [("Greedy, as the job's evaluation", "greedy"), ("Sampled, as in training", "training")]
# Where episode i starts: row i of the job's dataset rows (its evaluation's, held out or not), or task i of the
# environment's held-out test split. The pick follows what the job's own evaluation played (arena_handlers.on_job).
SOURCE_CHOICES = [("The job's dataset rows (row i)", "rows"), ("The environment's test split (task i)", "test")]
TABLE_HEADERS = ["episode", "seed", "row", "base", "tuned", "turns (base/tuned)", "tool calls (base/tuned)"]
# The transcripts' look (app.py adds it to the page's CSS): a tool call and a tool's answer read as blocks of their own.
ARENA_CSS = """
.arena-transcript { font-size: 0.92em; }
.arena-who { font-weight: 600; margin-bottom: 4px; }
.arena-transcript > div { border-radius: 6px; padding: 6px 8px; margin: 6px 0; }
.arena-title { font-weight: 600; }
.arena-transcript pre { white-space: pre-wrap; word-break: break-word; margin: 4px 0 0; }
.arena-text { background: rgba(99, 102, 241, 0.06); }
.arena-call { border-left: 4px solid #6366f1; background: rgba(99, 102, 241, 0.12); }
.arena-tool { border-left: 4px solid #0d9488; background: rgba(13, 148, 136, 0.10); }
.arena-end { border-left: 4px solid #64748b; background: rgba(100, 116, 139, 0.10); }
.arena-lost { border-left: 4px solid #b91c1c; background: rgba(185, 28, 28, 0.08); }
.arena-reasoning { color: #64748b; }
"""
ARENA_HINT = "Pick a job trained in an environment (GRPO with an OpenEnv environment) to watch both models play it."
PANE_TITLES = {"base": "Base", "tuned": "Tuned"}  # a pane's heading before anything is played


@dataclass
class ArenaLayout:
    """Every widget of the arena; the panes and "played better" buttons keyed by side ("base", "tuned")."""

    panel: gr.Accordion
    info: gr.Markdown
    base_choice: gr.Radio
    sampling: gr.Radio
    row: gr.Number
    first: gr.Textbox
    source: gr.Radio
    play_one: gr.Button
    count: gr.Number
    play_many: gr.Button
    summary: gr.Markdown
    panes: dict[str, gr.HTML]
    shown: gr.Markdown
    better: dict[str, gr.Button]
    export: gr.DownloadButton
    judged: gr.Markdown
    table: gr.Dataframe
    pairs: gr.State  # the last play's pairs, as plain data
    current: gr.State  # the episode number shown

    @property
    def played(self) -> list:
        """What a play (and a link) draws: summary, the two panes, the table, the pairs, the note and episode."""
        return [self.summary, *self.panes.values(), self.table, self.pairs, self.shown, self.current]


def lay_out() -> ArenaLayout:
    """The arena's section, hidden until a job that played an environment is picked."""
    parts: dict = {}
    with gr.Accordion(
        "Agent arena: both models play the job's environment", open=True, visible=False, elem_id="arena"
    ) as parts["panel"]:
        parts["info"] = gr.Markdown(ARENA_HINT, elem_id="arena-info")
        with gr.Row():
            parts["base_choice"] = gr.Radio(BASE_CHOICES, value="base", label="Left side", elem_id="arena-base-choice")
            parts["sampling"] = gr.Radio(SAMPLING_CHOICES, value="greedy", label="Sampling", elem_id="arena-sampling")
        with gr.Row():
            parts["source"] = gr.Radio(SOURCE_CHOICES, value="rows", label="Episodes from", elem_id="arena-source")
            parts["row"] = gr.Number(
                0, precision=0, label="Row or test task (episode i plays row or task i)", elem_id="arena-row"
            )
            parts["first"] = gr.Textbox(
                label="First message (optional: replaces the row's prompt; the environment resets on the row)",
                elem_id="arena-first-message",
                scale=3,
            )
        with gr.Row():
            parts["play_one"] = gr.Button("Play", variant="primary", elem_id="arena-play")
            parts["count"] = gr.Number(8, precision=0, label="Episodes per side", elem_id="arena-count", scale=0)
            parts["play_many"] = gr.Button("Play N", elem_id="arena-play-n")
        parts["summary"] = gr.Markdown(elem_id="arena-summary")
        with gr.Row():
            parts["panes"] = {
                side: gr.HTML(transcript_html(None, PANE_TITLES[side]), elem_id=f"arena-{side}") for side in SIDES
            }
        parts["shown"] = gr.Markdown(elem_id="arena-shown")
        with gr.Row():
            parts["better"] = {
                "base": gr.Button("⬅ Base played better", size="sm", elem_id="arena-base-better"),
                "tuned": gr.Button("Tuned played better ➡", size="sm", elem_id="arena-tuned-better"),
            }
            parts["export"] = gr.DownloadButton(
                "Export episode preferences (DPO .jsonl, with tools)",
                size="sm",
                elem_id="arena-export",
                interactive=False,
            )
        parts["judged"] = gr.Markdown(elem_id="arena-judged")
        parts["table"] = gr.Dataframe(
            headers=TABLE_HEADERS,
            value=[],
            interactive=False,
            wrap=True,
            label="Episodes (click a row to open its two transcripts)",
            elem_id="arena-table",
        )
        parts["pairs"] = gr.State([])
        parts["current"] = gr.State(None)
    return ArenaLayout(**parts)
