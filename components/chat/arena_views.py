"""What the agent arena shows (no Gradio here): each side's episode as a transcript, the Play N table's rows, a kept
pair's link and note."""

from __future__ import annotations

import html
import json
from typing import Any


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
    start = f"{pair['split']} task" if pair.get("split") else "row"
    said = f"{head}: {start} {pair['row']}, seed {pair['seed']}."
    return f"{said} Link: [{link}]({link})" if link else said
