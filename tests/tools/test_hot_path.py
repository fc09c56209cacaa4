"""
The counting driver (C{python -m tools.hot_path}) runs every task end to end,
for each protocol and mix (its figures belong to callgrind, not to the tests).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("arguments", [["1"], ["2"], ["2", "expiring"]])
def test_the_driver_runs_every_task_end_to_end(arguments: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.hot_path", "300", *arguments],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "300 tasks end to end"
