"""
What the report's tables and page share: percentiles, tables, chart scales.

What the report's tables and page share: the percentiles they show, and the
page's tables and chart scales (self-contained HTML and SVG).
"""

from __future__ import annotations

import html
import math
from typing import Any

PERCENTILES = (0.5, 0.95, 0.99)
"""The percentiles of the report's latency columns."""
CHAR_PX = 7.5
"""A generous width of one 12 px character, to space tick labels."""


def html_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    """
    C{rows} as an HTML table of C{columns} (default: all, as the first row
    has them).  A number may break after a thousands separator (C{<wbr>}),
    which it does only where the table would not fit otherwise.
    """
    if not rows:
        return "<p>(none)</p>"
    columns = columns or list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"<td>{value:,.1f}</td>".replace(",", ",<wbr>")
        if isinstance(value, int):
            return f"<td>{value:,}</td>".replace(",", ",<wbr>")
        return f"<td class='text'>{html.escape('' if value is None else str(value))}</td>"

    head = "".join(f"<th>{html.escape(c.replace('_', ' '))}</th>" for c in columns)
    body = "".join("<tr>" + "".join(cell(row[c]) for c in columns) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def nice_step(top: int, ticks: int = 4) -> int:
    """A step of 1, 2 or 5 times a power of ten giving about C{ticks} ticks to C{top}."""
    raw = max(top / ticks, 1)
    magnitude = 10 ** math.floor(math.log10(raw))
    return int(next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw))
