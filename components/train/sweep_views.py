"""What the Train tab's sweep panel offers and says: the fields a sweep may vary (numbers and closed choices), a
refusal in the field's own words, and the queued sweep's answer. No Gradio here: plain functions, tested without a
browser."""

from __future__ import annotations

from backend.api import counted
from components.train.fields import FORM_FIELDS, FormField
from components.train.form import queued_link


def variable(f: FormField) -> bool:
    """Whether a sweep may vary the field: a number, or one of a closed list of choices (not an open catalogue)."""
    if f.derived or f.choices is not None or f.path == "method":  # another method is another form
        return False
    described = f.spec
    return described.kind in ("int", "float") or (bool(described.choices) and described.kind != "bool")


def vary_choices() -> list[tuple[str, str]]:
    """(label, field name) of every field a sweep may vary, in the form's order.

    >>> ("Learning rate (training.learning_rate)", "learning_rate") in vary_choices()
    True
    """
    return [(f"{f.label} ({f.path})", name) for name, f in FORM_FIELDS.items() if variable(f)]


def vary_setting(name: str, values: str) -> str:
    """The ``--vary`` setting the panel sends: the field's spec path and the values as typed.

    >>> vary_setting("learning_rate", " 1e-4, 5e-4 ")
    'training.learning_rate=1e-4, 5e-4'
    """
    return f"{FORM_FIELDS[name].path}={(values or '').strip()}"


def refusal_text(name: str, problems: list[str]) -> str:
    """A sweep refused for its values, in the field's words: the label where the sentence names the path.

    >>> refusal_text("learning_rate", ['--vary training.learning_rate: "abc" does not fit the field (not a number)'])
    '⚠️ Not queued: Learning rate: "abc" does not fit the field (not a number)'
    """
    f = FORM_FIELDS[name]
    said = [
        p.replace(f"--vary {f.path}", f.label).replace("--vary ", "").replace("--trials ", "trials ") for p in problems
    ]
    return "⚠️ Not queued: " + " ".join(said)


def sweep_queued_markdown(submitted) -> str:
    """Queue sweep's answer: the sweep, its children with the value each tries, and where to follow them."""
    report = submitted.report
    rows = [
        f"- {queued_link(child.child.job_id)}: "
        + ", ".join(f"{path.rsplit('.', 1)[-1]} = {value}" for path, value in child.child.params.items())
        for child in report.children
    ]
    head = f"Queued sweep **{report.sweep.id}**: {counted(len(report.children), 'job')}, one per value."
    tail = "Pick any of them in the Jobs tab to see the sweep's table, plot and best."
    return "\n".join([head, *rows, tail])
