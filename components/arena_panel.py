"""The agent arena, in the Chat tab: for a job trained in an environment, its base and tuned models play the same
episode side by side (same row, same seed), live, each turn shown as the model's text, its tool calls as blocks, the
tool's answer as the model read it and the step's reward; Play N plays N seeded episodes per side into a table whose
rows open their two transcripts; "played better" keeps the pair as a DPO row with its tools; ``?job=<id>&episode=<n>``
opens a kept pair again (its owner only)."""

from __future__ import annotations

import html
import json
import math
from dataclasses import dataclass
from typing import Any

import gradio as gr

from backend.api import JobNotFound, SpecError, StudioAPI, gpu_task
from components.deep_links import landing, linked_episode
from components.job_pickers import finished_job_choices, job_choice_id
from components.session import as_user, require_user, user_from

BASE_CHOICES = [("Base model (adapter off)", "base"), ("Parent job's adapter (where this job started)", "parent")]
SAMPLING_CHOICES = [("Greedy, as the job's evaluation", "greedy"), ("Sampled, as in training", "training")]
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


@dataclass
class ArenaHandles:
    panel: gr.Accordion
    summary: gr.Markdown
    base: gr.HTML
    tuned: gr.HTML
    table: gr.Dataframe


# --- rendering (no Gradio) -----------------------------------------------------------------------------------------


def _block(kind: str, title: str, body: str = "", pre: bool = True) -> str:
    inner = f"<pre>{html.escape(body)}</pre>" if pre and body else html.escape(body)
    return f'<div class="arena-{kind}"><div class="arena-title">{html.escape(title)}</div>{inner}</div>'


def _content_text(content: Any) -> str:
    if isinstance(content, list):  # typed parts: their text
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _arguments(arguments: Any) -> str:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return arguments
    return json.dumps(arguments, indent=2, ensure_ascii=False)


def transcript_html(episode: dict[str, Any] | None, who: str) -> str:
    """One side's episode for people: the prompt (folded), each model turn's text and tool calls, each tool answer as
    the model read it with the step's reward, and the end with the final reward and whether it is a success.

    >>> call = {"function": {"name": "submit", "arguments": {"a": 4}}}
    >>> page = transcript_html({"messages": [{"role": "user", "content": "2+2?"},
    ...     {"role": "assistant", "content": "", "tool_calls": [call]},
    ...     {"role": "tool", "name": "submit", "content": "correct"}], "prompt_messages": 1, "reward": 1.0,
    ...     "success": True, "over": True, "steps": [{"message": 2, "reward": 1.0, "done": True}],
    ...     "stop_reason": "the episode ended", "tool_calls": 1, "tool_failures": 0}, "tuned")
    >>> "🛠 Tool call: submit" in page and "step reward 1" in page and "success" in page and "<tool_call>" not in page
    True
    """
    if not episode:
        return f'<div class="arena-empty">{html.escape(who)}: nothing played yet.</div>'
    messages, prompt_count = episode.get("messages") or [], int(episode.get("prompt_messages") or 0)
    steps = {step.get("message"): step for step in episode.get("steps") or []}
    parts = [f'<div class="arena-who">{html.escape(who)}</div>']
    prompt = "\n\n".join(f"{m.get('role')}: {_content_text(m.get('content'))}" for m in messages[:prompt_count])
    parts.append(
        f'<details class="arena-prompt"><summary>Prompt, with the environment\'s first observation</summary>'
        f"<pre>{html.escape(prompt)}</pre></details>"
    )
    for index, message in enumerate(messages[prompt_count:], start=prompt_count):
        role = message.get("role")
        if role == "tool":
            step = steps.get(index) or {}
            reward = step.get("reward")
            tail = [f"step reward {reward:g}" if isinstance(reward, (int, float)) else "no reward for this step"]
            if step.get("done"):
                tail.append("the episode ended")
            title = f"🔧 {message.get('name', 'tool')} answered ({'; '.join(tail)})"
            parts.append(_block("tool", title, _content_text(message.get("content"))))
            continue
        if message.get("reasoning_content"):
            parts.append(_block("reasoning", "Reasoning", str(message["reasoning_content"])))
        text = _content_text(message.get("content")).strip()
        if text:
            parts.append(_block("text", "Model", text))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            parts.append(
                _block("call", f"🛠 Tool call: {function.get('name', '?')}", _arguments(function.get("arguments")))
            )
        if not text and not message.get("tool_calls"):
            parts.append(_block("text", "Model", "(an empty answer)", pre=False))
    if episode.get("error"):
        parts.append(_block("lost", f"⚠️ {episode.get('stop_reason')}", pre=False))
    elif episode.get("over", True):
        verdict = "✅ success" if episode.get("success") else "❌ no success"
        parts.append(
            _block(
                "end",
                f"Episode over: {verdict}, reward {float(episode.get('reward') or 0):g}",
                f"{episode.get('tool_calls', 0)} tool call(s), {episode.get('tool_failures', 0)} failed; "
                f"stopped: {episode.get('stop_reason')}",
                pre=False,
            )
        )
    else:
        parts.append('<div class="arena-playing">playing…</div>')
    return '<div class="arena-transcript">' + "".join(parts) + "</div>"


def _turns(episode: dict[str, Any]) -> int:
    return sum(1 for m in episode["messages"][episode["prompt_messages"] :] if m.get("role") == "assistant")


def _outcome(episode: dict[str, Any]) -> str:
    if episode.get("error"):
        return "environment lost"
    if not episode.get("over", True):
        return "playing…"
    return f"{'success' if episode.get('success') else 'no success'} ({float(episode.get('reward') or 0):g})"


def table_rows(pairs: list[dict[str, Any]]) -> list[list[Any]]:
    """The Play N table: one row per pair (its number once kept), each side's outcome, turns and tool calls."""
    return [
        [
            pair.get("episode") or "",
            pair["seed"],
            pair["row"],
            _outcome(pair["base"]),
            _outcome(pair["tuned"]),
            f"{_turns(pair['base'])}/{_turns(pair['tuned'])}",
            f"{pair['base'].get('tool_calls', 0)}/{pair['tuned'].get('tool_calls', 0)}",
        ]
        for pair in pairs
    ]


def pair_link(job_id: str, episode: int | None) -> str:
    """The address that opens a kept pair again.

    >>> pair_link("j1", 3)
    '?tab=chat&job=j1&episode=3'
    """
    return f"?tab=chat&job={job_id}&episode={episode}" if episode else ""


def pair_note(pair: dict[str, Any], job_id: str) -> str:
    """Which pair is shown, and its link."""
    link = pair_link(job_id, pair.get("episode"))
    head = f"Episode {pair['episode']}" if pair.get("episode") else "This episode"
    said = f"{head}: row {pair['row']}, seed {pair['seed']}."
    return f"{said} Link: [{link}]({link})" if link else said


# --- the panel -----------------------------------------------------------------------------------------------------


def build(api: StudioAPI, job: gr.Dropdown) -> ArenaHandles:
    """The arena's section, under the chat; ``job`` is the Chat tab's job picker."""
    # Shown for a job that played an environment (or continues one that did); hidden for any other pick.
    with gr.Accordion(
        "Agent arena: both models play the job's environment", open=True, visible=False, elem_id="arena"
    ) as panel:
        info = gr.Markdown(ARENA_HINT, elem_id="arena-info")
        with gr.Row():
            base_choice = gr.Radio(BASE_CHOICES, value="base", label="Left side", elem_id="arena-base-choice")
            sampling = gr.Radio(SAMPLING_CHOICES, value="greedy", label="Sampling", elem_id="arena-sampling")
        with gr.Row():
            row = gr.Number(0, precision=0, label="Row (episode i plays row i)", elem_id="arena-row")
            first = gr.Textbox(
                label="First message (optional: replaces the row's prompt; the environment resets on the row)",
                elem_id="arena-first-message",
                scale=3,
            )
        with gr.Row():
            play_one = gr.Button("Play", variant="primary", elem_id="arena-play")
            count = gr.Number(8, precision=0, label="Episodes per side", elem_id="arena-count", scale=0)
            play_many = gr.Button("Play N", elem_id="arena-play-n")
        summary = gr.Markdown(elem_id="arena-summary")
        with gr.Row():
            base_pane = gr.HTML(transcript_html(None, "Base"), elem_id="arena-base")
            tuned_pane = gr.HTML(transcript_html(None, "Tuned"), elem_id="arena-tuned")
        shown = gr.Markdown(elem_id="arena-shown")
        with gr.Row():
            base_better = gr.Button("⬅ Base played better", size="sm", elem_id="arena-base-better")
            tuned_better = gr.Button("Tuned played better ➡", size="sm", elem_id="arena-tuned-better")
            export = gr.DownloadButton(
                "Export episode preferences (DPO .jsonl, with tools)",
                size="sm",
                elem_id="arena-export",
                interactive=False,
            )
        judged = gr.Markdown(elem_id="arena-judged")
        table = gr.Dataframe(
            headers=TABLE_HEADERS,
            value=[],
            interactive=False,
            wrap=True,
            label="Episodes (click a row to open its two transcripts)",
            elem_id="arena-table",
        )
        pairs = gr.State([])  # the last play's pairs, as plain data
        current = gr.State(None)  # the episode number shown

    @as_user(signed_in=False)
    def on_job(user, job_choice):
        """Show the arena for a job that played an environment: what it plays, and the parent's adapter as the left
        side for a staged job; hide it for any other pick."""
        job_id = job_choice_id(job_choice)
        hidden = (gr.update(visible=False), ARENA_HINT, gr.update(value="base", interactive=False))
        if not job_id or user is None:
            return hidden
        try:
            setup = api.arena.setup(job_id, user)
        except (JobNotFound, ValueError):
            return hidden
        where = (
            ""
            if setup.environment_job_id == setup.job_id
            else f" (from job {setup.environment_job_id}, which this job continues)"
        )
        text = (
            f"**Environment:** `{setup.environment}`{where}. Both sides play the same rows and seeds as the job's "
            f"evaluation, with its chat template, tools, token budget ({setup.spec.rollout.max_completion_length} "
            f"tokens) and up to {setup.spec.environment.max_tool_calling_iterations} tool round(s)."
        )
        return gr.update(visible=True), text, gr.update(interactive=setup.parent_adapter is not None)

    job.change(on_job, job, [panel, info, base_choice], api_name=False)

    def play(job_choice, base, sampling_mode, first_row, first_message, episodes, request_profile):
        user = require_user(request_profile)
        job_id = job_choice_id(job_choice)
        if not job_id:
            raise gr.Error("Pick a finished job first.")
        try:
            stream = api.arena.play(
                job_id,
                user,
                episodes=_whole(episodes, "Episodes per side"),
                row=_whole(first_row, "Row"),
                base=base or "base",
                sampling=sampling_mode or "greedy",
                first_message=first_message if episodes == 1 else None,
            )
            for state in stream:
                played = [pair.to_dict() for pair in state.pairs]
                first_pair = played[0] if played else None
                note = state.summary() + (f"\n\n{state.note}" if state.note else "")
                if state.over:
                    note += f"\n\nLeft: {state.base_label}. Sampling: {state.sampling}."
                yield (
                    note,
                    transcript_html(first_pair["base"] if first_pair else None, f"Base: {state.base_label}"),
                    transcript_html(first_pair["tuned"] if first_pair else None, "Tuned: this job's adapter"),
                    table_rows(played),
                    played,
                    pair_note(first_pair, job_id) if first_pair and state.over else "",
                    first_pair.get("episode") if first_pair and state.over else None,
                )
        except JobNotFound:
            raise gr.Error("That job is not yours or no longer exists.") from None
        except (SpecError, ValueError) as exc:
            raise gr.Error(str(exc)) from None

    outputs = [summary, base_pane, tuned_pane, table, pairs, shown, current]
    play_inputs = [job, base_choice, sampling, row, first]

    @gpu_task(duration=300)
    def play_single(job_choice, base, sampling_mode, first_row, first_message, profile: gr.OAuthProfile | None = None):
        yield from play(job_choice, base, sampling_mode, first_row, first_message, 1, profile)

    @gpu_task(duration=600)
    def play_n(
        job_choice, base, sampling_mode, first_row, first_message, episodes, profile: gr.OAuthProfile | None = None
    ):
        yield from play(job_choice, base, sampling_mode, first_row, first_message, episodes, profile)

    play_one.click(play_single, play_inputs, outputs, api_name="arena_play", concurrency_limit=None)
    play_many.click(play_n, [*play_inputs, count], outputs, api_name="arena_play_n", concurrency_limit=None)

    def open_row(played, job_choice, event: gr.SelectData):
        """A click on a table row opens its pair's two transcripts."""
        index = event.index[0] if isinstance(event.index, (list, tuple)) else event.index
        if not played or not isinstance(index, int) or not 0 <= index < len(played):
            return gr.update(), gr.update(), gr.update(), gr.update()
        pair = played[index]
        return (
            transcript_html(pair["base"], "Base"),
            transcript_html(pair["tuned"], "Tuned: this job's adapter"),
            pair_note(pair, job_choice_id(job_choice) or ""),
            pair.get("episode"),
        )

    table.select(open_row, [pairs, job], [base_pane, tuned_pane, shown, current], api_name=False)

    def prefer(side: str):
        def record(job_choice, episode, profile: gr.OAuthProfile | None = None):
            """Keep the shown pair as a DPO row: the side that played better is chosen, with both whole episodes."""
            user = require_user(profile)
            job_id = job_choice_id(job_choice)
            if not job_id or not episode:
                return (
                    "Play an episode first (or open one from the table); then say which side played better.",
                    gr.update(),
                )
            try:
                row = api.arena.prefer(job_id, int(episode), side, user)
                path = api.chat.export_preferences(user, "episodes")
            except JobNotFound:
                raise gr.Error("That job is not yours or no longer exists.") from None
            except ValueError as exc:
                return f"Nothing recorded: {exc}.", gr.update()
            done = "Changed your pick for" if row.get("replaced") else "Saved"
            said = f"{done} episode {episode}: the {side} side played better (a DPO row with both episodes and tools)."
            return said, gr.update(value=str(path), interactive=True)

        return record

    base_better.click(prefer("base"), [job, current], [judged, export], api_name="arena_prefer_base")
    tuned_better.click(prefer("tuned"), [job, current], [judged, export], api_name="arena_prefer_tuned")

    def open_link(request: gr.Request, profile: gr.OAuthProfile | None = None):
        """``?job=<id>&episode=<n>``: the kept pair, read-only, for its owner; anyone else is told it is not theirs."""
        params = dict(request.query_params) if request is not None else {}
        _, job_id = landing(params)
        episode = linked_episode(params)
        if not job_id or episode is None:
            return [gr.skip()] * 9
        user = user_from(profile)
        try:
            if user is None:
                raise JobNotFound(job_id)
            pair = api.arena.pair(job_id, episode, user)
        except (JobNotFound, ValueError):
            said = f"Episode {episode} of job {job_id} is not among your arena episodes (it may be someone else's)."
            return [gr.update(visible=True), gr.skip(), said, *[gr.skip()] * 6]
        choices = finished_job_choices(api, user)
        choice = next((c for c in choices if job_choice_id(c) == job_id), gr.skip())
        return (
            gr.update(visible=True),
            gr.update(choices=choices, value=choice),
            f"Opened from its link: {pair.get('environment')}; left: {pair.get('base_label')}; "
            f"sampling: {pair.get('sampling')}.",
            transcript_html(pair["base"], f"Base: {pair.get('base_label')}"),
            transcript_html(pair["tuned"], "Tuned: this job's adapter"),
            table_rows([pair]),
            [pair],
            pair_note(pair, job_id),
            episode,
        )

    link_outputs = [panel, job, summary, base_pane, tuned_pane, table, pairs, shown, current]
    gr.on(None, open_link, None, link_outputs, api_name=False)

    return ArenaHandles(panel=panel, summary=summary, base=base_pane, tuned=tuned_pane, table=table)


def _whole(value: Any, label: str) -> int:
    """A whole number from a Number field, or a sentence naming the field."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise gr.Error(f"{label} must be a whole number.") from None
    if not math.isfinite(number) or number != int(number) or number < 0:
        raise gr.Error(f"{label} must be a whole number of 0 or more, not {value}.")
    return int(number)
