"""
The workloads that watch the daemon: monitor queries against a deep queue,
end to end with /metrics, the dashboard and WATCH in use.
"""

from __future__ import annotations

import http.client
import socket
import statistics
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

from quicx.clients.address import CLIENT_MAX_LENGTH
from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.protocol import admin, codec, link
from quicx.protocol.frames import Frame, FrameParser
from tools.bench.rig import (
    BENCH_TYPE,
    SMALL_RESULT_SIZE,
    V2_DELAYED,
    V2_EXPIRING,
    running,
)
from tools.bench.throughput import e2e_workload
from tools.launcher import (
    DaemonProcess,
)


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


V2_FEATURES = (
    "v1",
    "v2",
    "v2 delayed",
    "v2 results",
    "v2 watched",
    "v2 expiring",
    "v2 observed",
)
"""The version-2 comparison's runs: version 1, then version 2 (4 queues x
3 priorities) plain, with every task delayed, with a 16-byte result each,
with a live events subscriber, with a deadline to start on every task, with
/metrics and the dashboard served and read."""


def v2_features_workload(n: int, rounds: int = 3) -> dict[str, Any]:
    """Every run of L{V2_FEATURES}, alternated, C{rounds} times."""
    runs: dict[str, Callable[[], dict[str, Any]]] = {
        "v1": lambda: e2e_workload(n, protocol=1),
        "v2": lambda: e2e_workload(n, protocol=2),
        "v2 delayed": lambda: e2e_workload(n, protocol=2, mix=V2_DELAYED),
        "v2 results": lambda: e2e_workload(n, protocol=2, result_size=SMALL_RESULT_SIZE),
        "v2 watched": lambda: e2e_workload(n, protocol=2, during=Watcher()),
        "v2 expiring": lambda: e2e_workload(n, protocol=2, mix=V2_EXPIRING),
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
