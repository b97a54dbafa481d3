"""The Train form as plain data: form values <-> spec dict, and spec problems routed to the field they are about.

No Gradio here, so the mapping is tested on its own; ``components/train.py`` only lays the fields out.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from backend.builtin_datasets import BUILTIN_DATASETS
from backend.demo_model import DEMO_MODEL_ID, DEMO_MODEL_NOTE, is_demo_model
from backend.environments.registry import BUILTIN_ENVIRONMENTS
from backend.spec import JobSpec, field_help
from components.links import job_link

CURATED_MODELS = [
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen3-0.6B",
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    DEMO_MODEL_ID,
]
ENVIRONMENT_CHOICES = ["", *(f"builtin:{name}" for name in BUILTIN_ENVIRONMENTS), "openenv/echo_env"]
DATASET_SOURCES = ["builtin", "hub", "upload"]

# Form field -> default value. The order is the order of the Gradio inputs (components/train.py).
# A setting auto-tune may decide: "auto" leaves it empty in the spec.
TRI_STATE: dict[str, bool | None] = {"auto": None, "on": True, "off": False}

FIELDS: dict[str, Any] = {
    "base_model": DEMO_MODEL_ID,
    "parent_job": "",
    "dataset_source": "builtin",
    "builtin_dataset": "chat-demo",
    "hub_dataset": "",
    "hub_split": "train",
    "upload_id": "",  # what StudioAPI.upload_dataset returned; never a path on the server
    "column_map": "",
    "max_rows": None,
    "method": "sft",
    "sft_completion_only": True,
    "sft_packing": "auto",
    "dpo_beta": 0.1,
    "dpo_loss_type": "sigmoid",
    "grpo_num_generations": 4,
    "grpo_max_completion_length": 128,
    "grpo_temperature": 1.0,
    "grpo_rewards": "- name: accuracy\n  weight: 1.0\n",
    "env_name": "",
    "env_reward": "success",
    "env_max_iterations": 8,
    "env_eval_episodes": 16,
    "max_steps": 30,
    "learning_rate": 2e-4,
    "batch_size": 4,
    "grad_accum": 1,
    "max_length": 512,
    "lora_enabled": True,
    "lora_r": 16,
    "lora_alpha": 32,
    "quant_mode": "none",
    "holdout_rows": 0,
    "run_name": "",
    "push_to_hub": False,
    "hub_repo_id": "",
    "hub_private": True,
    "trackio": False,
}

# Which box under the form shows a problem, by the spec path it starts with.
SECTIONS = ("model", "dataset", "method", "environment", "settings", "general")
_PREFIXES = {
    "model": "model", "dataset": "dataset", "columns": "dataset", "sft": "method", "dpo": "method",
    "grpo": "method", "environment": "environment", "training": "settings", "lora": "settings",
    "quantization": "settings", "eval": "settings", "output": "settings",
}


class FormError(ValueError):
    """A form value that cannot even be turned into a spec (e.g. unreadable rewards YAML); routed like problems."""

    def __init__(self, section: str, message: str):
        super().__init__(message)
        self.section = section


def job_choice_id(choice: str | None) -> str | None:
    """Job pickers show ``<id> · <name>``; the id is the first word."""
    return choice.split()[0] if choice and choice.strip() else None


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
    try:
        rewards = yaml.safe_load(text or "") or []
    except yaml.YAMLError as exc:
        raise FormError("method", f"rewards are not valid YAML: {exc}") from None
    if not isinstance(rewards, list) or not all(isinstance(r, dict) for r in rewards):
        raise FormError("method", "rewards must be a YAML list of mappings, e.g. '- name: accuracy'")
    return rewards


def _number(values: dict[str, Any], name: str, path: str, cast=float, optional: bool = False):
    """Form field ``name`` (spec field ``path``) as a finite number; an empty, non-numeric, infinite or (for whole
    numbers) fractional value is a FormError naming the field, never a TypeError or OverflowError."""
    raw, section = values[name], _PREFIXES[path.split(".")[0]]
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


def _auto(number: int | None) -> int | str:
    """An empty number field left for auto-tune to decide."""
    return "auto" if number is None else number


def form_to_spec(values: dict[str, Any]) -> dict[str, Any]:
    """The spec dict the form describes (validated later by ``parse_spec``, whose messages name the fields)."""
    try:
        return _form_to_spec({**FIELDS, **values})
    except (TypeError, AttributeError) as exc:  # an API caller sent e.g. a list where the form has a text box
        raise FormError("general", f"the form sent a value of the wrong type ({str(exc)[:80]}); "
                        "send text, numbers and booleans as the Train tab does") from None


def _form_to_spec(v: dict[str, Any]) -> dict[str, Any]:
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
    max_rows = _number(v, "max_rows", "dataset.max_rows", int, optional=True)
    if max_rows:
        dataset["max_rows"] = max_rows
    method = v["method"]
    spec: dict[str, Any] = {
        "method": method,
        "model": {"name_or_path": (v["base_model"] or "").strip(), "parent_job_id": job_choice_id(v["parent_job"])},
        "dataset": dataset,
        "lora": {"enabled": bool(v["lora_enabled"]), "r": _number(v, "lora_r", "lora.r", int),
                 "alpha": _number(v, "lora_alpha", "lora.alpha", int)},
        "quantization": {"mode": v["quant_mode"]},
        "training": {
            "max_steps": _number(v, "max_steps", "training.max_steps", int, optional=True),
            "learning_rate": _number(v, "learning_rate", "training.learning_rate"),
            "batch_size": _auto(_number(v, "batch_size", "training.batch_size", int, optional=True)),
            "gradient_accumulation_steps": _number(v, "grad_accum", "training.gradient_accumulation_steps", int),
            "max_length": _number(v, "max_length", "training.max_length", int),
        },
        "eval": {"holdout_rows": _number(v, "holdout_rows", "eval.holdout_rows", int, optional=True) or None},
        "output": {"run_name": v["run_name"] or None, "push_to_hub": bool(v["push_to_hub"]),
                   "hub_repo_id": (v["hub_repo_id"] or "").strip() or None, "private": bool(v["hub_private"]),
                   "trackio": bool(v["trackio"])},
    }
    if method == "sft":
        spec["sft"] = {"completion_only_loss": bool(v["sft_completion_only"]), "packing": TRI_STATE[v["sft_packing"] or "auto"]}
    elif method == "dpo":
        spec["dpo"] = {"beta": _number(v, "dpo_beta", "dpo.beta"), "loss_type": v["dpo_loss_type"]}
    elif method == "grpo":
        spec["grpo"] = {
            "num_generations": _number(v, "grpo_num_generations", "grpo.num_generations", int),
            "max_completion_length": _number(v, "grpo_max_completion_length", "grpo.max_completion_length", int),
            "temperature": _number(v, "grpo_temperature", "grpo.temperature"),
        }
        rewards = parse_rewards(v["grpo_rewards"])
        if v["env_name"]:
            spec["environment"] = {
                "name": v["env_name"].strip(), "reward": v["env_reward"],
                "max_tool_calling_iterations": _number(v, "env_max_iterations",
                                                       "environment.max_tool_calling_iterations", int),
                "eval_episodes": _number(v, "env_eval_episodes", "environment.eval_episodes", int),
            }
            spec["grpo"]["rewards"] = rewards  # with an environment, extra rewards only (may be empty)
        elif rewards:
            spec["grpo"]["rewards"] = rewards
    return spec


def spec_to_form(spec: JobSpec) -> dict[str, Any]:
    """A stored job's settings as form values: "clone this job" fills the Train tab with them."""
    d = spec.dataset
    source = {"builtin": "builtin", "hub": "hub", "upload": "upload", "file": "upload"}[d.source]
    values = {
        "base_model": spec.model.name_or_path,
        "parent_job": spec.model.parent_job_id or "",
        "dataset_source": source,
        "builtin_dataset": d.name if d.source == "builtin" else FIELDS["builtin_dataset"],
        "hub_dataset": d.name if d.source == "hub" else "",
        "hub_split": d.split or "train",
        "upload_id": d.name if d.source in ("upload", "file") else "",
        "column_map": ", ".join(f"{k}={v}" for k, v in (d.columns or {}).items()),
        "max_rows": d.max_rows,
        "method": spec.method.value,
        "sft_completion_only": spec.sft.completion_only_loss,
        "sft_packing": {value: name for name, value in TRI_STATE.items()}[spec.sft.packing],
        "dpo_beta": spec.dpo.beta,
        "dpo_loss_type": spec.dpo.loss_type,
        "grpo_num_generations": spec.grpo.num_generations,
        "grpo_max_completion_length": spec.grpo.max_completion_length,
        "grpo_temperature": spec.grpo.temperature,
        "grpo_rewards": yaml.safe_dump(
            [r.model_dump(exclude_defaults=True) | {"name": r.name} for r in spec.grpo.rewards], sort_keys=False
        ) if spec.grpo.rewards else "",
        "env_name": spec.environment.name or "",
        "env_reward": spec.environment.reward,
        "env_max_iterations": spec.environment.max_tool_calling_iterations,
        "env_eval_episodes": spec.environment.eval_episodes,
        "max_steps": spec.training.max_steps,
        "learning_rate": spec.training.learning_rate,
        "batch_size": None if spec.training.batch_size == "auto" else spec.training.batch_size,
        "grad_accum": spec.training.gradient_accumulation_steps,
        "max_length": spec.training.max_length,
        "lora_enabled": spec.lora.enabled,
        "lora_r": spec.lora.r,
        "lora_alpha": spec.lora.alpha,
        "quant_mode": spec.quantization.mode,
        "holdout_rows": spec.eval.holdout_rows or 0,
        "run_name": spec.output.run_name or "",
        "push_to_hub": spec.output.push_to_hub,
        "hub_repo_id": spec.output.hub_repo_id or "",
        "hub_private": spec.output.private,
        "trackio": spec.output.trackio,
    }
    assert values.keys() == FIELDS.keys()
    return values


def bench_table(scored: list[dict[str, Any]]) -> dict[str, list]:
    """The reward bench's result as a table: completion (cut to 80 characters), each reward's score, total, notes.

    A reward that does not apply to a completion (None) shows "-", as TRL skips it.
    """
    rewards = list(scored[0]["scores"]) if scored else []
    rows = [
        [s["completion"][:80], *("-" if v is None else f"{v:.3f}" for v in s["scores"].values()), f"{s['total']:.3f}",
         "; ".join(s.get("notes", []))]
        for s in scored
    ]
    return {"headers": ["completion", *rewards, "total", "notes"], "data": rows}


def route_problems(problems: list[str]) -> dict[str, list[str]]:
    """Each problem under the section its field belongs to (``dataset: ...`` -> dataset), the rest under general."""
    routed: dict[str, list[str]] = {section: [] for section in SECTIONS}
    for problem in problems:
        head = problem.split(":", 1)[0].split(".", 1)[0].strip()
        routed[_PREFIXES.get(head, "general")].append(problem)
    return routed


def builtin_dataset_choices(method: str | None = None) -> list[str]:
    """Built-in datasets that suit ``method`` (all of them without one)."""
    return [name for name, d in BUILTIN_DATASETS.items() if method is None or method in d.suits]


# The Train tab's help in its own words where the spec's help (written for spec files and the CLI) names spec paths
# or fields the form does not have; every other field shows field_help as it is.
FORM_HELP: dict[str, str] = {
    "parent_job": "Start from a finished job: its base model plus its adapter, trained further (e.g. SFT, then DPO "
                  "or GRPO). The base model is then the parent job's.",
    "column_map": "When your columns are named differently: expected=your_column, e.g. prompt=question, "
                  "completion=answer (SFT) or messages=conversation.",
    "sft_packing": "Pack several short examples into one Max length sequence (no attention across examples). "
                   "auto: on when auto-tune finds the examples short on a GPU.",
    "batch_size": "Examples per step on the device, 1-1024. Empty: auto-tune picks the largest that fits (a power of "
                  "two up to 64 on a GPU, 4 on a CPU, one generation group for GRPO).",
    "env_name": "An OpenEnv environment for GRPO: a Hub Space id (openenv/echo_env), an http(s) URL, or a built-in "
                "(builtin:echo, builtin:wordle, builtin:arithmetic). Empty: no environment.",
    "holdout_rows": "Rows kept out of training; after training, the base and the tuned model are scored on them "
                    "(0: no before/after evaluation).",
}
BASE_MODEL_HELP = ("A curated small instruct model, any Hub id, or the offline demo model (random weights: "
                   "plumbing only).")


def form_help(field: str, path: str) -> str:
    """Help for one Train-tab field: the form's own wording where it has one, else the spec's help for ``path``."""
    return FORM_HELP.get(field) or field_help(path)


def builtin_dataset_help(name: str | None) -> str:
    """What the picked built-in dataset holds and which method it suits."""
    dataset = BUILTIN_DATASETS.get(name or "")
    if dataset is None:
        return "Pick one of the small datasets shipped with the studio (they run offline)."
    return f"{dataset.name}: {dataset.description} For {', '.join(m.upper() for m in dataset.suits)}."


def model_notice(base_model: str | None) -> str:
    """The notice under the model picker: the demo model's caveat when it is picked, else nothing."""
    return f"ℹ️ {DEMO_MODEL_NOTE}" if is_demo_model(base_model) else ""


def queued_link(job_id: str) -> str:
    """A job id as a link that opens the Jobs tab on it (``?job=<id>``), for the Queue and warm-up results."""
    return f"[**{job_id}**]({job_link(job_id)})"
