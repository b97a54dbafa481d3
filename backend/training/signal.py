"""GRPO's live signal watch: whether the logged steps give the policy anything to learn from, and what to try."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from backend.core.artifacts import SignalWatch

PATIENCE = 3  # logged steps in a row without signal before the warning (and, if asked, the early stop)

# TRL's GRPOTrainer keys (trl/trainer/grpo_trainer.py): only training rows carry them (eval rows are eval_*).
ZERO_STD_KEY = "frac_reward_zero_std"
REWARD_STD_KEY = "reward_std"
REWARD_KEY = "reward"
CLIPPED_KEY = "completions/clipped_ratio"

# The conditions, by the names the ``signal`` artifact lists them under, in the order a warning says them.
GROUPS_SCORED_SAME = "groups_scored_same"
REWARD_CONSTANT = "reward_constant"
ALL_CLIPPED = "all_clipped"
CONDITIONS = {
    GROUPS_SCORED_SAME: "every group's completions scored the same (frac_reward_zero_std = 1)",
    REWARD_CONSTANT: "the reward was constant (reward_std = 0)",
    ALL_CLIPPED: "every completion was cut at rollout.max_completion_length (completions/clipped_ratio = 1)",
}
_EPS = 1e-9


def _number(row: Mapping[str, Any], key: str) -> float | None:
    value = row.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def row_conditions(row: Mapping[str, Any]) -> list[str]:
    """The no-signal conditions that hold on one logged GRPO training row, in CONDITIONS order."""
    zero_std, reward_std, clipped = (_number(row, key) for key in (ZERO_STD_KEY, REWARD_STD_KEY, CLIPPED_KEY))
    held = {
        GROUPS_SCORED_SAME: zero_std is not None and zero_std >= 1 - _EPS,
        REWARD_CONSTANT: reward_std is not None and abs(reward_std) <= _EPS,
        ALL_CLIPPED: clipped is not None and clipped >= 1 - _EPS,
    }
    return [name for name in CONDITIONS if held[name]]


def warning_sentence(conditions: list[str], patience: int = PATIENCE, reward: float | None = None) -> str:
    """What held for ``patience`` logged steps in a row, what it does to training, and what to try."""
    said = [CONDITIONS[name] for name in conditions if name in CONDITIONS]
    if REWARD_CONSTANT in conditions and reward is not None:
        said = [
            text.replace("reward_std = 0)", f"reward_std = 0: every completion scored {reward:g})") for text in said
        ]
    what = said[0] if len(said) == 1 else ", ".join(said[:-1]) + " and " + said[-1]
    if GROUPS_SCORED_SAME in conditions or REWARD_CONSTANT in conditions:
        effect = ", so the advantages, the loss and the gradients are 0 and the model learns nothing"
        tips = [
            "the reward bench (Train tab) to check the rewards on real completions",
            "a warm-up or SFT job first so the model produces answers a reward can tell apart",
            "a higher rollout.temperature for more diverse groups",
        ]
    else:
        effect = ", so the rewards only ever score unfinished answers"
        tips = []
    if ALL_CLIPPED in conditions:
        tips.append("a larger rollout.max_completion_length so completions can finish")
    advice = "; ".join(tips)
    return f"On {patience} logged steps in a row {what}{effect}. Try {advice}."


class SignalMonitor:
    """Fed each logged training row, tracks whether GRPO's groups still give it something to learn from.

    A condition (CONDITIONS) holds on one row; once any held for ``patience`` logged steps in a row, ``warning``
    says what and what to try, until a row on which none holds clears it. Rows without ``frac_reward_zero_std``
    (eval rows, the final ``train_runtime`` row, other methods' rows) are ignored.
    """

    def __init__(self, patience: int = PATIENCE):
        self.patience = patience
        self.warning: str | None = None
        self.conditions: list[str] = []
        self.since_step: int | None = None
        self.consecutive = 0
        self.steps_logged = 0
        self.steps_with_signal = 0
        self.stopped_early = False
        self.warned = False  # whether the last observed row raised the warning

    def carry_over(self, earlier: SignalWatch | Mapping[str, Any] | None) -> None:
        """Continue an earlier attempt's counts (a resumed job), so its steps with signal still count."""
        watch = _as_watch(earlier)
        if watch is not None:
            self.steps_logged, self.steps_with_signal = watch.steps_logged, watch.steps_with_signal

    def observe(self, row: Mapping[str, Any], step: int | None = None) -> bool:
        """Take one logged row; True when the warning appeared, changed or cleared, or steps_with_signal changed."""
        self.warned = False
        zero_std = _number(row, ZERO_STD_KEY)
        if zero_std is None or "train_runtime" in row:
            return False
        before = (self.warning, self.steps_with_signal)
        self.steps_logged += 1
        if zero_std < 1 - _EPS:
            self.steps_with_signal += 1
        held = row_conditions(row)
        if not held:
            self.warning, self.conditions, self.since_step, self.consecutive = None, [], None, 0
        else:
            if not self.consecutive:
                self.since_step, self.conditions = (step if step is not None else row.get("step")), []
            self.consecutive += 1
            conditions = [name for name in CONDITIONS if name in held or name in self.conditions]
            if self.consecutive >= self.patience and (self.warning is None or conditions != self.conditions):
                self.warning = warning_sentence(conditions, self.patience, _number(row, REWARD_KEY))
            self.conditions = conditions
        self.warned = before[0] is None and self.warning is not None
        return (self.warning, self.steps_with_signal) != before

    def snapshot(self) -> SignalWatch:
        """The state as the typed ``signal`` artifact."""
        return SignalWatch(
            warning=self.warning,
            conditions=list(self.conditions),
            since_step=self.since_step,
            consecutive=self.consecutive,
            steps_logged=self.steps_logged,
            steps_with_signal=self.steps_with_signal,
            stopped_early=self.stopped_early,
        )


def _as_watch(signal: SignalWatch | Mapping[str, Any] | None) -> SignalWatch | None:
    if signal is None or isinstance(signal, SignalWatch):
        return signal
    try:
        return SignalWatch.model_validate(dict(signal))
    except (ValidationError, TypeError, ValueError):
        return None


def no_signal_reason(signal: SignalWatch | dict | None) -> str | None:
    """Why the run never had any signal (steps logged, none with signal), else None; the verdict's sentence puts it
    after "The run learned nothing:"."""
    watch = _as_watch(signal)
    if watch is None or watch.steps_logged <= 0 or watch.steps_with_signal > 0:
        return None
    steps = "the one logged step" if watch.steps_logged == 1 else f"all {watch.steps_logged} logged steps"
    stopped = " (training.stop_when_no_signal ended the run early)" if watch.stopped_early else ""
    return f"on {steps} every group's completions scored the same, so the advantages and gradients were 0{stopped}."
