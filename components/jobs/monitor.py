"""Monitoring views of a job, from its logged metrics and samples: one small-multiple plot per metric family (raw and
smoothed series, units, integer steps), the training log as rows, GRPO samples with each reward, and the frame that
overlays several jobs' curves.

No Gradio here: plain functions on store rows, tested without a browser. ``unchanged`` lets a timer send only what
changed since the page last drew it.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd

from backend.api import methods, monitoring

# TensorBoard's default smoothing weight: each point keeps 60 % of the running average.
SMOOTHING = 0.6
# The step axis spans at least this many steps, so that the plotting library's "nice" ticks land on whole steps
# (Vega-Lite draws about one tick per 40 px and rounds the tick step to 1, 2 or 5 times a power of ten: a span of 24
# steps gives ticks 1 apart or more on plots up to ~1300 px wide, a plot alone on its row or in full screen).
MIN_X_SPAN = 24
RAW_SUFFIX = " (raw)"

# Strong colours for the smoothed series and a faint tint of each for the raw one.
PALETTE = [
    ("#4f46e5", "#c7d2fe"),
    ("#e11d48", "#fecdd3"),
    ("#059669", "#a7f3d0"),
    ("#d97706", "#fde68a"),
    ("#0891b2", "#a5f3fc"),
    ("#7c3aed", "#ddd6fe"),
]


@dataclass(frozen=True)
class Family:
    """Metrics drawn in one plot: they share a scale and a unit. A family every method logs is ``shared``; the others
    show for the methods whose row in the method table lists one of their metrics as monitored."""

    key: str
    title: str
    unit: str
    metrics: tuple[str, ...] = ()
    shared: bool = False
    smooth: bool = True
    # Metrics found by name pattern (GRPO's per-reward means): prefix and suffix.
    pattern: tuple[str, str] | None = None

    def unit_for(self, method: str) -> str:
        """The y-axis title for ``method``: the loss plot takes the method's own loss unit."""
        return monitoring(method).loss_unit if self.key == "loss" else self.unit

    def shows_for(self, method: str) -> bool:
        """Whether ``method``'s jobs draw this family."""
        return self.shared or any(m in monitoring(method).metrics for m in self.metrics)


FAMILIES: tuple[Family, ...] = (
    Family("loss", "Loss", "loss", ("loss", "eval_loss"), shared=True),
    Family("reward", "Reward", "mean reward per completion", ("reward",), pattern=("rewards/", "/mean")),
    # DPO's and KTO's margin is an implicit reward (β·log-ratio); a reward model's (``margin``) is its own score.
    Family(
        "margins", "Reward margin (chosen − rejected)", "reward (DPO, KTO: β·log-ratio)", ("rewards/margins", "margin")
    ),
    Family("preference_accuracy", "Preference accuracy", "fraction of pairs (0–1)", ("rewards/accuracies", "accuracy")),
    Family(
        "chosen_rejected",
        "Chosen and rejected rewards",
        "implicit reward (β·log-ratio)",
        ("rewards/chosen", "rewards/rejected"),
    ),
    Family(
        "token_accuracy",
        "Token accuracy",
        "fraction of tokens (0–1)",
        ("mean_token_accuracy", "eval_mean_token_accuracy"),
    ),
    Family("reward_std", "Reward spread within a group", "standard deviation", ("reward_std",)),
    Family("kl", "KL to the reference", "nats", ("kl",)),
    Family(
        "length",
        "Completion length",
        "tokens",
        ("completions/mean_length", "completions/min_length", "completions/max_length"),
    ),
    Family(
        "fractions",
        "Groups without signal, completions cut short",
        "fraction (0–1)",
        ("frac_reward_zero_std", "completions/clipped_ratio"),
    ),
    Family("tools", "Tool calls", "per completion", ("tools/call_frequency", "tools/failure_frequency")),
    Family("lr", "Learning rate", "learning rate", ("learning_rate",), shared=True, smooth=False),
    Family("grad_norm", "Gradient norm", "L2 norm", ("grad_norm",), shared=True),
    Family("entropy", "Entropy", "nats per token", ("entropy",), shared=True),
    Family("throughput", "Throughput", "tokens per second", ("perf/tokens_per_second",), shared=True),
)
FAMILY_KEYS = tuple(f.key for f in FAMILIES)

# A metric as its plot's legend names it: a few words, not the trainer's key (a key such as
# ``perf/tokens_per_second`` is long, and a legend past the plot's width is cut off). The plot's title and unit say
# the rest.
LABELS = {
    "loss": "loss",
    "eval_loss": "eval loss",
    "reward": "reward (mean)",
    "rewards/margins": "margin",
    "margin": "margin",
    "rewards/accuracies": "accuracy",
    "accuracy": "accuracy",
    "rewards/chosen": "chosen",
    "rewards/rejected": "rejected",
    "mean_token_accuracy": "train",
    "eval_mean_token_accuracy": "eval",
    "reward_std": "reward std",
    "kl": "KL",
    "completions/mean_length": "mean",
    "completions/min_length": "min",
    "completions/max_length": "max",
    "frac_reward_zero_std": "no-signal groups",
    "completions/clipped_ratio": "cut short",
    "tools/call_frequency": "calls",
    "tools/failure_frequency": "failures",
    "learning_rate": "learning rate",
    "grad_norm": "grad norm",
    "entropy": "entropy",
    "perf/tokens_per_second": "tokens/s",
}


def metric_label(key: str) -> str:
    """A metric's legend name: the label table's words, a reward function's name for its mean reward, else the key.

    >>> metric_label("perf/tokens_per_second"), metric_label("rewards/format_reward/mean"), metric_label("x/y")
    ('tokens/s', 'format_reward', 'x/y')
    """
    if key in LABELS:
        return LABELS[key]
    if key.startswith("rewards/") and key.endswith("/mean"):
        return key[len("rewards/") : -len("/mean")]
    return key


def ema(values: list[float], weight: float = SMOOTHING) -> list[float]:
    """Exponential moving average, debiased like TensorBoard's (the first point is itself, not pulled to zero).

    >>> [round(v, 3) for v in ema([1.0, 0.0, 0.0], 0.5)]
    [1.0, 0.333, 0.143]
    """
    out, last, debias = [], 0.0, 1.0
    for value in values:
        last = last * weight + (1 - weight) * value
        debias *= weight
        out.append(last / (1 - debias))
    return out


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def family_metrics(family: Family, method: str, rows: list[dict[str, Any]]) -> list[str]:
    """The metrics of ``family`` that ``rows`` hold a number for, in the family's order (patterned ones sorted)."""
    if not family.shows_for(method):
        return []
    present = {k for row in rows for k, v in row.items() if _number(v) is not None and row.get("step") is not None}
    names = [m for m in family.metrics if m in present]
    if family.pattern:
        prefix, suffix = family.pattern
        names += sorted(k for k in present if k.startswith(prefix) and k.endswith(suffix) and k not in names)
    return names


def step_axis(rows: list[dict[str, Any]], total_steps: int | None = None) -> list[int]:
    """The step axis's limits [0, end]: at least ``MIN_X_SPAN`` (whole-number ticks), else the last logged step
    rounded up to 1, 2 or 5 times a power of ten (so the axis, and the chart with it, changes rarely while a job
    runs), never past the job's planned total.

    >>> step_axis([{"step": 6}], 6), step_axis([{"step": 130}], 1000), step_axis([{"step": 130}], 140)
    ([0, 24], [0, 200], [0, 140])
    """
    last = max((int(r["step"]) for r in rows if r.get("step") is not None), default=0)
    end = 1
    while end < last:
        end = _next_nice(end)
    if total_steps and total_steps >= last:
        end = min(end, int(total_steps))
    return [0, max(MIN_X_SPAN, end)]


def _next_nice(value: int) -> int:
    """The next of 1, 2, 5, 10, 20, 50, … after ``value``."""
    magnitude = 10 ** int(math.floor(math.log10(value)))
    for factor in (2, 5, 10):
        if factor * magnitude > value:
            return factor * magnitude
    return 10 * magnitude


@dataclass
class PlotView:
    """What one small-multiple plot shows: a long frame (step, value, series), colours, axis limits and unit."""

    frame: pd.DataFrame
    color_map: dict[str, str]
    x_lim: list[int]
    y_title: str
    title: str


def plot_views(method: str, rows: list[dict[str, Any]], total_steps: int | None = None) -> dict[str, PlotView | None]:
    """Each family's plot for ``method`` (None where there is nothing to draw): the smoothed series in a strong
    colour named after the metric (``metric_label``) and, for a plot of one metric, the raw one faint as
    "<label> (raw)". A plot of several metrics draws their smoothed lines alone: with a raw line each, its legend
    was wider than the plot and cut off. A series of one point has no raw line either (the same point, on top)."""
    x_lim = step_axis(rows, total_steps)
    views: dict[str, PlotView | None] = {}
    for family in FAMILIES:
        names = family_metrics(family, method, rows)
        points: list[dict[str, Any]] = []
        raw_points: list[dict[str, Any]] = []
        colors: dict[str, str] = {}
        for i, name in enumerate(names):
            series = [
                (int(r["step"]), v)
                for r in rows
                if r.get("step") is not None and (v := _number(r.get(name))) is not None
            ]
            strong, faint = PALETTE[i % len(PALETTE)]
            label = metric_label(name)
            values = [v for _, v in series]
            shown = ema(values) if family.smooth else values
            points += [{"step": s, "value": v, "series": label} for (s, _), v in zip(series, shown)]
            colors[label] = strong
            # (The raw line's arrival with the second point changes the colours: the chart redraws its legend.)
            if family.smooth and len(names) == 1 and len(series) > 1:
                raw_points += [{"step": s, "value": v, "series": label + RAW_SUFFIX} for s, v in series]
                colors[label + RAW_SUFFIX] = faint
        views[family.key] = (
            PlotView(pd.DataFrame(points + raw_points), colors, x_lim, family.unit_for(method), family.title)
            if points
            else None
        )
    return views


# --- the training log as rows ----------------------------------------------------------------------------------
def _fmt(value: Any, key: str = "") -> str:
    number = _number(value)
    if number is None:
        return ""
    if key == "learning_rate":
        return f"{number:.2e}"
    if number == int(number) and abs(number) < 1e6:
        return str(int(number))
    return f"{number:.4g}"


def log_rows(method: str, rows: list[dict[str, Any]], limit: int = 20) -> pd.DataFrame:
    """The newest ``limit`` logged rows (newest first) as time, step and the metrics that matter for ``method``."""
    columns = monitoring(method).log_columns
    out = []
    for row in rows:
        if not any(_number(row.get(key)) is not None for key, _ in columns):
            continue  # the end-of-training summary row and perf-only rows say nothing here
        ts = row.get("ts")
        out.append(
            [
                time.strftime("%H:%M:%S", time.localtime(ts)) if ts else "",
                row.get("step") or "",
                *(_fmt(row.get(key), key) for key, _ in columns),
            ]
        )
    return pd.DataFrame(out[-limit:][::-1], columns=["time", "step", *(label for _, label in columns)])


# --- GRPO samples ----------------------------------------------------------------------------------------------
def _text(value: Any) -> str:
    """A prompt or completion as one line: chat messages as ``role: text``, tool calls shown."""
    if isinstance(value, list):
        parts = []
        for message in value:
            if not isinstance(message, dict):
                parts.append(str(message))
                continue
            text = str(message.get("content") or "")
            for call in message.get("tool_calls") or []:
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                text += f" [calls {fn.get('name')}({fn.get('arguments')})]"
            parts.append(f"{message.get('role')}: {text}".strip())
        return " | ".join(parts)
    return " ".join(str(value or "").split())


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], dict):
        return " ".join(str(prompt[-1].get("content") or "").split())  # the question, not the system prompt
    return _text(prompt)


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def sample_total(sample: dict[str, Any], weights: dict[str, float] | None = None) -> float | None:
    """The weighted sum of a sample's rewards (weight 1 for rewards ``weights`` does not name); None if it has none."""
    values = [(k, _number(v)) for k, v in (sample.get("rewards") or {}).items()]
    values = [(k, v) for k, v in values if v is not None]
    if not values:
        return None
    return sum(v * (weights or {}).get(k, 1.0) for k, v in values)


def samples_table(
    samples: list[dict[str, Any]], weights: dict[str, float] | None = None, limit: int = 24
) -> pd.DataFrame:
    """The newest ``limit`` samples, newest step first and best total first within a step: step, prompt,
    completion, one column per reward, total, advantage."""
    names = list(dict.fromkeys(k for s in samples for k in (s.get("rewards") or {})))
    chosen = samples[-limit:]
    chosen = sorted(chosen, key=lambda s: (-(s.get("step") or 0), -(sample_total(s, weights) or -math.inf)))
    rows = []
    for s in chosen:
        rewards = s.get("rewards") or {}
        total = sample_total(s, weights)
        rows.append(
            [
                s.get("step"),
                _short(_prompt_text(s.get("prompt")), 100),
                _short(_text(s.get("completion")), 240),
                *(_fmt(rewards.get(name)) if _number(rewards.get(name)) is not None else "" for name in names),
                "" if total is None else f"{total:.3g}",
                _fmt(s.get("advantage")),
            ]
        )
    return pd.DataFrame(rows, columns=["step", "prompt", "completion", *names, "total", "advantage"])


def best_and_worst(samples: list[dict[str, Any]], weights: dict[str, float] | None = None) -> str:
    """Markdown naming the best and the worst completion of the last logged step, by total reward."""
    if not samples:
        return ""
    last = max((s.get("step") or 0) for s in samples)
    scored = [(t, s) for s in samples if (s.get("step") or 0) == last and (t := sample_total(s, weights)) is not None]
    if not scored:
        return ""
    best = max(scored, key=lambda p: p[0])
    worst = min(scored, key=lambda p: p[0])

    def line(label: str, pair: tuple[float, dict[str, Any]]) -> str:
        text = _short(_text(pair[1].get("completion")), 300).replace("|", "\\|").replace("`", "'")
        return f"**{label}** (total {pair[0]:.3g}): {text}"

    return "\n\n".join([f"Step {last}: {len(scored)} completions", line("Best", best), line("Worst", worst)])


# --- comparing jobs --------------------------------------------------------------------------------------------
def compare_metrics() -> tuple[str, ...]:
    """The metrics the compare view offers: the loss, then every metric a method's row monitors (a new method's own
    with it), each once."""
    monitored = (metric for method in methods() for metric in monitoring(method).metrics)
    return tuple(dict.fromkeys(("loss", "eval_loss", *monitored)))


def compare_labels(jobs: list[tuple[str, str | None]]) -> list[str]:
    """Short legend labels for (job id, run name) pairs: the run name, with the id's tail where names repeat; the
    id for unnamed jobs (a legend cuts labels past ~25 characters).

    >>> compare_labels([("20261201-1-abc123", "lr-1e-3"), ("20261201-2-def456", None)])
    ['lr-1e-3', '20261201-2-def456']
    >>> compare_labels([("20261201-1-abc123", "run"), ("20261201-2-def456", "run")])
    ['run · abc123', 'run · def456']
    """
    names = [name or job_id for job_id, name in jobs]
    return [f"{name} · {job_id[-6:]}" if names.count(name) > 1 else name for name, (job_id, _) in zip(names, jobs)]


def compare_frame(
    curves: Iterable[tuple[str, list[dict[str, Any]]]], metric: str, smooth: bool = True
) -> pd.DataFrame | None:
    """One long frame (step, value, job) overlaying ``metric`` of each (label, metric rows) pair; None when no job
    logged it."""
    points = []
    for label, rows in curves:
        series = [
            (int(r["step"]), v) for r in rows if r.get("step") is not None and (v := _number(r.get(metric))) is not None
        ]
        values = [v for _, v in series]
        shown = ema(values) if smooth and len(values) >= 3 else values
        points += [{"step": s, "value": v, "job": label} for (s, _), v in zip(series, shown)]
    return pd.DataFrame(points) if points else None


def compare_axis(curves: Iterable[tuple[str, list[dict[str, Any]]]], metric: str) -> list[int]:
    """The compare plot's step axis [0, end]: it ends at the last step any compared job logged ``metric`` at (not a
    rounder number past it, nor a job's planned total), so the longest curve spans the plot; at least
    ``MIN_X_SPAN`` steps, for whole-number ticks.

    >>> compare_axis([("a", [{"step": 10, "loss": 1.0}]), ("b", [{"step": 30, "loss": 1.0}, {"step": 40}])], "loss")
    [0, 30]
    """
    last = max(
        (int(r["step"]) for _, rows in curves for r in rows if r.get("step") is not None and r.get(metric) is not None),
        default=0,
    )
    return [0, max(MIN_X_SPAN, last)]


def fingerprint(value: Any) -> str:
    """A short digest of one output's value (text, table rows, a frame, an update's dict of them): equal values give
    equal digests, so a refresh can tell what the page already shows.

    >>> fingerprint({"value": pd.DataFrame({"step": [1]}), "visible": True}) == fingerprint({"visible": True,
    ...     "value": pd.DataFrame({"step": [1]})})
    True
    >>> fingerprint([["a", 1]]) == fingerprint([["a", 2]])
    False
    """
    digest = hashlib.blake2b(digest_size=12)
    _feed(digest, value)
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    if isinstance(value, pd.DataFrame):
        digest.update(b"F" + value.to_json(orient="split", date_format="iso").encode())
    elif isinstance(value, dict):
        digest.update(b"{")
        for key in sorted(value, key=str):
            _feed(digest, key)
            _feed(digest, value[key])
        digest.update(b"}")
    elif isinstance(value, list | tuple):
        digest.update(b"[")
        for item in value:
            _feed(digest, item)
        digest.update(b"]")
    else:
        digest.update(repr(value).encode() + b"|")


def unchanged(
    values: list[Any], shown: dict[int, str] | None, positions: Iterable[int] | None = None
) -> tuple[list[bool], dict[int, str]]:
    """For a refresh's outputs: which of them the page already shows (``shown``: the digests of the last values sent,
    by position), and the digests to remember now. ``positions`` places ``values`` among the page's outputs when they
    are only some of them (0, 1, ... by default); the digests of the others are kept.

    >>> same, now = unchanged(["a", "b"], None)
    >>> same, unchanged(["a", "c"], now)[0]
    ([False, False], [True, False])
    >>> same, later = unchanged(["c"], now, [1])
    >>> same, later[0] == now[0], later[1] == unchanged(["a", "c"], now)[1][1]
    ([False], True, True)
    """
    digests = dict(shown or {})
    same = []
    for i, value in zip(range(len(values)) if positions is None else positions, values):
        digest = fingerprint(value)
        same.append(digests.get(i) == digest)
        digests[i] = digest
    return same, digests


# A plot is a few hundred pixels wide, and the browser redraws every point it is sent (issue 24's slow Jobs tab).
MAX_PLOT_POINTS = 120


def thinned(frame: pd.DataFrame, limit: int = MAX_PLOT_POINTS) -> pd.DataFrame:
    """At most ``limit`` points per series of a plot's frame: evenly spaced, the first and the last kept.

    >>> frame = pd.DataFrame({"step": range(1000), "value": 0.0, "series": "loss"})
    >>> small = thinned(frame, 10)
    >>> len(small), int(small["step"].iloc[0]), int(small["step"].iloc[-1])
    (10, 0, 999)
    >>> len(thinned(frame.head(5), 10))
    5
    """
    if frame.empty or frame.groupby("series").size().max() <= limit:
        return frame
    parts = []
    for _, series in frame.groupby("series", sort=False):
        if len(series) > limit:
            picks = sorted({round(i * (len(series) - 1) / (limit - 1)) for i in range(limit)})
            series = series.iloc[picks]
        parts.append(series)
    return pd.concat(parts, ignore_index=True)
