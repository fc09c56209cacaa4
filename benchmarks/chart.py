"""
Draw docs/performance.png from a C{python -m tools.bench --json-out} file.

    python benchmarks/chart.py bench.json docs/performance.png

Needs matplotlib (C{pip install 'quicx[bench]'}).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

QUICX, QUICX_SPIN, PEER = "#1f6f8b", "#6fb3c9", "#b5651d"


def by_workload(results: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {result["workload"]: result for result in results}


def throughput_bars(
    results: dict[str, dict[str, Any]],
) -> tuple[list[str], list[float], list[float]]:
    """End-to-end tasks/s: Quicx and beanstalkd, per workload run in both."""
    labels, ours, theirs = [], [], []
    for name, label in (
        ("e2e stock worker", "stock worker\n(no flags)"),
        ("e2e", "64 credits\n100 B"),
        ("e2e one task/conn", "32 conns,\n1 task each"),
        ("e2e one task/worker", "1 conn,\n1 task"),
        ("e2e 1024 B", "64 credits\n1 KiB"),
        ("harness e2e", "both: one put\nper round trip"),
    ):
        result = results.get(name)
        if not result:
            continue
        quicx = result.get("quicx", result)
        peer = result.get("peer") or {}
        rate = quicx.get("tasks_per_s", quicx.get("jobs_per_s"))
        if rate is None or "jobs_per_s" not in peer:
            continue
        labels.append(label)
        ours.append(rate)
        theirs.append(peer["jobs_per_s"])
    return labels, ours, theirs


def main(source: str, target: str) -> None:
    results = by_workload(json.loads(Path(source).read_text()))
    figure, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.4), width_ratios=[3.4, 2])

    labels, ours, theirs = throughput_bars(results)
    positions = range(len(labels))
    left.bar([p - 0.2 for p in positions], ours, 0.4, label="Quicx", color=QUICX)
    left.bar(
        [p + 0.2 for p in positions],
        theirs,
        0.4,
        label="beanstalkd (harness: one put per round trip)",
        color=PEER,
    )
    for p, a, b in zip(positions, ours, theirs, strict=True):
        left.annotate(f"{a / b:.2f}x", (p - 0.2, a), ha="center", va="bottom", fontsize=9)
    left.set_xticks(list(positions), labels)
    left.set_ylabel("tasks per second (higher is better)")
    left.set_title("End-to-end throughput, 2 worker processes; Quicx pipelined")
    # Headroom above the tallest bar for the legend and the ratio labels.
    left.set_ylim(top=1.35 * max([*ours, *theirs], default=1))
    left.legend(loc="upper right")

    latency = results.get("latency", {})
    sleeping = results.get("latency no busy-poll", {})
    peer = latency.get("peer") or {}
    marks = ["p50_us", "p99_us"]  # the harness reports no p90 for beanstalkd
    if peer and all(m in peer for m in marks):
        positions = range(len(marks))
        series = [
            (latency, "Quicx (defaults: busy polling 100 µs)", QUICX),
            (sleeping, "Quicx, busy polling off", QUICX_SPIN),
            (peer, "beanstalkd", PEER),
        ]
        for offset, (values, label, color) in zip((-0.27, 0, 0.27), series, strict=True):
            if all(m in values for m in marks):
                right.bar([p + offset for p in positions], [values[m] for m in marks], 0.27,
                          label=label, color=color)  # fmt: skip
        right.set_xticks(list(positions), ["p50", "p99"])
    right.set_ylabel("µs (lower is better)")
    right.set_title("Round trip: submit → worker → outcome")
    right.legend()

    figure.tight_layout()
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
