"""What the Jobs tab shows of a sweep: its children as a table (the values each tried, status, verdict, score) with
the best marked, the score against the varied field as plot points, and a line saying where the sweep stands. No
Gradio here: plain functions of the facade's ``SweepReport``, tested without a browser."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

import pandas as pd

from backend.api import SweepReport
from components import charts

BEST_MARK = "★ best"
COLORS = {"best": "#e4572e", "other": "#4c78a8"}


def _short(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _value_text(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def metric_label(report: SweepReport) -> tuple[str, bool]:
    """(what the score is, as people say it; whether it is a share shown in percent), from the children's verdicts."""
    if report.sweep.objective.startswith("benchmark:"):
        return report.sweep.objective.partition(":")[2], True
    for child in report.children:
        learning = child.job.artifacts.learning if child.job is not None else None
        if learning is not None:
            return learning.label, learning.rate
    return "score", False


def score_text(value: float | None, rate: bool) -> str:
    """A child's score as the table shows it (empty until it has one).

    >>> score_text(0.4219, True), score_text(1.25, False), score_text(None, True)
    ('42.2%', '1.25', '')
    """
    if value is None:
        return ""
    return f"{value:.1%}" if rate else f"{value:.3g}"


def sweep_table(report: SweepReport) -> pd.DataFrame:
    """One row per child: the best mark, its job id, each varied field's value, status, verdict and score."""
    label, rate = metric_label(report)
    varied = report.sweep.varied
    rows = []
    for child in report.children:
        learning = child.job.artifacts.learning if child.job is not None else None
        rows.append(
            [
                BEST_MARK if child.best else "",
                child.child.job_id,
                *(_value_text(child.child.params.get(path)) for path in varied),
                child.status,
                learning.word if learning is not None else "",
                score_text(child.value, rate),
            ]
        )
    columns = ["", "job", *(_short(p) for p in varied), "status", "verdict", label]
    return pd.DataFrame(rows, columns=columns)


def log_scaled(values: list[Any]) -> bool:
    """Whether the varied values are best plotted on a log scale: all positive numbers spanning 100 times or more.

    >>> log_scaled([1e-6, 1e-3, 5e-3]), log_scaled([8, 16, 32]), log_scaled(["sigmoid", "ipo"])
    (True, False, False)
    """
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(numbers) != len(values) or not numbers or min(numbers) <= 0:
        return False
    return max(numbers) / min(numbers) >= 100


def plot_frame(report: SweepReport) -> tuple[pd.DataFrame | None, str, str]:
    """(the scored children as points: the first varied field's value against the score, the best apart; the x
    axis's title; the y axis's), or a None frame while no child has a score."""
    label, rate = metric_label(report)
    path = report.sweep.varied[0]
    scored = [c for c in report.children if c.value is not None]
    if not scored:
        return None, _short(path), label
    xs = [c.child.params.get(path) for c in scored]
    log = log_scaled(xs)
    frame = pd.DataFrame(
        {
            "x": [math.log10(x) if log else x for x in xs],
            "score": [c.value * 100 if rate else c.value for c in scored],
            "child": ["best" if c.best else "other" for c in scored],
            "job": [c.child.job_id for c in scored],
        }
    )
    x_title = f"log10({_short(path)})" if log else _short(path)
    return frame, x_title, f"{label} (%)" if rate else label


def plot_html(report: SweepReport) -> str:
    """The scored children as a scatter chart (``plot_frame``), the best ringed in its own colour, each dot's
    tooltip naming its job; "" while no child has a score."""
    frame, x_title, y_title = plot_frame(report)
    if frame is None:
        return ""
    dots = [
        charts.Dot(float(x), float(y), COLORS[kind], f"{job}: {x_title} {x:.4g}, {y_title} {y:.4g}", kind == "best")
        for x, y, kind, job in frame[["x", "score", "child", "job"]].itertuples(index=False)
    ]
    axes = charts.Axes(x_title, y_title, whole_x=False)
    kinds = [(kind, color) for kind, color in COLORS.items() if kind in set(frame["child"])]
    return charts.scatter_chart(dots, axes, kinds, "Score against the varied field", "sweep-plot-chart")


def sweep_markdown(report: SweepReport) -> str:
    """Where the sweep stands: its id and status, what it varies, how many children ended, and its best."""
    s = report.sweep
    ended = sum(1 for c in report.children if c.job is not None and c.job.status.finished)
    label, rate = metric_label(report)
    varied = "; ".join(d.describe() for d in s.dimensions)
    lines = [
        f"**Sweep {s.id}**: {report.status}, {ended} of {s.trials} children ended ({s.search}; varies {varied}).",
    ]
    best = report.best
    if best is not None:
        values = ", ".join(f"{_short(p)} = {_value_text(v)}" for p, v in best.child.params.items())
        lines.append(f"Best so far: **{best.child.job_id}** ({values}), {label} {score_text(best.value, rate)}.")
    elif any(c.ranked_out for c in report.children):
        lines.append(
            "No best yet: every child with a score got worse, or lost something a guard checks (see its verdict)."
        )
    else:
        lines.append("No child has a score yet.")
    return "\n\n".join(lines)


def digest(report: SweepReport | None) -> str:
    """A fingerprint of what the panel shows, so a tick sends it only when it changed."""
    if report is None:
        return ""
    rows = [(c.child.job_id, c.status, c.value, c.best) for c in report.children]
    return hashlib.sha1(json.dumps([report.sweep.id, report.status, rows]).encode()).hexdigest()
