"""The Chat tab's widgets, laid out in page order and held in ``ChatLayout`` (no behaviour: handlers.py wires it).
The two sides are built in one loop over ``SIDES``, as FastChat's named arena builds its models' panes."""

from __future__ import annotations

import json
from dataclasses import dataclass

import gradio as gr

from components.chat.views import MODE_CHOICES, PICK_JOB_HINT, SIDES, mode_note, samples

EXPORT_IDS = {"dpo": "export-preferences", "kto": "export-thumbs"}
# Loaded with the page (app.py): a click on an export button while the pick or thumb that rewrites its file is being
# saved is held, and replayed once the new file is on the button (the button stays clickable; it looks busy).
EXPORT_HOLD_JS = f"""
() => {{
    const held = {{saving: new Set(), wanted: new Set()}};
    const ids = {json.dumps(sorted(EXPORT_IDS.values()))};
    window.studioExportSaving = (id) => {{
        held.saving.add(id);
        document.getElementById(id)?.classList.add("studio-saving");
    }};
    window.studioExportSaved = (id) => {{
        held.saving.delete(id);
        const button = document.getElementById(id);
        button?.classList.remove("studio-saving");
        if (held.wanted.delete(id) && button && !button.disabled) button.click();
    }};
    document.addEventListener("click", (event) => {{
        const button = event.target instanceof Element && event.target.closest(ids.map((id) => "#" + id).join(","));
        if (!button || !held.saving.has(button.id) || !event.isTrusted) return;
        event.preventDefault();
        event.stopImmediatePropagation();
        held.wanted.add(button.id);
    }}, true);
}}
"""
EXPORT_CSS = ".studio-saving { opacity: 0.6; cursor: progress; }"


@dataclass(frozen=True)
class SideLook:
    """How one side of the chat reads on the page: its heading, and the hand its buttons' ids are named after."""

    title: str
    hand: str  # "left" / "right": the elem_ids' prefix
    better: str  # the label of its "is better" button


SIDE_LOOKS = {
    "base": SideLook("Base model", "left", "⬅ Base is better"),
    "tuned": SideLook("Tuned model", "right", "Tuned is better ➡"),
}


@dataclass
class ChatLayout:
    """Every widget of the Chat tab; the per-side ones keyed by side ("base", "tuned")."""

    job: gr.Dropdown
    refresh: gr.Button
    job_info: gr.Markdown
    mode: gr.Radio
    mode_info: gr.Markdown
    system: gr.Textbox
    temperature: gr.Slider
    max_tokens: gr.Slider
    seed: gr.Number
    chats: dict[str, gr.Chatbot]
    ups: dict[str, gr.Button]
    downs: dict[str, gr.Button]
    message: gr.Textbox
    send: gr.Button
    tools_row: gr.Row
    tools_info: gr.Markdown
    tool_side: gr.Radio
    run_tools: gr.Button
    # Each side's conversation as its model sees it and the judging buttons record it (answers as they streamed,
    # tool calls as calls, tools' answers): the chat widgets show tool calls as blocks, which are neither.
    kept: gr.State
    regenerate: gr.Button
    clear: gr.Button
    better: dict[str, gr.Button]
    exports: dict[str, gr.DownloadButton]  # by format: "dpo" (the picks), "kto" (the thumbs)
    note: gr.Markdown
    score_job: gr.Dropdown  # a finished reward job, to score the two last answers
    score_button: gr.Button
    scores: gr.Markdown

    @property
    def need_a_job(self) -> list:
        """The buttons that act on a picked job's chat (off without one)."""
        return [self.regenerate, self.clear, *self.better.values()]

    @property
    def judges(self) -> list:
        """The buttons off while answers stream: a click then recorded the half-written answer (and "Run tool calls"
        would run the calls of the answer before)."""
        thumbs = [button for side in SIDES for button in (self.ups[side], self.downs[side])]
        return [*thumbs, *self.better.values(), self.run_tools]

    @property
    def histories(self) -> list:
        """The two chats, base then tuned."""
        return [self.chats[side] for side in SIDES]


def lay_out() -> ChatLayout:
    """The tab's widgets in page order."""
    parts: dict = {}
    with gr.Row():
        parts["job"] = gr.Dropdown(
            [""],
            value="",
            label="Finished job",
            info="Its base model on the left, tuned on the right",
            elem_id="chat-job",
            allow_custom_value=True,
        )
        parts["refresh"] = gr.Button("Refresh jobs", size="sm")
    parts["job_info"] = gr.Markdown(PICK_JOB_HINT, elem_id="chat-job-info")
    with gr.Row():
        parts["mode"] = gr.Radio(
            MODE_CHOICES, value="compare", label="Mode", elem_id="chat-mode", scale=1, min_width=320
        )
        parts["mode_info"] = gr.Markdown(mode_note("compare"), elem_id="chat-mode-note")
    with gr.Accordion("System prompt and sampling (the same for both sides)", open=False):
        parts["system"] = gr.Textbox(label="System prompt", lines=2)
        with gr.Row():
            sampled = samples("compare")  # off in Compare, which answers greedily: the mode's change turns them on
            parts["temperature"] = gr.Slider(
                0.0, 1.5, value=0.7, step=0.05, label="Temperature (0: greedy)", interactive=sampled
            )
            parts["max_tokens"] = gr.Slider(8, 1024, value=128, step=8, label="Max new tokens")
            parts["seed"] = gr.Number(0, precision=0, label="Seed", interactive=sampled)
    parts["chats"], parts["ups"], parts["downs"] = {}, {}, {}
    with gr.Row():
        for side in SIDES:
            _lay_out_side(side, parts)
    with gr.Row():
        parts["message"] = gr.Textbox(
            placeholder="Ask both models…",
            label="Message to both models",
            show_label=False,
            scale=5,
            elem_id="chat-input",
        )
        parts["send"] = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
    # Shown for a job that played an environment: its answers' tool calls can run there.
    with gr.Row(visible=False, elem_id="chat-tools") as parts["tools_row"]:
        with gr.Column(scale=3):
            parts["tools_info"] = gr.Markdown(elem_id="chat-tools-info")
        parts["tool_side"] = gr.Radio(
            [("Both sides", "both"), ("Base", "base"), ("Tuned", "tuned")],
            value="both",
            label="Run the last answer's calls of",
            elem_id="chat-tool-side",
            scale=2,
            min_width=340,
        )
        parts["run_tools"] = gr.Button("🛠 Run tool calls", size="sm", elem_id="chat-run-tools", scale=0, min_width=160)
    parts["kept"] = gr.State({side: [] for side in SIDES})
    with gr.Row():
        # Off until a job is picked (and again when the pick is cleared): without one they had nothing to act on.
        parts["regenerate"] = gr.Button("Regenerate", size="sm", elem_id="chat-regenerate", interactive=False)
        parts["clear"] = gr.Button("Clear", size="sm", elem_id="chat-clear", interactive=False)
        parts["better"] = {
            side: gr.Button(look.better, size="sm", elem_id=f"{look.hand}-better", interactive=False)
            for side, look in SIDE_LOOKS.items()
        }
        # Their values are kept up to date (an export is written after every pick or thumb), so one click downloads:
        # a handler on the click that made the file only armed the button for a second click.
        parts["exports"] = {
            "dpo": gr.DownloadButton(
                "Export preferences (DPO .jsonl)", size="sm", elem_id=EXPORT_IDS["dpo"], interactive=False
            ),
            "kto": gr.DownloadButton(
                "Export thumbs (KTO .jsonl)", size="sm", elem_id=EXPORT_IDS["kto"], interactive=False
            ),
        }
    parts["note"] = gr.Markdown(elem_id="chat-note")
    with gr.Accordion("Score both answers with a reward model", open=False, elem_id="chat-scoring"):
        with gr.Row():
            parts["score_job"] = gr.Dropdown(
                [""],
                value="",
                label="Finished reward job",
                info="It scores each side's last answer, as it was trained to: higher is the answer it prefers",
                elem_id="chat-reward-job",
                allow_custom_value=True,
                scale=3,
            )
            parts["score_button"] = gr.Button("Score both answers", size="sm", elem_id="chat-score", scale=1)
        parts["scores"] = gr.Markdown(elem_id="chat-scores")
    return ChatLayout(**parts)


def _lay_out_side(side: str, parts: dict) -> None:
    # The panel layout gives each message the pane's width: a bubble sized to a short answer was one word wide and
    # tall, and the floating label covered the first message; the label is a heading instead.
    look = SIDE_LOOKS[side]
    with gr.Column():
        gr.Markdown(f"**{look.title}**")
        parts["chats"][side] = gr.Chatbot(
            label=look.title, show_label=False, elem_id=f"chat-{side}", height=380, layout="panel"
        )
        with gr.Row():
            parts["ups"][side] = gr.Button("👍 Good", size="sm", elem_id=f"{look.hand}-up", scale=0, min_width=90)
            parts["downs"][side] = gr.Button("👎 Bad", size="sm", elem_id=f"{look.hand}-down", scale=0, min_width=90)
