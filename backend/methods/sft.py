"""SFT: translate a JobSpec into TRL's SFTConfig and build an SFTTrainer (TRL does the training)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.core.learning import LearningMetric
from backend.core.spec import JobSpec, Method
from backend.methods.common import base_training_kwargs, load_policy
from backend.methods.rendering import render_sft_row
from backend.methods.support import ACCURACY_GUARD, LOSS_GUARD, DataFormat, MethodSupport, TrainerInputs
from backend.models.mixed_batch import BASE_ADAPTER
from backend.models.scoring import (
    PER_ROW,
    all_present,
    answer_pair,
    answer_scores,
    mean,
    merge_scores,
    split_answer,
    token_nll,
)

if TYPE_CHECKING:
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer


def assistant_only_loss_supported(tokenizer) -> bool:
    """True when TRL can mask non-assistant tokens for this chat template (it has or can swap in generation tags)."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return False
    if has_generation_markers(template):
        return True
    try:
        get_training_chat_template(tokenizer)
    except ValueError:
        return False
    return True


def sft_config_kwargs(spec: JobSpec, dataset_format: str | None = None, assistant_masks: bool = True) -> dict:
    """SFTConfig's method kwargs, for the trainer and the TRL CLI export alike.

    ``dataset_format`` None: not known (a Hub dataset in the export), so TRL decides from the data it loads. The
    completion-only loss is TRL's assistant-only loss for chats (when the template can mark assistant turns,
    ``assistant_masks``) and its completion-only loss for prompt/completion rows.
    """
    only = spec.sft.completion_only_loss
    kwargs = {
        "max_length": spec.training.max_length,
        "packing": bool(spec.sft.packing),
    }  # best-fit decreasing (TRL's default strategy), padding-free
    if dataset_format == "conversational":
        kwargs["assistant_only_loss"] = only and assistant_masks
    if dataset_format in (None, "prompt-completion"):
        kwargs["completion_only_loss"] = only
    return kwargs


def to_sft_config(spec: JobSpec, output_dir: Path, dataset_format: str, assistant_masks: bool) -> SFTConfig:
    """Pure translation of the spec's settings into TRL's SFTConfig."""
    from trl import SFTConfig

    return SFTConfig(
        **base_training_kwargs(spec, output_dir), **sft_config_kwargs(spec, dataset_format, assistant_masks)
    )


def build_sft_trainer(
    spec: JobSpec,
    output_dir: Path,
    models_dir: Path,
    callbacks: list,
    dataset: Dataset,
    dataset_format: str,
    parent_adapter: Path | None = None,
    eval_dataset: Dataset | None = None,
) -> SFTTrainer:
    """The SFTTrainer; ``eval_dataset`` (the held-out rows) is tokenized with the training rows."""
    from trl import SFTTrainer

    policy = load_policy(spec, models_dir, parent_adapter)
    args = to_sft_config(spec, output_dir, dataset_format, assistant_only_loss_supported(policy.tokenizer))
    return SFTTrainer(
        args=args, train_dataset=dataset, eval_dataset=eval_dataset, callbacks=callbacks, **policy.trainer_kwargs()
    )


def training_template_kwargs(spec: JobSpec, dataset_format: str, tokenizer) -> dict:
    """The template SFTTrainer swaps in for assistant-only loss: it can render earlier turns differently (Qwen3's
    keeps their empty think blocks), so the preview renders with it too."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = getattr(tokenizer, "chat_template", None)
    if dataset_format != "conversational" or not spec.sft.completion_only_loss or not template:
        return {}
    if has_generation_markers(template):
        return {}
    try:
        return {"chat_template": get_training_chat_template(tokenizer)}
    except ValueError:  # no known training template: the job trains on the stock template without masks
        return {}


def _build(inputs: TrainerInputs):
    # The held-out loss comes from trainer.evaluate(), so TRL must tokenize those rows too.
    return build_sft_trainer(
        inputs.spec,
        inputs.output_dir,
        inputs.models_dir,
        inputs.callbacks,
        inputs.dataset,
        inputs.dataset_format,
        inputs.parent_adapter,
        eval_dataset=inputs.held_out,
    )


def _card_rows(spec: JobSpec) -> list[tuple[str, object]]:
    return [
        ("completion-only loss", spec.sft.completion_only_loss),
        ("packing", {True: "on", False: "off", None: "auto"}[spec.sft.packing]),
    ]


def loss_scores(trainer, spec: JobSpec, rows, sides) -> dict[str | None, dict[str, Any]]:
    """The trainer's own held-out loss with the adapter on and off, each row's loss per completion token on every
    side, and, where each row's answer is one assistant reply, the greedy answers' exact match and format."""
    scores: dict[str | None, dict[str, Any]] = {side: {} for side in sides}
    for side in sides:
        if side == BASE_ADAPTER:
            with trainer.model.disable_adapter():
                scores[side]["eval_loss"] = trainer.evaluate()["eval_loss"]
        elif side == sides[0]:
            scores[side]["eval_loss"] = trainer.evaluate()["eval_loss"]
    model, tokenizer = trainer.model, trainer.processing_class
    pairs = all_present([split_answer(row) for row in rows])
    if rows and pairs is not None:
        for side, values in token_nll(model, tokenizer, pairs, sides).items():
            scores[side]["token_nll"] = mean(values)
            scores[side][PER_ROW] = {"token_nll": values}
        answered = all_present([answer_pair(prompt, completion) for prompt, completion in pairs])
        if answered is not None:
            answers = answer_scores(model, tokenizer, [a[0] for a in answered], [a[1] for a in answered], sides)
            merge_scores(scores, answers)
    return scores


SUPPORT = MethodSupport(
    method=Method.sft,
    spec_part="sft",
    summary="supervised fine-tuning (SFT) on demonstrations",
    formats=(
        DataFormat("conversational", ("messages",)),
        DataFormat("prompt-completion", ("prompt", "completion")),
        DataFormat("language-modeling", ("text",)),
    ),
    optional_columns=("tools",),  # TRL renders a conversational row's tools into the chat template
    config_kwargs=sft_config_kwargs,
    build_trainer=_build,
    evaluate=loss_scores,
    # Exact match where each held-out row's answer is one reply, else the loss on the answers.
    learning_metrics=lambda spec: (
        LearningMetric("exact_match", "held-out exact-match accuracy", rate=True),
        LearningMetric("token_nll", "held-out loss (nats/token)", higher_is_better=False),
    ),
    guards=lambda spec: (ACCURACY_GUARD, LOSS_GUARD),
    render=render_sft_row,
    card_rows=_card_rows,
    packing_path="sft.packing",
    template_kwargs=training_template_kwargs,
    loss_unit="cross-entropy (nats/token)",
    monitored=("mean_token_accuracy", "eval_mean_token_accuracy"),
    log_columns=(
        ("loss", "loss"),
        ("eval_loss", "eval loss"),
        ("mean_token_accuracy", "token acc"),
        ("learning_rate", "lr"),
        ("grad_norm", "grad norm"),
    ),
)
