"""The server-drawn tables (components/tables.py): what a model wrote is shown as text, never as markup."""

from __future__ import annotations

import math
from html.parser import HTMLParser

import pandas as pd

from components.jobs import monitor
from components.tables import html_table


class _Cells(HTMLParser):
    """The table's header and body cells as text, and every tag met."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.rows: list[list[str]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _parse(markup: str) -> _Cells:
    cells = _Cells()
    cells.feed(markup)
    return cells


def test_a_hostile_completion_and_reward_name_are_text_in_their_cells():
    hostile = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
    samples = [{"step": 3, "prompt": "2+2?", "completion": hostile, "rewards": {"<b>r</b>": 1.0}, "advantage": 0.5}]
    markup = html_table(monitor.samples_table(samples), "Sampled completions")
    parsed = _parse(markup)
    assert "img" not in parsed.tags and "script" not in parsed.tags and "b" not in parsed.tags, parsed.tags
    header, row = parsed.rows
    assert header == ["step", "prompt", "completion", "<b>r</b>", "total", "advantage"]
    assert row[:3] == ["3", "2+2?", " ".join(hostile.split())] and row[-2:] == ["1", "0.5"]


def test_rows_in_order_blank_cells_for_missing_values_and_nothing_for_no_rows():
    frame = pd.DataFrame([[2, None, 0.5], [1, math.nan, "x"]], columns=["step", "loss", "note"])
    parsed = _parse(html_table(frame, "Training log"))
    assert parsed.rows == [["step", "loss", "note"], ["2", "", "0.5"], ["1", "", "x"]]
    assert "<caption>Training log</caption>" in html_table(frame, "Training log")
    assert html_table(frame.iloc[0:0], "Training log") == ""
