"""
Prometheus C{/metrics}: a real daemon on loopback runs a known workload over
raw sockets, and its scrape, read with C{prometheus_client}'s own parser,
says exactly what happened; the collector in-process on a fake clock, for
the histograms' buckets.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from attrs import define, field
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure
from twisted.web.server import Site

from quicx import __version__
from quicx.daemon.observe import metrics
from quicx.daemon.observe.metrics_web import MetricsPage
from quicx.daemon.observe.telemetry import JOURNAL_BUCKETS
from quicx.daemon.queue import pmad
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.shared import SharedData
from quicx.documents.latency import LATENCY_BUCKETS
from quicx.protocol import outcomes, taskflow, wire
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.fakes import make_queue, producer_of, submit_to, worker_of
from tests.peer import Peer
from tools.launcher import DaemonError, DaemonProcess

METRICS = "--metrics-listen=tcp:0:interface=127.0.0.1"

Labels = frozenset[tuple[str, str]]
Scrape = dict[str, dict[Labels, float]]


def parse(text: str) -> Scrape:
    """Every sample of a scrape: by sample name, then by its labels."""
    samples: Scrape = defaultdict(dict)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[sample.name][frozenset(sample.labels.items())] = sample.value
    return samples


def fetch(port: int, path: str = "/metrics") -> tuple[int, str, str]:
    """C{GET path}: the status, the content type and the body."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as reply:
            return reply.status, reply.headers["Content-Type"], reply.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def scrape(port: int) -> Scrape:
    status, content_type, body = fetch(port)
    assert status == 200 and content_type.startswith("text/plain; version="), content_type
    return parse(body)


def series(samples: Scrape, name: str, *keys: str) -> dict[tuple[str, ...], float]:
    """C{name}'s samples, by the values of the labels C{keys}."""
    return {
        tuple(dict(labels)[key] for key in keys): value
        for labels, value in samples.get(name, {}).items()
    }


def one(samples: Scrape, name: str) -> float:
    (value,) = samples[name].values()
    return value


def check_histograms(
    samples: Scrape, name: str, bounds: tuple[float, ...] = LATENCY_BUCKETS
) -> None:
    """Every series of histogram C{name}: buckets C{bounds}, cumulative, up to +Inf (_count)."""
    by_series: dict[Labels, list[tuple[float, float]]] = defaultdict(list)
    for labels, value in samples[f"{name}_bucket"].items():
        bound = dict(labels)["le"]
        by_series[labels - {("le", bound)}].append((float(bound), value))
    assert by_series, name
    for labels, found in by_series.items():
        found.sort()
        assert [bound for bound, _ in found] == [*bounds, float("inf")]
        counts = [count for _, count in found]
        assert counts == sorted(counts), (name, labels, counts)
        assert counts[-1] == samples[f"{name}_count"][labels]
        assert samples[f"{name}_sum"][labels] >= 0


def submit(peer: Peer, task_type: bytes, payload: bytes, **options: object) -> wire.Message:
    return peer.request(
        taskflow.encode_submit(task_type, payload, taskflow.submit_options(**options))
    )


def listening_ports(pid: int) -> set[int]:
    """The TCP ports process C{pid} listens on (from /proc)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = str(fd.readlink()) if fd.is_symlink() else ""
        if target.startswith("socket:["):
            sockets.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in sockets:  # LISTEN
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# -- a real daemon --------------------------------------------------------------------

QUEUED = b"q" * 40
"""The payload of the tasks left queued (a block of the 48-byte class)."""


def test_a_scrape_says_exactly_what_a_known_workload_did(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(METRICS, f"--journal={tmp_path / 'j'}", "--fsync=always")
    port = daemon.announced_port("metrics")
    assert listening_ports(daemon.pid) == {daemon.port, port}
    before = scrape(port)
    once = Backoff(BackoffKind.FIXED, 1, 1)
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as worker,
        Peer(daemon.address) as monitor,
    ):
        assert isinstance(monitor.request(wire.encode_stats()), wire.StatsResponse)
        workload: list[tuple[bytes, bytes, dict[str, Any]]] = [
            *[(b"email", b"ok", {"queue": "mail"})] * 5,
            *[(b"email", b"fail", {"queue": "mail", "retries": 0})] * 2,
            *[(b"resize", b"ok", {"queue": "img"})] * 4,
            (b"resize", b"fail", {"queue": "img", "retries": 1, "backoff": once}),
            *[(b"email", QUEUED, {"queue": "later", "priority": 7})] * 3,
            *[(b"email", QUEUED, {"queue": "later", "priority": 2})] * 2,
        ]
        for task_type, payload, options in workload:
            assert isinstance(submit(producer, task_type, payload, **options), taskflow.Ok)
        too_large = submit(producer, b"email", b"x" * 2000, queue="mail")
        assert (
            isinstance(too_large, wire.Error) and too_large.code == wire.ErrorCode.PAYLOAD_TOO_LARGE
        )
        worker.send(taskflow.encode_ready(20, ["mail", "img"]))
        deliveries = 0
        while deliveries < 13:  # 7 in mail; 5 in img, one of them twice
            task = worker.receive()
            assert isinstance(task, taskflow.Task), task
            deliveries += 1
            if task.payload == b"ok":
                worker.send(outcomes.encode_ack(task.task_id, task.token))
            else:
                worker.send(outcomes.encode_nack(task.task_id, task.token, "no"))
        reports = [type(producer.receive()).__name__ for _ in range(13)]
        assert sorted(reports) == ["Done"] * 9 + ["Failed"] * 3 + ["Retrying"]
        assert worker.nothing_for(0.1)
        samples = scrape(port)

    outcomes_by = series(samples, "quicx_tasks_finished_total", "queue", "type", "outcome")
    assert {k: v for k, v in outcomes_by.items() if v} == {
        ("mail", "email", "done"): 5,
        ("mail", "email", "failed"): 2,
        ("img", "resize", "done"): 4,
        ("img", "resize", "dead"): 1,
    }
    assert len(outcomes_by) == 3 * 5  # every outcome of every (queue, type), zeros too
    assert series(samples, "quicx_tasks_submitted_total", "queue", "type") == {
        ("mail", "email"): 7,
        ("img", "resize"): 5,
        ("later", "email"): 5,
    }
    assert series(samples, "quicx_tasks_retried_total", "queue", "type")["img", "resize"] == 1
    assert sum(series(samples, "quicx_tasks_retried_total", "queue", "type").values()) == 1
    assert sum(series(samples, "quicx_tasks_requeued_total", "queue", "type").values()) == 0
    assert series(samples, "quicx_tasks_rejected_total", "code") == {("payload_too_large",): 1}

    # Each delivery waited, then ran: one observation each, in its queue and type.
    for name in ("quicx_task_wait_seconds", "quicx_task_run_seconds"):
        check_histograms(samples, name)
        assert series(samples, f"{name}_count", "queue", "type") == {
            ("mail", "email"): 7,
            ("img", "resize"): 6,
            ("later", "email"): 0,
        }

    assert series(samples, "quicx_queue_depth", "queue", "priority") == {
        ("default", "0"): 0,
        ("mail", "0"): 0,
        ("img", "0"): 0,
        ("later", "0"): 0,
        ("later", "2"): 2,
        ("later", "7"): 3,
    }
    for name in ("quicx_queue_delayed", "quicx_queue_running", "quicx_queue_paused"):
        assert set(series(samples, name, "queue").values()) == {0}, name
    assert series(samples, "quicx_queue_dead_letters", "queue")["img",] == 1
    assert series(samples, "quicx_queue_workers", "queue") == {
        ("default",): 0,
        ("mail",): 1,
        ("img",): 1,
        ("later",): 0,
    }
    assert series(samples, "quicx_connections", "role") == {
        ("new",): 1,
        ("producer",): 1,
        ("worker",): 1,
    }
    assert one(samples, "quicx_workers_idle") == 1

    # The pool holds the 5 queued payloads (48-byte class) and the dead one's (16).
    used = {k: v for k, v in series(samples, "quicx_pool_class_used_blocks", "size").items() if v}
    assert used == {("48",): 5, ("16",): 1}
    blocks = series(samples, "quicx_pool_class_blocks", "size")
    assert [int(size) for (size,) in blocks] == [c.size for c in pmad.default_classes()]
    header = pmad.BLOCK_HEADER_SIZE
    grown = one(samples, "quicx_pool_used_bytes") - one(before, "quicx_pool_used_bytes")
    assert grown == 5 * (header + 48) + (header + 16)
    assert one(samples, "quicx_pool_size_bytes") == 8 << 20

    assert one(samples, "quicx_journal_append_seconds_count") > 0
    assert one(samples, "quicx_journal_fsync_seconds_count") > 0  # fsync = always
    check_histograms(samples, "quicx_journal_append_seconds", JOURNAL_BUCKETS)
    assert one(samples, "quicx_journal_file_bytes") > 0
    assert one(samples, "quicx_journal_broken") == 0
    assert series(samples, "quicx_build_info", "version") == {(__version__,): 1}
    assert 0 < time.time() - one(samples, "quicx_start_time_seconds") < 60
    assert one(samples, "quicx_uptime_seconds") > one(before, "quicx_uptime_seconds")

    status, content_type, _ = fetch(port, "/")
    assert status == 404 and content_type.startswith("text/plain")
    assert "GET /metrics" not in daemon.log()  # scrapes are not logged


def test_tasks_waiting_for_others_are_scraped_and_in_quicx_status(start_daemon) -> None:
    daemon = start_daemon(METRICS)
    with Peer(daemon.address) as producer:
        parent = submit(producer, b"p", b"", queue="nobody")
        assert isinstance(parent, taskflow.Ok), parent
        for _ in range(2):
            child = submit(producer, b"c", b"", queue="later", after=(parent.task_id,))
            assert isinstance(child, taskflow.Ok), child
        samples = scrape(daemon.announced_port("metrics"))
    assert one(samples, "quicx_tasks_waiting") == 2
    assert (one(samples, "quicx_checkpoints"), one(samples, "quicx_checkpoints_bytes")) == (0, 0)
    quicx = str(Path(sys.executable).parent / "quicx")
    status = subprocess.run(
        [quicx, "status", "--json", f"--control={daemon.control_path}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["tasks"]["waiting"] == 2


def test_task_types_past_max_types_count_as_other(start_daemon) -> None:
    daemon = start_daemon(METRICS, "--metrics-max-types=2")
    with Peer(daemon.address) as producer:
        for task_type in (b"a", b"b", b"c", b"d", b"c"):
            assert isinstance(producer.submit(task_type, b""), wire.Ok)
        samples = scrape(daemon.announced_port("metrics"))
    assert series(samples, "quicx_tasks_submitted_total", "queue", "type") == {
        ("default", "a"): 1,
        ("default", "b"): 1,
        ("default", "other"): 3,
    }


def test_queues_of_types_counted_as_other_stay_within_max_series(start_daemon) -> None:
    """Each queue given a type past max_types was a pair past max_series: 321 of 50."""
    daemon = start_daemon(METRICS, "--metrics-max-types=1", "--metrics-max-series=5")
    with Peer(daemon.address) as producer:
        assert isinstance(submit(producer, b"a", b""), taskflow.Ok)
        for n in range(30):
            assert isinstance(submit(producer, b"b", b"", queue=f"queue{n}"), taskflow.Ok)
        samples = scrape(daemon.announced_port("metrics"))
    submitted = series(samples, "quicx_tasks_submitted_total", "queue", "type")
    assert len(submitted) == 6  # max_series, and (other, other)
    assert submitted["other", "other"] == 26
    assert sum(submitted.values()) == 31


def test_metrics_are_off_by_default(daemon: DaemonProcess) -> None:
    assert listening_ports(daemon.pid) == {daemon.port}
    assert "metrics on" not in daemon.log()


def test_a_bad_metrics_endpoint_is_one_line_naming_the_key(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path, ["--metrics-listen=bogus:1"])
    with pytest.raises(DaemonError, match="quicx exited with 1") as raised:
        daemon.start()
    assert "quicx: bad listen address 'bogus:1' ([metrics] listen)" in str(raised.value)
    assert "Traceback" not in str(raised.value)


# -- the collector in-process -----------------------------------------------------------


def test_histogram_buckets_are_cumulative_counts_of_each_bound() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"resize", b"p")
    worker = worker_of(queue)
    for task_id, seconds in ((1, 0.003), (2, 0.2), (3, 4000.0)):
        clock.advance(seconds)
        queue.done(worker.session, task_id)
    samples = parse(
        generate_latest(metrics.QuicxCollector(queue, SharedData(queue), None)).decode()
    )
    run = series(samples, "quicx_task_run_seconds_bucket", "le")
    assert run["0.0025",] == 0
    assert run["0.005",] == run["0.1",] == 1
    assert run["0.25",] == run["1800.0",] == 2
    assert run["+Inf",] == 3
    assert one(samples, "quicx_task_run_seconds_sum") == pytest.approx(4000.203)
    # The first waited nothing, the second 3 ms, the third 0.203 s.
    wait = series(samples, "quicx_task_wait_seconds_bucket", "le")
    assert (wait["0.0005",], wait["0.005",], wait["0.25",]) == (1, 2, 3)
    assert "quicx_journal_file_bytes" not in samples  # no journal


class SlowTransport(StringTransport):
    """
    The daemon's side of a scraper's connection: full, as a socket's buffer
    is, once it holds 64 KiB that the scraper has not read (L{read}).
    """

    def write(self, data: bytes) -> None:
        super().write(data)
        if self.producer is not None and len(self.value()) > 1 << 16:
            self.producer.pauseProducing()

    def writeSequence(self, data: Iterable[bytes]) -> None:
        self.write(b"".join(data))

    def read(self) -> bytes:
        """What the scraper reads: all written so far; then the buffer has room again."""
        data = self.value()
        self.clear()
        if self.producer is not None:
            self.producer.resumeProducing()
        return data


@define
class InMemory:
    """
    The metrics page of C{queue} on in-memory connections; the texts it
    builds wait in C{jobs} for L{build} (what the thread does).
    """

    queue: QueueService
    max_scrapes: int = 100
    jobs: list[tuple[Deferred[bytes], Any, tuple[Any, ...]]] = field(factory=list)
    site: Site = field(init=False)

    def __attrs_post_init__(self) -> None:
        collector = metrics.QuicxCollector(self.queue, SharedData(self.queue), None)
        self.site = Site(MetricsPage(collector, self.max_scrapes, self.in_thread))

    def in_thread(self, function: Any, *args: Any) -> Deferred[bytes]:
        self.jobs.append((Deferred(), function, args))
        return self.jobs[-1][0]

    def build(self) -> None:
        done, function, args = self.jobs.pop(0)
        done.callback(function(*args))

    def get(self, version: bytes = b"1.0") -> tuple[SlowTransport, Any]:
        transport = SlowTransport()
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
        channel.makeConnection(transport)
        channel.dataReceived(b"GET /metrics HTTP/%s\r\nHost: x\r\n\r\n" % version)
        return transport, channel


def test_scrapes_that_come_at_once_share_one_snapshot_and_one_text() -> None:
    """
    A scrape that comes while a text is being built gets that text: a flood
    of scrapes (answered or given up) holds one snapshot, not one each.
    """
    page = InMemory(make_queue())
    scrapes = [page.get() for _ in range(50)]
    scrapes[1][1].connectionLost(Failure(ConnectionDone()))  # one gives up
    assert len(page.jobs) == 1
    page.build()
    for index, (transport, _) in enumerate(scrapes):
        answer = transport.value()
        if index == 1:
            assert answer == b""
        else:
            assert answer.startswith(b"HTTP/1.0 200 OK")
            assert b"\nquicx_uptime_seconds " in answer
    page.get()  # one more, once that text is sent: a snapshot of its own
    assert len(page.jobs) == 1


def many_pairs() -> QueueService:
    """A queue core with 500 (queue, type) pairs: a text of about 1.8 MB."""
    queue = make_queue()
    producer = producer_of(queue)
    for n in range(500):
        submit_to(queue, producer.session, b"type%d" % (n % 50), b"", f"queue{n // 50}")
    return queue


def test_a_scraper_that_does_not_read_holds_a_chunk_of_the_text_not_all_of_it() -> None:
    page = InMemory(many_pairs())
    transport, _ = page.get(b"1.1")
    page.build()
    held = len(transport.value())
    assert held < 200_000
    body = transport.read()
    while transport.value():
        body += transport.read()
    assert body.endswith(b"\r\n0\r\n\r\n")  # the chunked body's end: the scrape is answered
    assert len(body) > 1_500_000


def test_a_scraper_that_leaves_in_the_middle_of_the_text_leaves_no_text_behind() -> None:
    """
    The text goes with its scraper, not at the next full collection (the
    tuned collector seldom runs one): 8 scrapers that stopped reading and
    left kept 86 MiB resident at 2,000 pairs (python -m tools.bench abuse).
    """
    page = InMemory(many_pairs())
    transport, channel = page.get(b"1.1")
    built, function, args = page.jobs.pop(0)
    text = function(*args)
    alone = sys.getrefcount(text)
    gc.disable()
    try:
        built.callback(text)
        assert transport.value().startswith(b"HTTP/1.1 200 OK")
        assert sys.getrefcount(text) > alone  # being sent
        channel.connectionLost(Failure(ConnectionDone()))
        assert sys.getrefcount(text) == alone
    finally:
        gc.enable()


def test_past_max_scrapes_one_more_is_answered_503_at_once() -> None:
    """
    Each scrape holds its text until its scraper has taken it: their number
    is bounded, so scrapers that stop reading cannot grow the daemon.
    """
    page = InMemory(many_pairs(), max_scrapes=2)
    slow, _ = page.get(b"1.1")
    page.build()  # its text: it takes 64 KiB of it, then stops reading
    _, gives_up = page.get(b"1.1")
    refused, _ = page.get(b"1.1")
    assert refused.value().startswith(b"HTTP/1.1 503 ")
    assert b"max_scrapes" in refused.value()
    assert len(page.jobs) == 1  # the second's text, not the third's
    gives_up.connectionLost(Failure(ConnectionDone()))  # a slot free again
    while slow.value():
        slow.read()  # the first is taken: another
    answered = [page.get(b"1.1")[0] for _ in range(3)]
    assert answered[2].value().startswith(b"HTTP/1.1 503 ")
    page.build()
    for transport in answered[:2]:
        assert transport.value().startswith(b"HTTP/1.1 200 OK")


@pytest.mark.parametrize("pairs", [0, 1, 99, 100, 101, 250])
def test_a_scrape_s_text_built_in_chunks_is_the_text_built_whole(pairs: int) -> None:
    """
    C{Snapshot.text} builds a few tallies' samples at a time (built whole,
    2,001 tallies took about 75 MiB, kept by the allocators after): the text
    is byte for byte what C{generate_latest} writes of the whole snapshot.
    """
    queue = make_queue(Clock())
    for n in range(pairs):
        tally = queue.telemetry.tally(f"q{n // 7}", f"type{n % 7}".encode())
        tally.submitted, tally.retried, tally.done = n + 1, n % 3, n // 2
        tally.wait.observe(n / 1000)
        tally.run.observe(n / 10)
    queue.telemetry.rejected["0x03"] = 2
    snapshot = metrics.QuicxCollector(queue, SharedData(queue), None).snapshot()
    assert len(snapshot.tallies) == pairs
    whole = generate_latest(snapshot)
    assert snapshot.text() == whole
    assert whole.count(b"# TYPE quicx_task_run_seconds histogram") == 1
