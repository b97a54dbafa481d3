"""Read-only tables drawn on the server as HTML, for a ``gr.HTML`` whose whole markup each update replaces.

Why not Gradio's Dataframe for tables that change at every pick (the Jobs tab's log rows and samples): each new value
left its old cells detached but alive, with their focus listeners, whenever the columns changed (picking between an
SFT and a GRPO job: 1,874 -> 3,967 listeners alive after a collection over fourteen picks; docs/benchmarks.md, "A
page's twentieth pick"). A replaced ``gr.HTML`` leaves nothing behind.
Every cell and header (model text, a metric's name) is escaped.
"""

from __future__ import annotations

from html import escape

import pandas as pd

TABLE_CSS = """
.studio-table { max-height: 480px; overflow: auto; }
.studio-table table { width: 100%; border-collapse: collapse; font-size: var(--text-sm); }
.studio-table caption { text-align: left; font-weight: 600; font-size: var(--text-md); padding: 0 0 4px; }
.studio-table th, .studio-table td { padding: 4px 8px; text-align: left; vertical-align: top;
    border-bottom: 1px solid var(--border-color-primary); }
.studio-table th { position: sticky; top: 0; background: var(--block-background-fill); white-space: nowrap; }
.studio-table td { white-space: normal; overflow-wrap: anywhere; }
"""


def html_table(frame: pd.DataFrame, caption: str) -> str:
    """``frame`` as a captioned table (its header row kept in view while its body scrolls); "" for no rows."""
    if frame.empty:
        return ""
    # Cells apart by a line break: the table's text (a copy, a search of the page) keeps its cells apart.
    head = "\n".join(f'<th scope="col"><span class="header">{escape(str(c))}</span></th>' for c in frame.columns)
    body = "\n".join(
        "<tr>" + "\n".join(f"<td>{escape('' if _blank(v) else str(v))}</td>" for v in row) + "</tr>"
        for row in frame.itertuples(index=False)
    )
    return (
        f'<div class="studio-table"><table><caption>{escape(caption)}</caption>\n'
        f"<thead><tr>{head}</tr></thead>\n<tbody>{body}</tbody></table></div>"
    )


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, float) and value != value)  # None and NaN show as empty cells
