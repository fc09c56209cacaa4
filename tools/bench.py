"""
The benchmark: C{python -m tools.bench}.  Not part of the test run.

Every workload starts a fresh daemon (C{twistd -n quicx}) on a loopback port,
with worker processes running C{quicx worker} on a no-op handler, and stops
every process it started.  Each prints a line of figures and a JSON line.
With C{--peers}, the same run also drives the peer harness in
C{../shared/bench/peers} (beanstalkd) and prints Quicx / peer ratios.

    python -m tools.bench                      # everything, with peers
    python -m tools.bench e2e latency --quick  # a subset, smaller N
    python -m tools.bench journal              # e2e per journal fsync policy
    python -m tools.bench delays               # delayed tasks: dispatch spread, memory
    python -m tools.bench observability        # e2e with /metrics off and on, scraped
    python -m tools.bench scale                # 1, 2, 4 daemons: independent, as a cluster
    python -m tools.bench abuse                # the memory bound under abuse (tools/abuse.py)

See docs/performance.md for the figures and how to read them.
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import select
import selectors
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import IO, Any, cast

from attrs import evolve

from quicx import __version__
from quicx.clients.address import CLIENT_MAX_LENGTH, parse_address
from quicx.clients.blocking import QuicxClient, Task
from quicx.clients.blocking_cluster import ClusterClient, open_client
from quicx.clients.requests import Options
from quicx.clients.worker import Worker
from quicx.daemon.control import fetch_status
from quicx.protocol import admin, codec, link, outcomes, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser
from tools import echo
from tools.abuse import abuse_workload
from tools.abuse import line_of as abuse_line
from tools.launcher import (
    QUICX,
    DaemonError,
    DaemonProcess,
    cpu_seconds,
    rss,
    start_workers,
    stop_all,
    tools_environment,
)

BENCH_TYPE = "bench"

noop_worker = Worker()
"""The workers' target: a no-op handler run on the reactor (no thread hop)."""


@noop_worker.handler(BENCH_TYPE, thread=False)
def noop(payload: bytes) -> None:
    return None


def plain_noop(payload: bytes) -> None:
    return None


STOCK = {BENCH_TYPE: plain_noop}
"""What a user writes: a plain function in a mapping, run by C{quicx worker}
with no flags (C{tools.bench:STOCK})."""

RESULT_SIZE = 1024
RESULT_1K = b"r" * RESULT_SIZE
result_worker = Worker()
"""The results workload's workers: each task's result is 1 KiB."""


@result_worker.handler(BENCH_TYPE, thread=False)
def kibibyte(payload: bytes) -> bytes:
    return RESULT_1K


SMALL_RESULT_SIZE = 16
small_result_worker = Worker()
"""The v2 comparison's results run: each task's result is 16 bytes."""


@small_result_worker.handler(BENCH_TYPE, thread=False)
def sixteen_bytes(payload: bytes) -> bytes:
    return RESULT_1K[:SMALL_RESULT_SIZE]


RESULT_WORKERS = {
    0: "tools.bench:noop_worker",
    SMALL_RESULT_SIZE: "tools.bench:small_result_worker",
    RESULT_SIZE: "tools.bench:result_worker",
}


# A pool that holds 500,000 queued 100-byte tasks and 64 KiB payloads.
BENCH_CONFIG = """\
[server]
listen = tcp:0:interface=127.0.0.1
[allocator]
pool_size = 1G
class = 32,2
class = 128,38
class = 1024,10
class = 65536,50
"""


def payload_of(size: int) -> bytes:
    return (b"0123456789abcdef" * (size // 16 + 1))[:size]


def status(daemon: DaemonProcess) -> dict[str, Any]:
    return fetch_status(str(daemon.control_path))


def wait_for_workers(
    daemon: DaemonProcess, connections: int, processes: Iterable[subprocess.Popen[bytes]]
) -> None:
    """
    Until C{connections} worker connections are idle.

    @raise SystemExit: they were not within 30 s (C{processes} are stopped).
    """
    deadline = time.monotonic() + 30
    while status(daemon)["connections"]["idle_workers"] < connections:
        if time.monotonic() > deadline:
            stop_all(processes, 30)
            raise SystemExit("tools.bench: the workers did not connect")
        time.sleep(0.05)


Layout = tuple[int, int] | None
"""Worker connections per process and credits per connection; C{None}: the
stock worker (L{STOCK}, no flags: the defaults choose)."""


class Workers:
    """
    C{count} C{quicx worker} processes with C{layout}'s connections each, each
    connection holding up to its credits; or, with no layout, stock workers.
    """

    def __init__(
        self,
        daemon: DaemonProcess,
        count: int,
        layout: Layout,
        busy_poll: float | None = None,
        extra: tuple[str, ...] = ("--protocol=1",),
        target: str = "tools.bench:noop_worker",
    ) -> None:
        args = [f"--connect={daemon.client_address}"]
        if busy_poll is not None:
            args.append(f"--busy-poll={busy_poll}")
        if layout is None:
            target, slots = "tools.bench:STOCK", 1
        else:
            slots = layout[0]
            args += [f"-n{slots}", f"--credits={layout[1]}", *extra]
        self.processes = start_workers(target, count, args, daemon.directory)
        wait_for_workers(daemon, count * slots, self.processes)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(process.pid) for process in self.processes)

    def stop(self) -> None:
        stop_all(self.processes, 30)


CREDITS: Layout = (1, 64)
"""Worker connections per process and credits per connection: one connection
that may hold 64 tasks (the READY credit extension), as docs/clients.md
advises for short tasks."""

ONE_TASK_EACH: Layout = (32, 1)
"""The protocol page's way: 32 connections per process, one task in flight
on each (32 was the best count measured, docs/performance.md)."""


BUSY_POLL = 0.0001
"""The busy-poll spin of the latency workload's second run (daemon and
workers): 100 µs, the best of 50, 100, 200 and 300 µs measured."""


@contextmanager
def running(
    extra: list[str] | None = None,
    workers: int = 0,
    layout: Layout = CREDITS,
    busy_poll: float | None = None,
    worker_args: tuple[str, ...] = ("--protocol=1",),
    target: str = "tools.bench:noop_worker",
) -> Iterator[tuple[DaemonProcess, Workers | None]]:
    """
    A daemon on L{BENCH_CONFIG} with C{workers} worker processes, all stopped
    after.  The workers speak protocol version 1 unless C{worker_args} say
    otherwise.  C{busy_poll}: the daemon's and the workers' (C{None}: their
    defaults).
    """
    with tempfile.TemporaryDirectory(prefix="quicx-bench-") as directory:
        config = Path(directory) / "quicx.conf"
        config.write_text(BENCH_CONFIG)
        args = [f"--config={config}", *(extra or [])]
        if busy_poll is not None:
            args.append(f"--busy-poll={busy_poll}")
        with DaemonProcess(Path(directory), args) as daemon:
            pool = (
                Workers(daemon, workers, layout, busy_poll, worker_args, target)
                if workers
                else None
            )
            try:
                yield daemon, pool
            finally:
                if pool is not None:
                    pool.stop()


# -- workloads -----------------------------------------------------------------------


V2_QUEUES = ("q0", "q1", "q2", "q3")
V2_PRIORITIES = (0, 5, 9)
V2_OPTIONS = [Options(queue, priority) for queue in V2_QUEUES for priority in V2_PRIORITIES]
"""The version-2 workload's mix: 4 queues, 3 priorities, dealt in turn."""


V2_DELAYED = [evolve(options, delay=0.001) for options in V2_OPTIONS]
"""The same mix, each task to run a millisecond after its SUBMIT: every one
goes through the delayed set and falls due."""


def tasks_of(n: int, payload: bytes, protocol: int, delayed: bool = False) -> Iterator[Task]:
    """
    C{n} tasks: plain for version 1, spread over L{V2_OPTIONS} for version 2
    (L{V2_DELAYED} if C{delayed}).
    """
    if protocol == 1:
        return ((BENCH_TYPE, payload) for _ in range(n))
    mix = V2_DELAYED if delayed else V2_OPTIONS
    return ((BENCH_TYPE, payload, mix[i % len(mix)]) for i in range(n))


def submit_workload(n: int, protocol: int = 1) -> dict[str, Any]:
    """One producer pipelines C{n} SUBMITs on one connection."""
    payload = payload_of(100)
    with (
        running() as (daemon, _),
        QuicxClient(daemon.client_address, protocol=protocol) as client,
    ):
        client.submit_many(tasks_of(1000, payload, protocol))  # warm-up
        started = time.perf_counter()
        client.submit_many(tasks_of(n, payload, protocol))
        seconds = time.perf_counter() - started
    return {"n": n, "protocol": protocol, "seconds": seconds, "oks_per_s": n / seconds}


def _produce_and_wait(
    address: str,
    n: int,
    payload: bytes,
    protocol: int = 1,
    result_size: int = 0,
    delayed: bool = False,
) -> float:
    """
    Pipeline C{n} tasks, wait for every DONE; the seconds it took.  With
    C{result_size}, each DONE must carry a result of that many bytes.
    """
    with QuicxClient(address, keep_outcomes=n + 1, protocol=protocol) as client:
        started = time.perf_counter()
        ids = client.submit_many(tasks_of(n, payload, protocol, delayed))
        for task_id in ids:
            value = client.wait(task_id)  # type: ignore[arg-type]
            if result_size and len(value) != result_size:
                raise SystemExit(f"tools.bench: task {task_id} gave {value!r}, not its result")
        return time.perf_counter() - started


def e2e_workload(
    n: int,
    payload_size: int = 100,
    extra: list[str] | None = None,
    layout: Layout = CREDITS,
    protocol: int = 1,
    result_size: int = 0,
    during: Callable[[DaemonProcess], AbstractContextManager[object]] | None = None,
    delayed: bool = False,
) -> dict[str, Any]:
    """
    One producer pipelines C{n} tasks; 2 worker processes run them.  With
    C{protocol} 2, the tasks are spread over 4 queues and 3 priorities and
    the workers serve the 4 queues (and with C{delayed}, each falls due a
    millisecond after its SUBMIT).  With C{result_size} (version 2: one of
    L{RESULT_WORKERS}), each handler returns a result of that many bytes,
    which reaches the producer.  C{during(daemon)}: a context the timed part
    runs in (a scraper, say).
    """
    worker_args = ("--protocol=1",) if protocol == 1 else (f"--queues={','.join(V2_QUEUES)}",)
    target = RESULT_WORKERS[result_size]
    assert protocol == 2 or not (result_size or delayed)
    with running(extra, 2, layout, None, worker_args, target) as (daemon, workers):
        assert workers is not None
        cpu = cpu_seconds(daemon.pid), workers.cpu_seconds(), time.process_time()
        with nullcontext() if during is None else during(daemon):
            seconds = _produce_and_wait(
                daemon.client_address, n, payload_of(payload_size), protocol, result_size, delayed
            )
        daemon_cpu = cpu_seconds(daemon.pid) - cpu[0]
        workers_cpu = workers.cpu_seconds() - cpu[1]
        producer_cpu = time.process_time() - cpu[2]
        completed = status(daemon)["tasks"]["completed"]
    if completed != n:
        raise SystemExit(f"tools.bench: {completed} of {n} tasks completed")
    return {
        "n": n,
        "protocol": protocol,
        "payload": payload_size,
        "result": result_size,
        "connections_per_worker": None if layout is None else layout[0],
        "credits": None if layout is None else layout[1],
        "seconds": seconds,
        "tasks_per_s": n / seconds,
        "cpu_us_per_task": {
            "daemon": 1e6 * daemon_cpu / n,
            "workers": 1e6 * workers_cpu / n,
            "producer": 1e6 * producer_cpu / n,
        },
    }


def latency_workload(
    n: int, busy_poll: float | None = None, layout: Layout = None
) -> dict[str, Any]:
    """
    One task at a time: submit, run, DONE back at the producer (version 1),
    with 2 stock workers unless C{layout} says otherwise.
    """
    payload = payload_of(100)
    with (
        running(workers=2, layout=layout, busy_poll=busy_poll) as (daemon, _),
        QuicxClient(daemon.client_address, protocol=1) as client,
    ):
        for _ in range(50):
            client.submit_and_wait(BENCH_TYPE, payload)
        samples = []
        for _ in range(n):
            started = time.perf_counter_ns()
            client.submit_and_wait(BENCH_TYPE, payload)
            samples.append(time.perf_counter_ns() - started)
    return {"n": n, "busy_poll": busy_poll, **percentiles(samples)}


def idle_workload(seconds: float, busy_poll: float | None = None) -> dict[str, Any]:
    """
    The CPU an idle daemon and 2 idle stock workers use over C{seconds}
    (with C{busy_poll}, or their defaults), as a percentage of one CPU each.
    """
    with running(workers=2, layout=None, busy_poll=busy_poll) as (daemon, workers):
        assert workers is not None
        time.sleep(1)  # past the start-up's work
        before = cpu_seconds(daemon.pid), [cpu_seconds(p.pid) for p in workers.processes]
        time.sleep(seconds)
        daemon_cpu = cpu_seconds(daemon.pid) - before[0]
        workers_cpu = [
            cpu_seconds(process.pid) - started
            for process, started in zip(workers.processes, before[1], strict=True)
        ]
    return {
        "seconds": seconds,
        "busy_poll": busy_poll,
        "daemon_percent": 100 * daemon_cpu / seconds,
        "worker_percent": max(100 * cpu / seconds for cpu in workers_cpu),
    }


def quantile(ordered: Sequence[float], fraction: float) -> float:
    """The C{fraction} quantile (nearest rank) of C{ordered}, which is sorted."""
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def percentiles(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)
    return {
        "p50_us": quantile(ordered, 0.50) / 1000,
        "p90_us": quantile(ordered, 0.90) / 1000,
        "p99_us": quantile(ordered, 0.99) / 1000,
        "max_us": ordered[-1] / 1000,
        "mean_us": statistics.fmean(ordered) / 1000,
    }


def fanin_workload(connections: int, per_connection: int) -> dict[str, Any]:
    """Many producer connections at once (one Twisted process), 4 workers."""
    with running(workers=4) as (daemon, _):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "tools.bench",
                "_fanin",
                daemon.client_address,
                str(connections),
                str(per_connection),
            ],
            capture_output=True,
            text=True,
            check=True,
            env=tools_environment(),
        )
    seconds = float(result.stdout)
    n = connections * per_connection
    return {"connections": connections, "n": n, "seconds": seconds, "tasks_per_s": n / seconds}


def _fanin_producer(address: str, connections: int, per_connection: int) -> None:
    """(Its own process.) Submit from every connection at once; print the seconds."""
    from twisted.internet import defer
    from twisted.internet.task import react

    from quicx.clients.twisted_client import connect

    payload = payload_of(100)

    async def one(reactor: Any) -> None:
        protocol = await connect(reactor, address, keep_outcomes=per_connection + 1, protocol=1)
        ids = await defer.gatherResults(
            [protocol.submit(BENCH_TYPE, payload) for _ in range(per_connection)]
        )
        await defer.gatherResults([protocol.outcome(task_id) for task_id in ids])
        protocol.close()

    async def main(reactor: Any) -> None:
        started = time.perf_counter()
        await defer.gatherResults([defer.ensureDeferred(one(reactor)) for _ in range(connections)])
        print(time.perf_counter() - started)

    react(lambda reactor: defer.ensureDeferred(main(reactor)))


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
            producers = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tools.bench",
                        "_scale",
                        address,
                        str(n),
                        str(size),
                    ],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=tools_environment(),
                )
                for address in addresses
            ]
            for producer in producers:  # each is connected
                if line_of(producer) != "ready":
                    raise SystemExit("tools.bench: a scale producer did not connect")
            cpu = [cpu_seconds(daemon.pid) for daemon in daemons]
            started_at = time.perf_counter()
            for producer in producers:
                assert producer.stdin is not None
                producer.stdin.write("go\n")
                producer.stdin.flush()
            # Each one's line, not its exit: closing a client and an interpreter takes time.
            seconds = [float(line_of(producer)) for producer in producers]
            wall = time.perf_counter() - started_at
            daemon_cpu = sum(cpu_seconds(d.pid) for d in daemons) - sum(cpu)
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


def _scale_producer(address: str, n: int, payload_size: int) -> None:
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


def rss_growth(
    daemon: DaemonProcess, warm_up: Iterable[Task], load: Iterable[Task], protocol: int
) -> tuple[int, int]:
    """
    The daemon's resident memory once C{warm_up} is submitted, and once
    C{load} is too, each from a connection closed before the reading.
    """
    readings = []
    for tasks in (warm_up, load):
        with QuicxClient(daemon.client_address, protocol=protocol) as client:
            client.submit_many(tasks)
        time.sleep(0.5)
        readings.append(rss(daemon.pid))
    return readings[0], readings[1]


def monitor_workload(depth: int, queries: int) -> dict[str, Any]:
    """
    Monitor queries against a deep queue: C{queries} INSPECTs of the last of
    C{depth} tasks queued in one queue, pipelined on one connection (one
    send), while another connection makes round trips (a SUBMIT to another
    queue and its OK, one at a time).  How long the INSPECTs take, and the
    round trips meanwhile: the event loop held by the first shows in the
    second.
    """
    with running() as (daemon, _), QuicxClient(daemon.client_address, protocol=2) as client:
        ids = client.submit_many((BENCH_TYPE, b"x", Options("deep")) for _ in range(depth))
        trips: list[float] = []
        done = threading.Event()

        def round_trips() -> None:
            with QuicxClient(daemon.client_address, protocol=2) as other:
                while not done.is_set():
                    started = time.perf_counter()
                    other.submit(BENCH_TYPE, b"x", queue="other")
                    trips.append(time.perf_counter() - started)

        thread = threading.Thread(target=round_trips)
        thread.start()
        with socket.create_connection(daemon.address) as monitor:
            parser = FrameParser(CLIENT_MAX_LENGTH, False, CLIENT_MAX_LENGTH)
            monitor.sendall(link.encode_hello())
            answers = -1  # the HELLO's INFO first
            while answers < 0:
                answers += len(parser.feed(monitor.recv(65536)))
            while len(trips) < 20:  # the round trips are under way
                time.sleep(0.01)
            before = len(trips)
            started = time.perf_counter()
            # submit_many raises rather than return an error (return_exceptions=False).
            monitor.sendall(admin.encode_inspect(cast(int, ids[-1])) * queries)
            while answers < queries:
                frames = parser.feed(monitor.recv(65536))
                if not all(
                    type(f) is Frame and f.message_type == codec.MessageType.INFO for f in frames
                ):
                    raise SystemExit(f"tools.bench: INSPECT was not answered INFO: {frames}")
                answers += len(frames)
            seconds = time.perf_counter() - started
            finished = len(trips) + 1  # and the round trip under way then
            while len(trips) < finished:
                time.sleep(0.001)
            during = trips[before:]
        done.set()
        thread.join()
    return {
        "depth": depth,
        "queries": queries,
        "seconds": seconds,
        "ms_per_inspect": seconds * 1000 / queries,
        "round_trips": len(during),
        "round_trip_max_ms": max(during, default=seconds) * 1000,
        "round_trip_median_ms": statistics.median(during) * 1000 if during else None,
    }


def memory_workload(n: int) -> dict[str, Any]:
    """Resident memory with no tasks and with C{n} queued 100-byte tasks."""
    payload = payload_of(100)
    with running() as (daemon, _):
        empty, full = rss_growth(
            daemon, tasks_of(1000, payload, 1), tasks_of(n - 1000, payload, 1), protocol=1
        )
        pool_used = status(daemon)["memory"]["used"]
    return {
        "n": n,
        "rss_empty": empty,
        "rss_full": full,
        "pmad_used": pool_used,
        "bytes_per_task": (full - empty) / n,
        "bytes_per_task_beyond_pool": (full - empty - pool_used) / n,
    }


def alike(n: int, payload: bytes, options: Options) -> Iterator[Task]:
    """C{n} version-2 tasks with the same C{options}."""
    return ((BENCH_TYPE, payload, options) for _ in range(n))


DELAY_WORKERS = 4
DELAY_CREDITS = 1000
"""The delays workload's workers: 4 version-2 connections (in one process)
of 1,000 credits each, so that they hold every task the daemon makes due
in one reactor turn (1,000, L{quicx.daemon.queue.delays.BATCH})."""

PROBE_INTERVAL = 0.01
"""Seconds between the STATS round trips that watch the daemon's replies."""

DAY = 86_400.0


def delays_dispatch_workload(n: int) -> dict[str, Any]:
    """
    C{n} version-2 tasks due at one whole second (run-at), a few seconds
    after their SUBMITs end: how late each TASK reaches a worker, and how
    long a STATS round trip on another connection takes meanwhile.
    """
    payload = payload_of(100)
    with running() as (daemon, _):
        worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tools.bench",
                "_delays_worker",
                daemon.client_address,
                str(DELAY_WORKERS),
                str(n),
            ],
            stdout=subprocess.PIPE,
            env=tools_environment(),
        )
        try:
            wait_for_workers(daemon, DELAY_WORKERS, [worker])
            # 2 s to spare when SUBMITs go at 50,000/s, a quarter of the usual rate.
            due = math.ceil(time.time() + 2 + n / 50_000)
            options = Options(run_at=due)
            with QuicxClient(daemon.client_address) as client:
                client.submit_many(alike(n, payload, options))
            margin = due - time.time()
            if margin <= 0:
                raise SystemExit(f"tools.bench: the SUBMITs ended {-margin:.1f} s past their time")
            assert worker.stdout is not None
            probes = probe(daemon.client_address, worker.stdout, due + 60 + n / 1000)
            output = worker.communicate(timeout=60)[0]
        finally:
            stop_all([worker])
    if worker.returncode != 0:
        raise SystemExit(f"tools.bench: the delays worker exited with {worker.returncode}")
    arrivals = json.loads(output)
    lateness = sorted(1000 * (arrived - due) for arrived in arrivals)
    first = due + lateness[0] / 1000
    during = sorted(1000 * took for sent, took in probes if sent + took >= first)
    before = [1000 * took for sent, took in probes if sent + took < first]
    return {
        "n": n,
        "workers": DELAY_WORKERS,
        "credits": DELAY_CREDITS,
        "margin_s": margin,
        "lateness_ms": {
            "p0": lateness[0],
            "p50": quantile(lateness, 0.50),
            "p99": quantile(lateness, 0.99),
            "p100": lateness[-1],
        },
        "tasks_per_s": 1000 * n / max(lateness[-1] - lateness[0], 0.001),
        "stats_rtt_ms": {
            "probes": len(during),
            "p50": quantile(during, 0.50),
            "max": during[-1],
            "max_before": max(before) if before else None,
        },
    }


IDLE_DELAY_MS = 200
"""How far ahead each task of the idle-lateness figure is due."""


def delays_idle_workload(k: int) -> dict[str, Any]:
    """
    C{k} version-2 tasks one at a time, each due L{IDLE_DELAY_MS} after its
    SUBMIT, on an otherwise idle daemon with one worker waiting: how late
    each TASK reaches it (the timer's own precision, no backlog).
    """
    payload = payload_of(100)
    lateness = []
    with running() as (daemon, _):
        _, sockaddr, _ = parse_address(daemon.client_address)
        assert isinstance(sockaddr, tuple), "a tcp: address"
        with (
            socket.create_connection(sockaddr) as sock,
            QuicxClient(daemon.client_address) as client,
        ):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.sendall(taskflow.encode_ready(1))
            parser = FrameParser(
                CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH
            )
            for _ in range(k):
                due_ms = int(time.time() * 1000) + IDLE_DELAY_MS
                options = Options(run_at=due_ms / 1000)
                client.submit_many(alike(1, payload, options))
                task = None
                while task is None:
                    data = sock.recv(1 << 16)
                    arrived = time.time()
                    if not data:
                        raise SystemExit("tools.bench: the daemon closed the worker connection")
                    for frame in parser.feed(data):
                        if (
                            isinstance(frame, Frame)
                            and frame.message_type == codec.MessageType.TASK
                        ):
                            task = taskflow.decode_task(frame.payload)
                lateness.append(1000 * arrived - due_ms)
                sock.sendall(outcomes.encode_ack(task.task_id, task.token))
    lateness.sort()
    return {
        "k": k,
        "delay_ms": IDLE_DELAY_MS,
        "lateness_ms": {"p50": quantile(lateness, 0.5), "max": lateness[-1]},
    }


def probe(address: str, until: IO[bytes], deadline: float) -> list[tuple[float, float]]:
    """
    A STATS round trip every L{PROBE_INTERVAL}, on a connection of its own,
    until C{until} has something to read; then one more.

    @return: when each was sent (Unix seconds) and the seconds it took.
    @raise SystemExit: C{until} had nothing by C{deadline} (Unix seconds).
    """
    samples = []
    with QuicxClient(address) as client:
        client.stats()  # the connection and its HELLO
        done = False
        while True:
            sent, started = time.time(), time.perf_counter()
            client.stats()
            samples.append((sent, time.perf_counter() - started))
            if done:
                return samples
            if sent > deadline:
                raise SystemExit("tools.bench: the workers did not get every task in time")
            wait = max(0.0, sent + PROBE_INTERVAL - time.time())
            done = bool(select.select([until], [], [], wait)[0])


def _delays_worker(address: str, connections: int, n: int) -> None:
    """
    (Its own process.) C{connections} version-2 worker connections of
    L{DELAY_CREDITS} credits, each TASK ACKed with its token; once C{n}
    have come, print when each came (Unix seconds, a JSON list).
    """
    _, sockaddr, _ = parse_address(address)
    assert isinstance(sockaddr, tuple), "a tcp: address"
    selector = selectors.DefaultSelector()
    for _ in range(connections):
        sock = socket.create_connection(sockaddr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(taskflow.encode_ready(DELAY_CREDITS))
        parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH)
        selector.register(sock, selectors.EVENT_READ, (sock, parser))
    arrivals: list[float] = []
    while len(arrivals) < n:
        for key, _ in selector.select():
            sock, parser = key.data
            data = sock.recv(1 << 18)
            now = time.time()
            if not data:
                raise SystemExit("tools.bench: the daemon closed a worker connection")
            replies = []
            for frame in parser.feed(data):
                if not isinstance(frame, Frame) or frame.message_type == codec.MessageType.ERROR:
                    raise SystemExit(f"tools.bench: a worker got {frame}")
                if frame.message_type == codec.MessageType.TASK:
                    task = taskflow.decode_task(frame.payload)
                    arrivals.append(now)
                    replies.append(outcomes.encode_ack(task.task_id, task.token))
                elif frame.message_type == codec.MessageType.HEARTBEAT:
                    replies.append(link.PONG_FRAME)
            sock.sendall(b"".join(replies))
    print(json.dumps(arrivals), flush=True)


def delays_memory_workload(m: int) -> dict[str, Any]:
    """
    Resident memory per task, C{m} version-2 100-byte tasks queued, and
    C{m} delayed by a day (none runs), each kind in a daemon of its own
    after 1,000 tasks of that kind.
    """
    payload = payload_of(100)
    extra = [f"--max-delayed={m + 1000}", f"--pool-size={max(1 << 30, 1024 * m)}"]
    kinds = {
        "queued": Options(),
        "delayed": Options(delay=DAY),
    }
    figures: dict[str, Any] = {"m": m}
    for kind, options in kinds.items():
        with running(extra) as (daemon, _):
            before, after = rss_growth(
                daemon, alike(1000, payload, options), alike(m, payload, options), protocol=2
            )
            held = status(daemon)["tasks"][kind]
        if held != m + 1000:
            raise SystemExit(f"tools.bench: {held} of {m + 1000} tasks {kind}")
        figures[kind] = {
            "rss_before": before,
            "rss_after": after,
            "bytes_per_task": (after - before) / m,
        }
    figures["delay_bytes_per_task"] = (
        figures["delayed"]["bytes_per_task"] - figures["queued"]["bytes_per_task"]
    )
    return figures


def events_workload(n: int, directory: Path, rounds: int = 3) -> dict[str, Any]:
    """End-to-end throughput with lifecycle events off and on, alternated."""
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        rates["off"].append(e2e_workload(n)["tasks_per_s"])
        with tempfile.TemporaryDirectory(dir=directory) as events:
            rates["on"].append(e2e_workload(n, extra=[f"--events={events}"])["tasks_per_s"])
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    return {"n": n, "rounds": rates, "median_off": off, "median_on": on, "ratio": on / off}


BENCH_TOKEN = "bench-admin-token"

OBSERVABILITY_ON = [
    "--metrics-listen=tcp:0:interface=127.0.0.1",
    "--web-listen=tcp:0:interface=127.0.0.1",
    f"--web-admin-token={BENCH_TOKEN}",
]
"""The daemon flags of the observability workload's "on" runs: every live
view the daemon serves (C{/metrics} and the web dashboard)."""

SCRAPE_INTERVAL = 1.0


class Scraper:
    """
    While in use for a daemon, fetches its C{/metrics} every
    L{SCRAPE_INTERVAL} on a thread (as Prometheus would), the first at once,
    and keeps a dashboard page's live stream open, reading it (as an open
    browser tab would).

    @ivar seconds: how long each scrape took, over every use.
    @ivar updates: the live stream's messages read, over every use.
    """

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self.updates = 0

    @contextmanager
    def __call__(self, daemon: DaemonProcess) -> Iterator[None]:
        url = f"http://127.0.0.1:{daemon.announced_port('metrics')}/metrics"
        stop = threading.Event()
        failures: list[BaseException] = []

        def scrape() -> None:
            try:
                while True:
                    started = time.perf_counter()
                    with urllib.request.urlopen(url, timeout=10) as reply:
                        reply.read()
                    self.seconds.append(time.perf_counter() - started)
                    if stop.wait(SCRAPE_INTERVAL):
                        return
            except Exception as e:  # told in the caller's thread
                failures.append(e)

        stream = http.client.HTTPConnection(
            "127.0.0.1", daemon.announced_port("dashboard"), timeout=10
        )
        stream.request("GET", "/api/stream", headers={"Authorization": f"Bearer {BENCH_TOKEN}"})
        reply = stream.getresponse()
        if reply.status != 200:
            raise SystemExit(f"tools.bench: the dashboard's stream answered {reply.status}")

        def follow() -> None:
            while not stop.is_set() and (line := reply.readline()):
                self.updates += line.startswith(b"data:")

        threads = [
            threading.Thread(target=scrape, name="scraper", daemon=True),
            threading.Thread(target=follow, name="dashboard", daemon=True),
        ]
        for thread in threads:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            # The daemon closes the stream as it stops: the reader then sees
            # its end (closing it under the reader's feet would race).
            for thread in threads:
                thread.join(15)
            stream.close()
        if failures:
            raise SystemExit(f"tools.bench: scraping {url} failed: {failures[0]}")


class Watcher:
    """
    While in use for a daemon, one client watches every lifecycle event it
    has (protocol version 2's WATCH), reading them on a thread.

    @ivar events: the events read, over every use.
    """

    def __init__(self) -> None:
        self.events = 0

    @contextmanager
    def __call__(self, daemon: DaemonProcess) -> Iterator[None]:
        client = QuicxClient(daemon.client_address)
        stream = client.events(timeout=0.2)

        def read() -> None:
            while not stop.is_set():
                try:
                    next(stream)
                except TimeoutError:
                    continue
                self.events += 1

        stop = threading.Event()
        thread = threading.Thread(target=read, name="watcher", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(15)
            stream.close()
            client.close()


V2_FEATURES = ("v1", "v2", "v2 delayed", "v2 results", "v2 watched", "v2 observed")
"""The version-2 comparison's runs: version 1, then version 2 (4 queues x
3 priorities) plain, with every task delayed, with a 16-byte result each,
with a live events subscriber, with /metrics and the dashboard served and
read."""


def v2_features_workload(n: int, rounds: int = 3) -> dict[str, Any]:
    """Every run of L{V2_FEATURES}, alternated, C{rounds} times."""
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "v1": lambda: e2e_workload(n, protocol=1),
        "v2": lambda: e2e_workload(n, protocol=2),
        "v2 delayed": lambda: e2e_workload(n, protocol=2, delayed=True),
        "v2 results": lambda: e2e_workload(n, protocol=2, result_size=SMALL_RESULT_SIZE),
        "v2 watched": lambda: e2e_workload(n, protocol=2, during=Watcher()),
        "v2 observed": lambda: e2e_workload(
            n, protocol=2, extra=OBSERVABILITY_ON, during=Scraper()
        ),
    }
    rates: dict[str, list[float]] = {name: [] for name in V2_FEATURES}
    daemon_cpu: dict[str, list[float]] = {name: [] for name in V2_FEATURES}
    for _ in range(rounds):
        for name in V2_FEATURES:
            figures = runs[name]()
            rates[name].append(figures["tasks_per_s"])
            daemon_cpu[name].append(figures["cpu_us_per_task"]["daemon"])
    return {
        "n": n,
        "rounds": rounds,
        "tasks_per_s": rates,
        "daemon_us_per_task": daemon_cpu,
        "median": {name: statistics.median(rates[name]) for name in V2_FEATURES},
        "median_daemon_us": {name: statistics.median(daemon_cpu[name]) for name in V2_FEATURES},
    }


def observability_workload(n: int, rounds: int = 3) -> dict[str, Any]:
    """
    End-to-end throughput with the live views off, and on (L{OBSERVABILITY_ON})
    with a scraper fetching C{/metrics} every second; alternated.
    """
    rates: dict[str, list[float]] = {"off": [], "on": []}
    daemon_cpu: dict[str, list[float]] = {"off": [], "on": []}
    scraper = Scraper()
    for _ in range(rounds):
        for side, run in (
            ("off", lambda: e2e_workload(n)),
            ("on", lambda: e2e_workload(n, extra=OBSERVABILITY_ON, during=scraper)),
        ):
            figures = run()
            rates[side].append(figures["tasks_per_s"])
            daemon_cpu[side].append(figures["cpu_us_per_task"]["daemon"])
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    return {
        "n": n,
        "flags": OBSERVABILITY_ON,
        "rounds": rates,
        "median_off": off,
        "median_on": on,
        "ratio": on / off,
        "daemon_cpu_us_per_task": {side: statistics.median(v) for side, v in daemon_cpu.items()},
        "scrapes": len(scraper.seconds),
        "scrape_ms_max": 1000 * max(scraper.seconds),
        "stream_updates": scraper.updates,
    }


def synthetic_events(directory: Path, events: int) -> int:
    """Write about C{events} lifecycle events (3 or 4 per task) as NDJSON."""
    from random import Random

    from quicx.daemon.observe.events import format_event

    rng = Random(7)
    written, task, now = 0, 0, 1_795_000_000.0
    path = directory / f"events-20261121T000000-{os.getpid()}-0001.ndjson"
    with path.open("w") as out:
        while written < events:
            task += 1
            now += rng.expovariate(2000)
            kind = b"mail" if task % 3 else b"sms"
            size = rng.randint(20, 400)
            producer, worker = 1 + task % 8, 100 + task % 64
            start = now + rng.expovariate(200)
            end = start + rng.expovariate(50)
            lines: list[tuple[Any, ...]] = [
                (now, "submitted", task, kind, size, producer, None, 0, None),
                (start, "dispatched", task, kind, size, producer, worker, 1, None),
            ]
            if task % 20:
                lines.append((end, "done", task, kind, size, producer, worker, 1, None))
            else:
                reason = "over quota" if task % 40 else "bad address"
                lines.append((end, "failed", task, kind, size, producer, worker, 1, reason))
            queue = "mail" if task % 3 else "sms"
            out.writelines(format_event((*line, queue, task % 3)) + "\n" for line in lines)
            written += len(lines)
    return written


def report_workload(events: int) -> dict[str, Any]:
    """Run time of C{quicx report} over C{events} synthetic events (local[*])."""
    with tempfile.TemporaryDirectory(prefix="quicx-bench-report-") as directory:
        source = Path(directory) / "events"
        source.mkdir()
        written = synthetic_events(source, events)
        started = time.perf_counter()
        subprocess.run(
            [QUICX, "report", str(source), f"--out={Path(directory) / 'out'}"],
            check=True,
            capture_output=True,
        )
        seconds = time.perf_counter() - started
    return {"events": written, "seconds": seconds, "events_per_s": written / seconds}


def journal_workload(n: int, journal_dir: Path) -> dict[str, Any]:
    """End-to-end throughput without a journal and with each fsync policy."""
    results = {}
    for policy in ("none", "no", "everysec", "always"):
        extra = []
        if policy != "none":
            path = journal_dir / f"bench-{policy}.journal"
            path.unlink(missing_ok=True)
            extra = [f"--journal={path}", f"--fsync={policy}"]
        results[policy] = e2e_workload(n, extra=extra)["tasks_per_s"]
        if policy != "none":
            path.unlink(missing_ok=True)
    base = results["none"]
    return {"n": n, "tasks_per_s": results, "ratio": {k: v / base for k, v in results.items()}}


# -- peers ---------------------------------------------------------------------------


def find_peers(explicit: str | None) -> Path | None:
    """The peer harness: C{--peers}, C{$QUICX_PEERS}, or C{../shared/bench/peers}."""
    for candidate in [explicit, os.environ.get("QUICX_PEERS"), "../shared/bench/peers"]:
        if candidate and (Path(candidate) / "harness" / "core.py").exists():
            return Path(candidate).resolve()
    return None


def peer_python(peers: Path) -> str:
    """The harness's virtualenv, set up as its run_all.sh does (idempotent)."""
    venv = peers.parent / ".venv"
    if shutil.which("beanstalkd") is None:
        raise SystemExit(
            "tools.bench: beanstalkd is missing: install it (apt-get install beanstalkd)"
            " or run with --no-peers"
        )
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(venv / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "-r",
                str(peers / "requirements.txt"),
            ],
            check=True,
        )
    return str(venv / "bin" / "python")


QUICX_ADAPTER = Path("benchmarks") / "quicx_adapter.py"
"""Quicx as a harness adapter (run from the repository root, with this Python)."""


def peer_run(
    peers: Path, python: str, adapter: str, workload: str, n: int, payload: int = 100
) -> dict[str, Any]:
    """One run of the harness: C{adapter} is a file in its adapters/, or "quicx"."""
    if adapter == "quicx":
        python, script = sys.executable, QUICX_ADAPTER.resolve()
    else:
        script = peers / "adapters" / f"{adapter}.py"
    with tempfile.TemporaryDirectory(prefix="quicx-bench-peer-") as directory:
        out = Path(directory) / "result.json"
        subprocess.run(
            [
                python,
                str(script),
                "bench",
                "--workload",
                workload,
                "--n",
                str(n),
                "--payload-bytes",
                str(payload),
                "--workers",
                "2",
                "--max-seconds",
                "300",
                "--out",
                str(out),
                "--log-dir",
                directory,
            ],
            check=False,
            capture_output=True,
            env={**tools_environment(), "QUICX_PEERS": str(peers)},
        )
        if not out.exists():
            return {"error": "no result"}
        result = json.loads(out.read_text())
    return result.get("result", result)


# -- the command ---------------------------------------------------------------------

WORKLOADS = (
    "submit",
    "e2e",
    "v2",
    "latency",
    "fanin",
    "sweep",
    "memory",
    "monitor",
    "harness",
    "journal",
    "events",
    "observability",
    "report",
    "delays",
    "results",
    "idle",
    "scale",
    "abuse",
)


def emit(name: str, line: str, figures: dict[str, Any], table: list[dict[str, Any]]) -> None:
    print(f"{name:<22} {line}", flush=True)
    record = {"workload": name, **figures}
    print(json.dumps(record), flush=True)
    table.append(record)


def main(argv: list[str] | None = None) -> int:  # noqa: C901, PLR0915
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description="Quicx benchmark (see docs/performance.md)"
    )
    parser.add_argument("workloads", nargs="*", help=f"any of {', '.join(WORKLOADS)}")
    parser.add_argument("--quick", action="store_true", help="smaller N everywhere")
    parser.add_argument("--peers", metavar="DIR", help="the peer harness (../shared/bench/peers)")
    parser.add_argument("--no-peers", action="store_true", help="Quicx only")
    parser.add_argument("--json-out", metavar="FILE", help="write every result here")
    parser.add_argument("--journal-dir", default=".", help="where the journal workload writes")
    parser.add_argument(
        "--delays-dispatch",
        type=int,
        metavar="N",
        help="tasks due in the same second (delays workload; 100,000 unless --quick)",
    )
    parser.add_argument(
        "--delays-memory",
        type=int,
        metavar="M",
        help="tasks held for the memory figures (delays workload; 1,000,000 unless --quick)",
    )
    args = parser.parse_args(argv)
    if any(count is not None and count < 1 for count in (args.delays_dispatch, args.delays_memory)):
        parser.error("--delays-dispatch and --delays-memory count tasks: 1 or more")
    # Absolute: each daemon runs in its own temporary directory.
    journal_dir = Path(args.journal_dir).resolve()
    unknown = set(args.workloads) - set(WORKLOADS)
    if unknown:
        parser.error(f"unknown workload {', '.join(sorted(unknown))}")
    chosen = args.workloads or [w for w in WORKLOADS if w != "journal"]
    scale = 10 if args.quick else 1
    peers = None if args.no_peers else find_peers(args.peers)
    python = peer_python(peers) if peers else ""
    table: list[dict[str, Any]] = []
    print(
        f"Quicx {__version__} benchmark, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())},"
        f" {platform.machine()} x{os.cpu_count()}, Python {platform.python_version()},"
        f" peers: {peers or 'none'}",
        flush=True,
    )

    def peer(workload: str, n: int, payload: int = 100) -> dict[str, Any] | None:
        return peer_run(peers, python, "beanstalkd", workload, n, payload) if peers else None

    def ratio(ours: float, theirs: dict[str, Any] | None, key: str) -> str:
        if not theirs or key not in theirs:
            return ""
        return f"   beanstalkd {theirs[key]:,.0f}, ratio {ours / theirs[key]:.2f}x"

    runners: dict[str, Callable[[], None]] = {}

    def run_submit() -> None:
        ours = submit_workload(200_000 // scale)
        theirs = peer("enqueue", 200_000 // scale)
        emit(
            "submit",
            f"{ours['oks_per_s']:,.0f} OKs/s" + ratio(ours["oks_per_s"], theirs, "jobs_per_s"),
            {**ours, "peer": theirs},
            table,
        )

    def emit_e2e(name: str, ours: dict[str, Any], theirs: dict[str, Any] | None) -> None:
        rate = f"{ours['tasks_per_s']:,.0f} tasks/s"
        line = rate + ratio(ours["tasks_per_s"], theirs, "jobs_per_s")
        emit(name, line, {**ours, "peer": theirs}, table)

    def run_e2e() -> None:
        n = 200_000 // scale
        ours = e2e_workload(n)
        theirs = peer("e2e", n)
        emit_e2e("e2e", ours, theirs)
        # Without the credit extension: what a protocol-page-only worker gets.
        emit_e2e("e2e one task/conn", e2e_workload(n, layout=ONE_TASK_EACH), theirs)
        emit_e2e("e2e one task/worker", e2e_workload(n // 4, layout=(1, 1)), theirs)
        # What a user gets: `quicx worker module:handlers`, no flags.
        emit_e2e("e2e stock worker", e2e_workload(n, layout=None), theirs)

    def run_v2() -> None:
        # Side by side, alternated: version 1 (one queue) against version 2
        # (4 queues x 3 priorities, then with each feature), each the
        # median of its rounds.
        rounds, n = 3, 100_000 // scale
        submits: dict[int, list[float]] = {1: [], 2: []}
        for _ in range(rounds):
            for protocol in (1, 2):
                submits[protocol].append(submit_workload(n, protocol)["oks_per_s"])
        v1, v2 = (statistics.median(submits[p]) for p in (1, 2))
        emit(
            "v2 submit",
            f"v1 {v1:,.0f}/s  v2 (4 queues x 3 priorities) {v2:,.0f}/s"
            f"  (median of {rounds}, alternated): ratio {v2 / v1:.2f}",
            {"n": n, "rounds": rounds, "v1": submits[1], "v2": submits[2]},
            table,
        )
        features = v2_features_workload(n, rounds)
        plain, cpu = features["median"]["v1"], features["median_daemon_us"]
        for name in V2_FEATURES[1:]:
            rate = features["median"][name]
            emit(
                f"v2 e2e {name[3:] or 'plain'}",
                f"{rate:,.0f} tasks/s, daemon {cpu[name]:.1f} µs/task;  v1 {plain:,.0f},"
                f" {cpu['v1']:.1f} µs  (median of {rounds}, alternated): ratio {rate / plain:.2f}",
                {"n": n, "rounds": rounds, "run": name, **features},
                table,
            )

    def run_idle() -> None:
        for name, busy_poll in (("idle", None), ("idle no busy-poll", 0.0)):
            ours = idle_workload(30 / scale, busy_poll)
            emit(
                name,
                f"daemon {ours['daemon_percent']:.2f} % of a CPU,"
                f" busiest worker {ours['worker_percent']:.2f} %",
                ours,
                table,
            )

    def run_latency() -> None:
        n = 5000 // scale
        theirs = peer("latency", n)
        # Stock workers; the daemon and the workers with their default
        # busy polling (100 µs), then with none.
        for name, busy_poll in (("latency", None), ("latency no busy-poll", 0.0)):
            ours = latency_workload(n, busy_poll)
            keys = ("p50_us", "p90_us", "p99_us", "max_us")
            line = " ".join(f"{k[:-3]} {ours[k]:,.0f}" for k in keys)
            if theirs and "p50_us" in theirs:
                line += (
                    f" µs   beanstalkd p50 {theirs['p50_us']:,.0f} p99 {theirs['p99_us']:,.0f},"
                    f" p50 ratio {ours['p50_us'] / theirs['p50_us']:.2f}x"
                )
            emit(name, line, {**ours, "peer": theirs}, table)
        # The floor: a task's round trip takes two round trips at least
        # (producer <-> daemon, daemon <-> worker), here through a bare
        # Python socket echo server.
        submit = wire.encode_submit(BENCH_TYPE.encode(), payload_of(100))
        floor = percentiles(echo.floor("socket", submit, n))
        emit(
            "latency floor",
            f"two bare socket round trips: p50 {floor['p50_us']:,.1f} µs",
            floor,
            table,
        )

    def run_fanin() -> None:
        ours = fanin_workload(50, 2000 // scale)
        emit("fan-in", f"{ours['tasks_per_s']:,.0f} tasks/s", ours, table)

    def run_sweep() -> None:
        for size, n in ((16, 200_000), (1024, 100_000), (65536, 20_000)):
            ours = e2e_workload(n // scale, size)
            # beanstalkd refuses jobs over 65,535 bytes by default.
            theirs = peer("e2e", n // scale, size) if size < 65536 else None
            emit_e2e(f"e2e {size} B", ours, theirs)

    def run_memory() -> None:
        ours = memory_workload(500_000 // scale)
        emit(
            "memory",
            f"RSS {ours['rss_empty'] / 2**20:.1f} MiB empty, {ours['rss_full'] / 2**20:.1f} MiB"
            f" with {ours['n']:,} tasks: {ours['bytes_per_task']:.0f} B/task,"
            f" {ours['bytes_per_task_beyond_pool']:.0f} B/task beyond the pool",
            ours,
            table,
        )

    def run_monitor() -> None:
        ours = monitor_workload(40_000 // scale, 300)
        emit(
            "monitor",
            f"{ours['queries']} pipelined INSPECTs, {ours['depth']:,} tasks ahead:"
            f" {ours['seconds'] * 1000:,.1f} ms ({ours['ms_per_inspect']:.3f} ms each);"
            f" round trips on another queue meanwhile: {ours['round_trips']},"
            f" the longest {ours['round_trip_max_ms']:,.1f} ms",
            ours,
            table,
        )

    def run_journal() -> None:
        ours = journal_workload(100_000 // scale, journal_dir)
        rates, ratios = ours["tasks_per_s"], ours["ratio"]
        emit(
            "journal e2e",
            "  ".join(f"{k} {rates[k]:,.0f}/s ({ratios[k]:.2f})" for k in rates),
            ours,
            table,
        )

    def run_harness() -> None:
        # The harness's own workloads and rules (one job per put, no
        # pipelining), Quicx and beanstalkd interleaved.
        if not peers:
            print("harness                (skipped: no peer harness)", flush=True)
            return
        if not QUICX_ADAPTER.exists():
            raise SystemExit(f"tools.bench: run from the repository root ({QUICX_ADAPTER})")
        for workload, n in (("enqueue", 20_000), ("e2e", 20_000), ("latency", 2_000)):
            ours = peer_run(peers, python, "quicx", workload, n // scale)
            theirs = peer_run(peers, python, "beanstalkd", workload, n // scale)
            key = "p50_us" if workload == "latency" else "jobs_per_s"
            if key not in ours or key not in theirs:
                emit(f"harness {workload}", "failed", {"quicx": ours, "peer": theirs}, table)
                continue
            emit(
                f"harness {workload}",
                f"quicx {ours[key]:,.0f}  beanstalkd {theirs[key]:,.0f}"
                f"  ({'µs p50' if workload == 'latency' else 'jobs/s'}),"
                f" ratio {ours[key] / theirs[key]:.2f}x",
                {"quicx": ours, "peer": theirs},
                table,
            )

    def run_events() -> None:
        ours = events_workload(100_000 // scale, journal_dir)
        emit(
            "events e2e",
            f"off {ours['median_off']:,.0f}/s  on {ours['median_on']:,.0f}/s"
            f"  (median of 3 each, alternated): ratio {ours['ratio']:.2f}",
            ours,
            table,
        )

    def run_observability() -> None:
        ours = observability_workload(100_000 // scale)
        emit(
            "observability e2e",
            f"off {ours['median_off']:,.0f}/s  on {ours['median_on']:,.0f}/s"
            f"  (median of 3 each, alternated; {ours['scrapes']} scrapes, the longest"
            f" {ours['scrape_ms_max']:.1f} ms; {ours['stream_updates']} dashboard updates):"
            f" ratio {ours['ratio']:.2f}; daemon CPU per task"
            f" {ours['daemon_cpu_us_per_task']['off']:.2f} µs off,"
            f" {ours['daemon_cpu_us_per_task']['on']:.2f} µs on",
            ours,
            table,
        )

    def run_report() -> None:
        ours = report_workload(1_000_000 // scale)
        emit(
            "report",
            f"{ours['events']:,} events in {ours['seconds']:.1f} s"
            f" ({ours['events_per_s']:,.0f} events/s, JVM start-up included)",
            ours,
            table,
        )

    def run_delays() -> None:
        ours = delays_idle_workload(20)
        late = ours["lateness_ms"]
        emit(
            "delays idle",
            f"{ours['k']} tasks one at a time, each due {ours['delay_ms']} ms after its SUBMIT:"
            f" lateness p50 {late['p50']:.2f} ms, max {late['max']:.2f} ms",
            ours,
            table,
        )
        n = 100_000 // scale if args.delays_dispatch is None else args.delays_dispatch
        ours = delays_dispatch_workload(n)
        late, rtt = ours["lateness_ms"], ours["stats_rtt_ms"]
        before = "-" if rtt["max_before"] is None else f"{rtt['max_before']:.1f}"
        emit(
            "delays dispatch",
            f"{n:,} tasks due at once, lateness p0 {late['p0']:.1f} p50 {late['p50']:.1f}"
            f" p99 {late['p99']:.1f} p100 {late['p100']:.1f} ms ({ours['tasks_per_s']:,.0f}"
            f" tasks/s); STATS every {PROBE_INTERVAL * 1000:.0f} ms: max {rtt['max']:.1f} ms"
            f" meanwhile, {before} before",
            ours,
            table,
        )
        m = 1_000_000 // scale if args.delays_memory is None else args.delays_memory
        ours = delays_memory_workload(m)
        emit(
            "delays memory",
            f"{ours['m']:,} tasks: queued {ours['queued']['bytes_per_task']:.0f} B/task,"
            f" delayed {ours['delayed']['bytes_per_task']:.0f} B/task:"
            f" {ours['delay_bytes_per_task']:.0f} B/task for the delay",
            ours,
            table,
        )

    def run_results() -> None:
        # Side by side, alternated: version-2 end to end without a result,
        # and with a 1 KiB result returned to the producer with each DONE.
        rounds, n = 3, 100_000 // scale
        runs: dict[int, list[dict[str, Any]]] = {0: [], RESULT_SIZE: []}
        for _ in range(rounds):
            for size in runs:
                runs[size].append(e2e_workload(n, protocol=2, result_size=size))
        rate = {size: statistics.median(r["tasks_per_s"] for r in runs[size]) for size in runs}
        daemon_us = {
            size: statistics.median(r["cpu_us_per_task"]["daemon"] for r in runs[size])
            for size in runs
        }
        emit(
            "results",
            f"v2 e2e without a result {rate[0]:,.0f}/s, with 1 KiB results"
            f" {rate[RESULT_SIZE]:,.0f}/s (median of {rounds}, alternated):"
            f" ratio {rate[RESULT_SIZE] / rate[0]:.2f}; daemon {daemon_us[0]:.1f} vs"
            f" {daemon_us[RESULT_SIZE]:.1f} µs/task",
            {"n": n, "rounds": rounds, "without": runs[0], "with_1k": runs[RESULT_SIZE]},
            table,
        )

    def run_scale() -> None:
        # Side by side, alternated: 1, 2 and 4 daemons, each producer and
        # worker given one daemon's address (independent) or all of them
        # (cluster); with 1 daemon both are the same run.
        ours = scale_workload(50_000 // scale)
        rates, per, cpu = ours["median"], ours["median_per_daemon"], ours["median_daemon_us"]
        most = SCALE_DAEMONS[-1]

        def figures(mode: str, count: int) -> str:
            return (
                f"{rates[mode][count]:,.0f}/s ({per[mode][count]:,.0f}/s each,"
                f" {cpu[mode][count]:.1f} µs/task)"
            )

        emit(
            "scale e2e",
            "  ".join(
                f"{count} daemon: {figures(INDEPENDENT, count)}"
                if count == 1
                else f"{count} daemons: "
                + ", ".join(f"{mode} {figures(mode, count)}" for mode in SCALE_MODES)
                for count in SCALE_DAEMONS
            )
            + f"  (median of {ours['rounds']}, alternated): with {most}, "
            + ", ".join(
                f"{mode} x{rates[mode][most] / rates[mode][1]:.2f}" for mode in SCALE_MODES
            ),
            ours,
            table,
        )

    def run_abuse() -> None:
        for result in abuse_workload(args.quick):
            emit(f"abuse {result['scenario']}", abuse_line(result), result, table)

    runners.update(
        abuse=run_abuse,
        scale=run_scale,
        results=run_results,
        report=run_report,
        events=run_events,
        observability=run_observability,
        harness=run_harness,
        submit=run_submit,
        e2e=run_e2e,
        v2=run_v2,
        latency=run_latency,
        fanin=run_fanin,
        sweep=run_sweep,
        memory=run_memory,
        monitor=run_monitor,
        journal=run_journal,
        delays=run_delays,
        idle=run_idle,
    )
    try:
        for workload in chosen:
            runners[workload]()
    except DaemonError as e:
        raise SystemExit(f"tools.bench: the daemon did not start: {e}") from None
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(table, indent=2) + "\n")
    return 0


HELPERS: dict[str, Callable[[str, int, int], None]] = {
    "_fanin": _fanin_producer,
    "_delays_worker": _delays_worker,
    "_scale": _scale_producer,
}
"""The processes a workload starts: C{python -m tools.bench NAME ADDRESS INT INT}."""

if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] in HELPERS:
        HELPERS[sys.argv[1]](sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        raise SystemExit(main())
