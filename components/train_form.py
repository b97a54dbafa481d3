"""The Train form as one declaration: each field names its spec path, and its help, default and choices come from the
spec (through ``backend.api``); form values <-> spec dict by dotted path; spec problems routed to their section.

No Gradio here, so the mapping is tested on its own; ``components/train_tab.py`` lays the fields out. A field whose path
starts with a method's part (``dpo.beta``) belongs to that method: a new method's spec part appears without form code.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from backend.api import (
    ARITH_MODEL_ID,
    CURATED_MODELS,
    DEMO_MODEL_ID,
    REWARDS,
    JobSpec,
    RewardSpec,
    SpecField,
    builtin_dataset_choices,
    builtin_dataset_help,
    demo_model_note,
    demo_recipe,
    environment_choices,
    field_methods,
    method_part,
    methods,
    spec_field,
)
from components.deep_links import job_link
from components.job_pickers import job_choice_id

# A setting auto-tune may decide (a spec ``bool | None``): "auto" leaves it empty in the spec.
TRI_STATE: dict[str, bool | None] = {"auto": None, "on": True, "off": False}
_SPEC = object()  # a declaration's default: the spec's own

BASE_MODEL_HELP = (
    f"A curated small instruct model, any Hub id, or a built-in tiny model that runs offline: "
    f"{ARITH_MODEL_ID} knows a little arithmetic (picking it fills in settings measured to make it "
    f"learn), {DEMO_MODEL_ID} has random weights (plumbing only)."
)
# The model the form starts on: it runs anywhere, and with its demo recipe a first try shows learning.
START_MODEL = ARITH_MODEL_ID


@dataclass(frozen=True)
class FormField:
    """One Train-tab field bound to a spec path: its label (the browser finds it by it), the form's own help where the
    spec's names spec paths, and how it maps. Default, choices and the other help come from the spec."""

    name: str  # the form's name; the declaration order is the order of the Gradio inputs (and API parameters)
    path: str  # the spec's dotted path
    label: str
    help: str | None = None  # None: the spec's help for ``path``
    default: Any = _SPEC  # a value here only where the form deliberately starts elsewhere than the spec
    choices: tuple[Any, ...] | None = None  # an open catalogue (any other value allowed); None: the spec's choices
    derived: bool = False  # mapped by hand in ``_derived_to_spec``/``_derived_from_spec``, not by path
    zero_means_none: bool = False  # 0 (like empty) is the spec's None ("0: all")
    none_as: Any = None  # the form value that stands for the spec's None
    options: dict[str, Any] = field(default_factory=dict)  # widget only (elem_id, placeholder; closed: choices only)

    @property
    def spec(self) -> SpecField:
        """The spec's description of ``path``."""
        return spec_field(self.path)

    @property
    def methods(self) -> tuple[str, ...] | None:
        """The methods this field is shown and sent for (its spec part says), None for every method."""
        return field_methods(self.path)

    @property
    def info(self) -> str:
        """The help shown under the field."""
        return self.help if self.help is not None else self.spec.help

    @property
    def initial(self) -> Any:
        """The value the form starts with: the spec's default as a form value, unless the declaration says else."""
        return self.default if self.default is not _SPEC else _from_spec_value(self, self.spec.default)


def rewards_text(rewards) -> str:
    """Rewards as the editor's YAML, each with its name and the settings it changes from their defaults."""
    dumped = [r.model_dump(exclude_defaults=True) | {"name": r.name} for r in rewards]
    return yaml.safe_dump(dumped, sort_keys=False) if dumped else ""


DECLARED: list[FormField] = [
    FormField(
        "base_model",
        "model.name_or_path",
        "Base model",
        help=BASE_MODEL_HELP,
        choices=CURATED_MODELS,
        default=START_MODEL,  # the spec picks by network; the form starts on what runs anywhere
        options={"elem_id": "base-model"},
    ),
    FormField(
        "parent_job",
        "model.parent_job_id",
        "…or continue from a finished job",
        derived=True,
        choices=("",),
        help="Start from a finished job: its base model plus its adapter, trained further (e.g. SFT, then "
        "DPO or GRPO). The base model is then the parent job's.",
        options={"elem_id": "parent-job"},
    ),
    FormField(
        "dataset_source",
        "dataset.source",
        "Source",
        derived=True,
        choices=("builtin", "hub", "upload"),
        help="",
        options={"elem_id": "dataset-source", "closed": True},
    ),
    FormField(
        "builtin_dataset",
        "dataset.name",
        "Built-in dataset",
        derived=True,
        choices=tuple(builtin_dataset_choices()),
        help=builtin_dataset_help(demo_recipe(START_MODEL, JobSpec().method.value).get("dataset.name")),
        options={"elem_id": "builtin-dataset"},
    ),
    FormField(
        "hub_dataset",
        "dataset.name",
        "Hub dataset id",
        derived=True,
        default="",
        help="",
        options={"placeholder": "trl-lib/Capybara", "visible": False},
    ),
    FormField("hub_split", "dataset.split", "Split", derived=True, help="", options={"visible": False}),
    # What api.datasets.upload_dataset returned; never a path on the server.
    FormField("upload_id", "dataset.name", "", derived=True, default="", help="", options={"visible": False}),
    FormField(
        "column_map",
        "dataset.columns",
        "Column mapping",
        derived=True,
        default="",
        help="When your columns are named differently: expected=your_column, e.g. prompt=question, "
        "completion=answer (SFT) or messages=conversation.",
        options={"elem_id": "column-map", "placeholder": "prompt=question, completion=answer"},
    ),
    FormField("max_rows", "dataset.max_rows", "Max rows (0: all)", zero_means_none=True, options={"minimum": 0}),
    FormField("method", "method", "Method", options={"elem_id": "method"}),
    FormField("sft_completion_only", "sft.completion_only_loss", "Loss on completions only"),
    FormField(
        "sft_packing",
        "sft.packing",
        "Packing",
        help="Pack several short examples into one Max length sequence (no attention across examples). "
        "auto: on when auto-tune finds the examples short on a GPU.",
    ),
    FormField("dpo_beta", "dpo.beta", "beta"),
    FormField("dpo_loss_type", "dpo.loss_type", "Loss"),
    FormField("rollout_num_generations", "rollout.num_generations", "Generations per prompt"),
    FormField("rollout_max_completion_length", "rollout.max_completion_length", "Max completion length"),
    FormField("rollout_temperature", "rollout.temperature", "Temperature"),
    FormField(
        "rollout_rewards",
        "rollout.rewards",
        f"Rewards (YAML list; names: {', '.join(REWARDS)})",
        derived=True,
        help="",
        default=rewards_text(JobSpec().rollout.rewards),
    ),
    FormField(
        "env_name",
        "environment.name",
        "Environment",
        choices=tuple(environment_choices()),
        help="An OpenEnv environment for GRPO: a Hub Space id (openenv/echo_env), an http(s) URL, or a "
        "built-in (builtin:echo, builtin:wordle, builtin:arithmetic). Empty: no environment.",
        options={"elem_id": "env-name"},
    ),
    FormField("env_reward", "environment.reward", "Reward"),
    FormField("env_max_iterations", "environment.max_tool_calling_iterations", "Max tool calls per episode"),
    FormField("env_eval_episodes", "environment.eval_episodes", "Evaluation episodes"),
    FormField(
        "max_steps", "training.max_steps", "Max steps", default=30
    ),  # the spec trains an epoch; a first try from the form should end in minutes
    FormField("learning_rate", "training.learning_rate", "Learning rate", options={"step": 1e-5}),
    FormField(
        "batch_size",
        "training.batch_size",
        "Batch size",
        help="Examples per step on the device, 1-1024. Empty: auto-tune picks the largest that fits (a power "
        "of two up to 64 on a GPU, 4 on a CPU, one generation group for GRPO).",
        # Empty (auto) rather than the spec's 2, which no GRPO group of 4 divides: the form's defaults must make a
        # job for every method; a model's demo recipe still fills in its measured batch.
        default=None,
    ),
    FormField("grad_accum", "training.gradient_accumulation_steps", "Gradient accumulation"),
    FormField("max_length", "training.max_length", "Max length"),
    FormField("lora_enabled", "lora.enabled", "LoRA"),
    FormField("lora_r", "lora.r", "LoRA rank"),
    FormField("lora_alpha", "lora.alpha", "LoRA alpha"),
    FormField("lora_dropout", "lora.dropout", "LoRA dropout"),
    FormField("quant_mode", "quantization.mode", "Quantization"),
    FormField(
        "holdout_rows",
        "eval.holdout_rows",
        "Held-out rows (before/after evaluation)",
        zero_means_none=True,
        none_as=0,
        help="Rows kept out of training; after training, the base and the tuned model are scored "
        "on them (0: no before/after evaluation; empty: a tenth of the dataset, at most 128, none under 20 rows).",
    ),
    FormField("run_name", "output.run_name", "Run name"),
    FormField("push_to_hub", "output.push_to_hub", "Push to the Hub when done"),
    FormField(
        "push_checkpoints",
        "output.push_checkpoints",
        "Push checkpoints to the Hub as they are saved",
        help="Each checkpoint is uploaded to the Hub repo's last-checkpoint/ folder as it is saved (a private repo "
        "when Private repo is ticked), so another machine can finish the run from it; a failed upload never fails "
        "the job.",
    ),
    FormField("hub_repo_id", "output.hub_repo_id", "Hub repo", options={"placeholder": "you/my-adapter"}),
    FormField("hub_private", "output.private", "Private repo"),
    FormField("trackio", "output.trackio", "Track with trackio"),
]

_PLAIN_KINDS = ("bool", "int", "float")


def generated_fields(declared: set[str | None]) -> list[FormField]:
    """Fields for each method not in ``declared`` (the methods the declaration lists fields of): its spec part's plain
    settings (flags, numbers, choices), labelled from their names, so a new method is trainable without form code."""
    generated = []
    for method in methods():
        if method in declared:
            continue
        for name in JobSpec.model_fields[method].annotation.model_fields:
            described = spec_field(f"{method}.{name}")
            if described.kind in _PLAIN_KINDS or described.choices:
                generated.append(FormField(f"{method}_{name}", f"{method}.{name}", name.replace("_", " ").capitalize()))
    return generated


# Which box under the form shows a problem, by the spec path it starts with.
SECTIONS = ("model", "dataset", "method", "environment", "settings", "general")
_PREFIXES = {
    "model": "model",
    "dataset": "dataset",
    "columns": "dataset",
    "environment": "environment",
    "rollout": "method",
    "training": "settings",
    "lora": "settings",
    "quantization": "settings",
    "eval": "settings",
    "output": "settings",
    **{method: "method" for method in methods()},
}


def section_of(path: str) -> str:
    """The section whose box shows a problem about spec path ``path`` (``training.max_steps`` -> settings)."""
    return _PREFIXES.get(path.split(".", 1)[0].strip(), "general")


class FormError(ValueError):
    """A form value that cannot even be turned into a spec (e.g. unreadable rewards YAML); routed like problems."""

    def __init__(self, section: str, message: str):
        super().__init__(message)
        self.section = section


def parse_column_map(text: str) -> dict[str, str]:
    """``messages=conversation, prompt=question`` -> ``{"messages": "conversation", "prompt": "question"}``."""
    mapping = {}
    for part in (text or "").replace("\n", ",").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise FormError("dataset", f"column mapping {part.strip()!r} must look like expected=your_column")
        expected, yours = (p.strip() for p in part.split("=", 1))
        if not expected or not yours:
            raise FormError("dataset", f"column mapping {part.strip()!r} must look like expected=your_column")
        mapping[expected] = yours
    return mapping


def parse_rewards(text: str) -> list[dict[str, Any]]:
    """The rewards editor's YAML as a list of reward mappings; FormError (method section) when it is not one."""
    try:
        rewards = yaml.safe_load(text or "") or []
    except yaml.YAMLError as exc:
        raise FormError("method", f"rewards are not valid YAML: {exc}") from None
    if not isinstance(rewards, list) or not all(isinstance(r, dict) for r in rewards):
        raise FormError("method", "rewards must be a YAML list of mappings, e.g. '- name: accuracy'")
    return rewards


def _number(raw: Any, path: str, cast=float, optional: bool = False):
    """Form value ``raw`` (spec field ``path``) as a finite number; an empty, non-numeric, infinite or (for whole
    numbers) fractional value is a FormError naming the field, never a TypeError or OverflowError."""
    section = section_of(path)
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        if optional:
            return None
        raise FormError(section, f"{path}: empty; give a number")
    try:
        number = float(raw)
    except (TypeError, ValueError):
        raise FormError(section, f"{path}: {str(raw)[:40]!r} is not a number") from None
    if isinstance(raw, bool) or not math.isfinite(number):
        raise FormError(section, f"{path}: must be a finite number (got {str(raw)[:40]})")
    if cast is int:
        if not number.is_integer():
            raise FormError(section, f"{path}: must be a whole number (got {number:g})")
        return int(number)
    return number


def _to_spec_value(f: FormField, raw: Any) -> Any:
    """One plain field's form value as the spec's value, by the kind the spec gives its path."""
    described = f.spec
    words = [c for c in described.choices if isinstance(c, str)]
    if described.kind == "bool":
        return TRI_STATE[raw or "auto"] if described.optional else bool(raw)
    if described.kind in ("int", "float"):
        number = _number(
            raw, f.path, int if described.kind == "int" else float, optional=described.optional or f.zero_means_none
        )
        if number is None or (f.zero_means_none and number == 0):
            if number == 0:  # "0: none" (Held-out rows), even where the spec has a word too ("auto")
                return None
            return words[0] if words else None  # empty batch size or held-out rows: "auto"
        return number
    if raw is None:
        raw = ""
    if not isinstance(raw, str):  # an API caller sent e.g. a list: form_to_spec makes it a FormError
        raise TypeError(f"{f.path} takes text, not {type(raw).__name__}")
    return raw.strip() or (None if described.optional else "")


def _from_spec_value(f: FormField, value: Any) -> Any:
    """The spec's value of a plain field as the form shows it (the inverse of ``_to_spec_value``)."""
    described = f.spec
    if described.kind == "bool" and described.optional:
        return {v: k for k, v in TRI_STATE.items()}[value]
    if described.kind in ("int", "float") and isinstance(value, str):  # a Literal word such as "auto": empty
        return None
    if value is None:
        return f.none_as if f.none_as is not None else ("" if described.kind == "text" else None)
    return getattr(value, "value", value)


def set_path(spec: dict[str, Any], path: str, value: Any) -> None:
    """Set a dotted ``path`` in a nested spec dict, making the parts on the way."""
    *parents, last = path.split(".")
    for name in parents:
        spec = spec.setdefault(name, {})
    spec[last] = value


def get_path(spec: Any, path: str) -> Any:
    """The value at a dotted ``path`` of a spec (model attributes)."""
    for name in path.split("."):
        spec = getattr(spec, name)
    return spec


FORM_FIELDS: dict[str, FormField] = {
    f.name: f for f in [*DECLARED, *generated_fields({method_part(f.path) for f in DECLARED})]
}
# Form field -> its plain default, for any model: the spec's default as a form value unless the declaration says else.
DEFAULTS: dict[str, Any] = {name: f.initial for name, f in FORM_FIELDS.items()}


# --- demo recipes: a built-in model's settings measured to make it learn (backend.api.demo_recipe) ----------------
# The field a recipe's spec path fills: the plain fields by their path, and two hand-mapped ones.
_RECIPE_FIELD = {
    "dataset.name": "builtin_dataset",
    "rollout.rewards": "rollout_rewards",
    **{f.path: name for name, f in FORM_FIELDS.items() if not f.derived},
}


def recipe_values(model: str | None, method: str | None, environment: str | None = None) -> dict[str, Any]:
    """The demo recipe of (``model``, ``method``, ``environment``) as form values (field name -> value); {} where it
    has none."""
    values: dict[str, Any] = {}
    for path, value in demo_recipe(model, method, environment).items():
        name = _RECIPE_FIELD[path]  # a KeyError here: a recipe setting the form has no field for
        if name == "rollout_rewards":
            values[name] = rewards_text([RewardSpec(**reward) for reward in value])
        elif name == "builtin_dataset":
            values[name] = value
        else:
            values[name] = _from_spec_value(FORM_FIELDS[name], value)
    return values


# Every field some built-in model's recipe sets (alone or in an environment), and the dataset (which a method change
# moves too).
RECIPE_FIELDS: tuple[str, ...] = tuple(
    name
    for name in FORM_FIELDS
    if name == "builtin_dataset"
    or any(
        name in recipe_values(model, method, environment)
        for model in CURATED_MODELS
        for method in methods()
        for environment in environment_choices()
    )
)


def dataset_choices(model: str | None, method: str, environment: str | None = None) -> list[str]:
    """The built-in datasets offered for ``method``: the model's demo-recipe dataset first, then the others."""
    suited = builtin_dataset_choices(method)
    first = demo_recipe(model, method, environment).get("dataset.name")
    return [first, *(name for name in suited if name != first)] if first in suited else suited


def pick_dataset(model: str | None, method: str, current: str | None, environment: str | None = None) -> str:
    """The built-in dataset after a method change: the one picked if it suits ``method``, else the first choice."""
    choices = dataset_choices(model, method, environment)
    return current if current in choices else choices[0]


def _plain(name: str, method: str) -> Any:
    """A field's value without a recipe: its plain default; the method's first built-in dataset for the dataset."""
    return builtin_dataset_choices(method)[0] if name == "builtin_dataset" else DEFAULTS[name]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, str) and isinstance(b, str):
        return a.strip() == b.strip()
    return a == b


def recipe_updates(values: dict[str, Any], before: tuple[str, ...], after: tuple[str, ...]) -> dict[str, Any]:
    """The fields that change when the form goes from the (base model, method[, environment]) ``before`` to ``after``.

    A field still holding ``before``'s recipe value or its plain default takes ``after``'s recipe value (its plain
    default where ``after`` has no recipe, or the recipe names no value for it); a value the user typed is kept. The
    built-in dataset the user picked is kept too while it suits ``after``'s method (else the first choice).
    """
    old, new = recipe_values(*before), recipe_values(*after)
    updates: dict[str, Any] = {}
    for name in RECIPE_FIELDS:
        current = values[name]
        if any(_same(current, v) for v in (old.get(name, _plain(name, before[1])), _plain(name, before[1]))):
            target = new.get(name, _plain(name, after[1]))
        elif name == "builtin_dataset":
            target = pick_dataset(*after[:2], current, *after[2:])
        else:
            continue
        if not _same(target, current):
            updates[name] = target
    return updates


# Form field -> the value it starts with: the plain defaults under the starting model's recipe for the starting
# method. The order is the order of the Gradio inputs (components/train_tab.py).
FIELDS: dict[str, Any] = {**DEFAULTS, **recipe_values(DEFAULTS["base_model"], DEFAULTS["method"])}

# What a "which value now" helper answers for "leave the field as it is".
KEEP = object()


def _applies(f: FormField, v: dict[str, Any]) -> bool:
    """Whether a field is sent: its method's fields only for that method, the environment's only with one named."""
    if f.methods is not None and v["method"] not in f.methods:
        return False
    return not f.path.startswith("environment.") or bool((v["env_name"] or "").strip())


def _recipes_own_data(v: dict[str, Any], recipe: dict[str, Any]) -> bool:
    """Whether the form trains on the recipe's own dataset (the built-in one it was measured on)."""
    source = v.get("dataset_source") or "builtin"
    return source == "builtin" and v.get("builtin_dataset") == recipe.get("builtin_dataset")


def _adapt_holdout(v: dict[str, Any], spec: dict[str, Any]) -> None:
    """A recipe's held-out rows are measured for its own dataset: on any other (an upload, a Hub dataset, another
    built-in) the count the recipe filled in becomes ``auto``, which the dataset's size decides (a tenth, at most 128,
    none for a tiny one). A count the user typed is sent as typed."""
    recipe = recipe_values(v["base_model"], v["method"], v["env_name"])
    if "holdout_rows" not in recipe or not _same(v["holdout_rows"], recipe["holdout_rows"]):
        return
    if not _recipes_own_data(v, recipe):
        set_path(spec, "eval.holdout_rows", "auto")


def holdout_shown(values: dict[str, Any]) -> Any:
    """What the *Held-out rows* box shows after the dataset changed: empty (``auto``, the dataset's size decides)
    where it held the recipe's count and the data is no longer the recipe's own, the recipe's count back on its own
    data where it was empty; :data:`KEEP` (leave it) otherwise, a count the user typed included.

    >>> arith = {**FIELDS, "dataset_source": "upload"}
    >>> holdout_shown(arith) is None, holdout_shown({**arith, "holdout_rows": 7}) is KEEP
    (True, True)
    >>> holdout_shown({**FIELDS, "holdout_rows": None}) == FIELDS["holdout_rows"]
    True
    """
    v = {**FIELDS, **values}
    recipe = recipe_values(v["base_model"], v["method"], v["env_name"])
    if "holdout_rows" not in recipe:
        return KEEP
    current, own = v["holdout_rows"], _recipes_own_data(v, recipe)
    if own and current in (None, ""):
        return recipe["holdout_rows"]
    if not own and _same(current, recipe["holdout_rows"]):
        return None
    return KEEP


def form_to_spec(values: dict[str, Any]) -> dict[str, Any]:
    """The spec dict the form describes (validated later by ``parse_spec``, whose messages name the fields)."""
    v = {**FIELDS, **values}
    try:
        spec: dict[str, Any] = {}
        for f in FORM_FIELDS.values():
            if f.derived or not _applies(f, v):
                continue
            value = _to_spec_value(f, v[f.name])
            if value is not None or f.spec.default is not None:  # None where the spec's default is None: left out
                set_path(spec, f.path, value)
        _derived_to_spec(v, spec)
        _adapt_holdout(v, spec)
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
    values = {name: _from_spec_value(f, get_path(spec, f.path)) for name, f in FORM_FIELDS.items() if not f.derived}
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
