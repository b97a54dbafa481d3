"""The typed job spec: one validated description of a training job, from the form to the worker."""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Mapping
from enum import Enum
from string import Formatter
from types import UnionType
from typing import Any, ClassVar, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backend.core.hub_names import (
    BUILTIN_MODELS,
    BUILTIN_PREFIX,
    DEMO_MODEL_ID,
    HUB_REPO_ID_RULE,
    hub_offline,
    is_builtin,
    is_namespaced_repo_id,
)

SCHEMA_VERSION = 2
ONLINE_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
# numpy's and torch's seeding accept at most an unsigned 32-bit integer.
MAX_SEED = 2**32 - 1
# A refusal quotes the user's input; a 20 MB field must not become a 20 MB reply.
ECHO_LIMIT = 80
PROBLEM_LIMIT = 500
MAX_FREE_FORM_DEPTH = 64


class SpecError(ValueError):
    """A job spec a person must fix; ``problems`` holds one actionable sentence per problem."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("\n".join(problems))


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with an ellipsis when something was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def quote_input(value: Any, limit: int = ECHO_LIMIT) -> str:
    """The user's input quoted for a refusal, cut to ``limit`` characters so a huge value is never replayed."""
    if isinstance(value, str):
        return repr(shorten(value, limit))
    return shorten(repr(value), limit)


def _free_form_problem(value: Any, max_depth: int = MAX_FREE_FORM_DEPTH) -> str | None:
    """Why free-form JSON-like data (a JSON schema) cannot be stored, or None: NaN or infinity, or too deep."""
    pending: list[tuple[Any, str, int]] = [(value, "", 0)]  # a loop, not recursion: the depth is the user's choice
    while pending:
        item, path, depth = pending.pop()
        if depth > max_depth:
            return f"must not nest deeper than {max_depth} levels"
        if isinstance(item, float) and not math.isfinite(item):
            return f"must hold only finite numbers (got {item!r} at {shorten(path, ECHO_LIMIT)})"
        children = item.items() if isinstance(item, dict) else enumerate(item) if isinstance(item, list) else ()
        pending.extend((child, f"{path}.{key}" if path else str(key), depth + 1) for key, child in children)
    return None


def _refuse_control_characters(value: str | None) -> str | None:
    if value is not None and any(unicodedata.category(ch) == "Cc" or ch in "\u2028\u2029" for ch in value):
        raise ValueError("must not contain control characters such as line breaks or tabs")
    return value


def default_model() -> str:
    """The offline demo model without a network, else a small instruct model from the Hub."""
    return DEMO_MODEL_ID if hub_offline() else ONLINE_DEFAULT_MODEL


class Method(str, Enum):
    """The training methods: SFT (demonstrations), DPO (preference pairs), GRPO and RLOO (rewards), KTO (labels)."""

    sft = "sft"
    dpo = "dpo"
    grpo = "grpo"
    kto = "kto"
    rloo = "rloo"


class _Part(BaseModel):
    # Unknown keys are refused so a typo in a YAML spec is an error, not a silently ignored setting. NaN and
    # infinity are refused because JSON cannot carry them: stored, they would come back as null and poison the row.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class ModelSpec(_Part):
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


class DatasetSpec(_Part):
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


class LoraSpec(_Part):
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


class QuantizationSpec(_Part):
    """How the base model is loaded: full precision, 4-bit NF4 (QLoRA) or 8-bit."""

    mode: Literal["none", "4bit", "8bit"] = Field(
        "none", description="Load the base model in 4-bit NF4 (double quant, QLoRA) or 8-bit to save memory."
    )


class TrainingSpec(_Part):
    """The optimisation loop: epochs or steps, learning rate, batch, sequence length, seed, checkpoints, GPUs."""

    epochs: float = Field(1.0, gt=0, description="Passes over the dataset (ignored when max_steps is set).")
    max_steps: int | None = Field(None, gt=0, description="Stop after this many optimizer steps.")
    learning_rate: float = Field(2e-4, gt=0, lt=1, description="Peak learning rate.")
    batch_size: int | Literal["auto"] = Field(
        2,
        description="Examples per device per step, 1-1024; auto: auto_tune picks the largest that fits (a power "
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
    num_gpus: int = Field(
        1,
        ge=1,
        le=64,
        description="GPUs for this job: more than 1 launches the worker with accelerate (DDP) on the whole machine.",
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


class SFTSpec(_Part):
    """SFT settings: completion-only loss and packing."""

    completion_only_loss: bool = Field(
        True, description="Loss on the assistant turns / completion only, not on the prompt."
    )
    packing: bool | None = Field(
        None,
        description="Pack several short examples into one max_length sequence (best-fit, no attention across "
        "examples). Empty: on when auto_tune finds the examples short on a GPU.",
    )


class DPOSpec(_Part):
    """DPO settings: beta and the loss type."""

    beta: float = Field(0.1, gt=0, le=10, description="How far the model may move from the reference (higher: less).")
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust", "apo_zero", "apo_down", "sigmoid_norm"] = Field(
        "sigmoid", description="DPO loss: sigmoid is the paper's; ipo and robust are gentler on noisy labels."
    )


class KTOSpec(_Part):
    """KTO's settings: how far the model may move, and the weights of good and bad rows."""

    beta: float = Field(0.1, gt=0, le=10, description="How far the model may move from the reference (higher: less).")
    desirable_weight: float = Field(
        1.0, gt=0, description="Weight of the loss on desirable (thumbs-up) rows; raise it when they are fewer."
    )
    undesirable_weight: float = Field(
        1.0, gt=0, description="Weight of the loss on undesirable (thumbs-down) rows; raise it when they are fewer."
    )


RewardName = Literal[
    "accuracy", "reasoning_accuracy", "think_format", "exact_match", "regex", "valid_json", "length", "keywords"
]
REWARD_NAMES: tuple[str, ...] = get_args(RewardName)


class RewardSpec(_Part):
    """One GRPO reward function by name, its weight, and the settings that function reads."""

    name: RewardName = Field(description="Which reward function scores each completion.")
    weight: float = Field(1.0, description="Weight of this reward in the total.")
    column: str | None = Field(
        None, description="Dataset column with the expected answer (exact_match; accuracy uses 'solution')."
    )
    pattern: str | None = Field(None, description="Regular expression the completion must match (regex).")
    json_schema: dict[str, Any] | None = Field(
        None, description="JSON schema the completion must satisfy (valid_json)."
    )
    target_length: int | None = Field(None, gt=0, description="Wanted completion length (length).")
    tolerance: int = Field(0, ge=0, description="Lengths within this distance of the target score 1.0 (length).")
    unit: Literal["chars", "words"] = Field("words", description="How length is counted (length).")
    include: list[str] = Field(default_factory=list, description="Words the completion must contain (keywords).")
    exclude: list[str] = Field(default_factory=list, description="Words the completion must not contain (keywords).")
    case_sensitive: bool = Field(False, description="Match case exactly (exact_match, regex, keywords).")

    @field_validator("json_schema")
    @classmethod
    def _finite_schema(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        problem = _free_form_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _params_fit_the_reward(self) -> RewardSpec:
        if self.name == "exact_match" and not self.column:
            raise ValueError("exact_match needs column: the dataset column holding the expected answer")
        if self.name == "regex":
            if not self.pattern:
                raise ValueError("regex needs pattern")
            try:
                re.compile(self.pattern)
            except (re.error, RecursionError, OverflowError) as exc:  # deep nesting overflows re's parser
                reason = exc if isinstance(exc, re.error) else "nested too deeply"
                raise ValueError(
                    f"pattern {quote_input(self.pattern)} is not a valid regular expression ({reason})"
                ) from None
        if self.name == "valid_json" and self.json_schema is not None:
            from jsonschema import Draft202012Validator, SchemaError

            try:
                Draft202012Validator.check_schema(self.json_schema)
            except SchemaError as exc:
                raise ValueError(f"json_schema is not a valid JSON schema ({exc.message})") from None
        if self.name == "length" and self.target_length is None:
            raise ValueError("length needs target_length")
        if self.name == "keywords" and not any(w.strip() for w in [*self.include, *self.exclude]):
            raise ValueError("keywords needs include or exclude words (blank words do not count)")
        return self


def _default_rewards() -> list[RewardSpec]:
    return [RewardSpec(name="accuracy")]


class RolloutSpec(_Part):
    """How an online method samples and scores: the group of completions per prompt, sampling, the generation
    engine and the rewards. Shared by every method that generates while it trains (GRPO, RLOO)."""

    num_generations: int = Field(4, ge=2, le=64, description="Completions sampled per prompt (the group).")
    max_completion_length: int = Field(
        256, gt=0, le=32768, description="Longest completion; for environments, the whole episode."
    )
    temperature: float = Field(1.0, gt=0, le=2, description="Sampling temperature for the group.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    enable_thinking: bool | None = Field(
        None, description="Qwen3-style chat_template_kwargs enable_thinking (None: the template's default)."
    )
    log_completions: bool = Field(
        True, description="Keep sampled completions and their rewards per step (the Jobs tab's samples table)."
    )
    use_vllm: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Generate with vLLM in colocate mode: auto (when a CUDA GPU and vLLM are present), on, or off.",
    )
    vllm_gpu_memory_utilization: float = Field(
        0.3, gt=0, lt=1, description="Share of GPU memory vLLM may take in colocate mode (the rest trains)."
    )
    rewards: list[RewardSpec] = Field(
        default_factory=_default_rewards,
        description="Reward functions and their weights (with an environment: extra rewards; default none).",
    )


class OnlinePart(_Part):
    """The spec part of a method that generates while it trains: it reads ``rollout`` (samples, rewards), and says
    whether the method can also play an environment (TRL's ``environment_factory``)."""

    takes_environment: ClassVar[bool] = False


class GRPOSpec(OnlinePart):
    """GRPO's own settings: its KL term and loss normalisation (sampling and rewards are in ``rollout``)."""

    takes_environment: ClassVar[bool] = True

    beta: float = Field(0.0, ge=0, description="KL penalty to the reference model (0 disables it, TRL's default).")
    loss_type: Literal["dapo", "grpo", "dr_grpo", "bnpo"] = Field("dapo", description="GRPO loss normalisation.")


class RLOOSpec(OnlinePart):
    """RLOO's own settings: REINFORCE with a leave-one-out baseline (sampling and rewards are in ``rollout``)."""

    beta: float = Field(
        0.05,
        ge=0,
        description="KL penalty subtracted from each completion's reward (TRL's default 0.05; 0 disables it).",
    )
    normalize_advantages: bool = Field(False, description="Scale each batch's advantages to unit variance.")


# The built-in environments by name; backend/environments/builtin/registry.py says what each one is (and refuses to
# drift from this list at import). The names live here so that the spec, the ground floor, imports nothing above it.
BUILTIN_ENVIRONMENT_NAMES = ("echo", "wordle", "arithmetic")


def remote_environment_problem(reference: str) -> str | None:
    """Why ``reference`` names no environment server (a sentence), or None for a Hub Space id or an http(s) URL."""
    if reference.startswith(("http://", "https://")):
        return _environment_url_problem(reference)
    if is_namespaced_repo_id(reference):
        return None
    return (
        f"{quote_input(reference)} is not an environment: give a Hub Space id (owner/name), an http(s) URL, "
        f"or a built-in name such as {BUILTIN_PREFIX}echo"
    )


def _environment_url_problem(url: str) -> str | None:
    """Why an http(s) URL cannot be an environment server's base URL: the studio appends ``/health``, ``/ws`` and the
    like as URL paths, so a query string or fragment (which would swallow them), user-info or a bad port is refused.

    >>> _environment_url_problem("http://host:8000/prefix") is None
    True
    >>> _environment_url_problem("http://host/x?y=")
    "'http://host/x?y=' is not an environment server's URL: it has a query string or fragment; give its base URL"
    """
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{quote_input(url)} is not a valid URL (its host or port cannot be read)"
    if "?" in url or "#" in url:
        return (
            f"{quote_input(url)} is not an environment server's URL: it has a query string or fragment; give its "
            "base URL"
        )
    if "@" in parts.netloc:
        return f"{quote_input(url)} is not an environment server's URL: it holds a user name or password"
    if not parts.hostname or port == 0:
        return f"{quote_input(url)} is not an environment server's URL: it names no host or port"
    return None


def template_problem(template: str) -> str | None:
    """Why an observation template cannot be used (a sentence), or None. Only plain field names are allowed: no
    attribute or index lookups, no conversions."""
    try:
        parsed = list(Formatter().parse(template))
    except ValueError as exc:
        return f"it is not a valid format string ({exc}); write fields as {{name}} and braces as {{{{ }}}}"
    for _, name, _, conversion in parsed:
        if name is not None and (not name.isidentifier() or conversion):
            return f"{{{name}}} is not a plain field name: use {{board}}, {{message}} and the like"
    return None


class EnvironmentSpec(_Part):
    """The OpenEnv environment a GRPO job plays, and how its reward and observations are read."""

    name: str | None = Field(
        None,
        description="OpenEnv environment for GRPO: a Hub Space id (openenv/echo_env), an http(s) URL, "
        "or a built-in (builtin:echo, builtin:wordle, builtin:arithmetic). None: no environment.",
    )
    reward: Literal["success", "last", "sum"] = Field(
        "success",
        description="Reward read from the environment: success (1.0 when the episode ends with a positive "
        "reward, else 0.0; binary, as TRL recommends), last (last reward) or sum (all rewards).",
    )
    max_tool_calling_iterations: int = Field(8, ge=1, le=64, description="Most model turns (tool calls) per episode.")
    eval_episodes: int = Field(
        16,
        ge=0,
        le=512,
        description="Episodes played after training by the base and the tuned model (same seeds) to measure the "
        "success rate (0: skip).",
    )
    timeout_s: float = Field(60.0, gt=0, le=600, description="Longest wait for one environment answer (seconds).")
    observation_template: str | None = Field(
        None,
        max_length=2000,
        description="How the model reads an observation, for the rare environment that needs a layout: a format "
        "string over its fields, e.g. '{board}\\nLegal moves: {legal_moves}'. None: the fields as short text.",
    )

    @field_validator("name")
    @classmethod
    def _known_form(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if is_builtin(value):
            if value.removeprefix(BUILTIN_PREFIX) not in BUILTIN_ENVIRONMENT_NAMES:
                known = ", ".join(f"{BUILTIN_PREFIX}{n}" for n in BUILTIN_ENVIRONMENT_NAMES)
                raise ValueError(f"unknown built-in environment; the built-ins are {known}")
            return value
        problem = remote_environment_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @field_validator("observation_template")
    @classmethod
    def _plain_fields(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        problem = template_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class EvalSpec(_Part):
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


class BenchmarksSpec(_Part):
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


class EvaluateSpec(_Part):
    """An eval-only job: no training, the benchmarks scored on a finished job (base, start, tuned) or on a model."""

    job_id: str | None = Field(
        None,
        description="The finished job to score (its base, its parent's adapter and its adapter); empty: "
        "score model.name_or_path alone.",
    )


class OutputSpec(_Part):
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

    _plain_run_name = field_validator("run_name")(_refuse_control_characters)

    @field_validator("hub_repo_id")
    @classmethod
    def _valid_repo_id(cls, value: str | None) -> str | None:
        if value is not None and not is_namespaced_repo_id(value):
            raise ValueError(f"must be a Hub repo id: {HUB_REPO_ID_RULE}")
        return value


class JobSpec(_Part):
    """Everything one training job needs, validated: method, model, data, LoRA, training, rewards and output."""

    schema_version: int = Field(SCHEMA_VERSION, description="Spec format version.")
    method: Method = Field(
        Method.sft,
        description="sft (demonstrations), dpo (preference pairs), grpo or rloo (rewards), kto (answers marked good "
        "or bad).",
    )
    model: ModelSpec = Field(default_factory=ModelSpec)
    dataset: DatasetSpec = Field(default_factory=DatasetSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    quantization: QuantizationSpec = Field(default_factory=QuantizationSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    sft: SFTSpec = Field(default_factory=SFTSpec)
    dpo: DPOSpec = Field(default_factory=DPOSpec)
    grpo: GRPOSpec = Field(default_factory=GRPOSpec)
    rollout: RolloutSpec = Field(default_factory=RolloutSpec)
    kto: KTOSpec = Field(default_factory=KTOSpec)
    rloo: RLOOSpec = Field(default_factory=RLOOSpec)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    benchmarks: BenchmarksSpec = Field(default_factory=BenchmarksSpec)
    evaluate: EvaluateSpec | None = Field(
        None, description="Set for an eval-only job: score the benchmarks, train nothing (method is then unused)."
    )
    output: OutputSpec = Field(default_factory=OutputSpec)
    owner: str = Field("local", min_length=1, max_length=96, description="Who submitted the job.")

    _plain_owner = field_validator("owner")(_refuse_control_characters)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if value != SCHEMA_VERSION:
            raise ValueError(f"this app reads spec versions 1 and {SCHEMA_VERSION}; got {value}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """Old specs, and the environment's reward default, in one place and in this order:

        1. version 1 kept sampling and rewards under ``grpo``: those keys move to ``rollout`` (whatever the version
           says, so a hand-written YAML file without one still loads; a key given in both places is refused);
        2. version 1 becomes 2;
        3. with an environment, the environment is the reward: the default reward list becomes empty.
        """
        if not isinstance(data, dict):
            return data
        grpo, rollout = data.get("grpo"), data.get("rollout")
        if isinstance(grpo, dict) and any(key in RolloutSpec.model_fields for key in grpo):
            moved = {k: v for k, v in grpo.items() if k in RolloutSpec.model_fields}
            rollout = dict(rollout) if isinstance(rollout, dict) else {}
            both = sorted(set(moved) & set(rollout))
            if both:
                raise ValueError(
                    f"grpo.{both[0]}: give it once, as rollout.{both[0]} (what every online method shares)"
                )
            grpo = {k: v for k, v in grpo.items() if k not in RolloutSpec.model_fields}
            data = {**data, "grpo": grpo, "rollout": {**moved, **rollout}}
        if data.get("schema_version") == 1:
            data = {**data, "schema_version": SCHEMA_VERSION}
        env, rollout = data.get("environment"), data.get("rollout")
        named = isinstance(env, dict) and env.get("name")
        if named and (rollout is None or (isinstance(rollout, dict) and "rewards" not in rollout)):
            data = {**data, "rollout": {**(rollout or {}), "rewards": []}}
        return data

    @property
    def method_part(self) -> _Part:
        """The method's own settings (``spec.dpo`` for DPO)."""
        return getattr(self, self.method.value)

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.evaluate is not None and not self.benchmarks.tasks:
            raise ValueError("benchmarks.tasks: an eval-only job needs at least one task")
        if self.quantization.mode != "none" and not self.lora.enabled:
            raise ValueError(
                "a quantized base model cannot be trained directly: enable LoRA (lora.enabled: true) "
                "or set quantization.mode to none"
            )
        part = self.method_part
        online = isinstance(part, OnlinePart)
        takes_environment = isinstance(part, OnlinePart) and part.takes_environment
        if self.environment.name and not takes_environment:
            takers = ", ".join(m.value.upper() for m in environment_methods())
            raise ValueError(
                f"environment.name is only used by {takers}: set method to {takers.lower()} or remove the environment"
            )
        if online and not self.environment.name and not self.rollout.rewards:
            also = ", or an environment to reward it" if takes_environment else ""
            raise ValueError(f"rollout.rewards: {self.method.value.upper()} needs at least one reward function{also}")
        if online:
            # An auto batch becomes one generation group (auto-tune), always a multiple.
            group = self.rollout.num_generations
            per_generation = self.training.batch_or(group) * self.training.gradient_accumulation_steps
            if per_generation % group:
                raise ValueError(
                    f"training.batch_size x training.gradient_accumulation_steps (= {per_generation}) must be a "
                    f"multiple of rollout.num_generations ({group}): each prompt's whole group "
                    "is sampled in one generation batch"
                )
        return self

    # --- JSON round trip -------------------------------------------------------------------------
    def to_json(self) -> str:
        """The spec as JSON text, as the store keeps it and the worker reads it."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> JobSpec:
        """The spec from JSON text (``parse_spec``); SpecError lists every problem."""
        return parse_spec(text)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """The spec from parsed YAML or JSON data (``parse_spec``); SpecError lists every problem."""
        return parse_spec(data)


def _part_class(method: Method) -> type:
    """The class of a method's own spec part (``DPOSpec`` for DPO)."""
    annotation = JobSpec.model_fields[method.value].annotation
    assert isinstance(annotation, type)
    return annotation


def online_methods() -> tuple[Method, ...]:
    """The methods that generate while they train (their spec part is an ``OnlinePart``): they read ``rollout``."""
    return tuple(m for m in Method if issubclass(_part_class(m), OnlinePart))


def environment_methods() -> tuple[Method, ...]:
    """The online methods that can also play an OpenEnv environment."""
    return tuple(m for m in online_methods() if getattr(_part_class(m), "takes_environment", False))


def methods_reading(part: str) -> tuple[Method, ...] | None:
    """The methods that read a spec part: a method's own part is that method's, ``rollout`` every online method's,
    ``environment`` every method that can play one; None for a part every method reads (``training``)."""
    if part in Method._value2member_map_:
        return (Method(part),)
    if part == "rollout":
        return online_methods()
    if part == "environment":
        return environment_methods()
    return None


def _describe(error: Mapping[str, Any]) -> str:
    # Dict keys in the location are the user's input too (an unknown setting, a column mapping).
    where = ".".join(shorten(str(p), ECHO_LIMIT) for p in error["loc"]) or "spec"
    kind = error["type"]
    got = error.get("input")
    if kind == "extra_forbidden":
        return f"{where}: unknown setting (check the spelling; see the spec fields in docs/spec.md)"
    if kind == "missing":
        return f"{where}: required"
    msg = error["msg"]
    # A validator elsewhere (an environment URL check) may quote the input at any length.
    msg = shorten(msg.removeprefix("Value error, "), PROBLEM_LIMIT)
    if kind in {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "finite_number"}:
        msg = msg.replace("Input should be", "must be")
    if isinstance(got, (int, float, str)) and not isinstance(got, bool) and kind != "missing":
        return f"{where}: {msg} (got {quote_input(got)})"
    return f"{where}: {msg}"


def parse_spec(data: str | dict[str, Any]) -> JobSpec:
    """Validate a spec from JSON text or a dict; raise :class:`SpecError` listing every problem."""
    try:
        if isinstance(data, str):
            return JobSpec.model_validate_json(data)
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        raise SpecError([_describe(e) for e in exc.errors()]) from None


MAX_SPEC_BYTES = 1 << 20


def load_spec_text(text: str | bytes, where: str = "spec") -> dict[str, Any]:
    """A spec mapping from JSON or YAML text (a file, an API call); every way it can be unreadable is a SpecError.

    ``where`` names the source in the sentence (a file path, ``spec``). Size is capped before parsing, and deep
    nesting (a RecursionError in the parsers) is refused like any other malformed input.
    """
    if len(text) > MAX_SPEC_BYTES:
        raise SpecError([f"{where}: {len(text)} bytes is larger than a spec can be ({MAX_SPEC_BYTES} bytes)"])
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError([f"{where}: not UTF-8 text (byte {exc.start}); save it as UTF-8 JSON or YAML"]) from None
    try:
        data = _json_or_yaml(text, where)
    except RecursionError:
        raise SpecError([f"{where}: nested too deeply to be a spec"]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{where}: must be a mapping of spec fields (got {type(data).__name__})"])
    return data


def _json_or_yaml(text: str, where: str) -> Any:
    import json

    import yaml

    try:
        return json.loads(text)
    except ValueError as json_error:  # YAML is a superset of JSON in all but a few corners, so JSON goes first
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as yaml_error:
            cause = json_error if text.lstrip().startswith("{") else yaml_error
            raise SpecError([f"{where}: not valid JSON or YAML ({str(cause).splitlines()[0][:120]})"]) from None


def field_docs(model: type[BaseModel] = JobSpec, prefix: str = "") -> list[tuple[str, str, str]]:
    """(dotted field, default, help) for every leaf field: the single source for docs/spec.md and UI help."""
    rows: list[tuple[str, str, str]] = []
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            rows.extend(field_docs(annotation, f"{prefix}{name}."))
            continue
        if info.default_factory is not None:
            default = {
                "name_or_path": "(offline: builtin:tiny-qwen3, else Qwen/Qwen2.5-0.5B-Instruct)",
                "rewards": "[{name: accuracy}]",
            }.get(name, "[]" if "list" in str(annotation) else "{}")
        elif info.is_required():
            default = "required"
        else:
            default = info.default.value if isinstance(info.default, Enum) else info.default
            default = "null" if default is None else str(default)
        rows.append((f"{prefix}{name}", default, info.description or ""))
    return rows


def field_help(path: str) -> str:
    """Help text for one dotted field, for the UI's ``info=``."""
    return {p: h for p, _, h in field_docs()}[path]


def spec_fields_markdown() -> str:
    """Markdown tables of every spec field, every reward setting and the eval-only part: type, default and help.

    docs/spec.md is this text (scripts/build_spec_docs.py writes it; a test holds it current).
    """

    def table(model: type[BaseModel], prefix: str = "") -> list[str]:
        rows = [f"| `{p}` | {_type_text(model, p)} | `{d}` | {h} |" for p, d, h in field_docs(model)]
        return ["| field | type | default | meaning |", "| --- | --- | --- | --- |", *rows]

    lines = table(JobSpec)
    lines += ["", "Each entry of `rollout.rewards`:", "", *table(RewardSpec)]
    lines += ["", "The `evaluate` part (an eval-only job):", "", *table(EvaluateSpec)]
    return "\n".join(lines)


def _type_text(model: type[BaseModel], path: str) -> str:
    # The dotted path's field, then its type as a spec writer reads it: choices spelled out, bounds after a comma.
    *parts, name = path.split(".")
    for part in parts:
        model = model.model_fields[part].annotation  # type: ignore[assignment]
    info = model.model_fields[name]
    bounds = [
        f"{word} {getattr(rule, attr)}"
        for rule in info.metadata
        for attr, word in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="), ("min_length", "length >="))
        + (("max_length", "length <="),)
        if getattr(rule, attr, None) is not None
    ]
    return ", ".join([_annotation_text(info.annotation), *bounds])


def _annotation_text(annotation: Any) -> str:
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return " or ".join(str(member.value) for member in annotation)
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is Literal:
        return " or ".join(str(value) for value in args)
    if origin in (Union, UnionType):
        return " or ".join(_annotation_text(arg) for arg in args)
    if origin is list:
        return f"list of {_annotation_text(args[0])}"
    if origin is dict:
        return f"mapping of {_annotation_text(args[0])} to {_annotation_text(args[1])}"
    return "any" if annotation is Any else getattr(annotation, "__name__", str(annotation))


def checkpointing(spec: JobSpec) -> bool:
    """Whether the job recomputes activations: training.gradient_checkpointing, on when left empty (TRL's
    default; auto-tune decides before training starts)."""
    return spec.training.gradient_checkpointing is not False
