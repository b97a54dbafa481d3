"""``JobSpec``: the whole spec, its parts put together and checked against each other, and what it says about the
methods (which are online, which play environments)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from backend.core.spec.base import SpecPart, refuse_control_characters
from backend.core.spec.environment import EnvironmentSpec
from backend.core.spec.errors import spec_error
from backend.core.spec.methods import (
    DistillationSpec,
    DPOSpec,
    ForecastSpec,
    GRPOSpec,
    KTOSpec,
    Method,
    OnlinePart,
    RewardModelSpec,
    RLOOSpec,
    RolloutSpec,
    SFTSpec,
)
from backend.core.spec.parts import (
    BenchmarksSpec,
    DatasetSpec,
    EvalSpec,
    EvaluateSpec,
    ExportSpec,
    LoraSpec,
    ModelSpec,
    OutputSpec,
    QuantizationSpec,
    TrainingSpec,
)

SCHEMA_VERSION = 2


class JobSpec(SpecPart):
    """Everything one training job needs, validated: method, model, data, LoRA, training, rewards and output."""

    schema_version: int = Field(SCHEMA_VERSION, description="Spec format version.")
    method: Method = Field(
        Method.sft,
        description="sft (demonstrations), dpo (preference pairs), grpo or rloo (rewards), kto (answers marked good "
        "or bad), reward (a reward model scoring answers, from preference pairs), distillation (prompts answered by "
        "the model, scored token by token by a teacher model).",
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
    forecast: ForecastSpec = Field(default_factory=ForecastSpec)
    kto: KTOSpec = Field(default_factory=KTOSpec)
    rloo: RLOOSpec = Field(default_factory=RLOOSpec)
    reward: RewardModelSpec = Field(default_factory=RewardModelSpec)
    distillation: DistillationSpec = Field(default_factory=DistillationSpec)
    environment: EnvironmentSpec = Field(default_factory=EnvironmentSpec)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    benchmarks: BenchmarksSpec = Field(default_factory=BenchmarksSpec)
    evaluate: EvaluateSpec | None = Field(
        None, description="Set for an eval-only job: score the benchmarks, train nothing (method is then unused)."
    )
    export: ExportSpec | None = Field(
        None, description="Set for an export job: write out a finished job's model, train nothing (method unused)."
    )
    output: OutputSpec = Field(default_factory=OutputSpec)
    owner: str = Field("local", min_length=1, max_length=96, description="Who submitted the job.")

    _plain_owner = field_validator("owner")(refuse_control_characters)

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
    def kind(self) -> str:
        """What the job does, in one word for lists and tables: ``eval`` for an eval-only job, ``export`` for an export
        job (their method is unused), else its method (``sft``, ``grpo``, ...).

        >>> JobSpec().kind, JobSpec(evaluate={}, benchmarks={"tasks": ["studio_arith"]}).kind
        ('sft', 'eval')
        >>> JobSpec(export={"job_id": "j1"}).kind
        'export'
        """
        if self.export is not None:
            return "export"
        if self.forecast.only and self.evaluate is None:
            return "forecast"
        return "eval" if self.evaluate is not None else self.method.value

    @property
    def method_part(self) -> SpecPart:
        """The method's own settings (``spec.dpo`` for DPO)."""
        return getattr(self, self.method.value)

    @model_validator(mode="after")
    def _consistent(self) -> JobSpec:
        if self.export is not None and self.evaluate is not None:
            raise ValueError("export: an export job scores nothing; remove evaluate")
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
        if self.forecast.only and not online:
            takers = ", ".join(m.value.upper() for m in online_methods())
            raise ValueError(f"forecast.only: only a job that samples and scores ({takers}) can be forecast")
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
        """The spec from JSON text; SpecError lists every problem."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise spec_error(exc) from None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> JobSpec:
        """The spec from parsed YAML or JSON data; SpecError lists every problem."""
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            raise spec_error(exc) from None


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


def checkpointing(spec: JobSpec) -> bool:
    """Whether the job recomputes activations: training.gradient_checkpointing, on when left empty (TRL's
    default; auto-tune decides before training starts)."""
    return spec.training.gradient_checkpointing is not False
