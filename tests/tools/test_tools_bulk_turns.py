"""C{python -m tools.bulk_turns}: it runs, and prints a row per action with its turns."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_tool_prints_each_actions_turns() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bulk_turns", "--tasks=3000", "--batch=100"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert re.fullmatch(
        r"3,000 queued tasks; \[bulk\] batch = 100, turn_time = 0.002;"
        r" the start's copy of the live tasks' ids: [\d.]+ ms \(the best of 5\)",
        lines[0],
    ), lines[0]
    row = re.compile(
        r"  (cancel \(dry run\)|move|cancel) +([\d,]+) tasks: start [\d.]+ ms, ([\d,]+) turns:"
        r" median [\d.]+ ms, p99 [\d.]+ ms, longest [\d.]+ ms;"
        r" the most CPU one turn took [\d.]+ ms \(longest GC pause [\d.]+ ms\)"
    )
    matches = [row.fullmatch(line) for line in lines[1:]]
    assert all(matches) and len(matches) == 3, result.stdout
    acted = [m.group(2) for m in matches if m]
    assert acted == ["3,000", "1,500", "1,500"]
    assert all(int(m.group(3).replace(",", "")) >= 15 for m in matches if m)
