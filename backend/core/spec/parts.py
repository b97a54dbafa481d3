"""The parts every job reads: the model, the dataset, LoRA, quantization, training, evaluation, benchmarks and
output."""

from __future__ import annotations

import math
import unicodedata
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from backend.core.hub_names import BUILTIN_MODELS, HUB_REPO_ID_RULE, is_builtin, is_namespaced_repo_id
from backend.core.spec.base import MAX_SEED, SpecPart, default_model, refuse_control_characters
from backend.core.spec.errors import quote_input


class ModelSpec(SpecPart):
    """The base model (Hub id, local folder or built-in), its revision, or a finished job to continue from."""

    name_or_path: str = Field(
        default_factory=default_model,
        min_length=1,
        description="Base model: a Hub id (Qwen/Qwen2.5-0.5B-Instruct), a local folder, builtin:tiny-qwen3-arith "
        "(a tiny model that knows a little arithmetic) or builtin:tiny-qwen3 (random weights).",
    )
    revision: str | None = Field(None, description="Hub branch, tag or commit of the base model.")
    parent_job_id: str | None = Field(
        None,
        description="Start from a finished job: its base model plus its adapter, trained further (SFT then DPO/GRPO).",
    )
    trust_remote_code: bool = Field(False, description="Run custom modelling code from the model repo.")

    @field_validator("name_or_path")
    @classmethod
    def _known_builtin(cls, value: str) -> str:
        # A misspelt built-in name would otherwise reach the Hub client as a repo id and fail there, as a traceback.
        if is_builtin(value) and value not in BUILTIN_MODELS:
            raise ValueError(f"unknown built-in model; the built-in models are {', '.join(BUILTIN_MODELS)}")
        return value


class DatasetSpec(SpecPart):
    """Where the training data comes from, which split and rows, and how its columns map to the method's."""

    source: Literal["builtin", "hub", "upload", "file"] = Field(
        "builtin",
        description="Where the data comes from: a built-in sample, a Hub dataset id, a file you uploaded, "
        "or a file on this machine (local use only).",
    )
    name: str = Field(
        "chat-demo",
        min_length=1,
        description="Built-in sample name, Hub dataset id, upload id (from Dataset -> Upload), "
        "or path to a .jsonl/.json/.csv/.parquet file.",
    )
    config: str | None = Field(None, description="Hub dataset configuration (subset) name.")
    split: str = Field("train", min_length=1, description="Split to train on.")
    max_rows: int | None = Field(None, gt=0, description="Use at most this many rows (handy for quick tries).")
    columns: dict[str, str] = Field(
        default_factory=dict,
        description="Column mapping, expected name -> your column (e.g. {messages: conversation}).",
    )


class LoraSpec(SpecPart):
    """The LoRA adapter: whether to train one, its rank, scaling, dropout and target modules."""

    enabled: bool = Field(True, description="Train a LoRA adapter instead of all weights.")
    r: int = Field(16, gt=0, le=1024, description="LoRA rank: capacity of the adapter.")
    alpha: int = Field(32, gt=0, description="LoRA scaling (alpha / r multiplies the update).")
    dropout: float = Field(0.05, ge=0.0, lt=1.0, description="Dropout on the LoRA branch.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Modules that get adapters: 'all-linear' or a list such as [q_proj, v_proj]."
    )

    @field_validator("target_modules")
    @classmethod
    def _non_empty(cls, value):
        if isinstance(value, list) and not value:
            raise ValueError("name at least one module, or use 'all-linear'")
        return value


class QuantizationSpec(SpecPart):
    """How the base model is loaded: full precision, 4-bit NF4 (QLoRA) or 8-bit."""

    mode: Literal["none", "4bit", "8bit"] = Field(
        "none", description="Load the base model in 4-bit NF4 (double quant, QLoRA) or 8-bit to save memory."
    )


class TrainingSpec(SpecPart):
    """The optimisation loop: epochs or steps, learning rate, batch, sequence length, seed, checkpoints, processes."""

    epochs: float = Field(1.0, gt=0, description="Passes over the dataset (ignored when max_steps is set).")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    learning_rate: float = Field(2e-4, gt=0, lt=1, description="Peak learning rate.")
    batch_size: int | Literal["auto"] = Field(
        2,
        description="Examples per device per step, 1-1024 (with training.num_processes above 1, per step over all "
        "processes: each takes its share); auto: auto_tune picks the largest that fits each process (a power "
        "of two up to 64 on a GPU, 4 on a CPU, one generation group for GRPO).",
    )
    gradient_accumulation_steps: int = Field(1, gt=0, le=1024, description="Steps whose gradients are summed.")
    max_length: int = Field(1024, gt=8, le=131072, description="Longest tokenized example; longer ones are cut.")
    warmup_ratio: float = Field(0.0, ge=0, lt=1, description="Fraction of steps spent warming up the LR.")
    seed: int = Field(42, ge=0, le=MAX_SEED, description="Random seed for data order and adapter init.")
    logging_steps: int = Field(1, gt=0, description="Log metrics every N steps.")
    save_steps: int = Field(50, gt=0, description="Save a resumable checkpoint every N steps.")
    resume_from_hub: str | None = Field(
        None,
        description="Continue a run from the checkpoint it pushed to the Hub (output.push_checkpoints): the repo id, "
        "e.g. you/my-adapter; its last-checkpoint/ folder is downloaded and training goes on from that step, with the "
        "same model, method and LoRA settings as the run that pushed it.",
    )
    num_processes: int = Field(
        1,
        ge=1,
        le=64,
        description="Training processes: one per GPU (or CPU processes where there is no GPU), launched with "
        "accelerate; more than 1 takes the whole machine and splits training.batch_size (else the gradient "
        "accumulation) between them, so the same spec trains the same global batch. Without a GPU at most the cores "
        "the studio may use; on a Space, for users other than its admins, at most STUDIO_MAX_PROCESSES_PER_JOB "
        "(default 1). Was num_gpus.",
    )
    distributed: Literal["ddp", "fsdp2", "zero2", "zero3"] = Field(
        "ddp",
        description="How several processes share the work: ddp (each holds the whole model; over gloo on a CPU), "
        "fsdp2 or zero2/zero3 (shard the model or optimizer state, GPUs only; TRL's accelerate configs).",
    )
    gradient_checkpointing: bool | None = Field(
        None,
        description="Recompute activations in the backward pass: less memory, ~20-30% more compute. Empty: "
        "off when auto_tune finds the job fits without it, else on (TRL's default).",
    )
    auto_tune: bool = Field(
        True,
        description="Fill the speed settings left empty (gradient checkpointing, packing, fused kernels, "
        "attention) and split the batch between device and accumulation from the memory estimate and the device; "
        "the job log and the Jobs tab say what was chosen and why.",
    )
    use_liger_kernel: bool | None = Field(
        None,
        description="Liger's fused kernels (linear + cross-entropy without the full fp32 logits). Empty: on "
        "when auto_tune runs on a CUDA GPU with liger-kernel installed.",
    )
    stop_when_no_signal: bool = Field(
        False,
        description="GRPO: end the run early, saying why, once several logged steps in a row had nothing to "
        "learn from (every group scored the same, a constant reward, or every completion cut at the length limit).",
    )
    attn_implementation: Literal["sdpa", "eager", "flash_attention_2", "flash_attention_3"] | None = Field(
        None,
        description="Attention kernel. Empty: flash attention when auto_tune finds flash-attn installed on a "
        "bf16 CUDA GPU, else PyTorch's sdpa.",
    )

    @model_validator(mode="before")
    @classmethod
    def _num_gpus_alias(cls, data: Any) -> Any:
        """``num_gpus`` (specs stored before num_processes) is read as ``num_processes``; both at once are refused."""
        if isinstance(data, dict) and "num_gpus" in data:
            if "num_processes" in data:
                raise ValueError("num_gpus: give it once, as training.num_processes (num_gpus is its old name)")
            data = {k: v for k, v in data.items() if k != "num_gpus"} | {"num_processes": data["num_gpus"]}
        return data

    @field_validator("resume_from_hub")
    @classmethod
    def _hub_repo(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not is_namespaced_repo_id(value):
            raise ValueError(f"must be the Hub repo id the checkpoints were pushed to: {HUB_REPO_ID_RULE}")
        return value

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_size(cls, value: Any) -> Any:
        if value == "auto":
            return value
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError("must be a whole number from 1 to 1024, or auto")
        if not 1 <= value <= 1024:
            raise ValueError("must be from 1 to 1024, or auto")
        return int(value)

    def batch_or(self, auto: int) -> int:
        """training.batch_size, or ``auto`` in its place while auto-tune has not decided it yet."""
        return auto if self.batch_size == "auto" else self.batch_size


class EvalSpec(SpecPart):
    """The before/after evaluation: how many rows are held out, and whether the base model is scored too."""

    holdout_fraction: float = Field(
        0.0, ge=0, lt=0.9, description="Share of rows held out for the before/after evaluation (0: none)."
    )
    holdout_rows: int | Literal["auto"] | None = Field(
        None,
        description="Or: this many rows held out (overrides the fraction); auto: a tenth of the dataset, at most "
        "128 and none under 20 rows.",
    )
    compare_base: bool = Field(True, description="Also score the base model on the held-out rows (before/after).")

    @field_validator("holdout_rows", mode="before")
    @classmethod
    def _holdout_rows(cls, value: Any) -> Any:
        if value is None or value == "auto":
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != int(value):
            raise ValueError("must be a whole number above 0, or auto")
        if value <= 0:
            raise ValueError(f"must be above 0, or auto (got {value})")
        return int(value)


class BenchmarksSpec(SpecPart):
    """lm-evaluation-harness tasks scored after training (or by an eval-only job) on base, start and tuned alike."""

    tasks: list[str] = Field(
        default_factory=list,
        max_length=16,
        description="Benchmarks to score: presets (arc_easy, hellaswag, gsm8k, mmlu_*, ifeval), built-in offline "
        "tasks for the demo models (studio_arith, studio_choice), or a JSONL of prompts with a solution column "
        "(a path on the command line, an upload id in the app).",
    )
    limit: int | None = Field(
        None, gt=0, le=100_000, description="Items per task, the same on every side (empty: each task's default)."
    )

    @field_validator("tasks")
    @classmethod
    def _plain_tasks(cls, value: list[str]) -> list[str]:
        for task in value:
            if not task.strip() or len(task) > 300 or any(unicodedata.category(c)[0] == "C" for c in task):
                raise ValueError(f"{quote_input(task)} is not a task name")
        if len(set(value)) != len(value):
            raise ValueError("each task once")
        return value


class EvaluateSpec(SpecPart):
    """An eval-only job: no training, the benchmarks scored on a finished job (base, start, tuned) or on a model."""

    job_id: str | None = Field(
        None,
        description="The finished job to score (its base, its parent's adapter and its adapter); empty: "
        "score model.name_or_path alone.",
    )


# The GGUF types an export writes with llama.cpp's own converter, no compiled llama.cpp needed (docs/hub.md says
# what q4_k_m needs). The export part and the converter (backend/workflows/gguf.py) read this one list.
GGUF_TYPES: tuple[str, ...] = ("f16", "q8_0")
# What an export job makes of a finished job: its adapter merged into the base (safetensors), that merged model as
# one GGUF file for llama.cpp, LM Studio and Ollama, or the adapter itself as a zip.
EXPORT_FORMATS: tuple[str, ...] = ("merged", "gguf", "adapter")


class ExportSpec(SpecPart):
    """An export job: a finished job's model written out (merged, GGUF or its adapter), offered as one download
    (a new export replaces the last one of its format) and optionally pushed to the Hub, all inside the job."""

    job_id: str = Field(..., min_length=1, max_length=64, description="The finished job whose model is exported.")
    format: Literal["merged", "gguf", "adapter"] = Field(
        "merged",
        description="merged (the adapter folded into its base, safetensors), gguf (that merged model as one GGUF file "
        "for llama.cpp, LM Studio and Ollama, with a Modelfile) or adapter (the adapter folder as a zip).",
    )
    gguf_type: Literal["f16", "q8_0"] = Field("q8_0", description="The GGUF file's type, for format gguf.")
    download: bool = Field(True, description="Offer the result as one file to download.")
    push: bool = Field(False, description="Also push the result to the Hub (a model repository), in the job.")
    repo_id: str | None = Field(None, max_length=96, description="The repository to push to (default from the run).")
    private: bool = Field(True, description="Create the pushed repository as private.")
    out: str | None = Field(
        None, max_length=4096, description="A folder on this machine to write to (the person at this machine only)."
    )

    _plain = field_validator("job_id", "repo_id", "out")(refuse_control_characters)


class OutputSpec(SpecPart):
    """What a job is called and where its adapter and checkpoints go: the Hub repo, its privacy, trackio."""

    run_name: str | None = Field(None, max_length=96, description="A name to recognise the job by.")
    push_to_hub: bool = Field(False, description="Push the adapter to the Hub when the job succeeds.")
    push_checkpoints: bool = Field(
        False,
        description="Push each checkpoint to the same Hub repo's last-checkpoint/ folder as it is saved (private "
        "unless private is off), so training.resume_from_hub can finish the run on another machine; a failed push "
        "is recorded, never a failed job.",
    )
    hub_repo_id: str | None = Field(None, description="Target repo, e.g. you/my-adapter (defaults from run name).")
    private: bool = Field(True, description="Create the Hub repo as private.")
    trackio: bool = Field(
        False,
        description="Also log the run to trackio, Hugging Face's local-first experiment "
        "tracker (kept in the data dir; the Jobs tab says how to open its dashboard).",
    )

    _plain_run_name = field_validator("run_name")(refuse_control_characters)

    @field_validator("hub_repo_id")
    @classmethod
    def _valid_repo_id(cls, value: str | None) -> str | None:
        if value is not None and not is_namespaced_repo_id(value):
            raise ValueError(f"must be a Hub repo id: {HUB_REPO_ID_RULE}")
        return value
