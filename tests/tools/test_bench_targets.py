"""
The targets' table (tools/bench/targets.py): each target read off a run's
records, met or not at its edge, and the flag that prints it from a file.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.bench.targets import markdown, rows

ROOT = Path(__file__).resolve().parents[2]


def hotpath(v1_us: float, v2_us: float, v2_rate: float) -> dict[str, Any]:
    return {
        "workload": "hotpath cpu",
        "median": {"v1": 100_000.0, "v2": v2_rate},
        "median_daemon_us": {"v1": v1_us, "v2": v2_us},
    }


def verdicts(table: list[dict[str, Any]]) -> dict[str, str]:
    return {f"{r.target} {r.goal}": r.verdict for r in rows(table)}


def test_each_target_is_met_at_its_edge_and_not_past_it() -> None:
    at_edge = verdicts(
        [
            hotpath(6.0, 7.0, 85_000.0),
            {"workload": "hotpath memory", "v1": {"bytes_per_task": 300.0}},
            {"workload": "submit", "oks_per_s": 350_000.0},
            {"workload": "journal always/no", "ratio": 0.85},
        ]
    )
    assert at_edge == {
        "1 daemon CPU, v1 <= 6 µs a task": "met",
        "1 daemon CPU, v2 plain <= 7 µs a task": "met",
        "5 pipelined submits >= 350k OKs/s": "met",
        "4 fsync always / no >= 0.85": "met",
        "6 v2 plain / v1 >= 0.85 (tasks/s)": "met",
        "7 memory per queued task <= 300 B": "met",
        "8 many-core >= 150k tasks/s one daemon; K daemons >= 0.8 K x": "not measured",
    }
    past = verdicts(
        [
            hotpath(6.01, 7.01, 84_999.0),
            {"workload": "hotpath memory", "v1": {"bytes_per_task": 300.5}},
            {"workload": "submit", "oks_per_s": 349_999.0},
            {"workload": "journal always/no", "ratio": 0.84},
        ]
    )
    assert set(past.values()) == {"**not met**", "not measured"}


def test_latency_against_beanstalkd_the_floor_and_the_open_loop() -> None:
    table = [
        {
            "workload": "round trip",
            "p50_us": 60.0,
            "awake_floor_us": 30.0,
            "peer": {"p50_us": 100.0},
        },
        {"workload": "open loop 50%", "p99": 999.0, "rate": 20_000},
    ]
    found = {r.goal: (r.figure, r.verdict) for r in rows(table)}
    assert found["<= 0.6x beanstalkd"] == ("0.60x (60 vs 100 µs)", "met")
    assert found["<= 2.5x the awake floor"] == ("2.0x (floor 30.0 µs)", "met")
    assert found["< 1,000 µs"] == ("999 µs at 20,000 tasks/s", "met")


def test_a_run_without_any_target_prints_no_table() -> None:
    assert rows([{"workload": "fan-in", "tasks_per_s": 1.0}]) == []


def test_the_table_is_printed_again_from_a_results_file(tmp_path) -> None:
    results = tmp_path / "bench.json"
    results.write_text(json.dumps([hotpath(5.0, 8.0, 90_000.0)]))
    out = subprocess.run(
        [sys.executable, "-m", "tools.bench", f"--targets-from={results}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout == markdown(rows(json.loads(results.read_text()))) + "\n"
    assert "| 1 daemon CPU, v2 plain | <= 7 µs a task | 8.00 µs | **not met** |" in out.stdout


@pytest.mark.parametrize("content", [None, "not json"])
def test_a_missing_or_broken_file_is_one_line_and_a_non_zero_exit(tmp_path, content) -> None:
    results = tmp_path / "bench.json"
    if content is not None:
        results.write_text(content)
    out = subprocess.run(
        [sys.executable, "-m", "tools.bench", f"--targets-from={results}"],
        capture_output=True, text=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr.startswith(f"tools.bench: --targets-from {results}: ")
    assert out.stderr.count("\n") == 1
