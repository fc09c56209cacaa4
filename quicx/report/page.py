"""
What the report's page is made of: percentiles, tables, charts, its style.

What the report's tables and page share: the percentiles they show, and the
page's style, tables and charts (self-contained HTML and SVG).
"""

from __future__ import annotations

import html
import math
import time
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


MAX_BARS = 90
"""Throughput bars at most: minutes are grouped when the span is longer."""


CSS = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin-bottom: 1em; max-width: 100%; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: right; vertical-align: top; }
td.text { text-align: left; white-space: normal; overflow-wrap: anywhere; min-width: 9em; }
th { background: #f0f0f0; }
.row { display: flex; flex-wrap: wrap; gap: 2em; }
figure { margin: 0 0 1em 0; max-width: 100%; } figcaption { font-weight: 600; }
svg { display: block; max-width: 100%; height: auto; background: #fafafa;
      border: 1px solid #ddd; font: 12px system-ui, sans-serif; }
svg .grid { stroke: #e4e4e4; } svg .axis { stroke: #888; } .note { color: #555; }
"""


def ms(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == 0 else f"{value:.1f}"


def throughput_chart(throughput: list[dict[str, Any]]) -> str:
    """Tasks completed over time, in at most L{MAX_BARS} bars of whole minutes."""
    by_minute: dict[int, int] = {}
    for row in throughput:
        by_minute[row["minute"]] = by_minute.get(row["minute"], 0) + row["completed"]
    if not by_minute:
        return "<p>Tasks completed over time: (none)</p>"
    first, last = min(by_minute), max(by_minute)
    minutes = (last - first) // 60000 + 1
    step = math.ceil(minutes / MAX_BARS)
    bars = [0] * math.ceil(minutes / step)
    for minute, count in by_minute.items():
        bars[(minute - first) // 60000 // step] += count
    days = time.gmtime(first / 1000)[:3] != time.gmtime(last / 1000)[:3]
    form = "%d %b %H:%M" if days else "%H:%M"
    labels = [
        time.strftime(form, time.gmtime(first / 1000 + i * step * 60)) for i in range(len(bars))
    ]
    per = "minute" if step == 1 else f"{step} minutes"
    return bar_chart(
        f"Tasks completed per {per}",
        list(zip(labels, bars, strict=True)),
        x_title=f"start of each {per} (UTC)",
        width=1000,
    )


def bar_chart(
    title: str,
    bars: list[tuple[str, int]],
    x_title: str,
    y_title: str = "tasks",
    width: int = 560,
) -> str:
    """
    Bars of (label, count) with a y axis (tasks) and as many x tick labels as
    fit without touching: each label is kept only if it clears the last one.
    """
    if not bars:
        return f"<p>{html.escape(title)}: (none)</p>"
    height = 260
    step = nice_step(max(c for _, c in bars))
    top = step * math.ceil(max(max(c for _, c in bars), 1) / step)
    y_ticks = list(range(0, top + 1, step))
    left = 14 + CHAR_PX * max(len(f"{v:,}") for v in y_ticks)
    right, upper, lower = 16, 34, 50
    plot_w, plot_h = width - left - right, height - upper - lower
    bar_w = plot_w / len(bars)
    bottom = upper + plot_h

    def y_of(value: float) -> float:
        return bottom - value / top * plot_h

    parts = [
        f"<svg viewBox='0 0 {width} {height}' width='{width}' height='{height}' role='img'"
        f" aria-label='{html.escape(title, quote=True)}'>",
        f"<text class='axis-title' x='4' y='16'>{html.escape(y_title)}</text>",
    ]
    for value in y_ticks:
        y = y_of(value)
        parts.append(
            f"<line class='grid' x1='{left}' x2='{width - right}' y1='{y:.1f}' y2='{y:.1f}'/>"
            f"<text class='tick y' x='{left - 6}' y='{y + 4:.1f}' text-anchor='end'>"
            f"{value:,}</text>"
        )
    for i, (label, count) in enumerate(bars):
        parts.append(
            f"<rect x='{left + i * bar_w:.1f}' y='{y_of(count):.1f}'"
            f" width='{max(bar_w - 1, 1):.1f}' height='{bottom - y_of(count):.1f}'"
            f" fill='#1f6f8b'><title>{html.escape(label)}: {count:,}</title></rect>"
        )
    parts.append(
        f"<line class='axis' x1='{left}' x2='{width - right}' y1='{bottom}' y2='{bottom}'/>"
    )
    cleared = 0.0  # the right edge of the last label kept
    for i, (label, _) in enumerate(bars):
        half = CHAR_PX * len(label) / 2
        centre = min(max(left + (i + 0.5) * bar_w, left + half), width - half - 2)
        if centre - half < cleared + 12:
            continue
        cleared = centre + half
        parts.append(
            f"<line class='axis' x1='{left + (i + 0.5) * bar_w:.1f}'"
            f" x2='{left + (i + 0.5) * bar_w:.1f}' y1='{bottom}' y2='{bottom + 4}'/>"
            f"<text class='tick x' x='{centre:.1f}' y='{bottom + 20}' text-anchor='middle'>"
            f"{html.escape(label)}</text>"
        )
    parts.append(
        f"<text class='axis-title' x='{left + plot_w / 2:.1f}' y='{height - 8}'"
        f" text-anchor='middle'>{html.escape(x_title)}</text></svg>"
    )
    return f"<figure><figcaption>{html.escape(title)}</figcaption>{''.join(parts)}</figure>"
