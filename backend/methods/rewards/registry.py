"""The reward table: which callable each RewardSpec name builds, and the dataset columns it reads."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TypeVar

from backend.core.spec import RewardSpec
from backend.methods.rewards.accuracy_rewards import ExactMatch, TRLReward
from backend.methods.rewards.format_rewards import RegexMatch, ValidJSON
from backend.methods.rewards.model_reward import ModelReward
from backend.methods.rewards.other_rewards import Keywords, LengthTarget
from backend.methods.rewards.reading import RewardFunction

T = TypeVar("T")


def _given(value: T | None, setting: str, spec: RewardSpec) -> T:
    """A setting the reward needs (the spec's validation requires it; a spec built past validation is refused)."""
    if value is None:
        raise ValueError(f"the {spec.name} reward needs its {setting}")
    return value


# name -> how its spec builds the reward; one row for each of core.spec's REWARD_NAMES.
BUILDERS: dict[str, Callable[[RewardSpec], RewardFunction]] = {
    **{name: (lambda spec: TRLReward(spec.name)) for name in TRLReward.TRL_FUNCTIONS},
    "exact_match": lambda spec: ExactMatch(_given(spec.column, "column", spec), case_sensitive=spec.case_sensitive),
    "regex": lambda spec: RegexMatch(_given(spec.pattern, "pattern", spec), case_sensitive=spec.case_sensitive),
    "valid_json": lambda spec: ValidJSON(spec.json_schema),
    "length": lambda spec: LengthTarget(
        _given(spec.target_length, "target_length", spec), tolerance=spec.tolerance, unit=spec.unit
    ),
    "keywords": lambda spec: Keywords(spec.include, spec.exclude, case_sensitive=spec.case_sensitive),
    # A reward model is loaded, not built: its scorer comes in ``build_rewards``'s ``models`` (model_reward.py).
    "reward_model": lambda spec: _given(None, "loaded model", spec),
}


def build_reward(spec: RewardSpec, models: Mapping[str, ModelReward] | None = None) -> RewardFunction:
    """The reward callable one RewardSpec describes; its weight is applied by TRL (GRPOConfig.reward_weights). A
    reward model's is its scorer in ``models`` (by the name the spec gives), loaded by the caller."""
    if spec.name not in BUILDERS:
        raise ValueError(f"no reward is built for {spec.name!r}")
    if spec.model is not None and models and spec.model in models:
        return models[spec.model].named(spec.name)
    return BUILDERS[spec.name](spec)


def build_rewards(
    specs: Sequence[RewardSpec], models: Mapping[str, ModelReward] | None = None
) -> tuple[list[RewardFunction], list[float]]:
    """Reward callables and their weights; repeated names get suffixes (keywords, keywords_2) so metrics stay apart.
    ``models``: the loaded reward models the specs name (``model_reward.load_model_rewards``)."""
    functions = [build_reward(spec, models) for spec in specs]
    for function, name in zip(functions, unique_names([spec.name for spec in specs])):
        function.__name__ = name
    return functions, [spec.weight for spec in specs]


def unique_names(names: Sequence[str]) -> list[str]:
    """
    >>> unique_names(["keywords", "regex", "keywords"])
    ['keywords', 'regex', 'keywords_2']
    """
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return unique


def required_columns(spec: RewardSpec) -> set[str]:
    """Dataset columns the reward reads; pre-flight refuses a dataset that lacks one."""
    if spec.name in ("accuracy", "reasoning_accuracy"):
        return {"solution"}
    if spec.name == "exact_match":
        return {_given(spec.column, "column", spec)}
    return set()


def missing_columns(specs: Sequence[RewardSpec], columns: Iterable[str]) -> list[str]:
    """One sentence per column a reward needs that ``columns`` lacks; empty when all are there."""
    present = set(columns)
    return [
        f"column {column!r} is missing: the {spec.name} reward reads the expected answer from it"
        for spec in specs
        for column in sorted(required_columns(spec) - present)
    ]
