"""Reward modeling: translate a JobSpec into TRL's RewardConfig and build a RewardTrainer, which teaches a score head
on the base model to rate the chosen answer of each preference pair above the rejected one.

The base model is loaded with a one-score head (transformers' sequence classification, ``num_labels=1``); LoRA trains
the layers beneath it, and the head itself, new and random, is trained and saved whole beside the adapter (PEFT's
``modules_to_save``). It reads the preference layouts DPO reads, as TRL does: prompt + chosen against prompt +
rejected, or chosen against rejected when the prompt is implicit.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method
from backend.methods.common import base_training_kwargs, policy_trainer
from backend.methods.rendering import render_preference_row
from backend.methods.support import DataFormat, MethodSupport, TrainerInputs
from backend.models.loading import ModelHead
from backend.models.mixed_batch import model_device, side_kwargs
from backend.models.scoring import PER_ROW, as_messages, chunks, mean, per_side, row_tools

if TYPE_CHECKING:
    from trl import RewardConfig, RewardTrainer

# One score per sequence, read at its last token. ``score`` is the head's name in Qwen, Llama and Mistral models
# (PEFT's SEQ_CLS task also saves a head named ``classifier``).
SCORE_HEAD = ModelHead("AutoModelForSequenceClassification", "SEQ_CLS", num_labels=1, modules_to_save=("score",))


def reward_config_kwargs(spec: JobSpec, dataset_format: str | None = None) -> dict:
    """RewardConfig's method kwargs, for the trainer and the TRL CLI export alike."""
    kwargs: dict[str, Any] = {"max_length": spec.training.max_length}
    if spec.reward.center_rewards_coefficient is not None:
        kwargs["center_rewards_coefficient"] = spec.reward.center_rewards_coefficient
    return kwargs


def to_reward_config(spec: JobSpec, output_dir: Path) -> RewardConfig:
    """Pure translation of the spec's settings into TRL's RewardConfig."""
    from trl import RewardConfig

    return RewardConfig(**base_training_kwargs(spec, output_dir), **reward_config_kwargs(spec))


def build_reward_trainer(inputs: TrainerInputs) -> RewardTrainer:
    """The RewardTrainer on the base model with a score head (TRL loads it with ``num_labels=1`` and sets its pad
    token id) and the job's LoRA, which trains and saves the head too."""
    from trl import RewardTrainer

    return policy_trainer(RewardTrainer, to_reward_config(inputs.spec, inputs.output_dir), inputs, SCORE_HEAD)


def scored_ids(tokenizer, row: dict, side: str) -> list[int]:
    """The tokens the head scores for one side (``chosen`` or ``rejected``) of a row, as RewardTrainer tokenizes it:
    the prompt and the answer through the chat template (with the row's ``tools``), or plain text ending in EOS."""
    answer = row[side]
    if as_messages(answer) is not None:
        messages = row.get("prompt", []) + answer
        return list(
            tokenizer.apply_chat_template(messages, tools=row_tools(row), tokenize=True, return_dict=True)["input_ids"]
        )
    text = row.get("prompt", "") + answer
    return tokenizer(text=text if text.endswith(tokenizer.eos_token) else text + tokenizer.eos_token)["input_ids"]


def sequence_scores(model, tokenizer, sequences: list[list[int]], adapter_names: list[str | None]) -> list[float]:
    """The head's score of each token sequence under that row's adapter (``__base__``: the adapter and the trained
    head off), in one right-padded forward pass; the model reads each row's score at its last token that is not
    padding."""
    import torch

    batch = tokenizer.pad({"input_ids": sequences}, padding_side="right", return_tensors="pt")
    with torch.inference_mode():
        logits = model(**batch.to(model_device(model)), use_cache=False, **side_kwargs(adapter_names)).logits
    return [float(score) for score in logits[:, 0].float()]


def pairwise_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """Per side: the share of held-out pairs whose chosen answer scores above the rejected one (pairwise accuracy),
    and the mean margin between the two scores; every side in the same batches. The base side is the base model with
    the head it started from (random: about half the pairs right)."""
    model, tokenizer = trainer.model, trainer.processing_class
    items = [
        (side, scored_ids(tokenizer, row, answer))
        for row in rows
        for side in sides
        for answer in ("chosen", "rejected")
    ]
    scores: list[float] = []
    for chunk in chunks(items):
        scores += sequence_scores(model, tokenizer, [ids for _, ids in chunk], [side for side, _ in chunk])
    margins = per_side(sides, [(items[i][0], scores[i] - scores[i + 1]) for i in range(0, len(items), 2)])
    return {
        side: {
            "pairwise_accuracy": mean([float(m > 0) for m in values]),
            "reward_margin": mean(values),
            PER_ROW: {"pairwise_accuracy": [float(m > 0) for m in values], "reward_margin": values},
        }
        for side, values in margins.items()
    }


def _cli_extras(spec: JobSpec) -> dict[str, Any]:
    """The TRL CLI's PEFT keys for a score head (its ModelConfig defaults to a language-model adapter)."""
    if not spec.lora.enabled:
        return {}
    return {"lora_task_type": SCORE_HEAD.peft_task, "lora_modules_to_save": list(SCORE_HEAD.modules_to_save)}


SUPPORT = MethodSupport(
    method=Method.reward,
    spec_part="reward",
    summary="reward modeling: a score head trained to rate the chosen answer of preference pairs above the rejected",
    formats=(
        DataFormat("preference", ("prompt", "chosen", "rejected")),
        DataFormat("implicit-preference", ("chosen", "rejected")),
    ),
    optional_columns=("tools",),  # TRL renders a conversational row's tools into the template
    config_kwargs=reward_config_kwargs,
    build_trainer=build_reward_trainer,
    evaluate=pairwise_scores,
    learning_metrics=lambda spec: (LearningMetric("pairwise_accuracy", "held-out pairwise accuracy", rate=True),),
    # No guards: a reward model generates nothing, and its LoRA and head are an artifact of their own, so no answer,
    # likelihood or loss of the base model can fall; the pairwise accuracy is the whole story.
    render=render_preference_row,
    card_rows=lambda spec: [("center rewards coefficient", spec.reward.center_rewards_coefficient or "off")],
    cli_extras=_cli_extras,
    plots=(("loss", "loss"), ("accuracy", "pairwise accuracy"), ("margin", "reward margin")),
    sequences_per_example=2,  # chosen and rejected go through the model in one batch
    loss_unit="pairwise loss (nats)",
    monitored=("accuracy", "margin"),
    log_columns=(
        ("loss", "loss"),
        ("accuracy", "pair acc"),
        ("margin", "margin"),
        ("mean_reward", "mean score"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
    head=SCORE_HEAD,
    trl_name="Reward",
)
