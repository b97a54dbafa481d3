"""What the UI may pick from and how each spec field describes itself: models, datasets, environments, rewards,
Hugging Face Jobs flavors, methods, and a spec field's help, default and choices by dotted path.

Part of the facade: the UI reaches it only through ``backend.api``, which re-exports it.
"""

from __future__ import annotations

import types
import typing
from dataclasses import dataclass
from enum import Enum
from functools import cache
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel

from backend.core.spec import REWARD_NAMES, JobSpec, Method, field_help, methods_reading, online_methods
from backend.data.builtin import BUILTIN_DATASETS
from backend.environments.builtin.registry import BUILTIN_ENVIRONMENTS
from backend.models.demo import ARITH_MODEL_ID, DEMO_MODEL_ID
from backend.platform.flavors import FLAVORS, GPU_FLAVORS

CURATED_MODELS: tuple[str, ...] = (
    "Qwen/Qwen2.5-0.5B-Instruct",
    "Qwen/Qwen3-0.6B",
    "HuggingFaceTB/SmolLM2-360M-Instruct",
    "Qwen/Qwen2.5-1.5B-Instruct",
    ARITH_MODEL_ID,
    DEMO_MODEL_ID,
)
# The Hugging Face Jobs hardware the Train tab offers: ``auto`` (the smallest flavor that holds the job's memory
# estimate, backend/training/remote_fit.py), then the GPU and CPU flavors of the table in backend/platform/flavors.py.
AUTO_FLAVOR = "auto"
HF_JOB_FLAVORS: tuple[str, ...] = (
    AUTO_FLAVOR,
    *GPU_FLAVORS,
    *(name for name in FLAVORS if name not in GPU_FLAVORS),
)
DEFAULT_HF_JOB_FLAVOR = AUTO_FLAVOR
REWARDS: tuple[str, ...] = REWARD_NAMES


def methods() -> list[str]:
    """The training methods, in the spec's order (a new ``Method`` value appears here and in the Train tab)."""
    return [method.value for method in Method]


FieldKind = Literal["bool", "int", "float", "text", "other"]


@dataclass(frozen=True)
class Monitoring:
    """How the Jobs tab shows one method's training: its loss unit, its own plotted metrics, its log columns."""

    loss_unit: str
    metrics: tuple[str, ...]
    log_columns: tuple[tuple[str, str], ...]


def monitoring(method: str) -> Monitoring:
    """The method table's monitoring facts for ``method`` (a Method value).

    >>> monitoring("kto").loss_unit
    'KTO loss (nats)'
    """
    from backend.methods.table import support

    row = support(method)
    return Monitoring(row.loss_unit, row.monitored, row.log_columns)


def method_part(path: str) -> str | None:
    """The method whose own part a spec path is in (``"dpo.beta"`` -> ``"dpo"``), None for a path of a shared part.

    >>> method_part("grpo.beta"), method_part("rollout.temperature"), method_part("training.max_steps")
    ('grpo', None, None)
    """
    head = path.split(".", 1)[0]
    return head if head in methods() else None


def field_methods(path: str) -> tuple[str, ...] | None:
    """The methods a spec field is used by (the form shows and sends it for them alone), None for every method: a
    method's own part for that method, ``rollout`` and ``forecast`` (the learnability forecast of a rollout) for the
    methods that generate, ``environment`` for those that can play one.

    >>> field_methods("dpo.beta"), "grpo" in field_methods("rollout.temperature"), field_methods("training.max_steps")
    (('dpo',), True, None)
    >>> field_methods("forecast.prompts") == field_methods("rollout.temperature")
    True
    """
    part = path.split(".", 1)[0]
    readers = methods_reading("rollout" if part == "forecast" else part)
    return None if readers is None else tuple(m.value for m in readers)


def generates(method: str) -> bool:
    """Whether a method samples completions and scores them while it trains (its jobs keep samples and rewards)."""
    return Method(method) in online_methods()


def environment_choices() -> list[str]:
    """The Environment picker's choices: none, each built-in, and one OpenEnv Space on the Hub."""
    return ["", *(f"builtin:{name}" for name in BUILTIN_ENVIRONMENTS), "openenv/echo_env"]


def builtin_dataset_choices(method: str | None = None) -> list[str]:
    """Built-in datasets that suit ``method`` (all of them without one, or when none suits it yet)."""
    suited = [name for name, d in BUILTIN_DATASETS.items() if method is None or method in d.methods()]
    return suited or list(BUILTIN_DATASETS)


def builtin_dataset_help(name: str | None) -> str:
    """What the picked built-in dataset holds and which method it suits."""
    dataset = BUILTIN_DATASETS.get(name or "")
    if dataset is None:
        return "Pick one of the small datasets shipped with the studio (they run offline)."
    return f"{dataset.name}: {dataset.description} For {', '.join(m.upper() for m in dataset.methods())}."


@dataclass(frozen=True)
class SpecField:
    """How one leaf of ``JobSpec`` describes itself to a form: help, default, choices and the kind of value."""

    path: str
    help: str
    default: Any
    choices: tuple[Any, ...]  # from a Literal or an Enum; () for free values
    kind: FieldKind
    optional: bool  # None (or a Literal word such as "auto") is allowed besides the kind


def _leaf(path: str) -> tuple[Any, Any]:
    """(annotation, field info) of a dotted path of ``JobSpec``; KeyError when it is not a field."""
    model: type[BaseModel] = JobSpec
    *parents, last = path.split(".")
    for name in parents:
        section = model.model_fields[name].annotation
        if not (isinstance(section, type) and issubclass(section, BaseModel)):
            raise KeyError(path)  # a leaf named as if it had fields
        model = section
    info = model.model_fields[last]
    return info.annotation, info


def _flatten(annotation: Any) -> list[Any]:
    """The members of a union (``int | None`` -> [int, NoneType]) or the annotation alone."""
    if get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for arg in get_args(annotation) for a in _flatten(arg)]
    return [annotation]


@cache
def spec_field(path: str) -> SpecField:
    """Describe the ``JobSpec`` field at dotted ``path`` (``"training.max_steps"``): the single source of a form
    field's help, default and choices."""
    annotation, _ = _leaf(path)
    members = _flatten(annotation)
    choices: list[Any] = []
    kinds: list[FieldKind] = []
    for member in members:
        if get_origin(member) is Literal:
            choices += list(get_args(member))
        elif isinstance(member, type) and issubclass(member, Enum):
            choices += [e.value for e in member]
        elif member is bool:
            kinds.append("bool")
        elif member is int:
            kinds.append("int")
        elif member is float:
            kinds.append("float")
        elif member is str:
            kinds.append("text")
    default: Any = JobSpec()
    for name in path.split("."):
        default = getattr(default, name)
    if isinstance(default, Enum):
        default = default.value
    kind = kinds[0] if len(kinds) == 1 else ("text" if choices and not kinds else "other")
    optional = type(None) in members or (bool(choices) and bool(kinds))
    return SpecField(path, field_help(path), default, tuple(choices), kind, optional)
