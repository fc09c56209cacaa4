"""
Open-loop latency: tasks sent on a fixed schedule at a share of the measured
maximum rate, whatever the answers do (no coordinated omission).

A producer process (L{openloop_producer}, its own process) owns one
version-1 connection.  Task C{k} is due at C{start + k / rate}; the producer
sends every task due whenever it wakes (C{select} with a microsecond
timeout, never waiting for an answer), and times each task from its
I{intended} send time to its DONE's arrival: a producer that falls behind,
or a daemon that stalls it, shows in the figures instead of hiding them.

The daemon is pinned to one CPU with C{taskset} (all its threads), its
workers and the producer to the others, so that the daemon's core is its own
and its scheduling is repeatable.  The maximum is measured first on the same
daemon and workers, as the highest rate the same paced producer sustains
(L{sustained_maximum}: its tasks all done within L{KEEPS_UP} of their
schedule); a burst's rate (every task due at once, pipelined) is kept
beside it, but is no maximum for a paced stream, whose reads carry one or
two frames each instead of hundreds.  Then each load (L{LOADS}) runs
L{RUNS} times, the loads alternated.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

from quicx.protocol import wire
from tools.bench.rig import BENCH_TYPE, payload_of, quantile, running
from tools.launcher import tools_environment

LOADS = (0.25, 0.50, 0.75)
"""The offered loads, as shares of the measured maximum."""

RUNS = 5
"""Runs per load."""

WARM_UP = 0.2
"""Seconds of unrecorded tasks each run starts with."""

KEEPS_UP = 0.05
"""A paced run is sustained when its last DONE arrives within this share
of its schedule's length after its last task's intended send time."""

STEP = 1.25
"""How much faster each probe of L{sustained_maximum} offers."""

QUANTILES = (0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999)
"""The quantiles kept per load (and drawn by L{tools.bench.chart})."""

_HEADER = struct.Struct(">BBI")
_ID = struct.Struct(">I")
_OK, _DONE = 0x02, 0x06


def pin(pid: int, cpus: Sequence[int]) -> None:
    """Pin every thread of C{pid} to C{cpus} (C{taskset -a -p})."""
    subprocess.run(
        ["taskset", "-a", "-p", "-c", ",".join(map(str, cpus)), str(pid)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def openloop_producer(address: str, rate: int, n: int) -> None:
    """
    (Its own process.) Send C{n} tasks at C{rate} a second to C{address}
    (C{tcp:HOST:PORT}), version 1, without waiting, after L{WARM_UP} of a
    second of unrecorded ones at the same rate (C{n} at most); print a JSON
    line: each recorded task's nanoseconds from its intended send time to
    its DONE, how late the producer was in sending (its own lag, the
    largest), the tasks sent and the seconds from the first one's intended
    send time to the last DONE (at a rate past the maximum: a burst's).
    """
    _, host, port = address.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setblocking(False)
    frame = wire.encode_submit(BENCH_TYPE.encode(), payload_of(100))
    interval = 1e9 / rate
    warm = min(int(rate * WARM_UP), n)
    total = warm + n
    clock = time.perf_counter_ns
    start = clock() + 1_000_000
    sent = oks = 0
    pending = buffer = b""
    intended: dict[int, int] = {}  # task id -> intended send time (-1: warm-up)
    early: dict[int, int] = {}  # DONE before its OK (an OK held for the journal)
    samples: list[int] = []
    lag = done = 0

    def outcome(at: int, arrived: int) -> None:
        if at >= 0:
            samples.append(arrived - at)

    while done < total:
        now = clock()
        due = min(total, int((now - start) / interval) + 1) if now >= start else 0
        if due > sent:
            if sent >= warm:
                lag = max(lag, now - int(start + sent * interval))
            pending += frame * (due - sent)
            sent = due
        if pending:
            with suppress(BlockingIOError):
                pending = pending[sock.send(pending) :]
        wake = (start + sent * interval - clock()) / 1e9 if sent < total else 1.0
        readable, _, _ = select.select([sock], [sock] if pending else [], [], max(wake, 0))
        if not readable:
            continue
        data = sock.recv(1 << 20)
        if not data:
            raise SystemExit("openloop producer: the daemon closed the connection")
        arrived = clock()
        buffer += data
        offset = 0
        while len(buffer) - offset >= _HEADER.size:
            _, kind, length = _HEADER.unpack_from(buffer, offset)
            if len(buffer) - offset - _HEADER.size < length:
                break
            task_id = _ID.unpack_from(buffer, offset + _HEADER.size)[0]
            offset += _HEADER.size + length
            if kind == _OK:
                at = int(start + oks * interval) if oks >= warm else -1
                oks += 1
                if task_id in early:
                    outcome(at, early.pop(task_id))
                else:
                    intended[task_id] = at
            elif kind == _DONE:
                done += 1
                if task_id in intended:
                    outcome(intended.pop(task_id), arrived)
                else:
                    early[task_id] = arrived
            else:
                raise SystemExit(f"openloop producer: unexpected message type {kind}")
        buffer = buffer[offset:]
    sock.close()
    seconds = (clock() - start) / 1e9
    print(json.dumps({"samples": samples, "lag_ns": lag, "tasks": total, "seconds": seconds}))


def produce(address: str, rate: int, n: int) -> dict[str, Any]:
    """One run of L{openloop_producer} in its own process, on the CPUs but the daemon's."""
    command = [sys.executable, "-m", "tools.bench", "_openloop", address, str(rate), str(n)]
    others = _other_cpus()
    if others:
        command = ["taskset", "-c", ",".join(map(str, others)), *command]
    result = subprocess.run(
        command, capture_output=True, text=True, check=True, env=tools_environment()
    )
    figures: dict[str, Any] = json.loads(result.stdout)
    return figures


def _daemon_cpu() -> int:
    return max(os.sched_getaffinity(0))


def _other_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0) - {_daemon_cpu()})


def sustained(figures: dict[str, Any], rate: int) -> bool:
    """A paced run (L{produce}) ended within L{KEEPS_UP} of its schedule."""
    schedule = figures["tasks"] / rate
    return bool(figures["seconds"] <= schedule * (1 + KEEPS_UP))


def sustained_maximum(address: str, ceiling: float, seconds: float) -> int:
    """
    The highest paced rate the daemon keeps up with, below C{ceiling} (a
    burst's rate): probes of C{seconds} from an eighth of it up by L{STEP}
    while each is L{sustained} (a second try allowed), then halfway back
    from the first that was not.
    """

    def keeps_up(rate: int) -> bool:
        # Two tries: one run's miss on a shared machine is often another
        # process's, not the daemon's.
        return any(
            sustained(produce(address, rate, max(1000, int(rate * seconds))), rate)
            for _ in range(2)
        )

    rate, best = max(1, int(ceiling / 8)), 0
    while rate <= ceiling:
        if not keeps_up(rate):
            middle = (best + rate) // 2 if best else 0
            return max(1, middle if middle > best and keeps_up(middle) else best)
        best, rate = rate, int(rate * STEP) + 1
    return max(1, best)


def quantiles_us(samples_ns: list[int]) -> dict[str, float]:
    """L{QUANTILES} of C{samples_ns}, in microseconds, keyed C{p50}, C{p99.9}..."""
    ordered = sorted(samples_ns)
    return {f"p{100 * q:g}": quantile(ordered, q) / 1000 for q in QUANTILES}


def openloop_workload(
    seconds: float, runs: int = RUNS, loads: Sequence[float] = LOADS
) -> dict[str, Any]:
    """
    The maximum paced rate of a daemon with 2 stock workers (and a burst's
    rate), then C{runs} runs of C{seconds} at each of C{loads} (shares of
    that maximum), alternated.
    Per load: the quantiles of every run's tasks together, and each run's
    p99 and the producer's own lag (how late it sent, at worst); the
    machine's load average at the end (other processes share its CPUs).
    """
    with running(workers=2, layout=None) as (daemon, workers):
        assert workers is not None
        others = _other_cpus()
        pin(daemon.pid, [_daemon_cpu()])
        for process in workers.processes if others else ():
            pin(process.pid, others)
        address = daemon.client_address
        # The same producer, every task due at once: a burst, pipelined;
        # then paced, the highest rate it keeps up with: the maximum.
        burst = produce(address, 10**9, 20_000)
        burst_rate = burst["tasks"] / burst["seconds"]
        maximum = sustained_maximum(address, burst_rate, seconds / 4)
        samples: dict[float, list[int]] = {load: [] for load in loads}
        per_run: dict[float, list[dict[str, float]]] = {load: [] for load in loads}
        for _ in range(runs):
            for load in loads:
                rate = max(1, int(maximum * load))
                got = produce(address, rate, max(1000, int(rate * seconds)))
                samples[load] += got["samples"]
                per_run[load].append(
                    {
                        "rate": rate,
                        "p99_us": quantile(sorted(got["samples"]), 0.99) / 1000,
                        "lag_us": got["lag_ns"] / 1000,
                    }
                )
    return {
        "max_tasks_per_s": maximum,
        "burst_tasks_per_s": burst_rate,
        "load_average": os.getloadavg()[0],
        "seconds": seconds,
        "runs": runs,
        "daemon_cpu": _daemon_cpu(),
        "loads": {
            f"{load:.0%}": {
                "rate": per_run[load][0]["rate"],
                "tasks": len(samples[load]),
                **quantiles_us(samples[load]),
                "per_run": per_run[load],
            }
            for load in loads
        },
    }
