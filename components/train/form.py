"""The Train form's values <-> a spec dict (validated later by the spec), the reward bench's table, and the spec's
problems and warnings in the form's words, under the fields or sections they are about. No Gradio here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from backend.api import (
    JobSpec,
    demo_model_note,
    demo_recipe,
    methods,
)
from components.deep_links import job_link
from components.job_pickers import job_choice_id
from components.train.fields import (
    FORM_FIELDS,
    SECTIONS,
    FormError,
    FormField,
    from_spec_value,
    get_path,
    parse_column_map,
    parse_rewards,
    rewards_text,
    section_of,
    set_path,
    to_spec_value,
)
from components.train.recipes import FIELDS, adapt_holdout


def _applies(f: FormField, v: dict[str, Any]) -> bool:
    """Whether a field is sent: its method's fields only for that method, the environment's only with one named."""
    if f.methods is not None and v["method"] not in f.methods:
        return False
    return not f.path.startswith("environment.") or bool((v["env_name"] or "").strip())


def form_to_spec(values: dict[str, Any]) -> dict[str, Any]:
    """The spec dict the form describes (validated later by ``parse_spec``, whose messages name the fields)."""
    v = {**FIELDS, **values}
    try:
        spec: dict[str, Any] = {}
        for f in FORM_FIELDS.values():
            if f.derived or not _applies(f, v):
                continue
            value = to_spec_value(f, v[f.name])
            if value is not None or f.spec.default is not None:  # None where the spec's default is None: left out
                set_path(spec, f.path, value)
        _derived_to_spec(v, spec)
        adapt_holdout(v, spec)
        return spec
    except (TypeError, AttributeError) as exc:  # an API caller sent e.g. a list where the form has a text box
        raise FormError(
            "general",
            f"the form sent a value of the wrong type ({str(exc)[:80]}); "
            "send text, numbers and booleans as the Train tab does",
        ) from None


def _derived_to_spec(v: dict[str, Any], spec: dict[str, Any]) -> None:
    """The fields that are not one spec value each: the dataset's source and name, the parent job, the rewards."""
    source = v["dataset_source"]
    if source == "builtin":
        dataset = {"source": "builtin", "name": v["builtin_dataset"]}
    elif source == "hub":
        if not (v["hub_dataset"] or "").strip():
            raise FormError("dataset", "give a Hub dataset id, e.g. trl-lib/Capybara")
        dataset = {"source": "hub", "name": v["hub_dataset"].strip(), "split": v["hub_split"] or "train"}
    else:
        upload = (v["upload_id"] or "").strip()
        if not upload:
            raise FormError("dataset", "upload a .jsonl, .json, .csv or .parquet file first")
        # A cloned local job names its file by path; the backend lets only the person at this machine use one.
        dataset = {"source": "file" if Path(upload).is_absolute() else "upload", "name": upload}
    if v["column_map"]:
        dataset["columns"] = parse_column_map(v["column_map"])
    spec["dataset"] = {**dataset, **spec.get("dataset", {})}
    set_path(spec, "model.parent_job_id", job_choice_id(v["parent_job"]))
    if _applies(FORM_FIELDS["rollout_rewards"], v):
        rewards = parse_rewards(v["rollout_rewards"])
        if rewards or "environment" in spec:  # with an environment, extra rewards only (may be empty)
            set_path(spec, "rollout.rewards", rewards)


def spec_to_form(spec: JobSpec) -> dict[str, Any]:
    """A stored job's settings as form values: "clone this job" fills the Train tab with them."""
    values = {name: from_spec_value(f, get_path(spec, f.path)) for name, f in FORM_FIELDS.items() if not f.derived}
    values.update(_derived_from_spec(spec))
    return {name: values[name] for name in FIELDS}


def _derived_from_spec(spec: JobSpec) -> dict[str, Any]:
    """The hand-mapped fields' values (the inverse of ``_derived_to_spec``)."""
    d = spec.dataset
    return {
        "parent_job": spec.model.parent_job_id or "",
        "dataset_source": {"builtin": "builtin", "hub": "hub", "upload": "upload", "file": "upload"}[d.source],
        "builtin_dataset": d.name if d.source == "builtin" else FIELDS["builtin_dataset"],
        "hub_dataset": d.name if d.source == "hub" else "",
        "hub_split": d.split or "train",
        "upload_id": d.name if d.source in ("upload", "file") else "",
        "column_map": ", ".join(f"{k}={v}" for k, v in (d.columns or {}).items()),
        "rollout_rewards": rewards_text(spec.rollout.rewards),
    }


def bench_table(scored: list[dict[str, Any]]) -> dict[str, list]:
    """The reward bench's result as a table: completion (cut to 80 characters), each reward's score, total, notes.

    A reward that does not apply to a completion (None) shows "-", as TRL skips it.
    """
    rewards = list(scored[0]["scores"]) if scored else []
    rows = [
        [
            s["completion"][:80],
            *("-" if v is None else f"{v:.3f}" for v in s["scores"].values()),
            f"{s['total']:.3f}",
            "; ".join(s.get("notes", [])),
        ]
        for s in scored
    ]
    return {"headers": ["completion", *rewards, "total", "notes"], "data": rows}


def route_problems(problems: list[str]) -> dict[str, list[str]]:
    """Each problem under the section its field belongs to (``dataset: ...`` -> dataset), the rest under general."""
    routed: dict[str, list[str]] = {section: [] for section in SECTIONS}
    for problem in problems:
        routed[section_of(problem.split(":", 1)[0])].append(problem)
    return routed


# --- problems at their field, in its label's words ------------------------------------------------------------
SECTION_TITLES = {
    "model": "1. Model",
    "dataset": "2. Dataset",
    "method": "3. Method",
    "environment": "3. Method",
    "settings": "4. Training settings",
    "general": "the form",
}
_BOUNDS = (
    ("must be less than or equal to ", "must be at most "),
    ("must be greater than or equal to ", "must be at least "),
    ("must be less than ", "must be below "),
    ("must be greater than ", "must be above "),
)
_GOT = re.compile(r"\s*\(got (.+)\)$", re.S)
_PATH_HEAD = re.compile(r"^([a-z_]+(?:\.[A-Za-z0-9_]+)+):\s*(.*)$", re.S)


# Each field's spec path as a sentence mentions it (a whole path, not the tail of a longer one), longest first.
_MENTIONS = [
    (path, re.compile(rf"(?<![\w.]){re.escape(path)}(?![\w])"))
    for path in sorted({f.path for f in FORM_FIELDS.values()}, key=len, reverse=True)
]


def field_section(name: str) -> str:
    """The section of the form a field sits in (its spec part's)."""
    return section_of(FORM_FIELDS[name].path)


def short_label(f: FormField) -> str:
    """A field's label without its parenthetical help: 'Max rows (0: all)' -> 'Max rows'."""
    return re.sub(r"\s*\(.*\)$", "", f.label).strip() or f.name


def _gave(text: str) -> str:
    """The value a problem quotes, as the user typed it: 1000000000.0 -> 1000000000."""
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() and abs(number) < 1e18 else text


def _field_of(path: str, values: dict[str, Any], shown) -> str | None:
    """The shown form field a spec path belongs to (the longest declared path it starts with), or None. The dataset's
    name is the field of the chosen source."""
    best = None
    for name, f in FORM_FIELDS.items():
        if name in shown and (path == f.path or path.startswith(f.path + ".")):
            if best is None or len(f.path) > len(FORM_FIELDS[best].path):
                best = name
    if best is not None and FORM_FIELDS[best].path == "dataset.name":
        chosen = {"builtin": "builtin_dataset", "hub": "hub_dataset"}.get(values.get("dataset_source"))
        return chosen if chosen in shown else None
    return best


def field_problems(problems: list[str], values: dict[str, Any], shown) -> tuple[dict[str, list[str]], list[str]]:
    """Each problem under every shown field it is about, worded with the fields' labels, and the problems no shown
    field takes (they stay under their section, with their spec paths).

    A problem is about the field its spec path names first, and about every field whose path its sentence mentions
    (a batch size that no generation group divides is shown at both fields).

    >>> at, rest = field_problems(["training.learning_rate: must be less than 1 (got 1000000000.0)"], {}, FORM_FIELDS)
    >>> at["learning_rate"], rest
    (['Learning rate must be below 1; you gave 1000000000'], [])
    >>> at, _ = field_problems(["spec: training.batch_size x training.gradient_accumulation_steps (= 2) must be a "
    ...     "multiple of rollout.num_generations (4)"], {}, FORM_FIELDS)
    >>> sorted(at)
    ['batch_size', 'grad_accum', 'rollout_num_generations']
    >>> at["batch_size"][0]
    'Batch size x Gradient accumulation (= 2) must be a multiple of Generations per prompt (4)'
    """
    at: dict[str, list[str]] = {}
    rest: list[str] = []
    for problem in problems:
        text = problem.removeprefix("spec: ")
        head = _PATH_HEAD.match(text)
        owner = _field_of(head.group(1), values, shown) if head else None
        body = head.group(2) if owner else text
        mentions = {  # the spec paths the sentence names -> their shown fields
            mention: name for p, mention in _MENTIONS if mention.search(body) and (name := _field_of(p, values, shown))
        }
        fields = list(dict.fromkeys([*([owner] if owner else []), *mentions.values()]))
        if not fields:
            rest.append(problem)
            continue
        for mention, name in mentions.items():  # in the form's words
            body = mention.sub(short_label(FORM_FIELDS[name]), body)
        for before, after in _BOUNDS:
            body = body.replace(before, after)
        body = _GOT.sub(lambda m: f"; you gave {_gave(m.group(1))}", body)
        if owner:
            label = short_label(FORM_FIELDS[owner])
            body = f"{label} {body}" if body.startswith(("must ", "is ", "should ")) else f"{label}: {body}"
        for name in fields:
            at.setdefault(name, []).append(body)
    return at, rest


RECIPE_NOTE = (
    "The Train form's settings (dataset, steps, learning rate, batch size, held-out rows and, for GRPO, "
    "its sampling) were filled in with ones measured to make it learn with each method; a value you type "
    "yourself is kept."
)


def model_notice(base_model: str | None) -> str:
    """The notice under the model picker: a built-in model's caveat when it is picked (and, for one with demo recipes,
    that the settings were filled in for it), else nothing."""
    note = demo_model_note(base_model)
    if note and any(demo_recipe(base_model, method) for method in methods()):
        note = f"{note} {RECIPE_NOTE}"
    return f"ℹ️ {note}" if note else ""


def queued_link(job_id: str) -> str:
    """A job id as a link that opens the Jobs tab on it (``?job=<id>``), for the Queue and warm-up results."""
    return f"[**{job_id}**]({job_link(job_id)})"


def queue_place(place: int | None, free_workers: int | None) -> str:
    """Where a job just queued stands, for the Queue result: "starting now" only when a worker is free for it.

    ``place`` is its place in the queue (1: next; None: no longer queued, so already started), ``free_workers`` how
    many workers were free when it was queued (None: not known).

    >>> queue_place(1, 1), queue_place(None, 0), queue_place(1, 0), queue_place(3, 0), queue_place(2, 1)
    ('starting now', 'starting now', 'next in the queue', 'place 3 in the queue', 'place 2 in the queue')
    >>> queue_place(1, None)
    'next in the queue'
    """
    if place is None or place <= (free_workers or 0):
        return "starting now"
    return "next in the queue" if place == 1 else f"place {place} in the queue"


def field_warnings(warnings: list[str], shown) -> dict[str, list[str]]:
    """The warnings about one setting (those that start with its spec path) under each shown field they are about,
    in the fields' words, as ``field_problems`` puts problems there; a warning that only mentions a setting is not.

    >>> field_warnings(["eval.holdout_rows: the dataset has 1 row", "memory is tight"], FORM_FIELDS)
    {'holdout_rows': ['Held-out rows: the dataset has 1 row']}
    """
    return field_problems([w for w in warnings if _PATH_HEAD.match(w)], {}, shown)[0]


_SPEC_PATH = re.compile(r"[a-z_]+(?:\.[A-Za-z0-9_]+)*")


def section_problem(problem: str) -> str:
    """A problem no field takes, as its section's box says it: the box sits under that part of the form, so the
    sentence reads plainly, its spec path in brackets at the end as a field's problem has it (a whole part's name,
    ``dataset:``, and ``spec:`` just go); a problem about no part of the spec stays as it is.

    >>> section_problem("dataset.name: chats.jsonl could not be read as JSONL: line 7 is not valid JSON")
    'chats.jsonl could not be read as JSONL: line 7 is not valid JSON (`dataset.name`)'
    >>> section_problem("dataset: screenshot.png is not a dataset file"), section_problem("Note: memory is tight")
    ('screenshot.png is not a dataset file', 'Note: memory is tight')
    """
    head, sep, body = problem.removeprefix("spec: ").partition(": ")
    if not sep or not _SPEC_PATH.fullmatch(head) or section_of(head) == "general":
        return problem
    return f"{body} (`{head}`)" if "." in head else body


def labelled_warning(warning: str, values: dict[str, Any] | None = None) -> str:
    """A pre-flight warning in the form's words, as a field's problem is: the fields' labels for the spec paths it
    names, those paths in brackets at the end; a warning about no field of the form stays as it is.

    >>> labelled_warning("rollout.max_completion_length (24) is below a typical episode; raise it to at least 96")
    'Max completion length (24) is below a typical episode; raise it to at least 96 (`rollout.max_completion_length`)'
    >>> labelled_warning("output.push_to_hub: there is no Hugging Face token")
    'Push to the Hub when done: there is no Hugging Face token (`output.push_to_hub`)'
    >>> labelled_warning("the model is large for this machine")
    'the model is large for this machine'
    """
    at, _ = field_problems([warning], values or {}, FORM_FIELDS)
    if not at:
        return warning
    body = next(iter(at.values()))[0]
    return f"{body} ({', '.join(f'`{FORM_FIELDS[name].path}`' for name in at)})"
