"""
The scale workload: 1, 2 and 4 daemons side by side, used independently or as a cluster.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from quicx.clients.blocking_cluster import ClusterClient, open_client
from tools.bench.rig import BENCH_CONFIG, payload_of, status, tasks_of, wait_for_workers
from tools.launcher import (
    DaemonProcess,
    cpu_seconds,
    start_workers,
    stop_all,
    tools_environment,
)

SCALE_DAEMONS = (1, 2, 4)
"""The scale workload's runs: this many daemons side by side."""

SCALE_WORKERS = 2
"""Stock worker processes per daemon in the scale workload (as e2e has)."""

INDEPENDENT = "independent"
CLUSTER = "cluster"
SCALE_MODES = (INDEPENDENT, CLUSTER)
"""How the scale workload's producers and workers use the daemons: each
given one daemon's address (L{INDEPENDENT}), or each given all of them
(L{CLUSTER}: C{open_client(LIST)} and C{quicx worker --connect LIST})."""


def client_addresses(daemons: Sequence[DaemonProcess], mode: str) -> list[str]:
    """
    The address each of the scale workload's producers, and each daemon's
    share of its workers, are given: in L{INDEPENDENT} mode one daemon's
    each, as independent daemons are used (a task never crosses daemons);
    in L{CLUSTER} mode all of them, as a list, to each.
    """
    if mode == CLUSTER:
        return [",".join(daemon.client_address for daemon in daemons)] * len(daemons)
    return [daemon.client_address for daemon in daemons]


def line_of(process: subprocess.Popen[str]) -> str:
    """The next line C{process} writes on its stdout (a pipe), stripped."""
    assert process.stdout is not None
    return process.stdout.readline().strip()


def scale_run(count: int, n: int, mode: str = INDEPENDENT, size: int = 100) -> dict[str, Any]:
    """
    C{count} daemons on L{BENCH_CONFIG}, with C{count} producer processes
    and L{SCALE_WORKERS} stock workers per daemon, their addresses as
    L{client_addresses} gives them in C{mode}.  Each producer pipelines
    C{n} tasks (C{size}-byte payloads) and waits for every DONE; the
    producers start together; each daemon runs C{n} tasks in either mode
    (a cluster producer spreads its tasks round-robin).  Throughput: all
    the tasks over the time from the start to the last producer's end.
    """
    with tempfile.TemporaryDirectory(prefix="quicx-bench-scale-") as directory:
        config = Path(directory) / "quicx.conf"
        config.write_text(BENCH_CONFIG)
        daemons = [
            DaemonProcess(Path(directory) / str(index), [f"--config={config}"])
            for index in range(count)
        ]
        workers: list[subprocess.Popen[bytes]] = []
        producers: list[subprocess.Popen[str]] = []
        try:
            for daemon in daemons:
                daemon.directory.mkdir()
                daemon.start()
            addresses = client_addresses(daemons, mode)
            for daemon, address in zip(daemons, addresses, strict=True):
                workers += start_workers(
                    "tools.bench:STOCK", SCALE_WORKERS, [f"--connect={address}"], daemon.directory
                )
            # A cluster worker holds a connection to every daemon.
            connections = len(workers) if mode == CLUSTER else SCALE_WORKERS
            for daemon in daemons:
                wait_for_workers(daemon, connections, workers)
            producers = [_producer(address, n, size) for address in addresses]
            for producer in producers:  # each is connected
                if line_of(producer) != "ready":
                    raise SystemExit("tools.bench: a scale producer did not connect")
            seconds, wall, daemon_cpu = _race(producers, daemons)
            completed = [status(daemon)["tasks"]["completed"] for daemon in daemons]
        finally:
            stop_all([*producers, *workers], 30)
            for daemon in daemons:
                daemon.stop()
    if completed != [n] * count:
        raise SystemExit(f"tools.bench: {completed} tasks completed, not {n} on each daemon")
    total = count * n
    return {
        "mode": mode,
        "daemons": count,
        "n_per_daemon": n,
        "seconds": wall,
        "tasks_per_s": total / wall,
        "per_daemon_tasks_per_s": total / wall / count,
        "producer_tasks_per_s": [n / s for s in seconds],
        "daemon_cpu_us_per_task": 1e6 * daemon_cpu / total,
    }


def _producer(address: str, n: int, size: int) -> subprocess.Popen[str]:
    """A producer process (L{scale_producer}), started: it says C{ready}, then waits."""
    return subprocess.Popen(
        [sys.executable, "-m", "tools.bench", "_scale", address, str(n), str(size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=tools_environment(),
    )


def _race(
    producers: Sequence[subprocess.Popen[str]], daemons: Sequence[DaemonProcess]
) -> tuple[list[float], float, float]:
    """
    Start the ready C{producers} together: the seconds each took, the
    seconds until the last ended, and the daemons' CPU seconds meanwhile.
    """
    cpu = [cpu_seconds(daemon.pid) for daemon in daemons]
    started_at = time.perf_counter()
    for producer in producers:
        assert producer.stdin is not None
        producer.stdin.write("go\n")
        producer.stdin.flush()
    # Each one's line, not its exit: closing a client and an interpreter takes time.
    seconds = [float(line_of(producer)) for producer in producers]
    wall = time.perf_counter() - started_at
    return seconds, wall, sum(cpu_seconds(d.pid) for d in daemons) - sum(cpu)


def scale_workload(n: int, rounds: int = 3) -> dict[str, Any]:
    """
    Every run of L{SCALE_DAEMONS} in each of L{SCALE_MODES}, alternated,
    C{rounds} times; the medians.  With one daemon both modes are the same
    run (one address: the plain client and worker), made once a round.
    """
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {
        mode: {count: [] for count in SCALE_DAEMONS} for mode in SCALE_MODES
    }
    for _ in range(rounds):
        for count in SCALE_DAEMONS:
            for mode in SCALE_MODES[: 1 if count == 1 else None]:
                runs[mode][count].append(scale_run(count, n, mode))
    runs[CLUSTER][1] = runs[INDEPENDENT][1]

    def median(mode: str, figure: str) -> dict[int, float]:
        return {
            count: statistics.median(r[figure] for r in runs[mode][count])
            for count in SCALE_DAEMONS
        }

    return {
        "n_per_daemon": n,
        "rounds": rounds,
        "workers_per_daemon": SCALE_WORKERS,
        "runs": runs,
        "median": {mode: median(mode, "tasks_per_s") for mode in SCALE_MODES},
        "median_per_daemon": {mode: median(mode, "per_daemon_tasks_per_s") for mode in SCALE_MODES},
        "median_daemon_us": {mode: median(mode, "daemon_cpu_us_per_task") for mode in SCALE_MODES},
    }


def scale_producer(address: str, n: int, payload_size: int) -> None:
    """
    (Its own process.) Connect to C{address} (one daemon's, or a list:
    L{open_client}), say C{ready}, wait for a line; then pipeline C{n} tasks
    and wait for every DONE; print the seconds.
    """
    with open_client(address, keep_outcomes=n + 1) as client:
        for one in client.clients.values() if isinstance(client, ClusterClient) else [client]:
            one.connect()
        print("ready", flush=True)
        sys.stdin.readline()
        started = time.perf_counter()
        for task_id in client.submit_many(tasks_of(n, payload_of(payload_size), 1)):
            client.wait(task_id)  # type: ignore[arg-type]
        print(time.perf_counter() - started, flush=True)
