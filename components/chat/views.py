"""What the Chat tab shows, from the models' answers and the job records: the two sides' messages (tool calls as
blocks), each side's history as its model sees it and as the judging buttons record it, and the tab's notes.

No Gradio here: plain functions, tested without a browser.
"""

from __future__ import annotations

import re

from backend.api import (
    ChatAnswer,
    GenerationSettings,
    JobNotFound,
    StudioAPI,
    ToolRun,
    counted,
    demo_model_note,
    message_text,
    verdict_metric_line,
)
from components.job_pickers import job_choice_id
from components.jobs.views import evaluation_markdown, verdict_line


def last_user_message(history: list[dict]) -> str | None:
    for message in reversed(history or []):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    return None


def before_last_question(history: list[dict]) -> list[dict]:
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


def generation_settings(system, temperature, max_tokens, seed) -> GenerationSettings:
    return GenerationSettings(
        system_prompt=system or "",
        temperature=float(temperature or 0.0),
        max_new_tokens=int(max_tokens or 128),
        seed=int(seed or 0),
    )


SIDES = ("base", "tuned")
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


def kept_or_shown(shown: list[dict], kept: list[dict] | None) -> list[dict]:
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


def samples(mode: str | None) -> bool:
    """Whether the mode samples answers with the temperature and seed set below (Conversation does); Compare answers
    greedily, as its note says, so those two controls are off while it is picked.

    >>> samples("compare"), samples(None), samples("conversation")
    (False, False, True)
    """
    return (mode or "compare") == "conversation"


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


def scores_markdown(job_id: str, scores: list[float]) -> str:
    """A reward job's scores of the two last answers (base, tuned), and which it prefers.

    >>> scores_markdown("j1", [0.25, 1.5])
    'Reward model of job j1: base **0.25**, tuned **1.5**: it prefers the tuned answer (by 1.25).'
    """
    base, tuned = scores
    verdict = (
        "it scores both alike" if base == tuned else f"it prefers the {'tuned' if tuned > base else 'base'} answer"
    )
    by = "" if base == tuned else f" (by {abs(tuned - base):.3g})"
    return f"Reward model of job {job_id}: base **{base:.3g}**, tuned **{tuned:.3g}**: {verdict}{by}."
