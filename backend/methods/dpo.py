"""DPO: translate a JobSpec into TRL's DPOConfig and build a DPOTrainer.

With LoRA the reference model is the policy with its adapter disabled (no second copy in memory); when the job
starts from a parent job's adapter, TRL keeps a frozen copy of that adapter as the reference instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method
from backend.methods.common import base_training_kwargs, policy_trainer
from backend.methods.rendering import render_preference_row
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
    as_messages,
    chunks,
    mean,
    merge_scores,
    per_side,
    render_texts,
    row_tools,
)

if TYPE_CHECKING:
    from trl import DPOConfig, DPOTrainer


def dpo_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """DPOConfig's method kwargs, for the trainer and the TRL CLI export alike."""
    return {"max_length": spec.training.max_length, "beta": spec.dpo.beta, "loss_type": [spec.dpo.loss_type]}


def to_dpo_config(spec: JobSpec, output_dir: Path) -> DPOConfig:
    """Pure translation of the spec's settings into TRL's DPOConfig."""
    from trl import DPOConfig

    return DPOConfig(**base_training_kwargs(spec, output_dir), **dpo_config_kwargs(spec))


def build_dpo_trainer(inputs: TrainerInputs) -> DPOTrainer:
    """The DPOTrainer; the reference is the policy with its adapter off (or the parent's frozen adapter)."""
    from trl import DPOTrainer

    return policy_trainer(DPOTrainer, to_dpo_config(inputs.spec, inputs.output_dir), inputs)


def preference_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Preference accuracy and mean log-prob margin (chosen minus rejected) per side, every side in the same batches;
    and the greedy answers' exact match against the chosen answer (preference learning must not cost accuracy). A
    row's ``tools`` are rendered into its chat template, as the trainer rendered it."""
    model, tokenizer = trainer.model, trainer.processing_class
    # Per row and side: the chosen text, then the rejected one (2 x sides sequences per row).
    items = []
    for row in rows:
        prompt = row.get("prompt", [] if as_messages(row["chosen"]) is not None else "")
        tools = row_tools(row)
        for side in sides:
            items += [
                (side, render_texts(tokenizer, prompt, row["chosen"], tools)),
                (side, render_texts(tokenizer, prompt, row["rejected"], tools)),
            ]
    logprobs = []
    for chunk in chunks(items):
        logprobs += mixed_logprobs(model, tokenizer, [text for _, text in chunk], [side for side, _ in chunk])
    margins = per_side(sides, [(items[i][0], logprobs[i] - logprobs[i + 1]) for i in range(0, len(items), 2)])
    chosen = per_side(sides, [(items[i][0], logprobs[i]) for i in range(0, len(items), 2)])
    scores = {
        side: {
            "preference_accuracy": sum(m > 0 for m in values) / len(values),
            "logprob_margin": sum(values) / len(values),
            "reference_logprob": mean(chosen[side]),
            PER_ROW: {
                "preference_accuracy": [float(m > 0) for m in values],
                "logprob_margin": values,
                "reference_logprob": chosen[side],
            },
        }
        for side, values in margins.items()
    }
    # A chosen side of several turns (a whole agent episode) has no one answer to match: then margins only.
    answered = all_present([answer_pair(row.get("prompt"), row["chosen"]) for row in rows])
    if rows and answered is not None and all(a[0] is not None for a in answered):
        prompts, references = [a[0] for a in answered], [a[1] for a in answered]
        schemas = [row_tools(row) for row in rows]
        merge_scores(scores, answer_scores(model, tokenizer, prompts, references, sides, schemas))
    return scores


SUPPORT = MethodSupport(
    method=Method.dpo,
    spec_part="dpo",
    summary="direct preference optimization (DPO) on preference pairs",
    formats=(
        DataFormat("preference", ("prompt", "chosen", "rejected")),
        DataFormat("implicit-preference", ("chosen", "rejected")),
    ),
    optional_columns=("tools",),  # TRL renders a conversational row's tools (a list or JSON text) into the template
    config_kwargs=dpo_config_kwargs,
    build_trainer=build_dpo_trainer,
    evaluate=preference_scores,
    learning_metrics=lambda spec: (LearningMetric("preference_accuracy", "held-out preference accuracy", rate=True),),
    # Preferring the right answers must neither cost greedy accuracy nor make the chosen answers unlikely.
    guards=lambda spec: (ACCURACY_GUARD, REFERENCE_LIKELIHOOD_GUARD),
    render=render_preference_row,
    card_rows=lambda spec: [("DPO beta", spec.dpo.beta), ("DPO loss", spec.dpo.loss_type)],
    reference_model=always,  # the reference log-probs, every step (the studio does not precompute them)
    sequences_per_example=2,  # chosen and rejected go through the model in one concatenated batch
    loss_unit="DPO loss (nats)",
    monitored=("rewards/margins", "rewards/accuracies", "rewards/chosen", "rewards/rejected"),
    log_columns=(
        ("loss", "loss"),
        ("rewards/margins", "margin"),
        ("rewards/accuracies", "pref acc"),
        ("rewards/chosen", "chosen"),
        ("rewards/rejected", "rejected"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
)
