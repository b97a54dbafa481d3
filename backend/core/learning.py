"""The learning verdict: did the job make the model better, by its method's own metric, on held-out rows?

The before/after evaluation scores each held-out row (or episode) on every side: the tuned model, where the job
started (a parent job's adapter, else the base model) and the base. The verdict compares tuned with the start row by
row; its 95% interval comes from a paired bootstrap over those rows, so it says how much of the change the rows can
support. A change whose interval excludes zero is ``improved`` or ``worse``; else ``no_change``. A GRPO run that never
had anything to learn from (every group scored the same on every step) is ``no_signal``, whatever the scores say.

A method's metric is what the method optimizes, and can be gamed: KTO widens the gap between good and bad answers
just as well by making the good ones 300,000 times less likely. So every verdict also carries guards, scores the user
cares about on the same rows (answer accuracy, the likelihood of the reference answers, per-token loss, general
benchmarks): one that fell beyond its interval (and its tolerance) turns ``improved`` or ``no_change`` into
``regressed``, and the sentence says what broke.

>>> accuracy = LearningMetric("exact_match", "held-out accuracy", rate=True)
>>> gap = LearningMetric("gap", "held-out log-prob gap")
>>> v = verdict(gap, [0.1, 0.0, 0.2, 0.1] * 16, [3.0, 2.0, 2.5, 3.0] * 16,
...             guards=[guard(accuracy, [1, 0, 1, 0] * 16, [0, 0, 0, 0] * 16)])
>>> v.verdict
'regressed'
>>> v.sentence.split(". ", 1)[1]
'But held-out accuracy fell 50% -> 0% (-50 points, ±12): the model got worse.'

>>> v = verdict(LearningMetric("accuracy", "held-out accuracy", rate=True), [0, 0, 1, 0] * 16, [1, 0, 1, 1] * 16)
>>> v.verdict, v.sentence
('improved', 'Held-out accuracy 25% -> 75% (+50 points, ±12) on 64 rows.')
>>> verdict(LearningMetric("eval_loss", "held-out loss", higher_is_better=False), [2.0, 1.0], [2.0, 1.0]).verdict
'no_change'
"""

from __future__ import annotations

import random
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from backend.core.artifacts import DriftCheck, GuardCheck, LearningVerdict, Verdict

BOOTSTRAP_SAMPLES = 2000
# The drift (mean per-token KL from the start on the tuned model's own held-out answers, nats) beyond which a
# verdict adds a caution. Set above the largest figure the healthy examples reach over seeds 0-2, with a margin
# (benchmarks/drift.py and benchmarks/forecast.py, docs/benchmarks.md, 2026-12-06): sft-demo 0.028-0.036, dpo-demo
# 0.009-0.018, kto-demo 0.039 (seed 0), grpo-demo 0.017-0.021, rloo-demo 0.014-0.019, grpo-env-demo 0.022-0.058 (the
# largest), about 3.4 times that. What gamed its signal drifted 3 to 8 times it: the KTO recipe that games its gap
# (beta 0.1, lr 2e-3, 300 steps) 0.56 and 0.88; grpo-rm-demo, whose reward model the policy games (worse by 37-39
# points), 0.58, 1.55 and 1.60.
HEALTHY_DRIFT = 0.2
BOOTSTRAP_SEED = 0
NO_SIGNAL = "no_signal"


@dataclass(frozen=True)
class LearningMetric:
    """A method's verdict metric: the evaluation key, its name, its direction and whether it is a share of rows.

    ``grouped``: the per-row values carry a group (KTO's desirable/undesirable label) and the statistic is the mean of
    the True group minus the mean of the False group; else it is the plain mean. ``tolerance``: as a guard, a fall
    smaller than this is not counted even when the rows can tell it from noise (a log-likelihood's few hundredths of
    a nat are nothing a user meets).
    """

    key: str
    label: str
    higher_is_better: bool = True
    rate: bool = False
    grouped: bool = False
    tolerance: float = 0.0


def _statistic(values: Sequence[float], groups: Sequence[bool] | None, index: Sequence[int]) -> float | None:
    if groups is None:
        return sum(values[i] for i in index) / len(index) if index else None
    good = [values[i] for i in index if groups[i]]
    bad = [values[i] for i in index if not groups[i]]
    if not good or not bad:
        return None
    return sum(good) / len(good) - sum(bad) / len(bad)


def paired_interval(
    before: Sequence[float],
    after: Sequence[float],
    groups: Sequence[bool] | None = None,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> float | None:
    """Half-width of the 95% percentile interval of statistic(after) - statistic(before), rows resampled in pairs.

    >>> paired_interval([1.0] * 10, [1.0] * 10)
    0.0
    """
    n = len(before)
    if n < 2:
        return None
    rng = random.Random(seed)
    deltas = []
    for _ in range(samples):
        index = [rng.randrange(n) for _ in range(n)]
        a, b = _statistic(after, groups, index), _statistic(before, groups, index)
        if a is not None and b is not None:
            deltas.append(a - b)
    if len(deltas) < samples // 2:
        return None
    deltas.sort()
    low, high = deltas[int(0.025 * len(deltas))], deltas[min(len(deltas) - 1, int(0.975 * len(deltas)))]
    return round((high - low) / 2, 6)


def shown(value: float | None, rate: bool) -> str:
    """A score as the sentences and the card's tables read it: ``41%`` for a share, ``-1.83`` else.

    >>> shown(0.41, rate=True), shown(-1.8312, rate=False), shown(None, rate=True)
    ('41%', '-1.83', 'n/a')
    """
    if value is None:
        return "n/a"
    return f"{value:.0%}" if rate else f"{value:.3g}"


def change_text(delta: float | None, ci: float | None, rate: bool) -> str:
    """A change with its interval: ``+17 points, ±8`` for a share, ``-0.4, ±0.1`` else.

    >>> change_text(0.17, 0.08, rate=True), change_text(-0.4, 0.1, rate=False), change_text(None, None, rate=True)
    ('+17 points, ±8', '-0.4, ±0.1', 'n/a')
    """
    if delta is None:
        return "n/a"
    if rate:
        text = f"{delta * 100:+.0f} points"
        return f"{text}, ±{ci * 100:.0f}" if ci is not None else text
    text = f"{delta:+.3g}"
    return f"{text}, ±{ci:.2g}" if ci is not None else text


def sentence(
    metric: LearningMetric,
    before: float | None,
    after: float | None,
    delta: float | None,
    ci: float | None,
    rows: int,
    base: float | None = None,
    start: str = "base",
    detail: str | None = None,
) -> str:
    """``Held-out accuracy 24% -> 41% (+17 points, ±8) on 64 rows.``; with a parent, the base's score too, and
    ``detail`` (what else changed on the same rows) after a semicolon."""
    label = metric.label[:1].upper() + metric.label[1:]
    unit = "episodes" if "success" in metric.key else "rows"
    text = f"{label} {shown(before, metric.rate)} -> {shown(after, metric.rate)}"
    if delta is not None:
        text += f" ({change_text(delta, ci, metric.rate)})"
    text += f" on {rows} {unit}"
    if start == "parent":
        text += f", from the parent job's adapter (base model {shown(base, metric.rate)})"
    if detail:
        text += f"; {detail}"
    return text + "."


def judge(delta: float | None, ci: float | None, higher_is_better: bool) -> str:
    """improved / worse when the interval excludes zero (in the metric's good or bad direction), else no_change."""
    if delta is None or ci is None:
        return "no_change"
    gain = delta if higher_is_better else -delta
    if gain - ci > 0:
        return "improved"
    if gain + ci < 0:
        return "worse"
    return "no_change"


def verdict(
    metric: LearningMetric,
    before_rows: Sequence[float],
    after_rows: Sequence[float],
    *,
    groups: Sequence[bool] | None = None,
    base_rows: Sequence[float] | None = None,
    start: str = "base",
    no_signal: str | None = None,
    guards: Sequence[GuardCheck] = (),
    detail: str | None = None,
) -> LearningVerdict:
    """The verdict from per-row scores of the start and the tuned model (the same rows, in the same order).

    ``detail``: what else changed on the same rows, said beside the metric (an environment's tool calls per episode).

    ``no_signal``: a sentence saying the run had nothing to learn from; it makes the verdict ``no_signal``.
    ``guards``: capability checks (:func:`guard`); one that fell makes an ``improved`` or ``no_change`` verdict
    ``regressed``.
    """
    if len(before_rows) != len(after_rows):
        raise ValueError(
            f"{len(before_rows)} rows before but {len(after_rows)} after: the sides must score the same rows"
        )
    groups = list(groups) if metric.grouped and groups is not None else None
    everything = list(range(len(after_rows)))
    before = _statistic(before_rows, groups, everything)
    after = _statistic(after_rows, groups, everything)
    base = _statistic(base_rows, groups, everything) if base_rows is not None and start == "parent" else None
    delta = after - before if before is not None and after is not None else None
    ci = paired_interval(before_rows, after_rows, groups) if delta is not None else None
    outcome = NO_SIGNAL if no_signal else judge(delta, ci, metric.higher_is_better)
    text = sentence(metric, before, after, delta, ci, len(after_rows), base, start, detail)
    if no_signal:
        text += f" The run learned nothing: {no_signal}"
    elif outcome == "no_change":
        text += " No change the rows can tell from noise."
    elif outcome == "worse":
        text += " Training made it worse."
    learning = LearningVerdict(
        **_figures(metric, before, after, delta, ci, len(after_rows)),
        verdict=outcome,
        sentence=text,
        method_sentence=text,
        base=base,
        start=start,
    )
    return guarded(learning, guards)


def _figures(
    metric: LearningMetric, before: float | None, after: float | None, delta: float | None, ci: float | None, rows: int
) -> dict[str, Any]:
    """What a verdict and a guard both record of a metric's change."""
    return {
        "metric": metric.key,
        "label": metric.label,
        "before": before,
        "after": after,
        "delta": delta,
        "ci95": ci,
        "rows": rows,
        "higher_is_better": metric.higher_is_better,
        "rate": metric.rate,
    }


def guard(
    metric: LearningMetric,
    before_rows: Sequence[float],
    after_rows: Sequence[float],
    *,
    groups: Sequence[bool] | None = None,
    stderr: tuple[float | None, float | None] | None = None,
) -> GuardCheck:
    """A capability guard from per-row scores of the start and the tuned model: did it fall beyond its interval?

    ``stderr``: (start, tuned) standard errors, for a score whose rows are not paired (the interval is then
    1.96 times their combined error).

    >>> g = guard(LearningMetric("exact_match", "held-out accuracy", rate=True), [1, 1, 0, 1] * 8, [1, 1, 0, 1] * 8)
    >>> g.fell, g.sentence
    (False, 'held-out accuracy 75% -> 75% (+0 points, ±0)')
    """
    if len(before_rows) != len(after_rows):
        raise ValueError(f"{len(before_rows)} rows before but {len(after_rows)} after: a guard scores the same rows")
    groups = list(groups) if metric.grouped and groups is not None else None
    everything = list(range(len(after_rows)))
    before, after = _statistic(before_rows, groups, everything), _statistic(after_rows, groups, everything)
    delta = after - before if before is not None and after is not None else None
    if stderr is not None and None not in stderr:
        ci: float | None = round(1.96 * (stderr[0] ** 2 + stderr[1] ** 2) ** 0.5, 6)  # type: ignore[operator]
    else:
        ci = paired_interval(before_rows, after_rows, groups) if delta is not None else None
    return guard_check(metric, before, after, ci, len(after_rows))


def guard_check(
    metric: LearningMetric, before: float | None, after: float | None, ci: float | None, rows: int
) -> GuardCheck:
    """A guard from its summary figures: it fell when the interval excludes zero on the bad side and the fall is over
    the metric's tolerance."""
    delta = after - before if before is not None and after is not None else None
    fell = (
        delta is not None
        and ci is not None
        and judge(delta, ci, metric.higher_is_better) == "worse"
        and abs(delta) > metric.tolerance
    )
    text = f"{metric.label} {'fell ' if fell else ''}{shown(before, metric.rate)} -> {shown(after, metric.rate)}"
    if delta is not None:
        text += f" ({change_text(delta, ci, metric.rate)})"
    return GuardCheck(**_figures(metric, before, after, delta, ci, rows), fell=fell, sentence=text)


def guarded(learning: LearningVerdict, guards: Sequence[GuardCheck]) -> LearningVerdict:
    """The verdict with ``guards`` added to those it has (a guard of the same metric is replaced): ``improved`` or
    ``no_change`` becomes ``regressed`` when one fell, ``regressed`` goes back when none does, and the sentence says
    what broke (or what was checked)."""
    if not guards and not learning.guards:
        return learning
    added = {g.metric for g in guards}
    checks = [g for g in learning.guards if g.metric not in added] + list(guards)
    outcome: Verdict = learning.verdict
    if outcome == "regressed":
        outcome = method_outcome(learning)
    fell = [g for g in checks if g.fell]
    if fell and outcome in ("improved", "no_change"):
        outcome = "regressed"
    text = learning.method_sentence or learning.sentence
    if fell:
        joined = "; ".join(g.sentence for g in fell)
        text += f" But {joined}: the model got worse." if outcome == "regressed" else f" Also {joined}."
    elif checks and outcome != NO_SIGNAL:
        text += " Nothing it was checked on got worse: " + "; ".join(g.sentence for g in checks) + "."
    text += drift_caution(learning.drift)
    return learning.model_copy(update={"guards": checks, "verdict": outcome, "sentence": text})


def method_outcome(learning: LearningVerdict) -> Verdict:
    """The verdict by the method's own metric alone (what ``regressed`` was before a guard fell)."""
    if learning.verdict != "regressed":
        return learning.verdict
    return typing.cast(Verdict, judge(learning.delta, learning.ci95, learning.higher_is_better))


def no_signal_verdict(metric: LearningMetric, reason: str) -> LearningVerdict:
    """``no_signal`` for a run with nothing to learn from and no held-out rows scored: it says so all the same."""
    text = f"The run learned nothing: {reason}"
    return LearningVerdict(
        **_figures(metric, None, None, None, None, 0), verdict=NO_SIGNAL, sentence=text, method_sentence=text
    )


def status_text(status: str, learning: LearningVerdict | dict[str, Any] | None) -> str:
    """A job's status as people read it: a success that learned nothing says so.

    >>> status_text("succeeded", {"verdict": "no_signal"}), status_text("succeeded", None)
    ('succeeded - learned nothing', 'succeeded')
    >>> status_text("succeeded", {"verdict": "regressed"})
    'succeeded - got worse'
    """
    outcome = learning.get("verdict") if isinstance(learning, dict) else getattr(learning, "verdict", None)
    if status == "succeeded" and outcome == NO_SIGNAL:
        return "succeeded - learned nothing"
    if status == "succeeded" and outcome in ("regressed", "worse"):
        return "succeeded - got worse"
    return status


def verdict_metric_line(learning: LearningVerdict | None) -> str:
    """What the verdict measured, as the Chat tab's header says it: the metric, start -> tuned, on how many rows
    ("" before there is a verdict). Not the training loss, which for GRPO is not what it learns by.

    >>> v = LearningVerdict(metric="exact_match", label="held-out accuracy", verdict="improved", sentence="",
    ...                     before=0.41, after=0.59, delta=0.18, ci95=0.06, rows=256, rate=True)
    >>> verdict_metric_line(v)
    "The verdict's metric: **held-out accuracy**, 41% -> 59% (+18 points, ±6) on 256 held-out rows."
    """
    if learning is None:
        return ""
    change = f" ({change_text(learning.delta, learning.ci95, learning.rate)})" if learning.delta is not None else ""
    scores = f"{shown(learning.before, learning.rate)} -> {shown(learning.after, learning.rate)}{change}"
    rows = f" on {learning.rows} held-out {'row' if learning.rows == 1 else 'rows'}" if learning.rows else ""
    return f"The verdict's metric: **{learning.label}**, {scores}{rows}."


def drift_text(drift: DriftCheck | None) -> str | None:
    """The drift as the surfaces say it (None before there is one).

    >>> drift_text(DriftCheck(mean=0.0312, ci95=0.004, rows=64, threshold=0.5))
    "KL from the base 0.0312 nats/token (±0.004) on the tuned model's answers to 64 held-out prompts (healthy: ≤ 0.5)"
    >>> drift_text(DriftCheck(skipped="a reward model writes no answers"))
    'not measured: a reward model writes no answers'
    """
    if drift is None:
        return None
    if drift.mean is None:
        return f"not measured: {drift.skipped or 'no figure'}"
    interval = f" (±{drift.ci95:.2g})" if drift.ci95 is not None else ""
    healthy = f" (healthy: ≤ {drift.threshold:.3g})" if drift.threshold is not None else ""
    return (
        f"KL from the {drift.reference} {drift.mean:.3g} nats/token{interval} on the tuned model's answers to "
        f"{drift.rows} held-out prompts{healthy}"
    )


def drift_caution(drift: DriftCheck | None) -> str:
    """The verdict's one sentence when the drift is beyond what healthy runs show ("" else): a caution, not a guard.

    >>> drift_caution(DriftCheck(mean=4.2, ci95=0.3, rows=64, threshold=0.5, exceeds=True))  # doctest: +ELLIPSIS
    ' Caution: it drifted far from the base (KL 4.2 nats/token, healthy runs stay under 0.5): check what else...'
    """
    if drift is None or not drift.exceeds or drift.mean is None:
        return ""
    return (
        f" Caution: it drifted far from the {drift.reference} (KL {drift.mean:.3g} nats/token, healthy runs stay under "
        f"{drift.threshold:.3g}): check what else it forgot."
    )


def with_drift(learning: LearningVerdict, drift: DriftCheck | None) -> LearningVerdict:
    """The verdict with its drift recorded, and the caution sentence where the drift is beyond healthy; the verdict
    itself is unchanged (only a guard changes it)."""
    if drift is None:
        return learning
    recorded = learning.model_copy(update={"drift": drift})
    if recorded.guards:
        return guarded(recorded, [])
    return recorded.model_copy(
        update={"sentence": (learning.method_sentence or learning.sentence) + drift_caution(drift)}
    )


def drift_table_row(drift: DriftCheck) -> str:
    """The drift as a row of the verdict's table: KL from the start, 0 there by definition.

    >>> drift_table_row(DriftCheck(mean=0.031, ci95=0.004, rows=64, threshold=1.0))
    '| drift from the base (KL, nats/token, on 64 of its answers) | 0 | 0.031 | +0.031, ±0.004 | healthy |'
    """
    change = change_text(drift.mean, drift.ci95, rate=False)
    state = "beyond healthy" if drift.exceeds else "healthy"
    return (
        f"| drift from the {drift.reference} (KL, nats/token, on {drift.rows} of its answers) | 0 | "
        f"{shown(drift.mean, rate=False)} | {change} | {state} |"
    )
