"""A method's row of the table and what it is made of: ``MethodSupport``, ``DataFormat``, ``TrainerInputs``.

Each method module (``sft``, ``dpo``, ``grpo``, ...) ends with its ``SUPPORT`` row, built from these types;
``backend/methods/table.py`` collects the rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method
from backend.models.loading import LANGUAGE_MODEL_HEAD, ModelHead


@dataclass(frozen=True)
class DataFormat:
    """One dataset layout a method accepts: its name, the columns it needs, and which of them are labels.

    Label columns hold booleans (KTO's ``label``: is this completion desirable?); every other column is text or
    messages, and scalar text columns are read as strings.
    """

    name: str
    columns: tuple[str, ...]
    labels: tuple[str, ...] = ()

    @property
    def text_columns(self) -> tuple[str, ...]:
        """The columns that hold text or messages (all but the labels)."""
        return tuple(c for c in self.columns if c not in self.labels)


@dataclass(frozen=True)
class TrainerInputs:
    """What the worker hands a method's trainer builder: the tuned spec, where to write, and the prepared data."""

    spec: JobSpec
    output_dir: Path
    models_dir: Path
    callbacks: list
    dataset: Any  # the rows to train on
    dataset_format: str
    parent_adapter: Path | None = None
    held_out: Any = None  # the before/after evaluation's rows, or None
    environment: Any = None  # an open OpenEnv environment (GRPO), or None
    reward_models: Any = None  # the reward models the rollout's rewards name: training.named_jobs.reward_model_sources


def always(spec: JobSpec) -> bool:
    """For a row's per-spec switches that are on for every job (a reference model every step)."""
    return True


def _never(spec: JobSpec) -> bool:
    return False


def _nothing(spec: JobSpec) -> dict[str, Any]:
    return {}


def _no_notes(spec: JobSpec) -> list[str]:
    return []


def _no_problems(spec: JobSpec, models_dir: Path) -> list[str]:
    return []


def _no_template_kwargs(spec: JobSpec, dataset_format: str, tokenizer) -> dict[str, Any]:
    return {}


def _no_learning_metrics(spec: JobSpec) -> tuple[LearningMetric, ...]:
    return ()


# The capability guards a row's ``guards`` names (backend/core/learning.py): what the user cares about, whatever the
# method optimizes. A log-likelihood guard tolerates a fall of ln 2 nats (the answer half as likely): DPO and KTO move
# the references' likelihood a little by design, and what matters is the collapse (KTO once made them e^12.7 times
# less likely). A loss guard tolerates 0.02 nats per token.
ACCURACY_GUARD = LearningMetric("exact_match", "held-out accuracy", rate=True)
REFERENCE_LIKELIHOOD_GUARD = LearningMetric(
    "reference_logprob", "log-likelihood of the reference answers", tolerance=math.log(2)
)
LOSS_GUARD = LearningMetric("token_nll", "held-out loss (nats/token)", higher_is_better=False, tolerance=0.02)


@dataclass(frozen=True)
class MethodSupport:
    """One method's row: everything the rest of the studio needs to know about it."""

    method: Method
    spec_part: str  # the JobSpec field holding the method's own settings ("sft")
    summary: str  # what the method trains on, as the model card says it
    formats: tuple[DataFormat, ...]  # accepted layouts, most preferred first
    # (spec, dataset format or None when unknown) -> the TRL config's method kwargs; the trainer and the export share it
    config_kwargs: Callable[[JobSpec, str | None], dict[str, Any]]
    build_trainer: Callable[[TrainerInputs], Any]
    # (trainer, spec, held-out rows, sides) -> {side: {metric: value, "per_row": {metric: [row values]}}}; a side is
    # an adapter name (None: no adapter)
    evaluate: Callable[[Any, JobSpec, list[dict], list[str | None]], dict[str | None, dict[str, Any]]]
    render: Callable[[dict, Any, int], Any]  # (example, preview renderer, max_length) -> preview.PreviewRow
    card_rows: Callable[[JobSpec], list[tuple[str, Any]]]  # the method's settings in the model card
    plots: tuple[tuple[str, str], ...] = (("loss", "loss"),)  # (logged metric, label) drawn against the step
    optional_columns: tuple[str, ...] = ()  # read when present (SFT's ``tools``)
    reference_model: Callable[[JobSpec], bool] = _never  # a frozen reference scores every step
    # (completions sampled per prompt, most completion tokens) for methods that generate while training, else None
    generation: Callable[[JobSpec], tuple[int, int]] | None = None
    sequences_per_example: int = 1  # sequences one example puts through the model per step (DPO: chosen + rejected)
    min_batch: int = 1  # the smallest per-device batch the trainer accepts
    packing_path: str | None = None  # spec path of the method's packing switch, if it packs
    # extra apply_chat_template arguments
    template_kwargs: Callable[[JobSpec, str, Any], dict[str, Any]] = _no_template_kwargs
    cli_extras: Callable[[JobSpec], dict[str, Any]] = _nothing  # TRL CLI keys beyond the config kwargs (script args)
    cli_notes: Callable[[JobSpec], list[str]] = _no_notes  # what the TRL CLI cannot express, one sentence each
    # The Jobs tab: the loss plot's unit, the method's own logged metrics it plots (every method also gets loss,
    # learning rate, gradient norm, entropy and throughput), and the training log's (metric, header) columns.
    # The learning verdict's metric: the first of these the evaluation scored per row (backend/core/learning.py).
    learning_metrics: Callable[[JobSpec], tuple[LearningMetric, ...]] = _no_learning_metrics
    # The capability guards on the same rows (any the evaluation scored per row, the verdict's own metric left out):
    # "improved" only when none of them fell.
    guards: Callable[[JobSpec], tuple[LearningMetric, ...]] = _no_learning_metrics
    loss_unit: str = "loss"
    monitored: tuple[str, ...] = ()
    log_columns: tuple[tuple[str, str], ...] = (("loss", "loss"), ("learning_rate", "lr"))
    # What sits on the base model: the language-model head (every method that generates) or the method's own head
    # (a reward model's score); the worker pool imports its loader class ahead of any job.
    head: ModelHead = LANGUAGE_MODEL_HEAD
    # (spec, models dir) -> what pre-flight refuses the job for beyond the data and the base model, one sentence
    # each naming its field (a distillation teacher whose tokens are not the student's)
    preflight: Callable[[JobSpec, Path], list[str]] = _no_problems
    trl_name: str | None = None  # TRL's name for the method where it is not the label (``Reward`` for REWARD)

    @property
    def label(self) -> str:
        """The method's name as people write it: SFT, DPO."""
        return self.method.value.upper()

    @property
    def trl_classes(self) -> tuple[str, str]:
        """The names of the method's TRL trainer and config classes (``SFTTrainer``, ``SFTConfig``): TRL names them
        after the method, and the worker pool imports them ahead of any job."""
        name = self.trl_name or self.label
        return f"{name}Trainer", f"{name}Config"

    def smallest_batch(self, spec: JobSpec) -> int:
        """The smallest per-device batch an auto batch starts from: one generation group, or ``min_batch``."""
        return self.generation(spec)[0] if self.generation is not None else self.min_batch

    def extra_forwards(self, spec: JobSpec) -> int:
        """Forward passes without gradients per training token: the reference model's, and generation's."""
        return int(self.reference_model(spec)) + int(self.generation is not None)

    def packs(self, spec: JobSpec) -> bool:
        """Whether this job packs several examples into one sequence."""
        return self.packing_path is not None and bool(spec_value(spec, self.packing_path))


def spec_value(spec: JobSpec, path: str) -> Any:
    """The value at a dotted spec path (``sft.packing``)."""
    value: Any = spec
    for name in path.split("."):
        value = getattr(value, name)
    return value
