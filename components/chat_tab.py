"""Chat tab: a finished job's base model (left) and tuned model (right) answer the same message side by side,
streamed at the same time with the same system prompt, sampling settings and seed; pick the better side to save a
DPO preference row, give either answer a 👍/👎 to save a KTO row, and export either kind as a dataset file. An answer
with tool calls shows as its text and one block per call; for a job that played an environment, "Run tool calls"
runs them there and shows the tool's answers as the next turn."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import gradio as gr

from backend.api import (
    ChatAnswer,
    GenerationSettings,
    JobNotFound,
    StudioAPI,
    ToolRun,
    counted,
    demo_model_note,
    gpu_task,
    message_text,
    verdict_metric_line,
)
from components.job_pickers import finished_job_choices, job_choice_id
from components.job_views import evaluation_markdown, verdict_line
from components.session import as_user, require_user, user_from


@dataclass
class ChatHandles:
    job: gr.Dropdown
    base: gr.Chatbot
    tuned: gr.Chatbot


def _last_user_message(history: list[dict]) -> str | None:
    for message in reversed(history or []):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return None


def _before_last_question(history: list[dict]) -> list[dict]:
    """A history without its last exchange (from its last user message on); as it is when it has none."""
    users = [i for i, m in enumerate(history or []) if m.get("role") == "user"]
    return list(history[: users[-1]]) if users else list(history or [])


def run_note(run: ToolRun) -> str:
    """What the tab says after one side's calls ran: how many, and whether the episode ended."""
    calls = len(run.results)
    said = f"Ran the {run.side} side's {counted(calls, 'tool call')}"
    if run.started:
        said += " in a new episode"
    if run.done:
        reward = f" (reward {run.reward:g})" if run.reward is not None else ""
        said += f"; the episode is over{reward}, the next run starts a new one"
    return said + "."


def _settings(system, temperature, max_tokens, seed) -> GenerationSettings:
    return GenerationSettings(
        system_prompt=system or "",
        temperature=float(temperature or 0.0),
        max_new_tokens=int(max_tokens or 128),
        seed=int(seed or 0),
    )


SIDES = ("base", "tuned")
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
TOOL_CALL_TITLE = "🛠 Tool call: "
TOOL_ANSWER_TITLE = "🔧 "
EPISODE_TITLE = "🌱 New episode"
TOOL_BLOCK_TITLES = (TOOL_CALL_TITLE, TOOL_ANSWER_TITLE, EPISODE_TITLE)


def _fenced(text: str, language: str = "") -> str:
    """``text`` as a Markdown code block, its fence longer than any run of backticks inside it.

    >>> _fenced('{"a": 1}', "json")
    '```json\\n{"a": 1}\\n```'
    """
    fence = "`" * max(3, max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    return f"{fence}{language}\n{text}\n{fence}"


def answer_messages(answer: ChatAnswer) -> list[dict]:
    """How one side's final answer shows: as it is when it made no tool call; else its text (when it has any) and one
    block per call, titled with the tool's name, the arguments pretty-printed as JSON.

    >>> from backend.api import ToolCall
    >>> shown = answer_messages(ChatAnswer("raw", "Sure.", (ToolCall("submit_answer", {"answer": 50}),)))
    >>> [m["content"] for m in shown][0], shown[1]["metadata"]["title"]
    ('Sure.', '🛠 Tool call: submit_answer')
    """
    if not answer.tool_calls:
        return [{"role": "assistant", "content": answer.text}]
    shown = [{"role": "assistant", "content": answer.content}] if answer.content else []
    for call in answer.tool_calls:
        shown.append(
            {
                "role": "assistant",
                "content": _fenced(call.arguments_json(), "json"),
                "metadata": {"title": f"{TOOL_CALL_TITLE}{call.name}"},
            }
        )
    return shown


def kept_answer(answer: ChatAnswer) -> dict:
    """What a side keeps of its answer beside the chat widget: the text as it streamed (what the judging buttons
    record) and, with tool calls, what it said apart from them and the calls (what the model sees next turn)."""
    kept: dict = {"role": "assistant", "content": answer.text}
    if answer.tool_calls:
        kept["said"] = answer.content
        kept["tool_calls"] = [call.as_message_call() for call in answer.tool_calls]
    return kept


def tool_results_shown(run: ToolRun) -> list[dict]:
    """The tool's answers as the next turn: the new episode's first observation when the run started one, then one
    block per call (the last one says when the episode ended, and its reward)."""
    shown = []
    if run.started:
        shown.append(
            {
                "role": "assistant",
                "content": _fenced(run.started),
                "metadata": {"title": f"{EPISODE_TITLE} (from the job's first dataset row)"},
            }
        )
    for result in run.results:
        verb = "failed" if result.failed else "answered"
        shown.append(
            {
                "role": "assistant",
                "content": _fenced(result.content),
                "metadata": {"title": f"{TOOL_ANSWER_TITLE}{result.name} {verb}"},
            }
        )
    if run.done and shown:
        reward = f", reward {run.reward:g}" if run.reward is not None else ""
        shown[-1]["metadata"]["log"] = f"episode over{reward}"
    return shown


def tool_results_kept(run: ToolRun) -> list[dict]:
    """The tool's answers as the side's model reads them next turn (``tool`` messages, as TRL's tool loop adds)."""
    return [{"role": "tool", "name": result.name, "content": result.content} for result in run.results]


def is_tool_block(message: dict) -> bool:
    """Whether a chat message is one of the tool blocks this tab shows (a call, a tool's answer, a new episode)."""
    metadata = message.get("metadata")
    title = metadata.get("title") if isinstance(metadata, dict) else None
    return isinstance(title, str) and title.startswith(TOOL_BLOCK_TITLES)


def _asked(history: list[dict]) -> list[str | None]:
    return [message_text(m.get("content")) for m in history or [] if m.get("role") == "user"]


def _is_kept(shown: list[dict], kept: list[dict] | None) -> bool:
    """Whether ``kept`` is the conversation ``shown`` shows (the same questions asked, in order)."""
    return bool(kept) and _asked(shown) == _asked(kept or [])


def _without_blocks(shown: list[dict]) -> list[dict]:
    return [
        {"role": m["role"], "content": message_text(m.get("content")) or ""}
        for m in shown or []
        if m.get("role") in ("user", "assistant") and not is_tool_block(m)
    ]


def model_history(shown: list[dict], kept: list[dict] | None) -> list[dict]:
    """What a side's model is prompted with: the conversation it kept when that is the one shown (its calls as calls,
    the tools' answers as ``tool`` turns); else the shown one without its tool blocks (a script's own history)."""
    if not _is_kept(shown, kept):
        return _without_blocks(shown)
    seen = []
    for m in kept or []:
        if m["role"] == "assistant" and m.get("tool_calls"):
            seen.append({"role": "assistant", "content": m.get("said", ""), "tool_calls": m["tool_calls"]})
        else:
            seen.append({k: m[k] for k in ("role", "name", "content") if k in m})
    return seen


def judged_history(shown: list[dict], kept: list[dict] | None) -> list[dict]:
    """What the judging buttons record from (backend feedback's ``last_turn``): the kept conversation, each answer as
    it streamed, up to the side's last answer (a tool's answer after it is not the model's); else the shown one
    without its tool blocks."""
    if not _is_kept(shown, kept):
        return _without_blocks(shown)
    judged = [{"role": m["role"], "content": m["content"]} for m in kept or []]
    while judged and judged[-1]["role"] == "tool":
        judged.pop()
    return judged


def _kept_or_shown(shown: list[dict], kept: list[dict] | None) -> list[dict]:
    return list(kept or []) if _is_kept(shown, kept) else _without_blocks(shown)


def pending_calls(shown: list[dict], kept: list[dict] | None) -> list[dict]:
    """The tool calls of a side's last answer, when they have not been run yet."""
    if not _is_kept(shown, kept) or not kept or kept[-1]["role"] != "assistant":
        return []
    return list(kept[-1].get("tool_calls") or [])


def tools_hint(environment: str | None) -> str:
    """What the tab says beside "Run tool calls" for a job that played ``environment``."""
    if not environment:
        return ""
    return (
        f"This job played **{environment}**: an answer's tool calls can run there (an episode per side, started "
        "from the job's first dataset row); the tool's answers show as the next turn."
    )


NO_JOBS_HINT = "Train a job first; finished jobs appear here (Train tab → Queue, then wait for it to succeed)."
PICK_JOB_HINT = "Pick a finished job above, then ask both models the same question."
# How the chat asks (backend/chat/side_by_side.py's modes): what each one means for what the sides show.
MODE_CHOICES = [("Compare (as the verdict)", "compare"), ("Conversation", "conversation")]
MODE_NOTES = {
    "compare": (
        "**Compare:** each question is asked on its own (no history) and both sides answer greedily, as the "
        "verdict's evaluation asks; the temperature and seed below are not used."
    ),
    "conversation": (
        "**Conversation:** the history carries over from turn to turn, so a model may copy earlier answers (the demo "
        "models copy numbers from them), and answers are sampled as set below; the verdict asks each question "
        "fresh and greedy, so this is not what it scored."
    ),
}


def mode_note(mode: str | None) -> str:
    """What the tab says under the mode picker (Compare's note for an unknown mode)."""
    return MODE_NOTES.get(mode or "compare", MODE_NOTES["compare"])


def rows_text(count: int) -> str:
    """``1 preference row`` / ``3 preference rows``."""
    return counted(count, "preference row")


def thumb_rows_text(rows: list[dict]) -> str:
    """``1 KTO row so far: 1 👍, 0 👎`` for a thumb log's rows."""
    ups = sum(1 for r in rows if r.get("label") is True)
    return f"{counted(len(rows), 'KTO row')} so far: {ups} 👍, {len(rows) - ups} 👎"


def thumb_note(row: dict, rows: list[dict]) -> str:
    """What the Chat tab says after a thumb: which answer got which thumb, whether it replaced one, the counts."""
    thumb, before = ("👍" if row["label"] else "👎"), row["previous"]
    said = f"{thumb} on the {row['side']} answer"
    if before is not None:  # one thumb per side per turn: the second click replaced the first
        said = (
            f"{said}, as before (kept once)"
            if before == row["label"]
            else f"Changed to {said}, replacing your {'👍' if before else '👎'}"
        )
    return f"{said} ({thumb_rows_text(rows)}; one thumb per side per turn)."


def sides_text(job_id: str, model: str, parent_job_id: str | None = None) -> str:
    """Which chat side is which model.

    >>> sides_text("j1", "builtin:tiny-qwen3-arith")
    "**Left:** builtin:tiny-qwen3-arith as it is, no adapter. **Right:** the same model with job j1's adapter."
    """
    staged = f", which continues job {parent_job_id}'s (the left side has neither)" if parent_job_id else ""
    return f"**Left:** {model} as it is, no adapter. **Right:** the same model with job {job_id}'s adapter{staged}."


def job_info_markdown(api: StudioAPI, job_choice: str | None, user) -> str:
    """What the Chat tab says about the picked job: the verdict and its own metric (what Compare mode asks as; not
    the training loss, which for GRPO is not what it learns by), the demo model's caveat, the before/after
    evaluation; the hint to pick or train a job when none is picked."""
    job_id = job_choice_id(job_choice)
    if not job_id:
        return PICK_JOB_HINT
    try:
        job = api.jobs.get_job(job_id, user)
    except JobNotFound:
        return "That job is not yours or no longer exists."
    model = job.spec.model.name_or_path
    parts = [sides_text(job.id, model, job.spec.model.parent_job_id)]
    verdict = verdict_line(job)
    if verdict:
        parts.append(verdict)
        parts.append(verdict_metric_line(job.artifacts.learning))
    else:
        parts.append("No learning verdict for this job (set *Held-out rows* in the Train tab to get one).")
    note = demo_model_note(model)
    if note:
        parts.append(f"ℹ️ **Demo model.** {note}")
    evaluation = evaluation_markdown(job)
    if evaluation:
        parts.append(evaluation)
    return "\n\n".join(parts)


def build(api: StudioAPI) -> ChatHandles:
    with gr.Row():
        job = gr.Dropdown(
            [""],
            value="",
            label="Finished job",
            info="Its base model on the left, tuned on the right",
            elem_id="chat-job",
            allow_custom_value=True,
        )
        refresh = gr.Button("Refresh jobs", size="sm")
    job_info = gr.Markdown(PICK_JOB_HINT, elem_id="chat-job-info")
    with gr.Row():
        mode = gr.Radio(
            MODE_CHOICES,
            value="compare",
            label="Mode",
            elem_id="chat-mode",
            scale=1,
            min_width=320,
        )
        mode_info = gr.Markdown(mode_note("compare"), elem_id="chat-mode-note")
    mode.change(mode_note, mode, mode_info, api_name=False, queue=False)
    with gr.Accordion("System prompt and sampling (the same for both sides)", open=False):
        system = gr.Textbox(label="System prompt", lines=2)
        with gr.Row():
            temperature = gr.Slider(0.0, 1.5, value=0.7, step=0.05, label="Temperature (0: greedy)")
            max_tokens = gr.Slider(8, 1024, value=128, step=8, label="Max new tokens")
            seed = gr.Number(0, precision=0, label="Seed")
    with gr.Row():
        # The panel layout gives each message the pane's width: a bubble sized to a short answer was one word
        # wide and tall, and the floating label covered the first message; the label is a heading instead.
        with gr.Column():
            gr.Markdown("**Base model**")
            base = gr.Chatbot(
                label="Base model",
                show_label=False,
                elem_id="chat-base",
                height=380,
                layout="panel",
            )
            with gr.Row():
                left_up = gr.Button("👍 Good", size="sm", elem_id="left-up", scale=0, min_width=90)
                left_down = gr.Button("👎 Bad", size="sm", elem_id="left-down", scale=0, min_width=90)
        with gr.Column():
            gr.Markdown("**Tuned model**")
            tuned = gr.Chatbot(
                label="Tuned model",
                show_label=False,
                elem_id="chat-tuned",
                height=380,
                layout="panel",
            )
            with gr.Row():
                right_up = gr.Button("👍 Good", size="sm", elem_id="right-up", scale=0, min_width=90)
                right_down = gr.Button("👎 Bad", size="sm", elem_id="right-down", scale=0, min_width=90)
    with gr.Row():
        message = gr.Textbox(
            placeholder="Ask both models…",
            label="Message to both models",
            show_label=False,
            scale=5,
            elem_id="chat-input",
        )
        send = gr.Button("Send", variant="primary", scale=1, elem_id="chat-send")
    # Shown for a job that played an environment: its answers' tool calls can run there.
    with gr.Row(visible=False, elem_id="chat-tools") as tools_row:
        with gr.Column(scale=3):
            tools_info = gr.Markdown(elem_id="chat-tools-info")
        tool_side = gr.Radio(
            [("Both sides", "both"), ("Base", "base"), ("Tuned", "tuned")],
            value="both",
            label="Run the last answer's calls of",
            elem_id="chat-tool-side",
            scale=2,
            min_width=340,
        )
        run_tools = gr.Button("🛠 Run tool calls", size="sm", elem_id="chat-run-tools", scale=0, min_width=160)
    # Each side's conversation as its model sees it and the judging buttons record it (answers as they streamed,
    # tool calls as calls, tools' answers): the chat widgets show tool calls as blocks, which are neither.
    kept = gr.State({"base": [], "tuned": []})
    with gr.Row():
        # Off until a job is picked (and again when the pick is cleared): without one they had nothing to act on.
        regenerate = gr.Button("Regenerate", size="sm", elem_id="chat-regenerate", interactive=False)
        clear = gr.Button("Clear", size="sm", elem_id="chat-clear", interactive=False)
        left_better = gr.Button("⬅ Base is better", size="sm", elem_id="left-better", interactive=False)
        right_better = gr.Button("Tuned is better ➡", size="sm", elem_id="right-better", interactive=False)
        # Their values are kept up to date (an export is written after every pick or thumb), so one click downloads:
        # a handler on the click that made the file only armed the button for a second click.
        export = gr.DownloadButton(
            "Export preferences (DPO .jsonl)", size="sm", elem_id=EXPORT_IDS["dpo"], interactive=False
        )
        export_kto = gr.DownloadButton(
            "Export thumbs (KTO .jsonl)", size="sm", elem_id=EXPORT_IDS["kto"], interactive=False
        )
    note = gr.Markdown(elem_id="chat-note")

    def jobs(profile: gr.OAuthProfile | None = None) -> list[str]:
        """Finished jobs the user can chat with, as ``<id> · <method> · <name>``."""
        return finished_job_choices(api, user_from(profile))

    gr.api(jobs, api_name="chat_jobs")

    @as_user(signed_in=False)
    def refresh_choices(user):
        return gr.update(choices=finished_job_choices(api, user))

    refresh.click(refresh_choices, None, job, api_name=False)
    job.focus(refresh_choices, None, job, api_name=False)

    @as_user(signed_in=False)
    def on_load(user):
        """An empty tab says what to do; a returning user's export is ready for one click."""
        has_jobs = len(finished_job_choices(api, user)) > 1
        hint = PICK_JOB_HINT if has_jobs else NO_JOBS_HINT
        dpo, kto = current_export(user, "dpo"), current_export(user, "kto")
        return (
            hint,
            gr.update(value=dpo, interactive=dpo is not None),
            gr.update(value=kto, interactive=kto is not None),
        )

    def current_export(user, fmt: str) -> str | None:
        log = api.chat.preference_log(user) if fmt == "dpo" else api.chat.thumb_log(user)
        if user is None or not log.rows():
            return None
        return str(api.chat.export_preferences(user, fmt))

    gr.on(None, on_load, None, [job_info, export, export_kto], api_name=False)

    @as_user(signed_in=False)
    def on_job(user, job_choice):
        return job_info_markdown(api, job_choice, user) if user is not None else PICK_JOB_HINT

    job.change(on_job, job, job_info, api_name=False)

    need_a_job = [regenerate, clear, left_better, right_better]

    def job_gates(job_choice):
        """The buttons that act on a picked job's chat: on with a pick, off without."""
        return [gr.update(interactive=bool(job_choice_id(job_choice)))] * len(need_a_job)

    job.change(job_gates, job, need_a_job, api_name=False, queue=False)

    @as_user(signed_in=False)
    def on_job_tools(user, job_choice):
        """Another job: the user's tool-call environment closes; the tools row shows for a job with an environment."""
        if user is None:
            return gr.update(visible=False), ""
        api.chat.close_chat_tools(user)
        job_id, environment = job_choice_id(job_choice), None
        if job_id:
            try:
                environment = api.chat.chat_environment(job_id, user)
            except JobNotFound:
                pass
        return gr.update(visible=environment is not None), tools_hint(environment)

    job.change(on_job_tools, job, [tools_row, tools_info], api_name=False)

    @gpu_task(duration=120)  # on ZeroGPU the chat borrows a GPU per message; elsewhere a no-op
    def stream(
        job_choice,
        text,
        base_hist,
        tuned_hist,
        system_prompt,
        temp,
        max_new,
        seed_value,
        sides_kept,
        chat_mode="compare",
        profile: gr.OAuthProfile | None = None,
    ):
        user = require_user(profile)
        job_id = job_choice_id(job_choice)
        if not job_id:
            raise gr.Error("Pick a finished job first.")
        if not (text or "").strip():
            raise gr.Error("Type a message.")
        chat_mode = chat_mode or "compare"
        base_hist, tuned_hist = list(base_hist or []), list(tuned_hist or [])
        sides_kept = sides_kept or {}
        if chat_mode == "compare":  # one question on its own: the chat shows it alone, as the models see it
            base_hist, tuned_hist, sides_kept = [], [], {}
        base_kept, tuned_kept = sides_kept.get("base"), sides_kept.get("tuned")
        try:
            updates = api.chat.chat_turn(
                job_id,
                model_history(base_hist, base_kept),
                model_history(tuned_hist, tuned_kept),
                text,
                _settings(system_prompt, temp, max_new, seed_value),
                user,
                mode=chat_mode,
            )
        except JobNotFound:
            raise gr.Error("That job is not yours or no longer exists.") from None
        except ValueError as exc:
            raise gr.Error(str(exc)) from None
        asked = {"role": "user", "content": text}
        for update in updates:
            if update.answers is None:
                yield (
                    [*base_hist, asked, {"role": "assistant", "content": update.base}],
                    [*tuned_hist, asked, {"role": "assistant", "content": update.tuned}],
                    "",
                    sides_kept,
                )
                continue
            # The final answers: tool calls as blocks on display, the answers as they streamed kept beside.
            left, right = update.answers
            yield (
                [*base_hist, asked, *answer_messages(left)],
                [*tuned_hist, asked, *answer_messages(right)],
                "",
                {
                    "base": [*_kept_or_shown(base_hist, base_kept), asked, kept_answer(left)],
                    "tuned": [*_kept_or_shown(tuned_hist, tuned_kept), asked, kept_answer(right)],
                },
            )

    # While answers stream, the 👍/👎 and "better" buttons are off: a click then recorded the half-written answer (and
    # "Run tool calls" would run the calls of the answer before).
    judges = [left_up, left_down, right_up, right_down, left_better, right_better, run_tools]

    def judges_back(job_choice):
        """The judging buttons on again once an answer ended (the "better" ones only with a job picked: a message
        sent without one ends in an error)."""
        picked = bool(job_choice_id(job_choice))
        return [gr.update(interactive=picked or button not in need_a_job) for button in judges]

    def answering(trigger, handler, handler_inputs, api_name):
        """``trigger`` runs ``handler`` (a streaming answer) with the judging buttons off until it ends, however."""
        trigger(lambda: [gr.update(interactive=False)] * len(judges), None, judges, api_name=False, queue=False).then(
            handler,
            handler_inputs,
            [base, tuned, message, kept],
            api_name=api_name,
        ).then(judges_back, job, judges, api_name=False, queue=False)

    inputs = [job, message, base, tuned, system, temperature, max_tokens, seed, kept, mode]
    answering(send.click, stream, inputs, "chat_send")
    answering(message.submit, stream, inputs, False)

    def drop_last_turn(base_hist, tuned_hist):
        """Both histories without their last exchange, and the message that started it."""
        text = _last_user_message(base_hist)
        if text is None:
            raise gr.Error("Nothing to regenerate yet.")
        return _before_last_question(base_hist), _before_last_question(tuned_hist), text

    def regenerate_turn(
        job_choice,
        base_hist,
        tuned_hist,
        system_prompt,
        temp,
        max_new,
        seed_value,
        sides_kept,
        chat_mode="compare",
        profile: gr.OAuthProfile | None = None,
    ):
        base_prev, tuned_prev, text = drop_last_turn(base_hist, tuned_hist)
        sides_kept = sides_kept or {}
        kept_prev = {
            "base": _before_last_question(_kept_or_shown(base_hist, sides_kept.get("base"))),
            "tuned": _before_last_question(_kept_or_shown(tuned_hist, sides_kept.get("tuned"))),
        }
        # A new seed, so a sampled answer changes (greedy ones stay the same by design).
        yield from stream(
            job_choice,
            text,
            base_prev,
            tuned_prev,
            system_prompt,
            temp,
            max_new,
            int(seed_value or 0) + 1,
            kept_prev,
            chat_mode,
            profile=profile,
        )

    answering(
        regenerate.click,
        regenerate_turn,
        [job, base, tuned, system, temperature, max_tokens, seed, kept, mode],
        "chat_regenerate",
    )

    @as_user(signed_in=False)
    def clear_chat(user):
        """An empty chat; the user's tool-call environment closes with it."""
        if user is not None:
            api.chat.close_chat_tools(user)
        return [], [], "", {"base": [], "tuned": []}

    clear.click(clear_chat, None, [base, tuned, note, kept], api_name="chat_clear")

    @as_user
    def run_tool_calls(user, job_choice, which, base_hist, tuned_hist, sides_kept):
        """Run the last answer's tool calls of one side (or both) in the job's environment; the tool's answers show
        as the next turn of that side."""
        job_id = job_choice_id(job_choice)
        if not job_id:
            raise gr.Error("Pick a finished job first.")
        shown = {"base": list(base_hist or []), "tuned": list(tuned_hist or [])}
        sides_kept = sides_kept or {}
        now = {side: _kept_or_shown(shown[side], sides_kept.get(side)) for side in SIDES}
        notes, problems = [], []
        for side in SIDES if which not in SIDES else (which,):
            calls = pending_calls(shown[side], sides_kept.get(side))
            if not calls:
                continue
            try:
                run = api.chat.run_tool_calls(job_id, calls, side=side, user=user)
            except JobNotFound:
                raise gr.Error("That job is not yours or no longer exists.") from None
            except ValueError as exc:
                problems.append(f"The {side} side's calls did not run: {exc}")
                continue
            shown[side] += tool_results_shown(run)
            now[side] += tool_results_kept(run)
            notes.append(run_note(run))
        if not notes and problems:
            raise gr.Error(" ".join(problems))
        if not notes:
            whose = "either side's" if which not in SIDES else f"the {which} side's"
            return gr.update(), gr.update(), gr.update(), f"No tool calls to run: {whose} last answer made none."
        return shown["base"], shown["tuned"], now, " ".join(notes + problems)

    run_tools.click(
        run_tool_calls, [job, tool_side, base, tuned, kept], [base, tuned, kept, note], api_name="chat_run_tools"
    )

    def prefer(side: str):
        def record(
            job_choice, base_hist, tuned_hist, system_prompt, sides_kept, profile: gr.OAuthProfile | None = None
        ):
            user = require_user(profile)
            log = api.chat.preference_log(user)
            sides_kept = sides_kept or {}
            try:
                row = log.record_turn(
                    judged_history(base_hist, sides_kept.get("base")),
                    judged_history(tuned_hist, sides_kept.get("tuned")),
                    system_prompt or "",
                    side,
                    job_choice_id(job_choice),
                )
            except ValueError as exc:
                raise gr.Error(str(exc)) from None
            done = "Changed your pick for this turn" if row["replaced"] else "Saved"
            text = f"{done}: the {side} answer is better ({rows_text(len(log.rows()))} so far; one per turn)."
            return text, gr.update(value=current_export(user, "dpo"), interactive=True)

        return record

    def export_ready(fmt: str):
        @as_user(signed_in=False)
        def ready(user):
            """An export button is on when it holds a file: when the user has rows of its kind."""
            log = api.chat.preference_log(user) if fmt == "dpo" else api.chat.thumb_log(user)
            return gr.update(interactive=user is not None and bool(log.rows()))

        return ready

    # A pick or a thumb writes the export anew. From the click (in the browser, at once) until the new file is on the
    # button, whether the pick was saved or refused, a click on the button is held and then replayed
    # (EXPORT_HOLD_JS): it once downloaded the file as it was before the pick (issue 24), then, with the button
    # switched off meanwhile, nothing at all (issue 37).
    def arm(trigger, handler, inputs, outputs, api_name, export_button):
        fmt = "dpo" if export_button is export else "kto"
        held = json.dumps(EXPORT_IDS[fmt])
        trigger(None, None, None, js=f"() => window.studioExportSaving({held})").then(
            handler, inputs, outputs, api_name=api_name
        ).then(export_ready(fmt), None, export_button, api_name=False, queue=False).then(
            None, None, None, js=f"() => window.studioExportSaved({held})"
        )

    pref_inputs = [job, base, tuned, system, kept]
    arm(left_better.click, prefer("base"), pref_inputs, [note, export], "prefer_base", export)
    arm(right_better.click, prefer("tuned"), pref_inputs, [note, export], "prefer_tuned", export)

    def thumb(side: str, label: bool):
        def record(
            job_choice, base_hist, tuned_hist, system_prompt, sides_kept, profile: gr.OAuthProfile | None = None
        ):
            """A 👍/👎 on one side's last answer, kept as a KTO row; with no answer yet the note says so instead."""
            user = require_user(profile)
            log = api.chat.thumb_log(user)
            try:
                row = log.record_turn(
                    judged_history(base_hist if side == "base" else tuned_hist, (sides_kept or {}).get(side)),
                    system_prompt or "",
                    label,
                    side,
                    job_choice_id(job_choice),
                )
            except ValueError as exc:
                return f"Nothing recorded: {exc}.", gr.update()
            return thumb_note(row, log.rows()), gr.update(value=current_export(user, "kto"), interactive=True)

        return record

    for button, side, label in (
        (left_up, "base", True),
        (left_down, "base", False),
        (right_up, "tuned", True),
        (right_down, "tuned", False),
    ):
        arm(
            button.click,
            thumb(side, label),
            pref_inputs,
            [note, export_kto],
            f"thumb_{side}_{'up' if label else 'down'}",
            export_kto,
        )

    def export_file(fmt: str):
        def export_now(profile: gr.OAuthProfile | None = None):
            """The user's picks (DPO) or thumbs (KTO) as a .jsonl (for scripts; the buttons download the files kept
            ready)."""
            user = require_user(profile)
            try:
                return str(api.chat.export_preferences(user, fmt))
            except ValueError as exc:
                raise gr.Error(str(exc)) from None

        return export_now

    # For gradio_client: events whose output is a file, so the client downloads it (the buttons need no event).
    for fmt, api_name in (("dpo", "export_preferences"), ("kto", "export_thumbs")):
        api_export, api_file = gr.Button(visible=False), gr.File(visible=False)
        api_export.click(export_file(fmt), None, api_file, api_name=api_name)
    return ChatHandles(job=job, base=base, tuned=tuned)
