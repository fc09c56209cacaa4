"""
A smoke test of C{python -m tools.crashmatrix}: one short round, one policy.
The full matrix is in docs/operations.md, "Crash matrix".
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_one_round(tmp_path: Path) -> None:
    out = tmp_path / "crash.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tools.crashmatrix",
            "--rounds=1",
            "--modes=always",
            "--seconds=2",
            "--workers=2",
            "--rate=1000",
            "--drain-timeout=10",
            "--seed=3",
            f"--json-out={out}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "| mode | rounds | acked | lost |" in done.stdout
    assert "| always | 1 |" in done.stdout
    document = json.loads(out.read_text())
    assert document["format"] == "quicx-crashmatrix/1"
    assert document["command"].startswith("python -m tools.crashmatrix ")
    total = document["totals"]["always"]
    for key in (
        "rounds",
        "submitted",
        "acked",
        "lost",
        "run_twice",
        "extra_runs_worker_kill",
        "extra_runs_daemon_kill",
        "extra_runs_unexplained",
        "refused",
        "refused_ran",
        "unknown_ran",
        "unknown_not_run",
        "ids_reused",
        "lost_age_ms_min",
        "lost_age_ms_max",
    ):
        assert key in total
    assert total["rounds"] == 1
    assert total["acked"] > 0
    assert total["acked"] + total["refused"] + total["unknown"] == total["submitted"]
    assert total["rounds_not_drained"] == 0
    (played,) = document["rounds"]["always"]
    assert played["kill_at"] > 0
    assert played["recovered_tasks"] >= 0
    assert played["ran"] <= played["submitted"]
    # With fsync = always, no acknowledged task is lost.
    assert total["lost"] == 0
