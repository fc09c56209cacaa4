"""
The open-loop latency chart (L{tools.bench.openloop}), as a small SVG
written here: latency by percentile, one line per offered load, both axes
logarithmic (the percentile's axis as 1 / (1 - q): p50, p90, p99, p99.9
evenly spaced).  No plotting library: the core install stays as it is.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from html import escape

WIDTH, HEIGHT = 640, 400
LEFT, RIGHT, TOP, BOTTOM = 70, 150, 40, 50
COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e")
TICKS = ("p50", "p90", "p99", "p99.9")


def _x(percentile: str) -> float:
    q = float(percentile[1:]) / 100
    span = math.log10(1 / (1 - 0.999)) - math.log10(2)
    share = (math.log10(1 / (1 - q)) - math.log10(2)) / span
    return LEFT + share * (WIDTH - LEFT - RIGHT)


def _duration(us: float) -> str:
    if us >= 1e6:
        return f"{us / 1e6:g} s"
    return f"{us / 1e3:g} ms" if us >= 1e3 else f"{us:g} µs"


def _decades(values: list[float]) -> tuple[int, int]:
    return math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))


def latency_svg(loads: Mapping[str, Mapping[str, float]], title: str) -> str:
    """
    An SVG of C{loads}: for each load's label (C{"50%"}), its latencies in
    microseconds by percentile (C{"p50"}, C{"p99.9"}...; other keys ignored).
    """
    curves = {
        label: {k: float(v) for k, v in figures.items() if k.startswith("p") and k[1:2].isdigit()}
        for label, figures in loads.items()
    }
    low, high = _decades([v for curve in curves.values() for v in curve.values()])
    high = max(high, low + 1)

    def y(us: float) -> float:
        share = (math.log10(us) - low) / (high - low)
        return HEIGHT - BOTTOM - share * (HEIGHT - TOP - BOTTOM)

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}"'
        f' viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="22" font-size="14">{escape(title)}</text>',
    ]
    for decade in range(low, high + 1):
        at = y(10.0**decade)
        label = _duration(10.0**decade)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{at:.1f}" y2="{at:.1f}" stroke="#ddd"/>'
            f'<text x="{LEFT - 6}" y="{at + 4:.1f}" text-anchor="end">{label}</text>'
        )
    for tick in TICKS:
        at = _x(tick)
        out.append(
            f'<line x1="{at:.1f}" x2="{at:.1f}" y1="{TOP}" y2="{HEIGHT - BOTTOM}" stroke="#ddd"/>'
            f'<text x="{at:.1f}" y="{HEIGHT - BOTTOM + 18}" text-anchor="middle">{tick}</text>'
        )
    out.append(
        f'<text x="{(LEFT + WIDTH - RIGHT) / 2}" y="{HEIGHT - 12}" text-anchor="middle">'
        "percentile (task's intended send time to its DONE)</text>"
    )
    if low <= 3 <= high:  # the goal at 50 % load: p99 under a millisecond
        at = y(1000.0)
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{at:.1f}" y2="{at:.1f}"'
            ' stroke="#999" stroke-dasharray="4 3"/>'
        )
    for index, (colour, (label, curve)) in enumerate(
        zip(COLOURS * len(curves), curves.items(), strict=False)
    ):
        points = " ".join(f"{_x(p):.1f},{y(v):.1f}" for p, v in curve.items())
        out.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out += [
            f'<circle cx="{_x(p):.1f}" cy="{y(v):.1f}" r="3" fill="{colour}"/>'
            for p, v in curve.items()
        ]
        legend = TOP + 10 + 20 * index
        out.append(
            f'<line x1="{WIDTH - RIGHT + 10}" x2="{WIDTH - RIGHT + 30}" y1="{legend}"'
            f' y2="{legend}" stroke="{colour}" stroke-width="2"/>'
            f'<text x="{WIDTH - RIGHT + 36}" y="{legend + 4}">{escape(label)} load</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"
