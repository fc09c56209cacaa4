"""
The benchmark command runs end to end (figures are not checked: they belong
to the benchmark, not to the tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# Load runs (20,000 tasks through four e2e set-ups, three latency runs): make test-cluster (CI)
# runs it.  In make test, the monitor workload below proves a workload runs end to end,
# prints and writes its JSON.
@pytest.mark.slow
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
    assert list(records) == [
        "e2e",
        "e2e one task/conn",
        "e2e one task/worker",
        "e2e stock worker",
        "latency",
        "latency no busy-poll",
        "latency floor",
    ]
    for name, n, credits in (
        ("e2e", 20_000, 64),
        ("e2e one task/conn", 20_000, 1),
        ("e2e one task/worker", 5_000, 1),
        ("e2e stock worker", 20_000, None),
    ):
        e2e = records[name]
        assert e2e["n"] == n and e2e["credits"] == credits and e2e["tasks_per_s"] > 0
    for name, busy_poll in (("latency", None), ("latency no busy-poll", 0.0)):
        latency = records[name]
        assert latency["n"] == 500 and latency["busy_poll"] == busy_poll
        assert 0 < latency["p50_us"] <= latency["p99_us"] <= latency["max_us"]
    assert 0 < records["latency floor"]["p50_us"] <= records["latency floor"]["max_us"]
    # The targets' table closes the run, read off the same records.
    stock = records["e2e stock worker"]["cpu_us_per_task"]
    assert "Issue 35's targets, from this run:" in result.stdout
    assert f"| 2 worker runner CPU | <= 3 µs a task | {stock['workers']:.2f} µs" in result.stdout


def test_bench_monitor_inspects_a_deep_queue_beside_round_trips(tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "monitor", "--quick", "--no-peers",
         f"--json-out={out}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "pipelined INSPECTs" in result.stdout
    (record,) = json.loads(out.read_text())
    assert (record["workload"], record["depth"], record["queries"]) == ("monitor", 4000, 300)
    assert record["seconds"] > 0 and record["round_trips"] >= 1


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_bench_abuse_prints_each_scenario_beside_the_bound(tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "abuse", "--quick", "--no-peers",
         f"--json-out={out}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = json.loads(out.read_text())
    assert [r["scenario"] for r in records] == [
        "1 half frames",
        "2 other pairs",
        "3 oversized",
        "4 idle http",
        "9 floods",
    ]
    for record in records:
        assert 0 < record["rss_before"] <= record["rss_peak"] and record["readings"] > 0
        assert record["bound_before"] > 0 and record["notes"]
    assert "413" in records[3]["notes"][0] and "a producer served" in records[3]["notes"][0]


def test_bench_refuses_an_unknown_workload() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "fastest"], capture_output=True, text=True, cwd=ROOT
    )
    assert result.returncode == 2
    assert "unknown workload fastest" in result.stderr


@pytest.mark.slow  # a long run of its own: make test-cluster (CI) runs it
def test_bench_delays_prints_dispatch_and_memory_figures(tmp_path) -> None:
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "delays", "--no-peers", "--delays-dispatch=200",
         "--delays-memory=2000", f"--json-out={out}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "lateness p0" in result.stdout and "B/task for the delay" in result.stdout
    records = {record["workload"]: record for record in json.loads(out.read_text())}
    assert list(records) == ["delays idle", "delays dispatch", "delays memory"]
    idle = records["delays idle"]
    assert idle["k"] == 20 and 0 <= idle["lateness_ms"]["p50"] <= idle["lateness_ms"]["max"]
    dispatch = records["delays dispatch"]
    assert dispatch["n"] == 200 and dispatch["workers"] * dispatch["credits"] >= 1000
    lateness = dispatch["lateness_ms"]
    assert lateness["p0"] <= lateness["p50"] <= lateness["p99"] <= lateness["p100"]
    rtt = dispatch["stats_rtt_ms"]
    assert rtt["probes"] >= 1 and 0 < rtt["p50"] <= rtt["max"] and "max_before" in rtt
    memory = records["delays memory"]
    assert memory["m"] == 2000
    for kind in ("queued", "delayed"):
        assert memory[kind]["rss_after"] > 0 and "bytes_per_task" in memory[kind]
    assert memory["delay_bytes_per_task"] == (
        memory["delayed"]["bytes_per_task"] - memory["queued"]["bytes_per_task"]
    )


def test_bench_refuses_a_delays_count_below_one() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "delays", "--delays-dispatch=0"],
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2
    assert "1 or more" in result.stderr


def test_bench_observability_scrapes_the_on_runs() -> None:
    from tools.bench import OBSERVABILITY_ON, observability_workload

    figures = observability_workload(2000, rounds=1)
    assert figures["flags"] == OBSERVABILITY_ON
    assert [len(figures["rounds"][k]) for k in ("off", "on")] == [1, 1]
    assert figures["ratio"] == figures["median_on"] / figures["median_off"] > 0
    assert figures["scrapes"] >= 1 and figures["scrape_ms_max"] > 0


# Load runs (the peak rate, then five runs at each of three loads): make test-cluster (CI) runs
# it.  In make test, test_latency_chart_draws_one_line_per_load draws the chart, the monitor
# workload runs end to end.
@pytest.mark.slow
def test_bench_openloop_prints_each_load_and_draws_the_chart(tmp_path) -> None:
    out, chart = tmp_path / "bench.json", tmp_path / "openloop.svg"
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "openloop", "roundtrip", "--quick", "--no-peers",
         f"--json-out={out}", f"--chart={chart}"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    records = {record["workload"]: record for record in json.loads(out.read_text())}
    assert list(records) == ["open loop 25%", "open loop 50%", "open loop 75%", "round trip"]
    maximum = records["open loop 25%"]["max_tasks_per_s"]
    # The maximum is a paced rate the daemon kept up with, at most a burst's.
    assert 0 < maximum <= records["open loop 25%"]["burst_tasks_per_s"]
    for share, name in ((0.25, "open loop 25%"), (0.5, "open loop 50%"), (0.75, "open loop 75%")):
        load = records[name]
        # Every task sent is timed: none lost, none counted twice.
        assert load["rate"] == int(maximum * share)
        assert load["tasks"] == 5 * max(1000, int(load["rate"] * 0.2))
        assert len(load["per_run"]) == 5
        assert 0 < load["p50"] <= load["p90"] <= load["p99"] <= load["p99.9"]
    svg = chart.read_text()
    assert svg.startswith("<svg") and svg.count("<polyline") == 3 and "50% load" in svg
    trip = records["round trip"]
    assert 0 < trip["awake_floor_us"] <= trip["awake_floor_two_us"]
    assert "awake floor" in result.stdout and "ratio" in result.stdout


def test_latency_chart_draws_one_line_per_load() -> None:
    from xml.etree import ElementTree

    from tools.bench.chart import latency_svg

    loads = {
        "25%": {"p50": 80.0, "p90": 120.0, "p99": 400.0, "p99.9": 900.0, "rate": 1000},
        "75%": {"p50": 150.0, "p90": 600.0, "p99": 3000.0, "p99.9": 12000.0, "rate": 3000},
    }
    root = ElementTree.fromstring(latency_svg(loads, "a <title>"))
    lines = root.findall("{http://www.w3.org/2000/svg}polyline")
    assert len(lines) == 2
    # Four points each, left to right, higher percentiles higher up (smaller y).
    for line in lines:
        points = [tuple(map(float, p.split(","))) for p in line.get("points", "").split()]
        assert len(points) == 4
        assert [x for x, _ in points] == sorted(x for x, _ in points)
        assert [y for _, y in points] == sorted((y for _, y in points), reverse=True)
