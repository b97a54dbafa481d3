"""What the Train tab's sweep panel offers and says: the fields a sweep may vary (numbers and closed choices), a
refusal in the field's own words, and the queued sweep's answer. No Gradio here: plain functions, tested without a
browser."""

from __future__ import annotations

from backend.api import counted
from components.train.fields import FORM_FIELDS, FormField
from components.train.form import queued_link, short_label


def variable(f: FormField) -> bool:
    """Whether a sweep may vary the field: a number, or one of a closed list of choices (not an open catalogue)."""
    if f.derived or f.choices is not None or f.path == "method":  # another method is another form
        return False
    described = f.spec
    return described.kind in ("int", "float") or (bool(described.choices) and described.kind != "bool")


# The field the panel starts on, and falls back to when the method changes: every method has it.
DEFAULT_VARY = "learning_rate"


def of_method(f: FormField, method: str | None) -> bool:
    """Whether the form shows the field for ``method`` (a shared field, or one of its own part); any, without one."""
    return method is None or f.methods is None or method in f.methods


def vary_choices(method: str | None = None) -> list[tuple[str, str]]:
    """(label, field name) of every field a sweep may vary for ``method`` (its own and the shared ones; every method's
    without one), in the form's order, each by the label the form shows it with and its spec path.

    >>> choices = vary_choices("sft")
    >>> ("Learning rate (training.learning_rate)", "learning_rate") in choices, ("Max rows (dataset.max_rows)",
    ...     "max_rows") in choices, any(name.startswith(("dpo_", "grpo_", "rollout_")) for _, name in choices)
    (True, True, False)
    >>> [label for label, name in vary_choices("dpo") if name == "dpo_beta"]
    ['Beta (dpo.beta)']
    """
    return [
        (f"{short_label(f)} ({f.path})", name)
        for name, f in FORM_FIELDS.items()
        if variable(f) and of_method(f, method)
    ]


def picked_field(method: str | None, current: str | None) -> str:
    """The field the panel shows after the method changed: the one picked while the method has it, else
    :data:`DEFAULT_VARY`.

    >>> picked_field("sft", "dpo_beta"), picked_field("dpo", "dpo_beta")
    ('learning_rate', 'dpo_beta')
    """
    return current if current in {name for _, name in vary_choices(method)} else DEFAULT_VARY


def off_method_text(name: str, method: str | None) -> str | None:
    """Why a sweep of the field is refused for ``method`` (a field the form does not show for it), else None.

    >>> off_method_text("grpo_beta", "sft")
    '⚠️ Not queued: Beta (grpo.beta) is not a setting of SFT; pick a field the form shows for it'
    >>> off_method_text("learning_rate", "sft") is None
    True
    """
    f = FORM_FIELDS.get(name)
    if f is not None and variable(f) and of_method(f, method):
        return None
    what = f"{short_label(f)} ({f.path})" if f is not None else repr(name[:80])
    return f"⚠️ Not queued: {what} is not a setting of {(method or '').upper()}; pick a field the form shows for it"


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
