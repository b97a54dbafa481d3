"""Charts drawn on the server as inline SVG: small line charts (the Jobs tab's metric families, the compare view) and
a scatter chart (a sweep's score against the field it varied).

Why not Gradio's LinePlot and ScatterPlot: each redraw of one made a new Vega view with a new ResizeObserver and
never released the old ones, so a page grew slower with every pick (issue 47: 40 live observers after the first pick,
259 after the twentieth, 18 s of blocked main thread per pick). Markup sent as an ``gr.HTML`` value replaces the old
markup and creates nothing that outlives it: no script, no observer, no listener.

No Gradio here: plain functions from points to markup, tested without a browser. Every text a user may have named (a
run name, a metric key) is escaped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

# The drawing's own coordinates: the SVG scales to its frame's width and keeps this aspect.
WIDTH, HEIGHT = 480, 270
LEFT, RIGHT, TOP, BOTTOM = 62, 14, 12, 44
TICKS = 5  # about this many ticks on each axis
FONT = 11

CHART_CSS = """
.chart { margin: 0; min-width: 0; }
.chart-title { font-weight: 600; font-size: var(--text-md); margin: 0 0 2px; }
.chart-legend { display: flex; flex-wrap: wrap; gap: 2px 12px; list-style: none; margin: 0 0 2px; padding: 0;
    font-size: var(--text-sm); }
.chart-legend li { display: inline-flex; align-items: center; gap: 4px; margin: 0; }
.chart-legend .swatch { display: inline-block; width: 14px; height: 3px; border-radius: 2px; }
.chart svg { display: block; width: 100%; height: auto; overflow: visible; }
.chart svg text { fill: var(--body-text-color); font-family: var(--font); }
.chart .grid line { stroke: var(--border-color-primary); stroke-width: 1; }
.chart .axis-line { stroke: var(--body-text-color-subdued); stroke-width: 1; }
.chart .line { fill: none; stroke-width: 2; stroke-linejoin: round; stroke-linecap: round; }
.chart .point { stroke: none; }
.chart .hit { fill: transparent; }
.chart-grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(360px, 1fr)); gap: 16px 20px; }
"""


@dataclass(frozen=True)
class Series:
    """One named line: (x, y) points in order of x, its colour, and whether it is a faint backdrop (a raw series
    under its smoothed one)."""

    name: str
    points: Sequence[tuple[float, float]]
    color: str
    faint: bool = False


@dataclass(frozen=True)
class Axes:
    """What the axes say: titles, the x range (None: the data's) and whether x is whole steps."""

    x_title: str
    y_title: str
    x_lim: tuple[float, float] | None = None
    whole_x: bool = True


def nice_step(span: float, count: int = TICKS) -> float:
    """A tick step of 1, 2 or 5 times a power of ten giving about ``count`` ticks over ``span``.

    >>> nice_step(10), nice_step(0.37), nice_step(2400, 6)
    (2.0, 0.1, 500.0)
    """
    if not span > 0:
        return 1.0
    raw = span / count
    magnitude = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * magnitude >= raw * 0.999:
            return float(factor * magnitude)
    return float(10 * magnitude)


def ticks(low: float, high: float, whole: bool = False, count: int = TICKS) -> list[float]:
    """Tick values from ``low`` to ``high`` at a nice step (whole numbers only when ``whole``).

    >>> ticks(0, 24, whole=True)
    [0.0, 5.0, 10.0, 15.0, 20.0]
    >>> ticks(0.2, 0.9)
    [0.2, 0.4, 0.6, 0.8]
    """
    step = nice_step(high - low, count)
    if whole:
        step = max(1.0, round(step))
    first = math.ceil(low / step - 1e-9) * step
    out, i = [], 0
    while (value := first + i * step) <= high + step * 1e-9 and i < 50:
        out.append(float(round(value, 12)))
        i += 1
    return out


def fmt(value: float, step: float = 0.0) -> str:
    """A tick label: short, as precise as the step needs, exponents for the very small or large.

    >>> fmt(0.0), fmt(2.5), fmt(0.0002, 0.0001), fmt(1500.0, 500), fmt(3e6, 1e6), fmt(1.0, 0.2)
    ('0', '2.5', '2e-04', '1,500', '3e+06', '1')
    """
    if value == 0:
        return "0"
    size = abs(value)
    if size < 1e-3 or size >= 1e6:
        return f"{value:.0e}" if step and abs(step) >= size * 0.999 else f"{value:.1e}".replace(".0e", "e")
    if value == int(value):
        return f"{int(value):,}"
    return f"{value:.4g}"


def _limits(values: list[float]) -> tuple[float, float]:
    """The y range: the data's, padded a little, a flat series centred in a span of its own size."""
    low, high = min(values), max(values)
    if high == low:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    pad = (high - low) * 0.06
    return low - pad, high + pad


class _Frame:
    """Data coordinates to the drawing's."""

    def __init__(self, x: tuple[float, float], y: tuple[float, float]) -> None:
        self.x, self.y = x, y

    def px(self, value: float) -> float:
        low, high = self.x
        return LEFT + (value - low) / ((high - low) or 1.0) * (WIDTH - LEFT - RIGHT)

    def py(self, value: float) -> float:
        low, high = self.y
        return HEIGHT - BOTTOM - (value - low) / ((high - low) or 1.0) * (HEIGHT - TOP - BOTTOM)


def _axes_markup(frame: _Frame, axes: Axes, x_ticks: list[float], y_ticks: list[float]) -> list[str]:
    y_step = (y_ticks[1] - y_ticks[0]) if len(y_ticks) > 1 else 0.0
    out = ['<g class="grid">']
    out += [f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{frame.py(v):.1f}" y2="{frame.py(v):.1f}"/>' for v in y_ticks]
    out.append("</g>")
    bottom = HEIGHT - BOTTOM
    out.append(f'<line class="axis-line" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{bottom}" y2="{bottom}"/>')
    out.append('<g class="axis axis-x">')
    out += [
        f'<text class="tick-label" x="{frame.px(v):.1f}" y="{bottom + FONT + 5}" text-anchor="middle" '
        f'font-size="{FONT}">{escape(fmt(v))}</text>'
        for v in x_ticks
    ]
    out.append(
        f'<text class="axis-title" x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 6}" text-anchor="middle" '
        f'font-size="{FONT}">{escape(axes.x_title)}</text></g>'
    )
    out.append('<g class="axis axis-y">')
    out += [
        f'<text class="tick-label" x="{LEFT - 6}" y="{frame.py(v) + 4:.1f}" text-anchor="end" '
        f'font-size="{FONT}">{escape(fmt(v, y_step))}</text>'
        for v in y_ticks
    ]
    middle = (TOP + HEIGHT - BOTTOM) / 2
    out.append(
        f'<text class="axis-title" transform="translate(12 {middle}) rotate(-90)" text-anchor="middle" '
        f'font-size="{FONT}">{escape(axes.y_title)}</text></g>'
    )
    return out


def _legend(entries: list[tuple[str, str]]) -> str:
    items = "".join(
        f'<li><span class="swatch" style="background:{escape(color)}"></span>'
        f'<span class="legend-label">{escape(name)}</span></li>'
        for name, color in entries
    )
    return f'<ul class="chart-legend">{items}</ul>'


def _figure(elem_id: str | None, title: str, legend: str, svg: list[str], label: str) -> str:
    ident = f' id="{escape(elem_id)}"' if elem_id else ""
    caption = f'<figcaption class="chart-title">{escape(title)}</figcaption>' if title else ""
    drawing = (
        f'<svg viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}" '
        f'xmlns="http://www.w3.org/2000/svg">{"".join(svg)}</svg>'
    )
    return f'<figure class="chart"{ident}>{caption}{legend}{drawing}</figure>'


def line_chart(series: Sequence[Series], axes: Axes, title: str = "", elem_id: str | None = None) -> str:
    """A line chart of ``series`` as an HTML figure: title, legend (HTML, so it wraps and is never cut off), and an
    SVG of the lines over gridlines and labelled axes. Each point carries a tooltip (step and value); a series of one
    point is a dot. Empty ``series``: an empty string."""
    drawn = [s for s in series if s.points]
    if not drawn:
        return ""
    xs = [x for s in drawn for x, _ in s.points]
    ys = [y for s in drawn for _, y in s.points]
    x_range = axes.x_lim or (min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1)
    y_ticks_range = _limits(ys)
    y_ticks = ticks(*y_ticks_range)
    frame = _Frame((float(x_range[0]), float(x_range[1])), y_ticks_range)
    svg = _axes_markup(frame, axes, ticks(*frame.x, whole=axes.whole_x), y_ticks)
    for s in sorted(drawn, key=lambda s: not s.faint):  # the faint backdrops first, under the strong lines
        color = escape(s.color)
        coords = [(frame.px(x), frame.py(y)) for x, y in s.points]
        path = "M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in coords)
        svg.append(f'<g class="series" data-series="{escape(s.name)}">')
        if len(coords) > 1:
            svg.append(f'<path class="line{" faint" if s.faint else ""}" d="{path}" stroke="{color}"/>')
        else:
            x, y = coords[0]
            svg.append(f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{color}"/>')
        if not s.faint:
            svg += [
                f'<circle class="hit" cx="{px:.1f}" cy="{py:.1f}" r="4"><title>{escape(s.name)} · '
                f"{escape(axes.x_title)} {escape(fmt(x))}: {escape(f'{y:.4g}')}</title></circle>"
                for (px, py), (x, y) in zip(coords, s.points)
            ]
        svg.append("</g>")
    legend = _legend([(s.name, s.color) for s in drawn])
    return _figure(elem_id, title, legend, svg, f"{title or axes.y_title} against {axes.x_title}")


@dataclass(frozen=True)
class Dot:
    """One point of a scatter chart: where, its colour, and its tooltip."""

    x: float
    y: float
    color: str
    note: str
    marked: bool = False  # drawn larger, ringed: the best


def scatter_chart(
    dots: Sequence[Dot], axes: Axes, legend: Sequence[tuple[str, str]] = (), title: str = "", elem_id: str | None = None
) -> str:
    """A scatter chart of ``dots`` (tooltips from their notes), inset from the frame's edges so that no dot is cut
    off. Empty ``dots``: an empty string."""
    if not dots:
        return ""
    x_low, x_high = _limits([d.x for d in dots])
    y_low, y_high = _limits([d.y for d in dots])
    frame = _Frame((x_low, x_high), (y_low, y_high))
    svg = _axes_markup(frame, axes, ticks(x_low, x_high, whole=axes.whole_x), ticks(y_low, y_high))
    svg.append('<g class="dots">')
    for d in dots:
        ring = ' stroke="currentColor" stroke-width="2"' if d.marked else ""
        svg.append(
            f'<circle class="point{" best" if d.marked else ""}" cx="{frame.px(d.x):.1f}" cy="{frame.py(d.y):.1f}" '
            f'r="{7 if d.marked else 5}" fill="{escape(d.color)}"{ring}><title>{escape(d.note)}</title></circle>'
        )
    svg.append("</g>")
    key = _legend(list(legend)) if legend else ""
    return _figure(elem_id, title, key, svg, f"{axes.y_title} against {axes.x_title}")


def grid(figures: Sequence[str]) -> str:
    """Figures side by side, as many to a row as fit (each at least 360 px wide)."""
    return f'<div class="chart-grid">{"".join(figures)}</div>' if any(figures) else ""
