"""What the Train tab says, from the facade's answers: the preview, Check's, Queue's and the warm-up's results, a
refusal that points at the fields to fix, and problems as lines. No Gradio here: plain functions, tested without a
browser.
"""

from __future__ import annotations

import json
from typing import Any

from backend.api import JobStatus, counted
from components.train.fields import FORM_FIELDS, SECTIONS, FormError
from components.train.form import (
    SECTION_TITLES,
    field_section,
    labelled_warning,
    queue_place,
    queued_link,
    section_problem,
    short_label,
)
from components.train.recipes import FIELDS

FIELD_NAMES = list(FIELDS)  # the form's fields in the order of its inputs (and of the API's parameters)


def form_values(args: tuple) -> dict[str, Any]:
    """The form's values by field name, from its inputs' values in ``FIELD_NAMES`` order."""
    return dict(zip(FIELD_NAMES, args))


def problems_markdown(problems: list[str]) -> str:
    """Problems as lines under a section's box, each marked and said plainly (:func:`section_problem`).

    >>> problems_markdown(["a", "dataset.name: b.jsonl could not be read"])
    '⚠️ a\\n⚠️ b.jsonl could not be read (`dataset.name`)'
    """
    return "\n".join(f"⚠️ {section_problem(p)}" for p in problems)


def field_lines(name: str, problems: list[str]) -> str:
    """The problems shown under one field, each with the field's spec path after it."""
    return "\n".join(f"⚠️ {p} (`{FORM_FIELDS[name].path}`)" for p in problems)


def bench_row(text: str | None) -> Any:
    """The bench's dataset row from its JSON text box (None when empty)."""
    if not (text or "").strip():
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise FormError(
            "method",
            f'the dataset row is not valid JSON ({str(exc)[:80]}); write an object such as {{"solution": "$4$"}}',
        ) from None


def refused_text(what: str, marked: list[str], sections: list[str]) -> str:
    """The answer under the button that asked: that nothing was done, and where the problems are shown (``marked``:
    the fields with a problem under them; ``sections``: the sections with one under them).

    >>> refused_text("Not queued", [], ["general"])
    '⚠️ Not queued: see the note below.'
    >>> refused_text("Not queued", [], [])
    '⚠️ Not queued.'
    """
    where = [f"**{short_label(FORM_FIELDS[n])}** ({SECTION_TITLES[field_section(n)]})" for n in marked]
    where += [
        "the note below" if s == "general" else f"the note under {SECTION_TITLES[s]}" for s in SECTIONS if s in sections
    ]
    return f"⚠️ {what}: see " + ", ".join(where) + "." if where else f"⚠️ {what}."


def preview_markdown(preview) -> str:
    """The dataset preview: its size, format and columns, then each row as the trainer sees it."""
    parts = [
        f"**{counted(preview.total_rows, 'row')}**, format `{preview.format}`, "
        f"columns: {', '.join(preview.columns)}; "
        f"longest previewed: {preview.summary.max_tokens} tokens (max_length {preview.summary.max_length})"
    ]
    for i, row in enumerate(preview.rows):
        cut = " — **longer than max_length: will be cut**" if row.over_max_length else ""
        parts.append(f"Row {i} · {row.n_tokens} tokens{cut}\n```\n{row.rendered}\n```")
        if row.rendered_rejected is not None:
            parts.append(f"Rejected · {row.n_tokens_rejected} tokens\n```\n{row.rendered_rejected}\n```")
    return "\n\n".join(parts)


def warnings_markdown(warnings: list[str]) -> str:
    """Pre-flight warnings as list lines, in the form's words."""
    return "".join(f"\n- ⚠️ {labelled_warning(w)}" for w in warnings)


def warm_up_markdown(warm) -> str:
    """What a warm-up wrote and queued."""
    text = (
        f"Wrote {warm.demonstrations}. Queued {queued_link(warm.sft.job.id)} (SFT warm-up), then "
        f"{queued_link(warm.grpo.job.id)} (this GRPO job, from the warm-up's adapter; it waits for it). "
        f"Follow them in the Jobs tab (click an id to open it there)."
    )
    return text + warnings_markdown(warm.sft.warnings + warm.grpo.warnings)


def check_markdown(warnings: list[str], memory: str) -> str:
    """Check's answer: passed, its warnings, and the memory estimate."""
    lines = ["✅ Pre-flight passed."] + [f"- ⚠️ {labelled_warning(w)}" for w in warnings] + [f"```\n{memory}\n```"]
    return "\n".join(lines)


def queued_markdown(submitted) -> str:
    """Queue's answer: the job's link and place in the queue, and its warnings; for a repeat of the same spec a
    moment ago, that it is the job already queued and nothing new was."""
    link = queued_link(submitted.job.id)
    if submitted.repeated:
        where = "running" if submitted.job.status is JobStatus.running else queue_place(submitted.queue_position, 0)
        text = (
            f"Already queued {link} a moment ago with these same settings ({where}); nothing new was queued. "
            "Click the id to follow it in the Jobs tab."
        )
    else:
        where = queue_place(submitted.queue_position, submitted.free_workers)
        text = f"Queued {link} ({where}). Click the id to follow it in the Jobs tab."
    if submitted.warnings:
        text += "\n" + "\n".join(f"- ⚠️ {labelled_warning(w)}" for w in submitted.warnings)
    return text


def first_row_note(row: Any) -> str:
    """Where the bench's row came from: the dataset's first row, shown cut to 160 characters."""
    shown = json.dumps(row, ensure_ascii=False, default=str)
    return f"the dataset's first row: `{shown[:160]}{'…' if len(shown) > 160 else ''}`"
