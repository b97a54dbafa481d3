"""The Jobs tab's charts as markup (components/charts.py): one panel of a chart per metric family for the picked job,
and the compare view's overlay of several jobs. The data comes from ``monitor.py``; no Gradio here."""

from __future__ import annotations

from typing import Any

import pandas as pd

from components import charts
from components.jobs import monitor


def plot_id(key: str) -> str:
    """The element id of a metric family's chart (the loss chart is the main one).

    >>> plot_id("loss"), plot_id("kl_div")
    ('plot-main', 'plot-kl-div')
    """
    return "plot-main" if key == "loss" else f"plot-{key.replace('_', '-')}"


def chart_series(frame: pd.DataFrame, color_map: dict[str, str], label: str = "series") -> list[charts.Series]:
    """A long frame's (step, value, ``label``) rows as chart series in their first-seen order, each in its colour
    (a raw series, named "<label> (raw)", faint)."""
    out = []
    for name, rows in frame.groupby(label, sort=False):
        points = list(zip(rows["step"].astype(float), rows["value"].astype(float)))
        color = color_map.get(str(name), monitor.PALETTE[0][0])
        out.append(charts.Series(str(name), points, color, faint=str(name).endswith(monitor.RAW_SUFFIX)))
    return out


def plots_html(method: str, rows: list[dict[str, Any]], total_steps: int | None = None) -> str:
    """Every family's chart for ``method``'s logged ``rows`` as one panel's markup, the families with nothing to
    draw left out ("" when nothing is logged yet). Each series is thinned to ``monitor.MAX_PLOT_POINTS``."""
    figures = []
    for key, view in monitor.plot_views(method, rows, total_steps).items():
        if view is None:
            continue
        axes = charts.Axes("step", view.y_title, (view.x_lim[0], view.x_lim[1]))
        series = chart_series(monitor.thinned(view.frame), view.color_map)
        figures.append(charts.line_chart(series, axes, view.title, plot_id(key)))
    return charts.grid(figures)


def compare_chart(curves: list[tuple[str, list[dict[str, Any]]]], metric: str) -> str | None:
    """``metric`` (smoothed) of each (label, metric rows) pair overlaid in one chart, a colour per job; None when no
    job logged it."""
    frame = monitor.compare_frame(curves, metric)
    if frame is None:
        return None
    colors = {label: monitor.PALETTE[i % len(monitor.PALETTE)][0] for i, (label, _) in enumerate(curves)}
    x_lim = monitor.compare_axis(curves, metric)
    axes = charts.Axes("step", f"{metric} (smoothed)", (x_lim[0], x_lim[1]))
    return charts.line_chart(chart_series(frame, colors, "job"), axes)
