"""
The hop-by-hop latency tool runs end to end against a real daemon and a real
worker, and its breakdown adds up (figures are not checked: they belong to
the tool, not to the tests).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hops(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "hops.json"
    result = subprocess.run(
        [sys.executable, "-m", "tools.hops", *args, f"--json-out={out}"],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "round trip" in result.stdout
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("args", "outcome"),
    [(("--quick",), "DONE"), (("--n=50", "--worker=stock", "--protocol=2"), "ACK")],
)
def test_each_hop_is_measured_and_the_hops_add_up_to_the_round_trip(
    tmp_path: Path, args: tuple[str, ...], outcome: str
) -> None:
    result = hops(tmp_path, *args)
    assert result["n"] == (200 if "--quick" in args else 50)
    # Every round trip was cut at every hop: each hop's end follows its
    # start in the same process or is caused by it.
    assert result["left_out"] == 0
    hops_ = [row for row in result["hops"] if not row["inside"]]
    assert [row["hop"] for row in hops_] == [
        "producer sends SUBMIT → daemon reads SUBMIT",
        "daemon reads SUBMIT → daemon sends TASK",
        "daemon sends TASK → worker reads TASK",
        f"worker reads TASK → worker sends {outcome}",
        f"worker sends {outcome} → daemon reads {outcome}",
        f"daemon reads {outcome} → daemon sends DONE",
        "daemon sends DONE → producer reads DONE",
    ]
    for row in result["hops"]:
        assert 0 < row["median_us"] <= row["p90_us"]
    total = result["total"]
    # Each round trip is the sum of its hops, so the means add up exactly
    # (the medians need not), and no hop's median passes the round trip's:
    # each hop is at most its own trip.  Both hold on a loaded machine too,
    # where a preempted trip's delay lands in a different hop each time (so
    # the medians' sum may be a small part of the round trip's median).
    assert sum(row["mean_us"] for row in hops_) == pytest.approx(total["mean_us"])
    assert all(row["median_us"] <= total["median_us"] for row in hops_)
    # The points inside a hop follow it, timed from its start.
    inside: list[list[str]] = []
    for row in result["hops"]:
        if row["inside"]:
            inside[-1].append(row["hop"])
        else:
            inside.append([])
    assert [points for points in inside if points] == [
        ["daemon sends OK", "daemon's read returns"],
        ["handler runs"],
        ["daemon's read returns"],
    ]
    assert len(result["sends"]) == 5
    for send in result["sends"]:
        assert send["median_us"] > 0 and 0 <= send["reader_first"] <= 1
    assert set(result["floor"]) == {"socket", "epoll", "twisted", "spin"}
    assert all(floor["median_us"] > 0 for floor in result["floor"].values())
