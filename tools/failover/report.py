"""
The matrix as a Markdown table (printed, and written into
docs/operations.md between its markers by C{--write-docs}), and as JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from attrs import asdict

from tools.failover.rows import BY_NAME, FAILOVER_TARGET, RowResult
from tools.failover.throughput import Throughput

BEGIN = "<!-- failover matrix: begin (python -m tools.failover --write-docs writes this part) -->"
END = "<!-- failover matrix: end -->"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
HEADER = (
    "| row | fault | shard | acknowledged | lost | delivered twice | applied twice"
    " | stale applied | stale refused | longest without an ack (s) | without a primary (s)"
    " | targets |"
)


def line(result: RowResult) -> str:
    what = BY_NAME[result.row].what if result.row in BY_NAME else ""
    c = result.counts
    if c is None:
        status = f"skipped: {result.skipped}" if result.skipped else f"error: {result.error}"
        return f"| {result.row} | {what} | {result.shard} |" + " — |" * 8 + f" {status} |"
    missed = result.misses()
    return (
        f"| {result.row} | {what} | {result.shard} | {c.acknowledged} | {c.lost}"
        f" | {c.delivered_twice} | {c.applied_twice} | {c.stale_applied} | {c.stale_refused}"
        f" | {c.ack_gap_s:.1f} | {c.no_primary_s:.1f}"
        f" | {'; '.join(missed) if missed else 'met'} |"
    )


def throughput_line(figures: Throughput | None) -> str:
    if figures is None:
        return "Throughput: not measured."
    single = f"{figures.single:,.0f} tasks/s on one daemon at `fsync = always`"
    if not figures.sync:
        return f"Throughput: {single}; sync shard: not measured (needs [replication])."
    verdict = "met" if figures.ratio >= 0.7 else "missed"
    return (
        f"Throughput (medians of {figures.rounds} alternated rounds): {single},"
        f" {figures.sync:,.0f} on a sync shard's primary: {figures.ratio:.2f} times that"
        f" (target: at least 0.7: {verdict})."
    )


def table(results: Sequence[RowResult], figures: Throughput | None) -> str:
    rows = [HEADER, "|" + "---|" * 12, *(line(r) for r in results)]
    return "\n".join([*rows, "", throughput_line(figures)])


def as_json(results: Sequence[RowResult], figures: Throughput | None) -> dict[str, Any]:
    return {
        "failover_target_s": FAILOVER_TARGET,
        "rows": [{**asdict(r), "misses": r.misses()} for r in results],
        "throughput": None if figures is None else {**asdict(figures), "ratio": figures.ratio},
    }


def write_docs(text: str, path: Path = DOCS) -> None:
    """Replace what lies between the markers of C{path} with C{text}."""
    document = path.read_text()
    if document.count(BEGIN) != 1 or document.count(END) != 1:
        raise SystemExit(f"{path} needs one {BEGIN!r} and one {END!r} line")
    before, rest = document.split(BEGIN)
    after = rest.split(END)[1]
    path.write_text(f"{before}{BEGIN}\n\n{text}\n\n{END}{after}")
