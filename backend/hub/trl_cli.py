"""The TRL command-line config equivalent to a job: a YAML file that ``trl <method> --config FILE`` accepts.

The keys are the fields of the dataclasses TRL's scripts parse (``trl/scripts/<method>.py``: ScriptArguments
or GRPOScriptArguments, the method's config, ModelConfig). What the CLI cannot express (a built-in or local
dataset, the app's own reward functions, an OpenEnv environment, a held-out evaluation) becomes a YAML comment
that says what to do instead, so the file stays valid and honest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from backend.core.hub_names import BUILTIN_PREFIX, hub_model_id, is_builtin, slug
from backend.core.spec import JobSpec
from backend.core.uploads import dataset_file_name
from backend.data.builtin import BUILTIN_DATASETS
from backend.methods.common import base_training_kwargs
from backend.methods.table import support
from backend.training.distributed import per_process_spec

# Placeholders for what must be uploaded to the Hub before the CLI can use it.
PLACEHOLDER_NAMESPACE = "YOUR_USERNAME"


def default_output_dir(spec: JobSpec) -> str:
    """The CLI config's output_dir: the run name, else <base>-<method>[-lora], made folder-safe."""
    if spec.output.run_name:
        return slug(spec.output.run_name)
    base = spec.model.name_or_path.rstrip("/").split("/")[-1].removeprefix(BUILTIN_PREFIX)
    return slug(f"{base}-{spec.method.value}-lora" if spec.lora.enabled else f"{base}-{spec.method.value}")


def _placeholder_dataset_id(spec: JobSpec) -> str:
    stem = (
        Path(dataset_file_name(spec.dataset)).stem if spec.dataset.source in ("file", "upload") else spec.dataset.name
    )
    return f"{PLACEHOLDER_NAMESPACE}/{slug(stem)}"


def _placeholder_model_id(spec: JobSpec) -> str:
    return f"{PLACEHOLDER_NAMESPACE}/{slug(spec.model.name_or_path.removeprefix(BUILTIN_PREFIX))}"


def _dataset_format(spec: JobSpec) -> str | None:
    """The layout of a shipped sample, read from its first line; None where the export cannot know it (Hub data)."""
    from backend.data.loading import ColumnsMismatch, detect_format

    builtin = BUILTIN_DATASETS.get(spec.dataset.name) if spec.dataset.source == "builtin" else None
    if builtin is None:
        return None
    with open(builtin.path, encoding="utf-8") as fh:
        first = fh.readline()
    try:
        return detect_format(list(json.loads(first)), spec.method) if first.strip() else None
    except ColumnsMismatch:
        return None


def _model_section(spec: JobSpec) -> dict[str, Any]:
    hub_id = hub_model_id(spec.model.name_or_path)
    if hub_id is not None:
        section: dict[str, Any] = {"model_name_or_path": hub_id}
    elif is_builtin(spec.model.name_or_path):
        section = {"model_name_or_path": _placeholder_model_id(spec)}
    else:
        section = {"model_name_or_path": spec.model.name_or_path}
    if spec.model.revision:
        section["model_revision"] = spec.model.revision
    if spec.model.trust_remote_code:
        section["trust_remote_code"] = True
    return section


def _dataset_section(spec: JobSpec) -> dict[str, Any]:
    d = spec.dataset
    if d.source != "hub":
        return {"dataset_name": _placeholder_dataset_id(spec)}
    section: dict[str, Any] = {"dataset_name": d.name}
    if d.config:
        section["dataset_config"] = d.config
    section["dataset_train_split"] = d.split.split("[")[0]  # TRL indexes the loaded splits by name: no slices
    return section


def _training_section(spec: JobSpec, output_dir: str) -> dict[str, Any]:
    t = spec.training
    section: dict[str, Any] = {
        "output_dir": output_dir,
        "learning_rate": t.learning_rate,
        "num_train_epochs": t.epochs,
    }
    if t.max_steps is not None:
        section["max_steps"] = t.max_steps
    # The same TrainingArguments the app's trainers get (warmup ratio as warmup_steps, saving, logging, seed),
    # minus what the CLI machine decides for itself (precision, progress bars, run name).
    # Several processes each take their share of the batch (backend/training/distributed.py), as the app ran them.
    shared = base_training_kwargs(per_process_spec(spec, t.num_processes), Path(output_dir))
    section.update(
        {
            key: shared[key]
            for key in (
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "warmup_steps",
                "seed",
                "logging_steps",
                "save_strategy",
                "save_steps",
                "save_total_limit",
                "gradient_checkpointing",
                "report_to",
            )
        }
    )
    if shared["auto_find_batch_size"]:
        section["auto_find_batch_size"] = True
    if spec.output.run_name:
        section["run_name"] = spec.output.run_name
    return section


def _method_section(spec: JobSpec) -> dict[str, Any]:
    """The method's own keys: the very kwargs its trainer's config gets, plus the script's extras."""
    method = support(spec.method)
    fmt = _dataset_format(spec)
    return {**method.config_kwargs(spec, fmt[0] if fmt else None), **method.cli_extras(spec)}


def _peft_section(spec: JobSpec) -> dict[str, Any]:
    lora = spec.lora
    if not lora.enabled:
        return {"use_peft": False}
    targets = lora.target_modules
    return {
        "use_peft": True,
        "lora_r": lora.r,
        "lora_alpha": lora.alpha,
        "lora_dropout": lora.dropout,
        "lora_target_modules": targets if isinstance(targets, str) else list(targets),
    }


def _quantization_section(spec: JobSpec) -> dict[str, Any]:
    if spec.quantization.mode == "4bit":
        return {"load_in_4bit": True, "bnb_4bit_quant_type": "nf4", "use_bnb_nested_quant": True}
    if spec.quantization.mode == "8bit":
        return {"load_in_8bit": True}
    return {}


def _sections(spec: JobSpec, output_dir: str | None) -> list[tuple[str, dict[str, Any]]]:
    return [
        ("model", _model_section(spec)),
        ("dataset", _dataset_section(spec)),
        ("training", _training_section(spec, output_dir or default_output_dir(spec))),
        (spec.method.value, _method_section(spec)),
        ("LoRA", _peft_section(spec)),
        ("quantization", _quantization_section(spec)),
    ]


def trl_cli_config(spec: JobSpec, output_dir: str | None = None) -> dict[str, Any]:
    """The ``--config`` mapping for ``trl <method>``: every key is a field TRL's script parses."""
    config: dict[str, Any] = {}
    for _, section in _sections(spec, output_dir):
        config.update(section)
    return config


def trl_cli_notes(spec: JobSpec) -> list[str]:
    """What the job did that the TRL CLI config cannot say: one sentence each, rendered as comments."""
    notes: list[str] = []
    if is_builtin(spec.model.name_or_path):
        notes.append(
            f"model: {spec.model.name_or_path} is the app's tiny random demo model, not a Hub model; push its "
            f"folder to {_placeholder_model_id(spec)} or put a real Hub model id in model_name_or_path."
        )
    elif hub_model_id(spec.model.name_or_path) is None:
        notes.append(f"model: {spec.model.name_or_path} is a local folder on the machine that trained this job.")
    if spec.model.parent_job_id:
        notes.append(
            f"model: this job continued the LoRA adapter of job {spec.model.parent_job_id}; the TRL CLI starts a "
            "fresh adapter, so run that earlier stage first and merge its adapter into the base model."
        )
    d = spec.dataset
    if d.source == "builtin":
        file = BUILTIN_DATASETS[d.name].path.name if d.name in BUILTIN_DATASETS else f"{d.name}.jsonl"
        notes.append(
            f"dataset: the built-in sample {d.name!r} is not on the Hub; upload backend/assets/datasets/{file} "
            f"(hf upload {_placeholder_dataset_id(spec)} {file} --repo-type dataset) and set dataset_name to it."
        )
    elif d.source in ("file", "upload"):
        file = dataset_file_name(d)
        notes.append(
            f"dataset: the {'uploaded' if d.source == 'upload' else 'local'} file {file} is not on the Hub; upload it "
            f"(hf upload {_placeholder_dataset_id(spec)} {file} --repo-type dataset) and set dataset_name to it."
        )
    if d.columns:
        renames = ", ".join(f"{theirs} -> {ours}" for ours, theirs in d.columns.items())
        notes.append(f"dataset: the app renamed columns ({renames}); rename them in the uploaded dataset too.")
    if d.source == "hub" and "[" in d.split:
        notes.append(f"dataset: the app loaded the slice {d.split!r}; TRL's CLI takes a whole split by name.")
    if d.max_rows:
        notes.append(f"dataset: the app used only the first {d.max_rows} rows.")
    if spec.eval.holdout_fraction or spec.eval.holdout_rows:
        rows = spec.eval.holdout_rows
        held = "a tenth (at most 128) of the" if rows == "auto" else rows or f"{spec.eval.holdout_fraction:.0%} of the"
        notes.append(f"evaluation: the app held out {held} rows for a before/after evaluation; the CLI trains on all.")
    notes += support(spec.method).cli_notes(spec)
    notes.append("precision: TRL's configs train in bf16 by default; on a CPU or a GPU without bf16 add --bf16 false.")
    notes.extend(launch_notes(spec))
    return notes


def launch_notes(spec: JobSpec) -> list[str]:
    """How the app launched a job of several processes, as the trl command's flags (none for one process)."""
    t = spec.training
    if t.num_processes <= 1:
        return []
    config = "multi_gpu" if t.distributed == "ddp" else t.distributed
    return [
        f"launch: the app trained with {t.num_processes} processes ({t.distributed}; on a CPU, DDP over gloo), each "
        f"taking its share of the batch (per_device_train_batch_size here is one process's); run trl "
        f"{spec.method.value} --config FILE --accelerate_config {config} --num_processes {t.num_processes}."
    ]


def _comment(text: str, width: int = 100) -> list[str]:
    words, lines, line = text.split(), [], "#"
    for word in words:
        if len(line) + 1 + len(word) > width and line != "#":
            lines.append(line)
            line = "#  "
        line += " " + word
    lines.append(line)
    return lines


def trl_cli_yaml(spec: JobSpec, output_dir: str | None = None) -> str:
    """The config as commented YAML: run it with ``trl <method> --config training_config.yaml``."""
    lines = [
        "# TRL CLI equivalent of this Post-Training Studio job (TRL 1.16):",
        f"#   trl {spec.method.value} --config training_config.yaml",
    ]
    for note in trl_cli_notes(spec):
        lines += _comment(note)
    for title, section in _sections(spec, output_dir):
        if not section:
            continue
        lines += ["", f"# {title}", yaml.safe_dump(section, sort_keys=False, default_flow_style=False).rstrip()]
    return "\n".join(lines) + "\n"
