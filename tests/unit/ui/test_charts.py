"""The server-drawn charts (components/charts.py) that replaced Gradio's LinePlot and ScatterPlot (issue 47): what
they draw, that hostile names stay text, and that nothing is drawn outside the frame."""

from __future__ import annotations

import doctest
import re
import xml.etree.ElementTree as ET

from components import charts
from components.jobs import monitor
from components.jobs import plots as job_plots

SVG = "{http://www.w3.org/2000/svg}"


def _svg(markup: str) -> ET.Element:
    """The chart's SVG, parsed (the markup is well-formed XML, or this fails)."""
    root = ET.fromstring(markup)
    return root.find(f".//{SVG}svg")


def test_the_doctests_hold():
    for module in (charts, monitor, job_plots):
        assert doctest.testmod(module).failed == 0, module.__name__


def test_a_line_chart_has_a_legend_entry_a_line_and_a_tooltip_per_point():
    series = [
        charts.Series("loss", [(1, 2.0), (2, 1.5), (3, 1.2)], "#4f46e5"),
        charts.Series("loss (raw)", [(1, 2.1), (2, 1.4), (3, 1.3)], "#c7d2fe", faint=True),
    ]
    markup = charts.line_chart(series, charts.Axes("step", "nats", (0, 24)), "Loss", "plot-main")
    assert re.findall(r'class="legend-label">([^<]*)<', markup) == ["loss", "loss (raw)"]
    svg = _svg(markup)
    assert len(svg.findall(f".//{SVG}path")) == 2
    assert [t.text for t in svg.findall(f".//{SVG}circle/{SVG}title")] == [
        "loss · step 1: 2",
        "loss · step 2: 1.5",
        "loss · step 3: 1.2",
    ]
    x_labels = [t.text for t in svg.findall(f".//{SVG}g[@class='axis axis-x']/{SVG}text[@class='tick-label']")]
    assert x_labels == ["0", "5", "10", "15", "20"], "whole steps over the given range"


def test_a_series_of_one_point_is_a_dot_and_nothing_logged_draws_nothing():
    markup = charts.line_chart([charts.Series("kl", [(1, 0.1)], "#000")], charts.Axes("step", "nats"))
    assert _svg(markup).find(f".//{SVG}circle[@class='point']") is not None
    assert charts.line_chart([charts.Series("kl", [], "#000")], charts.Axes("step", "nats")) == ""
    assert job_plots.plots_html("sft", []) == ""


def test_a_hostile_name_is_text_not_markup():
    evil = '<img src=x onerror="alert(1)">'
    markup = charts.line_chart([charts.Series(evil, [(1, 1.0), (2, 2.0)], '"red" onload="x"')], charts.Axes(evil, evil))
    assert "<img" not in markup and 'onload="x"' not in markup and 'onerror="alert' not in markup
    _svg(markup)  # still well-formed


def test_no_dot_of_a_scatter_is_cut_off_at_the_edges():
    dots = [charts.Dot(x, y, "#e4572e", f"job {x}", marked=x == 3) for x, y in [(1, 10.0), (2, 50.0), (3, 90.0)]]
    svg = _svg(charts.scatter_chart(dots, charts.Axes("lr", "accuracy (%)", whole_x=False), [("best", "#e4572e")]))
    for circle in svg.findall(f".//{SVG}circle"):
        x, y, r = (float(circle.get(k)) for k in ("cx", "cy", "r"))
        assert charts.LEFT <= x - r and x + r <= charts.WIDTH - charts.RIGHT, (x, r)
        assert charts.TOP <= y - r and y + r <= charts.HEIGHT - charts.BOTTOM, (y, r)


def test_the_jobs_panel_draws_each_family_logged_with_its_id():
    rows = [{"step": i, "loss": 2.0 / i, "learning_rate": 1e-3 * (1 - i / 10), "grad_norm": 1.0} for i in range(1, 9)]
    markup = job_plots.plots_html("sft", rows, 8)
    assert re.findall(r'<figure class="chart" id="([^"]+)"', markup) == ["plot-main", "plot-lr", "plot-grad-norm"]
    ET.fromstring(markup)
