"""KTO: translate a JobSpec into TRL's KTOConfig and build a KTOTrainer, for answers marked good or bad one by one.

KTO learns from unpaired feedback: each row is a prompt, one completion and a label (true: desirable, a thumbs-up;
false: undesirable). As with DPO, a LoRA job's reference model is the policy with its adapter disabled, and a job
that starts from a parent job's adapter keeps a frozen copy of that adapter as the reference.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method
from backend.methods.common import base_training_kwargs, policy_trainer
from backend.methods.rendering import render_sft_row
from backend.methods.support import (
    ACCURACY_GUARD,
    REFERENCE_LIKELIHOOD_GUARD,
    DataFormat,
    MethodSupport,
    TrainerInputs,
    always,
)
from backend.models.mixed_batch import mixed_logprobs
from backend.models.scoring import (
    PER_ROW,
    all_present,
    answer_pair,
    answer_scores,
    chunks,
    merge_scores,
    per_side,
    render_texts,
)

if TYPE_CHECKING:
    from trl import KTOConfig, KTOTrainer


def kto_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """KTOConfig's method kwargs, for the trainer and the TRL CLI export alike."""
    k = spec.kto
    return {
        "max_length": spec.training.max_length,
        "beta": k.beta,
        "desirable_weight": k.desirable_weight,
        "undesirable_weight": k.undesirable_weight,
    }


def to_kto_config(spec: JobSpec, output_dir: Path) -> KTOConfig:
    """Pure translation of the spec's settings into TRL's KTOConfig (the stable ``trl`` import, not experimental)."""
    from trl import KTOConfig

    return KTOConfig(**base_training_kwargs(spec, output_dir), **kto_config_kwargs(spec))


def build_kto_trainer(inputs: TrainerInputs) -> KTOTrainer:
    """The KTOTrainer; the reference is the policy with its adapter off (or the parent's frozen adapter)."""
    from trl import KTOTrainer

    return policy_trainer(KTOTrainer, to_kto_config(inputs.spec, inputs.output_dir), inputs)


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def feedback_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Per side: the mean log-probability of the desirable and of the undesirable completions, and their margin
    (desirable minus undesirable; KTO should raise it). Every side is scored in the same batches; a held-out set
    with one kind of label only has that kind's mean."""
    model, tokenizer = trainer.model, trainer.processing_class
    items = [
        (side, render_texts(tokenizer, row["prompt"], row["completion"]), bool(row["label"]))
        for row in rows
        for side in sides
    ]
    logprobs: list[float] = []
    for chunk in chunks(items):
        logprobs += mixed_logprobs(model, tokenizer, [text for _, text, _ in chunk], [side for side, _, _ in chunk])
    scored = per_side(sides, [(side, (label, lp)) for (side, _, label), lp in zip(items, logprobs)])
    scores: dict[str | None, dict[str, Any]] = {}
    for side, values in scored.items():
        good = _mean([lp for label, lp in values if label])
        bad = _mean([lp for label, lp in values if not label])
        row = {
            "desirable_logprob": good,
            "undesirable_logprob": bad,
            "logprob_margin": good - bad if good is not None and bad is not None else None,
            "reference_logprob": good,
        }
        scores[side] = {name: value for name, value in row.items() if value is not None}
        scores[side][PER_ROW] = {
            "logprob": [lp for _, lp in values],
            "groups": [float(label) for label, _ in values],
            # The capability guard's rows: the desirable answers alone (the references a user wants said).
            "reference_logprob": [lp for label, lp in values if label],
        }
    # The desirable answers are the references: the greedy answers must keep matching them.
    answered = all_present([answer_pair(row["prompt"], row["completion"]) for row in rows if bool(row["label"])])
    if answered:  # neither None (a reference that is no one answer) nor empty
        merge_scores(scores, answer_scores(model, tokenizer, [a[0] for a in answered], [a[1] for a in answered], sides))
    return scores


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    k = spec.kto
    return [("KTO beta", k.beta), ("desirable / undesirable weight", f"{k.desirable_weight} / {k.undesirable_weight}")]


SUPPORT = MethodSupport(
    method=Method.kto,
    spec_part="kto",
    summary="Kahneman-Tversky optimization (KTO) on answers marked good or bad",
    formats=(DataFormat("unpaired-preference", ("prompt", "completion", "label"), labels=("label",)),),
    config_kwargs=kto_config_kwargs,
    build_trainer=build_kto_trainer,
    evaluate=feedback_scores,
    learning_metrics=lambda spec: (
        LearningMetric("logprob", "held-out desirable - undesirable log-prob gap", grouped=True),
    ),
    # The gap widens as well when the good answers become unlikely, only less so than the bad ones: guard both.
    guards=lambda spec: (ACCURACY_GUARD, REFERENCE_LIKELIHOOD_GUARD),
    render=render_sft_row,  # prompt + completion, as KTOTrainer tokenizes them
    card_rows=_card_rows,
    plots=(("loss", "loss"), ("rewards/margins", "reward margin")),
    reference_model=always,  # the reference log-probs, every step
    sequences_per_example=2,  # the completion, and a mismatched one for the KL estimate
    min_batch=2,  # the KL estimate pairs each prompt with another row's completion in the same batch
    loss_unit="KTO loss (nats)",
    monitored=("rewards/margins", "rewards/chosen", "rewards/rejected", "kl"),
    log_columns=(
        ("loss", "loss"),
        ("rewards/margins", "margin"),
        ("rewards/chosen", "good"),
        ("rewards/rejected", "bad"),
        ("kl", "kl"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
)
