"""The failover matrix's table, and its place in docs/operations.md."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.failover.count import Counts
from tools.failover.report import BEGIN, DOCS, END, table, write_docs
from tools.failover.rows import NEEDS, RowResult
from tools.failover.throughput import Throughput


def counts(**changes: float) -> Counts:
    figures: dict[str, float] = {
        "acknowledged": 800, "lost": 0, "undrained": 0, "delivered_twice": 3,
        "applied_twice": 0, "stale_applied": 0, "stale_refused": 2,
        "ack_gap_s": 4.2, "no_primary_s": 3.9, "two_primaries_s": 0.0,
    }  # fmt: skip
    return Counts(**{**figures, **changes})  # type: ignore[arg-type]


def test_each_row_says_whether_it_met_its_targets() -> None:
    rows = [
        RowResult("kill-primary", "2 daemons, sync", counts(), failover=True),
        RowResult("zombie", "2 daemons, sync", counts(lost=2, no_primary_s=12.5), failover=True),
        RowResult("kill-etcd", "2 daemons, sync", skipped=NEEDS),
    ]
    text = table(rows, Throughput(1000.0, 800.0, 2)).splitlines()
    assert text[2].startswith("| kill-primary | kill -9 of the primary |")
    assert text[2].endswith("| 800 | 0 | 3 | 0 | 0 | 2 | 4.2 | 3.9 | met |")
    assert text[3].endswith("| 2 acknowledged lost; failover 12.5 s |")
    assert text[4].endswith("| skipped: needs [replication] |")
    assert all(line.count("|") == 13 for line in text[:5])
    assert "0.80 times that (target: at least 0.7: met)" in text[-1]


def test_the_docs_have_one_place_for_the_table() -> None:
    document = DOCS.read_text()
    assert document.count(BEGIN) == 1
    assert document.count(END) == 1
    assert document.index(BEGIN) < document.index(END)


def test_write_docs_replaces_only_what_lies_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "operations.md"
    page.write_text(f"# Ops\n\nbefore\n\n{BEGIN}\n\nold table\n\n{END}\n\nafter\n")
    write_docs("| new |", page)
    write_docs("| newer |", page)
    assert page.read_text() == f"# Ops\n\nbefore\n\n{BEGIN}\n\n| newer |\n\n{END}\n\nafter\n"


def test_write_docs_refuses_a_page_without_its_markers(tmp_path: Path) -> None:
    page = tmp_path / "operations.md"
    page.write_text("# Ops\n")
    with pytest.raises(SystemExit, match="needs one"):
        write_docs("| new |", page)
