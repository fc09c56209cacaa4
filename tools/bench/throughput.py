"""
The throughput, latency and footprint workloads: SUBMITs alone, end to end,
one at a time, idle, fan-in, memory, with events, per journal policy.
"""

from __future__ import annotations

import asyncio
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext, suppress
from pathlib import Path
from typing import Any

from quicx.aio import AsyncClient
from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from tools.bench.rig import (
    BENCH_TYPE,
    CREDITS,
    RESULT_WORKERS,
    V2_QUEUES,
    Layout,
    payload_of,
    percentiles,
    rss_growth,
    running,
    status,
    tasks_of,
)
from tools.launcher import (
    DaemonProcess,
    cpu_seconds,
    tools_environment,
)


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
    mix: Sequence[Options] | None = None,
) -> float:
    """
    Pipeline C{n} tasks, wait for every DONE; the seconds it took.  With
    C{result_size}, each DONE must carry a result of that many bytes.
    """
    with QuicxClient(address, keep_outcomes=n + 1, protocol=protocol) as client:
        started = time.perf_counter()
        ids = client.submit_many(tasks_of(n, payload, protocol, mix))
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
    mix: Sequence[Options] | None = None,
) -> dict[str, Any]:
    """
    One producer pipelines C{n} tasks; 2 worker processes run them.  With
    C{protocol} 2, the tasks are spread over 4 queues and 3 priorities and
    the workers serve the 4 queues (C{mix}: the options they are dealt in
    turn, L{V2_OPTIONS} unless said: L{V2_DELAYED}, say).  With C{result_size} (version 2: one of
    L{RESULT_WORKERS}), each handler returns a result of that many bytes,
    which reaches the producer.  C{during(daemon)}: a context the timed part
    runs in (a scraper, say).
    """
    worker_args = ("--protocol=1",) if protocol == 1 else (f"--queues={','.join(V2_QUEUES)}",)
    target = RESULT_WORKERS[result_size]
    assert protocol == 2 or not (result_size or mix)
    with running(extra, 2, layout, None, worker_args, target) as (daemon, workers):
        assert workers is not None
        cpu = cpu_seconds(daemon.pid), workers.cpu_seconds(), time.process_time()
        with nullcontext() if during is None else during(daemon):
            seconds = _produce_and_wait(
                daemon.client_address, n, payload_of(payload_size), protocol, result_size, mix
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


CLIENT_LOOPS = ("asyncio", "uvloop")
"""The loops the asyncio client is measured on (uvloop's where installed)."""


def clients_workload(n: int, round_trips: int, rounds: int = 3) -> dict[str, Any]:
    """
    The blocking and the asyncio client side by side, on one daemon with 2
    stock workers, version 2: C{n} pipelined SUBMITs (submits/s), then
    C{round_trips} submit-and-wait one at a time (round trip percentiles);
    C{rounds} rounds, the clients in turn in each (the asyncio client on
    asyncio's loop, and on uvloop's where installed), the medians kept
    (C{<client>_rounds}: each round's rate), with the client's CPU time
    per submit and per round trip (C{cpu_us_per_submit}, C{cpu_us_per_trip}:
    steadier than the rates on a busy machine).
    """
    payload = payload_of(100)
    figures: dict[str, Any] = {"n": n, "round_trips": round_trips, "rounds": rounds}
    runners: dict[str, Callable[..., Any]] = {"asyncio": asyncio.run}
    with suppress(ImportError):
        runners["uvloop"] = importlib.import_module("uvloop").run
    rates: dict[str, list[float]] = {}
    trips: dict[str, list[dict[str, float]]] = {}

    def keep(name: str, rate: float, samples: list[int], cpu: tuple[float, float]) -> None:
        rates.setdefault(name, []).append(rate)
        per_submit, per_trip = cpu[0] / n * 1e6, cpu[1] / max(round_trips, 1) * 1e6
        trip = {
            **percentiles(samples),
            "cpu_us_per_submit": per_submit,
            "cpu_us_per_trip": per_trip,
        }
        trips.setdefault(name, []).append(trip)

    with running(workers=2, layout=None) as (daemon, _):
        address = daemon.client_address

        def blocking() -> None:
            with QuicxClient(address) as client:
                client.submit_many((BENCH_TYPE, payload) for _ in range(1000))  # warm-up
                started, cpu = time.perf_counter(), time.process_time()
                client.submit_many((BENCH_TYPE, payload) for _ in range(n))
                rate = n / (time.perf_counter() - started)
                submits_cpu, cpu = time.process_time() - cpu, time.process_time()
                samples = []
                for _ in range(round_trips):
                    started_ns = time.perf_counter_ns()
                    client.submit_and_wait(BENCH_TYPE, payload)
                    samples.append(time.perf_counter_ns() - started_ns)
                trips_cpu = time.process_time() - cpu
            keep("blocking", rate, samples, (submits_cpu, trips_cpu))

        async def asynchronous(name: str) -> None:
            async with AsyncClient(address) as client:
                await client.submit_many((BENCH_TYPE, payload) for _ in range(1000))
                started, cpu = time.perf_counter(), time.process_time()
                await client.submit_many((BENCH_TYPE, payload) for _ in range(n))
                rate = n / (time.perf_counter() - started)
                submits_cpu, cpu = time.process_time() - cpu, time.process_time()
                samples = []
                for _ in range(round_trips):
                    started_ns = time.perf_counter_ns()
                    await client.submit_and_wait(BENCH_TYPE, payload)
                    samples.append(time.perf_counter_ns() - started_ns)
                trips_cpu = time.process_time() - cpu
            keep(name, rate, samples, (submits_cpu, trips_cpu))

        for _ in range(rounds):
            blocking()
            for name, run in runners.items():
                run(asynchronous(name))
    for name, kept in rates.items():
        figures[f"{name}_submits_per_s"] = statistics.median(kept)
        figures[f"{name}_rounds"] = [round(rate) for rate in kept]
        figures[name] = {
            key: statistics.median(trip[key] for trip in trips[name]) for key in trips[name][0]
        }
    return figures


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


def fanin_producer(address: str, connections: int, per_connection: int) -> None:
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


def events_workload(n: int, directory: Path, rounds: int = 3) -> dict[str, Any]:
    """End-to-end throughput with lifecycle events off and on, alternated."""
    rates: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(rounds):
        rates["off"].append(e2e_workload(n)["tasks_per_s"])
        with tempfile.TemporaryDirectory(dir=directory) as events:
            rates["on"].append(e2e_workload(n, extra=[f"--events={events}"])["tasks_per_s"])
    off, on = statistics.median(rates["off"]), statistics.median(rates["on"])
    return {"n": n, "rounds": rates, "median_off": off, "median_on": on, "ratio": on / off}


def fsync_workload(n: int, journal_dir: Path, rounds: int = 3) -> dict[str, Any]:
    """End to end with C{fsync = always} and C{fsync = no}, alternated; the medians' ratio."""
    rates: dict[str, list[float]] = {"always": [], "no": []}
    cpu: dict[str, list[float]] = {"always": [], "no": []}
    for _ in range(rounds):
        for policy in rates:
            path = journal_dir / f"bench-{policy}.journal"
            path.unlink(missing_ok=True)
            ours = e2e_workload(n, extra=[f"--journal={path}", f"--fsync={policy}"])
            path.unlink(missing_ok=True)
            rates[policy].append(ours["tasks_per_s"])
            cpu[policy].append(ours["cpu_us_per_task"]["daemon"])
    median = {policy: statistics.median(rates[policy]) for policy in rates}
    return {
        "n": n,
        "rounds": rounds,
        "tasks_per_s": rates,
        "daemon_cpu_us_per_task": cpu,
        "median": median,
        "ratio": median["always"] / median["no"],
    }


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
