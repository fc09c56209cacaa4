"""
The cluster view: several daemons side by side, and their totals.

In-process: the totals' percentiles come from the daemons' histogram
buckets added up (not from their percentiles), and none when the bounds
differ; a daemon whose document cannot be read shows as down.  End to end,
real daemons on loopback with known workloads: C{quicx status --connect
A,B,C} shows each and the right totals, and one stopped as down; a daemon
with C{[cluster] peers} shows its peers in C{/metrics} and C{/api/cluster}.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from quicx.documents.cluster import Member, cluster_view
from quicx.documents.latency import LATENCY_BUCKETS, quantile
from quicx.protocol import outcomes, taskflow
from quicx.status.cluster import render_cluster
from tests.peer import Peer
from tools.launcher import DaemonProcess, tools_environment

TOKEN = "monitor-token-for-the-cluster-test"


def document(pid: int, uptime: float, waits: list[int], submitted: int = 0) -> dict[str, Any]:
    """A status document with one tally: C{waits} its wait buckets' counts."""
    empty = [0] * len(waits)
    tally = {
        "queue": "q",
        "type": "t",
        "submitted": submitted,
        "done": sum(waits),
        "failed": 0,
        "dead": 0,
        "cancelled": 0,
        "wait": {"counts": waits, "sum": 0.0},
        "run": {"counts": empty, "sum": 0.0},
    }
    return {
        "format": "quicx-status/1",
        "pid": pid,
        "started_at": 1000.0,
        "uptime": uptime,
        "tasks": {"queued": 2, "running": 1, "delayed": 0, "dead_now": 0},
        "connections": {"total": 3, "workers": 1, "idle_workers": 0},
        "memory": {"used": 100, "total": 1000},
        "telemetry": {"buckets": list(LATENCY_BUCKETS), "tallies": [tally]},
    }


def test_the_total_percentiles_come_from_the_buckets_added_up() -> None:
    size = len(LATENCY_BUCKETS) + 1
    fast, slow = [0] * size, [0] * size
    fast[0], slow[10] = 90, 10  # 90 waits under 0.5 ms on one, 10 around 1 s on the other
    view = cluster_view(
        [Member("a", document(1, 10.0, fast, 100)), Member("b", document(2, 5.0, slow, 10))]
    )
    a, b = view["daemons"]
    total = view["total"]
    assert a["wait"]["p95"] == quantile(fast, 0.95) and b["wait"]["p95"] == quantile(slow, 0.95)
    merged = [x + y for x, y in zip(fast, slow, strict=True)]
    assert (
        total["wait"]["p95"] == quantile(merged, 0.95) != (a["wait"]["p95"] + b["wait"]["p95"]) / 2
    )
    p50 = quantile(merged, 0.5)
    assert p50 is not None and total["wait"]["p50"] == p50 < 0.0005
    assert total["run"] == {"p50": None, "p95": None, "p99": None}
    assert total["tasks"]["submitted"] == 110 and total["tasks"]["done"] == 100
    assert total["rates"]["submitted"] == 100 / 10 + 10 / 5
    assert (total["queued"], total["workers"], total["memory"]) == (
        4,
        2,
        {"used": 200, "total": 2000},
    )


def test_the_rates_cover_the_interval_and_the_total_has_no_percentile_over_other_bounds() -> None:
    size = len(LATENCY_BUCKETS) + 1
    member = Member("a", document(1, 10.0, [1] + [0] * (size - 1), 100))
    member = member.answered(document(1, 12.0, [3] + [0] * (size - 1), 150))
    other = document(2, 1.0, [1, 0])
    other["telemetry"]["buckets"] = [1.0]
    view = cluster_view([member, Member("b", other)])
    a = view["daemons"][0]
    assert (a["seconds"], a["since_start"], a["rates"]["submitted"]) == (2.0, False, 25.0)
    assert a["tasks"]["submitted"] == 150  # the counts are since start
    assert view["total"]["wait"] == {"p50": None, "p95": None, "p99": None}
    # A restart (another pid): the rates run from its start again.
    restarted = member.answered(document(9, 1.0, [0] * size, 4))
    assert restarted.earlier is None


def test_a_daemon_down_or_unreadable_is_shown_as_down_and_left_out_of_the_totals() -> None:
    size = len(LATENCY_BUCKETS) + 1
    broken = document(3, 1.0, [0] * size)
    del broken["uptime"]
    view = cluster_view(
        [
            Member("a", document(1, 1.0, [0] * size, 7)),
            Member("b", error="connection refused"),
            Member("c", broken),
        ]
    )
    assert [(d["up"], d.get("error", "")[:26]) for d in view["daemons"]] == [
        (True, ""),
        (False, "connection refused"),
        (False, "its status document cannot"),
    ]
    assert (view["total"]["up"], view["total"]["down"]) == (1, 2)
    assert view["total"]["tasks"]["submitted"] == 7


def test_what_a_daemon_down_sent_reaches_no_terminal_as_escapes() -> None:
    size = len(LATENCY_BUCKETS) + 1
    members = [
        Member("tcp:a:1", document(1, 1.0, [0] * size)),
        Member("tcp:b:2\x1b[2J", error="refused: \x1b]0;owned\x07\x1b[2J\nfake line"),
    ]
    shown = render_cluster(cluster_view(members))
    assert "\x1b" not in shown and "\x07" not in shown
    assert "down: tcp:b:2\\x1b[2J: refused: \\x1b]0;owned\\x07\\x1b[2J\\nfake line" in shown


# -- end to end ----------------------------------------------------------------------------


def workload(daemon: DaemonProcess, done: int, failed: int, queued: int) -> None:
    """Tasks done and failed by a worker in queue C{work}, and left queued in C{later}."""
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        for index in range(done + failed):
            payload = b"ok" if index < done else b"fail"
            reply = producer.request(
                taskflow.encode_submit(b"t", payload, taskflow.submit_options(queue="work"))
            )
            assert isinstance(reply, taskflow.Ok), reply
        for _ in range(queued):
            reply = producer.request(
                taskflow.encode_submit(b"t", b"x", taskflow.submit_options(queue="later"))
            )
            assert isinstance(reply, taskflow.Ok), reply
        if done + failed:
            worker.send(taskflow.encode_ready(50, ["work"]))
            for _ in range(done + failed):
                task = worker.receive()
                if task.payload == b"ok":
                    worker.send(outcomes.encode_ack(task.task_id, task.token))
                else:
                    worker.send(outcomes.encode_nack(task.task_id, task.token, "no"))
            for _ in range(done + failed):
                producer.receive()


def status(*addresses: str) -> tuple[int, dict[str, Any], str]:
    """C{quicx status --connect A,B,... --json}: exit status, view, stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "quicx.cli", "status", "--connect", ",".join(addresses), "--json"],
        capture_output=True,
        text=True,
        timeout=30,
        env=tools_environment(),
    )
    return done.returncode, json.loads(done.stdout), done.stderr


def test_status_connect_shows_each_daemon_and_the_totals_and_one_stopped_as_down(
    start_daemon,
) -> None:
    daemons = [start_daemon() for _ in range(3)]
    for daemon, (done, failed, queued) in zip(
        daemons, [(3, 0, 1), (0, 2, 0), (1, 1, 4)], strict=True
    ):
        workload(daemon, done, failed, queued)
    addresses = [d.client_address for d in daemons]
    code, view, _ = status(*addresses)
    assert code == 0
    assert [d["address"] for d in view["daemons"]] == addresses
    assert [(d["tasks"]["done"], d["tasks"]["failed"], d["queued"]) for d in view["daemons"]] == [
        (3, 0, 1),
        (0, 2, 0),
        (1, 1, 4),
    ]
    total = view["total"]
    assert total["tasks"] == {"submitted": 12, "done": 4, "failed": 3, "cancelled": 0}
    assert (total["up"], total["queued"], total["running"]) == (3, 5, 0)
    assert total["wait"]["p99"] is not None

    daemons[1].stop()
    code, view, _ = status(*addresses)
    assert code == 1
    assert [d["up"] for d in view["daemons"]] == [True, False, True]
    assert "refused" in view["daemons"][1]["error"]
    assert (view["total"]["down"], view["total"]["tasks"]["submitted"]) == (1, 4 + 6)


def get(port: int, path: str) -> str:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {TOKEN}"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        return answer.read().decode()


def test_a_daemon_with_peers_shows_them_in_its_metrics_and_its_cluster_api(start_daemon) -> None:
    peers = [start_daemon() for _ in range(2)]
    workload(peers[0], 2, 0, 3)
    workload(peers[1], 0, 1, 0)
    gone = "tcp:127.0.0.1:1"
    daemon = start_daemon(
        f"--cluster-peers={peers[0].client_address},{peers[1].client_address},{gone}",
        "--cluster-interval=0.2",
        "--cluster-timeout=1",
        "--metrics-listen=tcp:0:interface=127.0.0.1",
        "--web-listen=tcp:0",
        f"--web-monitor-token={TOKEN}",
    )
    metrics, web = daemon.announced_port("metrics"), daemon.announced_port("dashboard")
    deadline = time.monotonic() + 10
    while True:
        view = json.loads(get(web, "/api/cluster"))
        polled = [d["up"] or "not polled" not in d["error"] for d in view["daemons"]]
        if all(polled) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    names = ["self", peers[0].client_address, peers[1].client_address, gone]
    assert [d["address"] for d in view["daemons"]] == names
    assert [d["up"] for d in view["daemons"]] == [True, True, True, False]
    assert view["total"]["tasks"] == {"submitted": 5 + 1, "done": 2, "failed": 1, "cancelled": 0}
    assert view["total"]["queued"] == 3

    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(get(metrics, "/metrics")):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    assert samples["quicx_cluster_up"] == {
        (("daemon", name),): float(name != gone) for name in names
    }
    assert samples["quicx_cluster_queued"] == {
        (("daemon", "self"),): 0.0,
        (("daemon", peers[0].client_address),): 3.0,
        (("daemon", peers[1].client_address),): 0.0,
    }
    finished = samples["quicx_cluster_tasks_finished"]
    assert finished[("daemon", peers[0].client_address), ("outcome", "done")] == 2
    assert finished[("daemon", peers[1].client_address), ("outcome", "failed")] == 1
