"""
The memory bound under abuse: C{python -m tools.bench abuse} (C{--quick}:
smaller counts).  Not part of the test run.

The abuse of issue 30's items 1, 2, 3, 4 and 9, one after the other, each
against a daemon of its own with the built-in settings, the dashboard and
C{/metrics} on (every listener on an ephemeral port of 127.0.0.1, its files
in a temporary directory).  For each: the daemon's resident memory (C{VmRSS}) before,
at its peak during, and after, each beside the bound docs/operations.md
("Memory") gives for the daemon's own status document at that moment
(L{documented_bound}), and whether any reading went over.
"""

from __future__ import annotations

import errno
import selectors
import socket
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attrs import define, field

from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.daemon.control import fetch_status
from quicx.protocol import admin, codec, link, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser
from tools.launcher import DaemonProcess, rss

MiB = 1 << 20

# -- the bound (docs/operations.md, "Memory") ------------------------------------------

FIXED = 56 * MiB
"""Python, Twisted, OpenSSL, with an empty pool."""
SLACK = 20 * MiB
"""What the allocators keep after churn (up to 20 MiB measured: docs/operations.md, "Memory")."""
PER_TASK = 550
PER_CONNECTION = 2048
MAX_OUTPUT_BUFFER = 1 << 20
"""[limits] max_output_buffer, the default."""
LARGEST_FRAME = 6 + 2 + 64 + (1 << 20)
"""The longest frame the defaults accept: a PUBLISH of [shared] max_size (1 MiB)."""
PER_OUTCOME = 470
PER_WAIT = 580
PER_GROUP = 180
PER_TALLY = 12 * 1024
"""A (queue, task type) tally, at most [metrics] max_series + 1 of them: 4 KiB
its own, 8 KiB what the allocators keep of the /metrics texts it was in."""
PER_TALLY_BUILT = 25 * 1024
PER_TALLY_SENT = 4 * 1024
"""A tally's share of the /metrics text being built (one at a time), and of
each text being sent (at most [metrics] max_scrapes)."""
PER_HTTP_CONNECTION = 20 * 1024
"""A dashboard or /metrics connection, with the request header it may be receiving."""
WEB_MAX_CONNECTIONS = 64
METRICS_MAX_CONNECTIONS = 16
METRICS_MAX_SCRAPES = 8
"""[web] max_connections, [metrics] max_connections and max_scrapes, the defaults."""
TASK_HISTORY_BYTES = 8 * MiB
"""[web] task_history_bytes, the default: the dashboard's history of finished tasks."""


def documented_bound(
    status: dict[str, Any], http_connections: int = 0, scrapes: int = 0, dashboard: bool = False
) -> int:
    """
    docs/operations.md, "Memory": the daemon's RSS never exceeds this, for
    its C{status} document, with C{http_connections} dashboard and
    C{/metrics} connections at most (their caps, where those listen),
    C{scrapes} of C{/metrics} being answered, and the C{dashboard} on (its
    history of finished tasks).
    """
    tallies = len(status["telemetry"]["tallies"])
    tasks, connections = status["tasks"], status["connections"]
    live = tasks["queued"] + tasks["running"]
    return (
        FIXED
        + status["memory"]["total"]
        + PER_TASK * live
        + (PER_CONNECTION + MAX_OUTPUT_BUFFER + LARGEST_FRAME) * connections["total"]
        + SLACK
        + status["shared"]["bytes"]
        + PER_OUTCOME * status["results"]["kept"]
        + PER_WAIT * status["results"]["waiters"]
        + PER_GROUP * status["groups"]["total"]
        + PER_TALLY * tallies
        + (PER_TALLY_BUILT + PER_TALLY_SENT * scrapes) * tallies * (scrapes > 0)
        + PER_HTTP_CONNECTION * http_connections
        + TASK_HISTORY_BYTES * dashboard
    )


# -- readings ------------------------------------------------------------------------


@define
class Reading:
    rss: int
    bound: int


@define
class Scenario:
    """One abuse's readings: before, every one during, after; and what it found."""

    name: str
    before: Reading
    during: list[Reading] = field(factory=list)
    after: Reading | None = None
    notes: list[str] = field(factory=list)

    @property
    def peak(self) -> Reading:
        return max([self.before, *self.during], key=lambda r: r.rss)

    @property
    def over(self) -> bool:
        readings = [self.before, *self.during, *([self.after] if self.after else [])]
        return any(r.rss > r.bound for r in readings)

    def as_dict(self) -> dict[str, Any]:
        after = self.after or self.before
        return {
            "scenario": self.name,
            "rss_before": self.before.rss,
            "bound_before": self.before.bound,
            "rss_peak": self.peak.rss,
            "bound_peak": self.peak.bound,
            "rss_after": after.rss,
            "bound_after": after.bound,
            "readings": len(self.during),
            "over": self.over,
            "notes": self.notes,
        }


class Target:
    """The daemon under abuse: its readings, and its ports."""

    def __init__(self, daemon: DaemonProcess) -> None:
        self.daemon = daemon
        self.web_port = daemon.announced_port("dashboard")
        self.metrics_port = daemon.announced_port("metrics")
        self.scrapes = 0  # of /metrics, under way

    def status(self) -> dict[str, Any]:
        return fetch_status(str(self.daemon.control_path))

    def read(self) -> Reading:
        """The RSS beside the bound for the status just fetched."""
        status = self.status()
        http = WEB_MAX_CONNECTIONS + METRICS_MAX_CONNECTIONS
        bound = documented_bound(status, http, self.scrapes, dashboard=True)
        return Reading(rss(self.daemon.pid), bound)

    @contextmanager
    def scenario(self, name: str) -> Iterator[Scenario]:
        """
        A scenario's readings: one before, one every 50 ms while in use (on a
        thread, and whenever the scenario asks), one once its connections
        have gone.
        """
        self.settle()
        scenario = Scenario(name, self.read())
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.05):
                scenario.during.append(self.read())

        thread = threading.Thread(target=sample, name="sampler", daemon=True)
        thread.start()
        try:
            yield scenario
        finally:
            stop.set()
            thread.join(30)
        self.settle()
        scenario.after = self.read()

    def settle(self, timeout: float = 60.0) -> None:
        """Until no connection is open to the task port (the control socket's are not)."""
        deadline = time.monotonic() + timeout
        while self.status()["connections"]["total"]:
            if time.monotonic() > deadline:
                raise SystemExit("tools.abuse: connections stayed open")
            time.sleep(0.05)


# -- the abuse -------------------------------------------------------------------------


def hello_v2(address: tuple[str, int]) -> tuple[socket.socket, FrameParser]:
    """A version-2 connection, its HELLO answered."""
    sock = socket.create_connection(address, timeout=30)
    sock.sendall(link.encode_hello())
    parser = FrameParser(1 << 24, False, 1 << 24)
    replies(sock, parser, 1)
    return sock, parser


def replies(sock: socket.socket, parser: FrameParser, count: int) -> list[Any]:
    """The next C{count} frames from C{sock}."""
    frames: list[Any] = []
    while len(frames) < count:
        data = sock.recv(1 << 16)
        if not data:
            raise SystemExit(f"tools.abuse: closed after {len(frames)} of {count} replies")
        frames += parser.feed(data)
    return frames


def half_frames(target: Target, scenario: Scenario, bursts: int, connections: int) -> None:
    """Item 1: each connection sends HELLO and most of a 1 MiB PUBLISH, then leaves."""
    hello = codec.frame(codec.MessageType.HELLO)
    most = codec.HEADER.pack(2, 0x24, MiB) + bytes(MiB - 16)
    for _ in range(bursts):
        socks = [socket.create_connection(target.daemon.address) for _ in range(connections)]
        for sock in socks:
            sock.sendall(hello + most)
        scenario.during.append(target.read())
        for sock in socks:
            sock.close()
        target.settle()
        scenario.during.append(target.read())
    scenario.notes.append(f"{bursts} bursts of {connections}")


def other_pairs(target: Target, scenario: Scenario, queues: int) -> None:
    """
    Item 2: C{max_types} task types, then C{queues} queues that each get a
    task of a type past them (counted as C{other}); each task is cancelled,
    so that its queue goes.  Then C{/metrics}.
    """
    batch = 500
    with QuicxClient(target.daemon.client_address, protocol=2) as client:
        types = [(f"type{n}", b"x", Options("abuse-types")) for n in range(50)]
        for task_id in client.submit_many(types):
            assert isinstance(task_id, int), task_id
            client.cancel(task_id)
        for start in range(0, queues, batch):
            tasks = [
                ("type-past-max-types", b"x", Options(f"abuse-q{n}"))
                for n in range(start, min(queues, start + batch))
            ]
            for task_id in client.submit_many(tasks):
                assert isinstance(task_id, int), task_id
                client.cancel(task_id)
    scenario.during.append(target.read())
    target.scrapes = 1
    url = f"http://127.0.0.1:{target.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=30) as reply:
        text = reply.read().decode()
    scenario.during.append(target.read())
    held = held_scrapes(target, scenario, METRICS_MAX_SCRAPES)
    target.scrapes = 0
    pairs = {
        line.split("}")[0]
        for line in text.splitlines()
        if line.startswith("quicx_tasks_submitted_total{")
    }
    status = target.status()
    scenario.notes.append(
        f"{queues:,} queues: {len(status['telemetry']['tallies']):,} tallies,"
        f" {len(pairs):,} pairs in /metrics ({len(text) / MiB:.1f} MiB)"
        f" against max_series = 2,000; {held} scrapers that read nothing at once;"
        f" {len(status['queues'])} queues left"
    )


def held_scrapes(target: Target, scenario: Scenario, count: int) -> int:
    """
    C{count} scrapes of C{/metrics} (one after another) whose scrapers read
    nothing, so that each holds its text: how many got one.
    """
    socks = []
    try:
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", target.metrics_port), timeout=30)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.sendall(b"GET /metrics HTTP/1.1\r\nhost: x\r\n\r\n")
            socks.append(sock)
            # Answered once its first bytes come: the text was built.
            if not sock.recv(64, socket.MSG_PEEK).startswith(b"HTTP/1.1 200"):
                return len(socks) - 1
            scenario.during.append(target.read())
        return len(socks)
    finally:
        for sock in socks:
            sock.close()


def oversized(target: Target, scenario: Scenario, count: int) -> None:
    """Item 3: C{count} SUBMITs too large for any block, each to a new queue; then one that fits."""
    sock, parser = hello_v2(target.daemon.address)
    with sock:
        too_large = b"x" * 1025
        sock.sendall(
            b"".join(
                taskflow.encode_submit(b"t", too_large, taskflow.submit_options(queue=f"big{n}"))
                for n in range(count)
            )
        )
        answers = replies(sock, parser, count)
        refused = sum(
            isinstance(f, Frame) and f.message_type == codec.MessageType.ERROR for f in answers
        )
        scenario.during.append(target.read())
        queues = len(target.status()["queues"])
        sock.sendall(
            taskflow.encode_submit(b"t", b"fits", taskflow.submit_options(queue="after-the-big"))
        )
        (answer,) = replies(sock, parser, 1)
        accepted = isinstance(answer, Frame) and answer.message_type == codec.MessageType.OK
        ok_id = taskflow.decode_ok(answer.payload).task_id if accepted else None
        if ok_id is not None:
            sock.sendall(admin.encode_cancel(ok_id))
            replies(sock, parser, 1)
    scenario.notes.append(
        f"{refused:,} of {count:,} refused, {queues} queues after them;"
        f" then a SUBMIT to a new queue: {'OK' if accepted else answer}"
    )


def idle_http(target: Target, scenario: Scenario, beyond: int) -> None:
    """
    Item 4: as many idle connections as each HTTP listener takes and
    C{beyond} more (answered 503); a producer served meanwhile; then a
    64 MiB POST to C{/metrics}.
    """
    socks: list[socket.socket] = []
    for port, cap in (
        (target.web_port, WEB_MAX_CONNECTIONS),
        (target.metrics_port, METRICS_MAX_CONNECTIONS),
    ):
        socks += [socket.create_connection(("127.0.0.1", port)) for _ in range(cap + beyond)]
    refused = answered(socks, 2 * beyond, b"HTTP/1.1 503 ")
    scenario.during.append(target.read())
    with QuicxClient(target.daemon.client_address, protocol=2) as producer:
        task_id = producer.submit("t", b"x", queue="after-the-idle")
        producer.cancel(task_id)
    scenario.during.append(target.read())
    for sock in socks:
        sock.close()
    status = post_to_metrics(target.metrics_port, 64 * MiB)
    scenario.notes.append(
        f"{WEB_MAX_CONNECTIONS}+{beyond} dashboard, {METRICS_MAX_CONNECTIONS}+{beyond}"
        f" /metrics connections: {refused} answered 503, a producer served;"
        f" a 64 MiB POST to /metrics: {status}"
    )


def answered(socks: list[socket.socket], expected: int, start: bytes) -> int:
    """How many of C{socks} are answered C{start...} (waiting for C{expected}, 30 s at most)."""
    found = 0
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            selector.register(sock, selectors.EVENT_READ)
        deadline = time.monotonic() + 30
        while found < expected and time.monotonic() < deadline:
            for key, _ in selector.select(0.5):
                answered = key.fileobj
                assert isinstance(answered, socket.socket)
                selector.unregister(answered)
                found += answered.recv(1 << 16).startswith(start)
    return found


def post_to_metrics(port: int, size: int) -> str:
    """The status line a POST of C{size} bytes to C{/metrics} gets (its body sent until refused)."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"POST /metrics HTTP/1.1\r\nhost: x\r\ncontent-length: %d\r\n\r\n" % size)
        chunk = bytes(MiB)
        try:
            for _ in range(size // MiB):
                sock.sendall(chunk)
        except OSError as e:
            if e.errno not in (errno.EPIPE, errno.ECONNRESET):
                raise
        try:
            head = sock.recv(1 << 16)
        except ConnectionResetError:
            return "reset before any answer"
    return head.split(b"\r\n")[0].decode() or "closed with no answer"


def floods(target: Target, scenario: Scenario, rounds: int, submits: int) -> None:
    """
    Item 9: C{rounds} of C{submits} pipelined SUBMITs from a producer that
    never reads: it sends until everything is sent or the daemon has stopped
    reading it for a second, then closes.  The RSS after each round.
    """
    flood = wire.encode_submit(b"t", b"x" * 20) * submits
    after = []
    for _ in range(rounds):
        sent = flood_once(target, flood)
        target.settle()
        reading = target.read()
        scenario.during.append(reading)
        after.append(f"{sent * submits // len(flood):,} sent, then {reading.rss / MiB:.1f} MiB")
    scenario.notes.append(f"{rounds} floods of {submits:,}: " + "; ".join(after))


def flood_once(target: Target, flood: bytes) -> int:
    """Bytes of C{flood} sent by a producer that never reads, before it gave up and left."""
    view, sent = memoryview(flood), 0
    with socket.create_connection(target.daemon.address) as sock:
        sock.setblocking(False)
        paused_since = None
        deadline = time.monotonic() + 120
        while sent < len(flood) and time.monotonic() < deadline:
            try:
                sent += sock.send(view[sent : sent + (1 << 20)])
                paused_since = None
                continue
            except BlockingIOError:
                time.sleep(0.01)
            if not target.status()["connections"]["paused"]:
                paused_since = None
            elif paused_since is None:
                paused_since = time.monotonic()
            elif time.monotonic() - paused_since > 1:
                break
    return sent


# -- the run ---------------------------------------------------------------------------


@define
class Counts:
    bursts: int = 4
    burst: int = 150
    queues: int = 8000
    oversized: int = 1000
    beyond: int = 100
    rounds: int = 2
    submits: int = 1_000_000


QUICK = Counts(bursts=2, burst=30, queues=800, oversized=100, beyond=20, submits=100_000)

SCENARIOS: tuple[tuple[str, Callable[[Target, Scenario, Counts], None]], ...] = (
    ("1 half frames", lambda t, s, c: half_frames(t, s, c.bursts, c.burst)),
    ("2 other pairs", lambda t, s, c: other_pairs(t, s, c.queues)),
    ("3 oversized", lambda t, s, c: oversized(t, s, c.oversized)),
    ("4 idle http", lambda t, s, c: idle_http(t, s, c.beyond)),
    ("9 floods", lambda t, s, c: floods(t, s, c.rounds, c.submits)),
)


def abuse_workload(quick: bool = False) -> list[dict[str, Any]]:
    """Every scenario, each against a daemon of its own: their readings (L{Scenario.as_dict})."""
    counts = QUICK if quick else Counts()
    results = []
    for name, run in SCENARIOS:
        with tempfile.TemporaryDirectory(prefix="quicx-abuse-") as directory:
            args = [
                "--metrics-listen=tcp:0:interface=127.0.0.1",
                "--web-listen=tcp:0:interface=127.0.0.1",
                "--web-admin-token=abuse-admin-token",
            ]
            with DaemonProcess(Path(directory), args) as daemon:
                target = Target(daemon)
                with target.scenario(name) as scenario:
                    run(target, scenario, counts)
                results.append(scenario.as_dict())
    return results


def line_of(result: dict[str, Any]) -> str:
    """A scenario's readings in MiB, RSS (bound): before, peak, after; PASS or OVER; notes."""

    def pair(when: str) -> str:
        return f"{result[f'rss_{when}'] / MiB:6.1f} ({result[f'bound_{when}'] / MiB:6.1f})"

    verdict = "OVER" if result["over"] else "PASS"
    return (
        f"before {pair('before')}  peak {pair('peak')}  after {pair('after')} MiB  {verdict}"
        f"  {'; '.join(result['notes'])}"
    )
