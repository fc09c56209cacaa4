"""
What every workload runs on: a daemon on the bench's settings, worker
processes on a no-op handler, payloads and task mixes, percentiles.
"""

from __future__ import annotations

import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attrs import evolve

from quicx.clients.blocking import QuicxClient, Task
from quicx.clients.requests import Options
from quicx.clients.worker import Worker
from quicx.daemon.control import fetch_status
from tools.launcher import (
    DaemonProcess,
    cpu_seconds,
    rss,
    start_workers,
    stop_all,
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


V2_QUEUES = ("q0", "q1", "q2", "q3")
V2_PRIORITIES = (0, 5, 9)
V2_OPTIONS = [Options(queue, priority) for queue in V2_QUEUES for priority in V2_PRIORITIES]
"""The version-2 workload's mix: 4 queues, 3 priorities, dealt in turn."""


V2_DELAYED = [evolve(options, delay=0.001) for options in V2_OPTIONS]
"""The same mix, each task to run a millisecond after its SUBMIT: every one
goes through the delayed set and falls due."""

V2_EXPIRING = [evolve(options, expires_in=60.0) for options in V2_OPTIONS]
"""The same mix, each task to start within a minute or expire: every one
has a deadline, watched until it starts."""


def tasks_of(
    n: int, payload: bytes, protocol: int, mix: Sequence[Options] | None = None
) -> Iterator[Task]:
    """
    C{n} tasks: plain for version 1, spread over C{mix} for version 2
    (L{V2_OPTIONS} unless said; L{V2_DELAYED}, L{V2_EXPIRING}, ...).
    """
    if protocol == 1:
        return ((BENCH_TYPE, payload) for _ in range(n))
    mix = mix or V2_OPTIONS
    return ((BENCH_TYPE, payload, mix[i % len(mix)]) for i in range(n))


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


def alike(n: int, payload: bytes, options: Options) -> Iterator[Task]:
    """C{n} version-2 tasks with the same C{options}."""
    return ((BENCH_TYPE, payload, options) for _ in range(n))
