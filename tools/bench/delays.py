"""
The delays workloads: tasks due all at once, one at a time on an idle
daemon, and the memory a delayed task takes.
"""

from __future__ import annotations

import json
import math
import select
import selectors
import socket
import subprocess
import sys
import time
from typing import IO, Any

from quicx.clients.address import CLIENT_MAX_LENGTH, parse_address
from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.protocol import codec, link, outcomes, taskflow
from quicx.protocol.frames import Frame, FrameParser
from tools.bench.rig import (
    alike,
    payload_of,
    quantile,
    rss_growth,
    running,
    status,
    wait_for_workers,
)
from tools.launcher import (
    stop_all,
    tools_environment,
)

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


def delays_worker(address: str, connections: int, n: int) -> None:
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
