"""Which of a job's pre-flight warnings still stand once it ran, and which the run settled, by what it showed.

Pre-flight warns before anything is known of the run (backend/training/preflight.py says the warnings); the run's own
record then answers some of them: a model that called the environment's tools did not need a tool-use warm-up, a run
whose completions were seldom cut off had a long enough episode budget, a job that improved found rewards to learn
from. A warning so answered is no longer shown as a warning; the summary says what settled it instead.

>>> said = ["GRPO learns only from groups where some episodes earn a reward: if the model does not call the "
...         "environment's tools yet, first run SFT ...", "Few rows."]
>>> rows = [{"step": 1, "tools/call_frequency": 0.0}, {"step": 40, "tools/call_frequency": 0.98}]
>>> judged = judge_warnings(said, None, rows, one_call_per_episode=True)
>>> judged.standing, judged.settled
(['Few rows.'], ['the model called the tool in 98% of completions by the end of training (0% at the start)'])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from backend.core.artifacts import LearningVerdict

# What each warning a run can settle says (backend/training/preflight.py and backend/environments/probe.py word them):
# the run may find nothing rewarded (its groups all score the same) ...
NO_REWARD_WARNING_MARK = "GRPO learns only from"
# ... the model may not call the environment's tools yet (so warm it up with SFT first) ...
TOOL_WARMUP_WARNING_MARK = "does not call the environment's tools yet"
# ... and the episode budget may be too short for an episode.
EPISODE_LENGTH_WARNING_MARK = "rollout.max_completion_length ("

# TRL's GRPO metrics the run is judged by: tool calls per completion, and the share of completions cut off at the
# length limit (each a mean over the logged step's completions).
TOOL_CALLS = "tools/call_frequency"
CUT_OFF = "completions/clipped_ratio"
# A run whose completions were cut off at most this often by its end was not held back by its episode budget.
FEW_CUT_OFF = 0.1


@dataclass(frozen=True)
class JudgedWarnings:
    """A job's pre-flight warnings after its run: those that still stand, and what the run showed that settled the
    others (one sentence each, without repeats)."""

    standing: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)


def _logged(metrics: Sequence[dict[str, Any]], key: str) -> list[float]:
    return [float(row[key]) for row in metrics if isinstance(row.get(key), (int, float))]


def _percent(share: float) -> str:
    return f"{share * 100:.0f}%"


def tool_use_sentence(metrics: Sequence[dict[str, Any]], one_call_per_episode: bool = False) -> str | None:
    """What the run showed of tool use, when the model called the tools by the end of training; None otherwise.
    ``one_call_per_episode``: an episode allows one tool call, so calls per completion are a share of completions.

    >>> tool_use_sentence([{"tools/call_frequency": 0.0}, {"tools/call_frequency": 1.5}])
    'the model made 1.5 tool calls per completion by the end of training (0 at the start)'
    >>> tool_use_sentence([{"tools/call_frequency": 0.0}]) is None, tool_use_sentence([]) is None
    (True, True)
    """
    calls = _logged(metrics, TOOL_CALLS)
    if not calls or calls[-1] <= 0:
        return None
    if one_call_per_episode:
        return (
            f"the model called the tool in {_percent(calls[-1])} of completions by the end of training "
            f"({_percent(calls[0])} at the start)"
        )
    per = f"{calls[-1]:.3g} tool calls per completion"
    return f"the model made {per} by the end of training ({calls[0]:.3g} at the start)"


def cut_off_sentence(metrics: Sequence[dict[str, Any]]) -> str | None:
    """What the run showed of its episode budget, when few completions were cut off at the end of training; None
    otherwise.

    >>> cut_off_sentence([{"completions/clipped_ratio": 0.4}, {"completions/clipped_ratio": 0.02}])
    'only 2% of completions ran out of tokens by the end of training'
    >>> cut_off_sentence([{"completions/clipped_ratio": 0.0}]), cut_off_sentence([{"completions/clipped_ratio": 0.5}])
    ('no completion ran out of tokens by the end of training', None)
    """
    cut = _logged(metrics, CUT_OFF)
    if not cut or cut[-1] > FEW_CUT_OFF:
        return None
    if round(cut[-1] * 100) == 0:
        return "no completion ran out of tokens by the end of training"
    return f"only {_percent(cut[-1])} of completions ran out of tokens by the end of training"


def judge_warnings(
    warnings: Sequence[str],
    learning: LearningVerdict | None,
    metrics: Sequence[dict[str, Any]] = (),
    one_call_per_episode: bool = False,
) -> JudgedWarnings:
    """Sort a job's pre-flight ``warnings`` by what its run showed: its verdict (``learning``) and its logged
    ``metrics`` rows. A tool-use warm-up is settled by tool calls; any no-reward warning by an improved verdict; a
    short episode budget by completions seldom cut off.

    >>> said = ["GRPO learns only from groups where some episodes earn a reward: ...", "Few rows."]
    >>> judge_warnings(said, None).standing == said
    True
    >>> won = LearningVerdict(metric="success", label="success", verdict="improved", sentence="")
    >>> judge_warnings(said, won)
    JudgedWarnings(standing=['Few rows.'], settled=['the job improved, so its episodes did earn rewards to learn from'])
    """
    improved = learning is not None and learning.verdict == "improved"
    standing: list[str] = []
    settled: list[str] = []
    for warning in warnings:
        answer = None
        if TOOL_WARMUP_WARNING_MARK in warning:
            answer = tool_use_sentence(metrics, one_call_per_episode)
        if answer is None and NO_REWARD_WARNING_MARK in warning and improved:
            answer = "the job improved, so its episodes did earn rewards to learn from"
        if warning.startswith(EPISODE_LENGTH_WARNING_MARK):
            answer = cut_off_sentence(metrics)
        if answer is None:
            standing.append(warning)
        elif answer not in settled:
            settled.append(answer)
    return JudgedWarnings(standing, settled)
