"""The reward test bench: typed completions scored with every reward, as GRPO would for one dataset row."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from backend.core.spec import RewardSpec, SpecError
from backend.core.spec.methods import MAX_REWARD_MODELS
from backend.methods.rewards.reading import (
    NON_REWARD_COLUMNS,
    TRAINER_KWARGS,
    USER_PATTERN_TIMEOUT_S,
    completion_text,
)
from backend.methods.rewards.registry import build_rewards, missing_columns

# What one bench call may score: enough to try rewards by hand, too little to tie up the app.
BENCH_MAX_COMPLETIONS = 32
BENCH_MAX_COMPLETION_CHARS = 8_000
BENCH_MAX_ROW_CHARS = 16_000
BENCH_MAX_REWARDS = 16


def bench_input_problems(specs: Sequence[Any], completions: Sequence[Any], row: dict[str, Any] | None) -> list[str]:
    """Sentences for bench input over the limits (nothing is scored then); empty when it fits."""
    problems = []
    if len(specs) > BENCH_MAX_REWARDS:
        problems.append(
            f"rewards: the bench scores at most {BENCH_MAX_REWARDS} rewards at once; you gave {len(specs)}, remove some"
        )
    named = (spec.get("model") if isinstance(spec, dict) else getattr(spec, "model", None) for spec in specs)
    models = {model for model in named if isinstance(model, str)}
    if len(models) > MAX_REWARD_MODELS:
        problems.append(
            f"rewards: the bench loads at most {MAX_REWARD_MODELS} different reward models at once; you named "
            f"{len(models)}, remove some"
        )
    if len(completions) > BENCH_MAX_COMPLETIONS:
        problems.append(
            f"completions: the bench scores at most {BENCH_MAX_COMPLETIONS} completions at once; "
            f"you gave {len(completions)}, score them in parts"
        )
    longest = max((len(completion_text(c)) for c in completions), default=0)
    if longest > BENCH_MAX_COMPLETION_CHARS:
        problems.append(
            f"completions: each may be at most {BENCH_MAX_COMPLETION_CHARS:,} characters; the longest has "
            f"{longest:,}, shorten it"
        )
    if row is not None:
        size = len(json.dumps(row, default=str))
        if size > BENCH_MAX_ROW_CHARS:
            problems.append(
                f"row: the dataset row may be at most {BENCH_MAX_ROW_CHARS:,} characters of JSON; "
                f"it has {size:,}, keep only the columns the rewards read"
            )
    return problems


def score_completions(
    specs: Sequence[RewardSpec],
    completions: Sequence[Any],
    row: dict[str, Any] | None = None,
    model_sources: Mapping[str, Any] | None = None,
    models_dir: Path | None = None,
) -> list[dict[str, Any]]:
    """Score typed completions with every reward, as GRPO would for one dataset row.

    A reward model (``{model: ...}``) scores the row's ``prompt`` and each completion as the trainer does; its
    source is in ``model_sources`` (``training.named_jobs.model_sources``, by the name given) and it loads under
    ``models_dir``.

    Returns one ``{"completion", "scores", "total", "notes"}`` per completion. ``scores`` maps each reward's
    name to its score, None where the reward does not apply; ``total`` is the weighted sum with None
    counted as 0, as TRL sums rewards; ``notes`` says where a user pattern ran out of time (scored 0.0).
    Raises SpecError when the input is over the bench's limits or the row lacks a column a reward needs.
    """
    problems = bench_input_problems(specs, completions, row)
    if problems:
        raise SpecError(problems)
    row = dict(row or {})
    problems = missing_columns(specs, row)
    if problems:
        raise SpecError(problems)
    models = {}
    if model_sources:
        from backend.methods.rewards.model_reward import load_model_rewards

        models = load_model_rewards(model_sources, models_dir or Path("."))
    functions, weights = build_rewards(specs, models)
    reward_kwargs = _row_as_batch(row, len(completions))
    scores_by_reward = {fn.__name__: fn(completions=list(completions), **reward_kwargs) for fn in functions}
    notes: dict[int, list[str]] = {}
    for fn in functions:
        for index in getattr(fn, "timed_out", ()):
            notes.setdefault(index, []).append(
                f"{fn.__name__}: the pattern ran past {USER_PATTERN_TIMEOUT_S} s and scored 0.0; simplify it"
            )
    return [
        {
            **_scored(
                completion, {name: scores[index] for name, scores in scores_by_reward.items()}, functions, weights
            ),
            "notes": notes.get(index, []),
        }
        for index, completion in enumerate(completions)
    ]


def _row_as_batch(row: dict[str, Any], count: int) -> dict[str, list[Any]]:
    columns = {
        name: [value] * count
        for name, value in row.items()
        if name not in NON_REWARD_COLUMNS and name not in TRAINER_KWARGS
    }
    if "prompt" in row:
        columns["prompts"] = [row["prompt"]] * count
    return columns


def _scored(completion: Any, scores: dict[str, float | None], functions, weights) -> dict[str, Any]:
    total = sum(weight * (scores[fn.__name__] or 0.0) for fn, weight in zip(functions, weights))
    return {"completion": completion_text(completion), "scores": scores, "total": total}
