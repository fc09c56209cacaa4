"""
The benchmark command runs end to end (figures are not checked: they belong
to the benchmark, not to the tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_bench_quick_run_prints_figures_and_json(tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "e2e", "latency", "--quick", "--no-peers",
         f"--json-out={out}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "tasks/s" in result.stdout and "p50" in result.stdout
    records = {record["workload"]: record for record in json.loads(out.read_text())}
    assert list(records) == ["e2e", "e2e one task/conn", "latency", "latency busy-poll"]
    for name, credits in (("e2e", 64), ("e2e one task/conn", 1)):
        e2e = records[name]
        assert e2e["n"] == 20_000 and e2e["credits"] == credits and e2e["tasks_per_s"] > 0
    for name, busy_poll in (("latency", 0.0), ("latency busy-poll", 0.0001)):
        latency = records[name]
        assert latency["n"] == 500 and latency["busy_poll"] == busy_poll
        assert 0 < latency["p50_us"] <= latency["p99_us"] <= latency["max_us"]


def test_bench_refuses_an_unknown_workload() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "fastest"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert "unknown workload fastest" in result.stderr
