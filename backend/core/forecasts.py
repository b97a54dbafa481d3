"""Will it learn? The learnability forecast of a rollout job: its record, and the rules that read it.

Before training, the starting model plays a few prompts through the job's own rollout (the same rewards, the same
environment, ``rollout.num_generations``, ``rollout.max_completion_length`` and tool rounds; run by
``backend/training/forecast.py`` in the worker). GRPO and RLOO learn only from groups whose completions scored
differently, so what the rollouts show decides the forecast:

- ``no_signal``: every group scored the same. Training cannot move the model: its advantages, loss and gradients are
  0 (TRL #3452, #3857). The cause names what made the groups alike, and the first thing to change.
- ``weak``: few groups scored differently, or a reward model's favourite answer is right no more often than a random
  one (where the rows carry a ``solution``): the run may learn little, or learn to please the reward model.
- ``learnable``: enough groups to learn from.

The thresholds were set against the verdicts of the examples and their broken variants (``benchmarks/forecast.py``,
docs/benchmarks.md "Will it learn?"). Numbers in, a forecast out: nothing here needs torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

LEARNABLE, WEAK, NO_SIGNAL = "learnable", "weak", "no_signal"
ForecastWord = Literal["learnable", "weak", "no_signal"]
FORECAST_WORDS = {LEARNABLE: "learnable", WEAK: "weak signal", NO_SIGNAL: "no signal"}

DEFAULT_PROMPTS = 16
MAX_SHARE = 0.10  # of the job's prompts: the forecast takes at most a tenth of the rollouts it forecasts
MIN_PROMPTS = 2
# Below this share of groups that scored differently the run has little to learn from (see the module's docstring).
WEAK_SPREAD = 0.1
# Fewer prompts than this promise nothing: the warm-up demo's GRPO stage (a tenth of its prompts is 2) saw both of
# its groups score differently at seed 1, then did not improve on the held-out tasks (benchmarks/forecast.py).
MIN_PROMISE_PROMPTS = 8
# From this share of completions cut at max_completion_length, the cut is the cause named first.
CUT_CAUSE = 0.5
# A reward model whose best-scored answer is right no more often than a random answer of its group, plus this, is
# no guide to the right answer: the policy would learn what it scores, not the answer.
RM_MARGIN = 0.05
_EPS = 1e-9


class ForecastSample(BaseModel):
    """One sampled completion of the forecast, with its total reward."""

    model_config = ConfigDict(extra="ignore")

    prompt: str = Field(description="the prompt (its last message)")
    completion: str = Field(description="what the starting model wrote (an environment's episode: its turns)")
    reward: float | None = Field(None, description="the completion's total reward (weighted)")


class ForecastChange(BaseModel):
    """The first thing to change: a spec field and its new value, or a step to take first (``path`` None)."""

    model_config = ConfigDict(extra="ignore")

    path: str | None = Field(None, description="the spec field to change (None: a step, such as a warm-up)")
    value: Any = Field(None, description="the value to set it to (a clone with the suggested change takes it)")
    action: str = Field(description="what to do, a verb first: 'raise', 'lower', 'change', 'warm up first'")

    def says(self, label: str | None = None) -> str:
        """The change in words, the field by ``label`` (the form's own) or its spec path.

        >>> ForecastChange(path="rollout.max_completion_length", value=96, action="raise").says("Max completion length")
        'raise Max completion length to 96'
        >>> ForecastChange(action="warm up first").says()
        'warm up first'
        """
        if self.path is None:
            return self.action
        name = label or f"`{self.path}`"
        return f"{self.action} {name}" + (
            f" to {self.value}" if self.value is not None and self.action != "change" else ""
        )


class Forecast(BaseModel):
    """The ``forecast`` artifact: what a few rollouts of the starting model showed, and the forecast they make."""

    model_config = ConfigDict(extra="ignore")

    forecast: ForecastWord = Field(description="learnable, weak or no_signal")
    cause: str = Field(description="why, in one clause")
    change: ForecastChange | None = Field(None, description="the first thing to change (None: nothing to change)")
    prompts: int = Field(description="prompts played")
    completions: int = Field(description="completions (episodes) sampled: prompts x rollout.num_generations")
    groups_with_spread: int = Field(description="groups whose completions scored differently")
    spread: float = Field(description="share of groups whose completions scored differently (what GRPO learns from)")
    reward_floor: float | None = Field(None, description="the lowest total reward of any completion")
    reward_ceiling: float | None = Field(None, description="the highest total reward of any completion")
    reward_mean: float | None = Field(None, description="the mean total reward")
    clipped: float = Field(0.0, description="share of completions cut at rollout.max_completion_length")
    max_completion_length: int = Field(description="rollout.max_completion_length the rollouts ran with")
    tool_calls_per_episode: float | None = Field(None, description="environments: tool calls per episode")
    tool_calls_accepted: float | None = Field(
        None, description="environments: share of tool calls the server accepted (None: no call was made)"
    )
    reward_model_best_right: float | None = Field(
        None, description="reward models: share of groups whose best-scored completion is right (rows with a solution)"
    )
    random_pick_right: float | None = Field(
        None, description="reward models: share of right completions in the same groups (what a random pick gets)"
    )
    samples: list[ForecastSample] = Field(default_factory=list, description="a handful of sampled completions")
    seconds: float = Field(0.0, description="how long the forecast took (the model already loaded)")
    stopped: bool = Field(False, description="whether the job stopped before training on this forecast")
    overridden: bool = Field(False, description="whether the job trained anyway (forecast.train_anyway)")

    @property
    def word(self) -> str:
        """The forecast as people say it."""
        return FORECAST_WORDS.get(self.forecast, self.forecast)

    def advice(self, label: str | None = None) -> str:
        """The cause and the first thing to change, one sentence (``label``: the changed field as the form names it).

        >>> Forecast(forecast="no_signal", cause="every group scored the same", prompts=1, completions=2,
        ...     groups_with_spread=0, spread=0.0, max_completion_length=24,
        ...     change=ForecastChange(path="rollout.temperature", value=1.0, action="raise")).advice("Temperature")
        'every group scored the same; raise Temperature to 1.0'
        """
        return self.cause + (f"; {self.change.says(label)}" if self.change is not None else "")

    def figures(self) -> str:
        """The numbers behind the forecast, one line.

        >>> Forecast(forecast="learnable", cause="c", prompts=16, completions=128, groups_with_spread=9,
        ...     spread=0.5625, reward_floor=0.0, reward_ceiling=1.0, clipped=0.0, max_completion_length=24).figures()
        '9 of 16 groups scored differently; rewards 0 to 1; 0% cut at 24 tokens'
        """
        parts = [f"{self.groups_with_spread} of {self.prompts} groups scored differently"]
        if self.reward_floor is not None and self.reward_ceiling is not None:
            parts.append(f"rewards {self.reward_floor:.3g} to {self.reward_ceiling:.3g}")
        parts.append(f"{self.clipped:.0%} cut at {self.max_completion_length} tokens")
        if self.tool_calls_per_episode is not None:
            accepted = "" if self.tool_calls_accepted is None else f" ({self.tool_calls_accepted:.0%} accepted)"
            parts.append(f"{self.tool_calls_per_episode:.2g} tool calls per episode{accepted}")
        if self.reward_model_best_right is not None and self.random_pick_right is not None:
            parts.append(
                f"the reward model's best answer right in {self.reward_model_best_right:.0%} of groups "
                f"(a random answer: {self.random_pick_right:.0%})"
            )
        return "; ".join(parts)

    def sentence(self, label: str | None = None) -> str:
        """The forecast, its cause and change, and its figures, as the Jobs tab, the CLI and the card say it."""
        return f"Forecast: {self.word}: {self.advice(label)} ({self.figures()}; {self.seconds:.0f} s)."


def forecast_prompts(requested: int, job_prompts: int | None, dataset_rows: int) -> int:
    """How many prompts the forecast plays: as asked, at most a tenth of the job's (``MAX_SHARE``; at least
    ``MIN_PROMPTS``) and at most the dataset's rows.

    >>> forecast_prompts(16, 600, 1000), forecast_prompts(16, 80, 1000), forecast_prompts(16, 4, 3)
    (16, 8, 2)
    """
    cap = max(MIN_PROMPTS, int(job_prompts * MAX_SHARE)) if job_prompts else requested
    return max(0, min(requested, cap, dataset_rows))


def group_spread(totals: Sequence[float | None], group: int) -> tuple[int, int]:
    """(groups, groups whose completions scored differently) of ``totals`` in consecutive groups of ``group``; a
    completion no reward scored (None) does not count.

    >>> group_spread([1, 1, 0, 1, 0.5, 0.5], 2)
    (3, 1)
    """
    groups = spread = 0
    for start in range(0, len(totals) - group + 1, group):
        scored = [t for t in totals[start : start + group] if t is not None]
        groups += 1
        spread += bool(scored) and max(scored) - min(scored) > _EPS
    return groups, spread


def reward_model_picks(
    totals: Sequence[float | None], right: Sequence[bool | None], group: int
) -> tuple[float | None, float | None]:
    """(share of groups whose best-scored completion is right, share of right completions in those groups): over the
    groups whose rows carry a solution (``right`` None where not).

    >>> reward_model_picks([0.1, 0.9, 0.8, 0.2], [False, True, False, True], 2)
    (0.5, 0.5)
    """
    best = picks = 0
    right_count = scored = 0
    for start in range(0, len(totals) - group + 1, group):
        pairs = [
            (float(t), bool(r))
            for t, r in zip(totals[start : start + group], right[start : start + group])
            if r is not None and t is not None
        ]
        if not pairs:
            continue
        picks += 1
        best += bool(max(pairs, key=lambda p: p[0])[1])
        right_count += sum(bool(r) for _, r in pairs)
        scored += len(pairs)
    if not picks:
        return None, None
    return best / picks, right_count / scored


def _no_signal(stats: dict[str, Any], environment: bool, temperature: float) -> tuple[str, ForecastChange] | None:
    """Why every group scored the same, and the first thing to change; None when no cause is certain (an environment
    whose tools were called, but no episode earned more than another: a few more might have)."""
    length = stats["max_completion_length"]
    floor, ceiling = stats.get("reward_floor"), stats.get("reward_ceiling")
    if environment and not stats.get("tool_calls_per_episode"):
        episode = stats.get("episode_tokens")
        if episode and length < episode:
            # measured: this model's recipe in this environment; else the environment's longest usual episode
            about = (
                "an episode of this model takes about" if stats.get("episode_measured") else "episodes here take up to"
            )
            ran = f"; {stats['clipped']:.0%} of the answers ran to the limit" if stats["clipped"] >= CUT_CAUSE else ""
            cause = f"the model never called a tool within {length} tokens ({about} {episode}{ran})"
            return cause, ForecastChange(path="rollout.max_completion_length", value=episode, action="raise")
        return "the model never called a tool", ForecastChange(action="warm up first")
    if environment:
        return None
    if stats["clipped"] >= CUT_CAUSE:
        cause = f"every group scored the same: {stats['clipped']:.0%} of the answers were cut at {length} tokens"
        return cause, ForecastChange(path="rollout.max_completion_length", value=max(96, length * 4), action="raise")
    if floor is not None and ceiling is not None and abs(ceiling - floor) <= _EPS:
        if floor > 0:
            cause = f"every answer earned the same reward ({floor:.3g}): the rewards cannot tell the answers apart"
            return cause, ForecastChange(path="rollout.rewards", action="change")
        cause = f"no answer earned any reward (every one scored {floor:.3g})"
        return cause, ForecastChange(action="train the model on the task first (SFT, or a warm-up)")
    cause = "each group's answers scored alike, though groups differed"
    return cause, _warmer(temperature)


def _warmer(temperature: float) -> ForecastChange:
    """A temperature that samples groups of different answers: 0.3 warmer, at least the examples' 0.7, at most 1.2.

    >>> _warmer(0.01).value, _warmer(0.7).value, _warmer(1.1).value
    (0.7, 1.0, 1.2)
    """
    return ForecastChange(
        path="rollout.temperature", value=round(max(0.7, min(1.2, temperature + 0.3)), 2), action="raise"
    )


def _raise_something(
    stats: dict[str, Any], temperature: float, num_generations: int, environment: bool = False
) -> ForecastChange | None:
    """What to raise for more groups that score differently: the length where answers were cut, else the group,
    else the temperature. An environment whose tools were called, with no episode better than another yet, gets
    no change past the group: a success is rare at the start (grpo-env-demo's forecast sees none in 8 prompts at some
    seeds, and trains from 0% to 39% at 0.7), and nothing the forecast saw says the temperature is why."""
    if stats["clipped"] >= CUT_CAUSE:
        value = max(stats.get("episode_tokens") or 96, stats["max_completion_length"] * 4)
        return ForecastChange(path="rollout.max_completion_length", value=value, action="raise")
    if num_generations < 8:
        return ForecastChange(path="rollout.num_generations", value=8, action="raise")
    if environment and stats["groups_with_spread"] == 0:
        return None
    return _warmer(temperature)


def judge(stats: dict[str, Any], environment: bool, temperature: float, num_generations: int) -> dict[str, Any]:
    """The forecast, its cause and change from a rollout's figures (the keys of :class:`Forecast`)."""
    groups = stats["prompts"]
    if not groups:
        return {"forecast": NO_SIGNAL, "cause": "no prompt could be played", "change": None}
    if stats["groups_with_spread"] == 0:
        certain = _no_signal(stats, environment, temperature)
        if certain is not None:
            return {"forecast": NO_SIGNAL, "cause": certain[0], "change": certain[1]}
        cause = (
            f"no group of {groups} scored differently, though the model called the tools "
            f"{stats.get('tool_calls_per_episode') or 0:.2g} times per episode: no episode did better than another "
            "yet, and GRPO learns only from groups where one does"
        )
        change = _raise_something(stats, temperature, num_generations, environment)
        return {"forecast": WEAK, "cause": cause, "change": change}
    best, pick = stats.get("reward_model_best_right"), stats.get("random_pick_right")
    if best is not None and pick is not None and best <= pick + RM_MARGIN:
        cause = (
            f"the reward model's best-scored answer was right in {best:.0%} of groups, no more often than a random "
            f"answer ({pick:.0%}): the policy would learn what it scores, not the answer"
        )
        return {"forecast": WEAK, "cause": cause, "change": ForecastChange(path="rollout.rewards", action="change")}
    if stats["spread"] < WEAK_SPREAD:
        cause = f"only {stats['groups_with_spread']} of {groups} groups scored differently"
        return {"forecast": WEAK, "cause": cause, "change": _raise_something(stats, temperature, num_generations)}
    if groups < MIN_PROMISE_PROMPTS:
        cause = (
            f"{stats['groups_with_spread']} of {groups} groups scored differently, but {groups} prompts are too few to "
            "promise it learns (the forecast plays at most a tenth of the job's prompts)"
        )
        return {"forecast": WEAK, "cause": cause, "change": None}
    return {
        "forecast": LEARNABLE,
        "cause": "enough groups scored differently to learn from",
        "change": None,
    }
