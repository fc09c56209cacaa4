"""The documentation's Markdown tables are whole tables (GitHub's rules)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
DELIMITER = re.compile(r"\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?")


def cells(row: str) -> list[str]:
    """A table row's cells: split at each pipe not escaped with a backslash."""
    inner = row.strip().removeprefix("|")
    if inner.endswith("|") and not inner.endswith("\\|"):
        inner = inner[:-1]
    return re.split(r"(?<!\\)\|", inner)


def tables(text: str) -> list[tuple[int, list[str]]]:
    """Each run of lines starting with a pipe outside code fences: (first line, rows)."""
    found: list[tuple[int, list[str]]] = []
    in_fence = False
    rows: list[str] = []
    for number, line in enumerate([*text.splitlines(), ""], start=1):
        if line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        elif not in_fence and line.lstrip().startswith("|"):
            rows.append(line)
            continue
        if rows:
            found.append((number - len(rows), rows))
            rows = []
    return found


def table_problems(text: str) -> list[str]:
    problems = []
    for line, rows in tables(text):
        if len(rows) < 2 or not DELIMITER.fullmatch(rows[1].strip()):
            problems.append(f"line {line}: rows without a header and a |---| line above them")
            continue
        width = len(cells(rows[0]))
        for offset, row in enumerate(rows):
            if len(cells(row)) != width:
                problems.append(
                    f"line {line + offset}: {len(cells(row))} cells, the header has {width}"
                )
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_table_row_has_the_headers_cells(page: Path) -> None:
    assert table_problems(page.read_text()) == []


def test_the_check_finds_broken_tables() -> None:
    whole = "| a | b |\n|---|---|\n| `x\\|y` | 2 |\n"
    assert table_problems(whole) == []
    assert table_problems("| a | b |\n|---|---|\n| 1 | 2 | 3 |\n") == [
        "line 3: 3 cells, the header has 2"
    ]
    # A blank line splits a table: the rows after it are no table at all.
    assert table_problems(whole + "\n| 4 | 5 |\n") == [
        "line 5: rows without a header and a |---| line above them"
    ]
    assert table_problems("```\n| not | a table |\n```\n") == []
