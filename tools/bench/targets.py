"""
Issue 35's targets read off one run's records: each target's figure, its
goal and whether it is met, as the table docs/performance.md shows.

C{python -m tools.bench ... --json-out FILE} prints the table at its end
when the run had any target's workload; C{python -m tools.bench
--targets-from FILE} prints it again (Markdown) from the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from attrs import frozen

Records = dict[str, dict[str, Any]]


@frozen
class Row:
    """One target: its number, what it asks, the figure and whether it is met."""

    target: str
    goal: str
    figure: str
    met: bool | None  # None: not measured in this run

    @property
    def verdict(self) -> str:
        return {True: "met", False: "**not met**", None: "not measured"}[self.met]


def _daemon_cpu(r: Records) -> Iterator[Row]:
    hot = r.get("hotpath cpu")
    if not hot:
        return
    cpu = hot["median_daemon_us"]
    yield Row("1 daemon CPU, v1", "<= 6 µs a task", f"{cpu['v1']:.2f} µs", cpu["v1"] <= 6)
    yield Row("1 daemon CPU, v2 plain", "<= 7 µs a task", f"{cpu['v2']:.2f} µs", cpu["v2"] <= 7)


def _stock(r: Records) -> Iterator[Row]:
    stock = r.get("e2e stock worker")
    if not stock:
        return
    peer, cpu = stock.get("peer") or {}, stock["cpu_us_per_task"]
    if "jobs_per_s" in peer:
        times = stock["tasks_per_s"] / peer["jobs_per_s"]
        figure = f"{times:.2f}x ({stock['tasks_per_s']:,.0f} vs {peer['jobs_per_s']:,.0f})"
        yield Row("2 stock worker end to end", ">= 5x beanstalkd", figure, times >= 5)
    yield Row(
        "2 worker runner CPU",
        "<= 3 µs a task",
        f"{cpu['workers']:.2f} µs (both workers)",
        cpu["workers"] <= 3,
    )
    yield Row(
        "2 blocking producer CPU (end to end)",
        "<= 3 µs a task",
        f"{cpu['producer']:.2f} µs",
        cpu["producer"] <= 3,
    )


def _clients(r: Records) -> Iterator[Row]:
    for name in ("blocking", "asyncio", "uvloop"):
        client = r.get(f"client {name}")
        if client:
            cost = client["cpu_us_per_submit"]
            yield Row(f"2 {name} client CPU", "<= 3 µs a submit", f"{cost:.2f} µs", cost <= 3)


def _latency(r: Records) -> Iterator[Row]:
    trip = r.get("round trip")
    if trip:
        peer = trip.get("peer") or {}
        if "p50_us" in peer:
            times = trip["p50_us"] / peer["p50_us"]
            figure = f"{times:.2f}x ({trip['p50_us']:,.0f} vs {peer['p50_us']:,.0f} µs)"
            yield Row("3 round trip p50", "<= 0.6x beanstalkd", figure, times <= 0.6)
        times = trip["p50_us"] / trip["awake_floor_us"]
        figure = f"{times:.1f}x (floor {trip['awake_floor_us']:.1f} µs)"
        yield Row("3 round trip p50", "<= 2.5x the awake floor", figure, times <= 2.5)
    half = r.get("open loop 50%")
    if half:
        figure = f"{half['p99']:,.0f} µs at {half['rate']:,} tasks/s"
        yield Row("3 open loop p99 at 50 %", "< 1,000 µs", figure, half["p99"] < 1000)


def _throughput(r: Records) -> Iterator[Row]:
    journal = r.get("journal always/no")
    if journal:
        ratio = journal["ratio"]
        yield Row("4 fsync always / no", ">= 0.85", f"{ratio:.2f}", ratio >= 0.85)
    submit = r.get("submit")
    if submit:
        rate = submit["oks_per_s"]
        yield Row("5 pipelined submits", ">= 350k OKs/s", f"{rate:,.0f}/s", rate >= 350_000)


def _features(r: Records) -> Iterator[Row]:
    hot = r.get("hotpath cpu")
    if not hot:
        return
    rate = hot["median"]
    for name in (n for n in rate if n.startswith("v2")):
        ratio = rate[name] / rate["v1"]
        label = name[3:] or "plain"
        yield Row(f"6 v2 {label} / v1", ">= 0.85 (tasks/s)", f"{ratio:.2f}", ratio >= 0.85)


def _memory(r: Records) -> Iterator[Row]:
    memory = r.get("hotpath memory")
    if memory:
        size = memory["v1"]["bytes_per_task"]
        yield Row("7 memory per queued task", "<= 300 B", f"{size:.0f} B", size <= 300)


def _many_core(r: Records) -> Iterator[Row]:
    scale = r.get("scale e2e")
    yield Row(
        "8 many-core",
        ">= 150k tasks/s one daemon; K daemons >= 0.8 K x",
        "no many-core machine in this run" if not scale else "see the scale line",
        None,
    )


READERS: tuple[Callable[[Records], Iterator[Row]], ...] = (
    _daemon_cpu,
    _stock,
    _clients,
    _latency,
    _throughput,
    _features,
    _memory,
    _many_core,
)


def rows(table: list[dict[str, Any]]) -> list[Row]:
    """Every target this run's records have a figure for (and target 8's line)."""
    records = {record["workload"]: record for record in table}
    found = [row for read in READERS for row in read(records)]
    return found if any(row.met is not None for row in found) else []


def markdown(found: list[Row]) -> str:
    lines = ["| target | goal | this run | |", "|---|---|---:|---|"]
    lines += [f"| {r.target} | {r.goal} | {r.figure} | {r.verdict} |" for r in found]
    return "\n".join(lines)


def from_file(path: str) -> str:
    """The table of the run written to C{path} (C{--json-out})."""
    try:
        table = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise SystemExit(f"tools.bench: --targets-from {path}: {e}") from None
    return markdown(rows(table))
