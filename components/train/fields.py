"""The Train form as one declaration: each field names its spec path, and its help, default and choices come from the
spec (through ``backend.api``); the hand-written fields' parsing (rewards, column mapping) and dotted paths.

No Gradio here: ``layout.py`` lays the fields out, ``form.py`` maps them to and from a spec. A field whose path starts
with a method's part (``dpo.beta``) belongs to that method: a new method's spec part appears without form code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import yaml

from backend.api import (
    ARITH_MODEL_ID,
    CURATED_MODELS,
    DEMO_MODEL_ID,
    REWARDS,
    JobSpec,
    SpecField,
    builtin_dataset_choices,
    builtin_dataset_help,
    demo_recipe,
    environment_choices,
    field_methods,
    method_part,
    methods,
    spec_field,
)

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
    options: dict[str, Any] = field(default_factory=dict)  # widget only (elem_id, placeholder, closed, radio)

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
        return self.default if self.default is not _SPEC else from_spec_value(self, self.spec.default)


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
    # Every method in sight, one click each (a dropdown from the seventh on hid them behind a click).
    FormField("method", "method", "Method", options={"elem_id": "method", "radio": True}),
    FormField("sft_completion_only", "sft.completion_only_loss", "Loss on completions only"),
    FormField(
        "sft_packing",
        "sft.packing",
        "Packing",
        help="Pack several short examples into one Max length sequence (no attention across examples). "
        "auto: on when auto-tune finds the examples short on a GPU.",
    ),
    FormField("dpo_beta", "dpo.beta", "Beta"),
    FormField("dpo_loss_type", "dpo.loss_type", "Loss"),
    FormField("rollout_num_generations", "rollout.num_generations", "Generations per prompt"),
    FormField("rollout_max_completion_length", "rollout.max_completion_length", "Max completion length"),
    FormField("rollout_temperature", "rollout.temperature", "Temperature"),
    FormField(
        "forecast_prompts",
        "forecast.prompts",
        "Forecast prompts",
        help="Before training, the starting model plays this many prompts (each Generations per prompt times) to "
        "forecast whether the job can learn; Check plays them too. At most a tenth of the job's prompts; 0: no "
        "forecast.",
        options={"minimum": 0, "elem_id": "forecast-prompts"},
    ),
    FormField(
        "forecast_train_anyway",
        "forecast.train_anyway",
        "Train even with no signal",
        help="Train even when the forecast finds no signal (otherwise the job stops before training, its forecast "
        "its verdict).",
    ),
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

_PLAIN_KINDS = ("bool", "int", "float", "text")


def generated_fields(declared: set[str | None]) -> list[FormField]:
    """Fields for each method not in ``declared`` (the methods the declaration lists fields of): its spec part's plain
    settings (flags, numbers, text, choices), labelled from their names, so a new method is trainable without form
    code (distillation's teacher is a text box)."""
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
    "forecast": "method",
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


def to_spec_value(f: FormField, raw: Any) -> Any:
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


def from_spec_value(f: FormField, value: Any) -> Any:
    """The spec's value of a plain field as the form shows it (the inverse of ``to_spec_value``)."""
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
