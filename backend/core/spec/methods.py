"""The methods: their names (``Method``) and their own parts: SFT, DPO, KTO, reward-model and distillation settings,
and the online methods (GRPO, RLOO) with the rollout and rewards they share. A new method's name and settings go here
together."""

from __future__ import annotations

import re
from enum import Enum
from typing import Any, ClassVar, Literal, get_args

from pydantic import Field, field_validator, model_validator

from backend.core.spec.base import SpecPart, free_form_problem, refuse_control_characters
from backend.core.spec.errors import quote_input


class Method(str, Enum):
    """The training methods: SFT (demonstrations), DPO (preference pairs), GRPO and RLOO (rewards), KTO (labels),
    reward modeling (a score head on preference pairs), distillation (a teacher's token distributions)."""

    sft = "sft"
    dpo = "dpo"
    grpo = "grpo"
    kto = "kto"
    rloo = "rloo"
    reward = "reward"
    distillation = "distillation"


class SFTSpec(SpecPart):
    """SFT settings: completion-only loss and packing."""

    completion_only_loss: bool = Field(
        True, description="Loss on the assistant turns / completion only, not on the prompt."
    )
    packing: bool | None = Field(
        None,
        description="Pack several short examples into one max_length sequence (best-fit, no attention across "
        "examples). Empty: on when auto_tune finds the examples short on a GPU.",
    )


class DPOSpec(SpecPart):
    """DPO settings: beta and the loss type."""

    beta: float = Field(0.1, gt=0, le=10, description="How far the model may move from the reference (higher: less).")
    loss_type: Literal["sigmoid", "ipo", "hinge", "robust", "apo_zero", "apo_down", "sigmoid_norm"] = Field(
        "sigmoid", description="DPO loss: sigmoid is the paper's; ipo and robust are gentler on noisy labels."
    )


class KTOSpec(SpecPart):
    """KTO's settings: how far the model may move, and the weights of good and bad rows."""

    beta: float = Field(0.1, gt=0, le=10, description="How far the model may move from the reference (higher: less).")
    desirable_weight: float = Field(
        1.0, gt=0, description="Weight of the loss on desirable (thumbs-up) rows; raise it when they are fewer."
    )
    undesirable_weight: float = Field(
        1.0, gt=0, description="Weight of the loss on undesirable (thumbs-down) rows; raise it when they are fewer."
    )


class RewardModelSpec(SpecPart):
    """Reward modeling's settings: a score head trained on preference pairs (TRL's RewardTrainer)."""

    center_rewards_coefficient: float | None = Field(
        None,
        ge=0,
        le=10,
        description="Pull the scores toward a mean of zero, so a reward from different runs reads alike (TRL's "
        "center_rewards_coefficient; 0.01 is the paper's). Empty: off.",
    )


class DistillationSpec(SpecPart):
    """On-policy distillation's settings (TRL's DistillationTrainer): the student (the job's base model with LoRA)
    writes answers to the prompts, and learns the teacher's next-token distribution over each of them."""

    # Fields that may name one of the user's finished jobs: the facade turns the id into that job's adapter folder.
    job_fields: ClassVar[tuple[str, ...]] = ("teacher",)

    teacher: str = Field(
        "",
        max_length=512,
        description="The model to learn from: your finished job's id (its base model with its adapter merged), a Hub "
        "id or a built-in model. It must share the student's tokenizer.",
    )
    beta: float = Field(
        1.0,
        ge=0,
        le=1,
        description="Which divergence to the teacher: 0 forward KL, 0.5 Jensen-Shannon, 1 reverse KL (TRL's "
        "default: the student settles on the teacher's likeliest answers).",
    )
    max_completion_length: int = Field(
        256, gt=0, le=32768, description="Longest answer the student writes per prompt (and the evaluation too)."
    )
    temperature: float = Field(
        1.0, gt=0, le=2, description="Sampling temperature of the student's answers and of both distributions."
    )

    _plain_teacher = field_validator("teacher")(refuse_control_characters)


RewardName = Literal[
    "accuracy",
    "reasoning_accuracy",
    "think_format",
    "exact_match",
    "regex",
    "valid_json",
    "length",
    "keywords",
    "reward_model",
]
REWARD_NAMES: tuple[str, ...] = get_args(RewardName)


class RewardSpec(SpecPart):
    """One GRPO reward function by name, its weight, and the settings that function reads; or a reward model
    (``{model: JOB_ID or Hub id, weight}``: its name is then ``reward_model``)."""

    name: RewardName = Field(description="Which reward function scores each completion.")
    model: str | None = Field(
        None,
        min_length=1,
        max_length=200,
        description="A reward model scores each prompt + completion (reward_model): your finished reward job's id, "
        "or a sequence-classification model's Hub id (one score).",
    )
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
        problem = free_form_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _model_names_the_reward(cls, data: Any) -> Any:
        """``{model: ..., weight: ...}`` is a reward model: its name needs no saying."""
        if isinstance(data, dict) and data.get("model") is not None and "name" not in data:
            return {**data, "name": "reward_model"}
        return data

    @model_validator(mode="after")
    def _params_fit_the_reward(self) -> RewardSpec:
        if self.name == "reward_model" and not self.model:
            raise ValueError("reward_model needs model: your reward job's id, or a reward model's Hub id")
        if self.model is not None and self.name != "reward_model":
            raise ValueError(f"model is for a reward model; the {self.name} reward reads none (drop name or model)")
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


# Each reward model a job names is loaded beside the model it trains (and by pre-flight, to see that it scores a
# group of completions differently): a few at most. The functions are cheap, but each entry is computed per completion.
MAX_REWARD_MODELS = 4
MAX_REWARDS = 32


def rewards_problem(rewards: list[RewardSpec]) -> str | None:
    """Why a list of rewards is too long (one sentence, without its field's name), or None.

    >>> rewards_problem([RewardSpec(model=f"owner/rm-{i}") for i in range(5)])[:58]
    'at most 4 different reward models per job (you named 5): e'
    >>> rewards_problem([RewardSpec(model="owner/rm")] * 5) is None
    True
    """
    if len(rewards) > MAX_REWARDS:
        return f"at most {MAX_REWARDS} rewards per job (you gave {len(rewards)}); keep the ones that matter"
    models = {reward.model for reward in rewards if reward.model is not None}
    if len(models) > MAX_REWARD_MODELS:
        return (
            f"at most {MAX_REWARD_MODELS} different reward models per job (you named {len(models)}): each is loaded "
            "beside the model being trained; keep the ones that matter, or give one model a larger weight"
        )
    return None


class RolloutSpec(SpecPart):
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
        description="Reward functions and their weights (with an environment: extra rewards; default none); at most "
        "32, naming at most 4 different reward models.",
    )

    @field_validator("rewards")
    @classmethod
    def _few_rewards(cls, value: list[RewardSpec]) -> list[RewardSpec]:
        problem = rewards_problem(value)
        if problem:
            raise ValueError(problem)
        return value


class ForecastSpec(SpecPart):
    """The learnability forecast an online job runs first (backend/core/forecasts.py): a few prompts of the
    starting model through the job's own rollout, and whether its rewards give GRPO or RLOO anything to learn."""

    prompts: int = Field(
        16,
        ge=0,
        le=256,
        description="Prompts the forecast plays before training (each rollout.num_generations times; at most a tenth "
        "of the job's prompts; 0: no forecast).",
    )
    train_anyway: bool = Field(False, description="Train even when the forecast finds no signal.")
    only: bool = Field(False, description="Forecast only, train nothing (what the Train tab's Check queues).")


class OnlinePart(SpecPart):
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
