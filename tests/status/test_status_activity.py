"""
What C{quicx status --watch} computes and shows (quicx.status): rates and
latency percentiles between two status documents, the numbers as text, the
refresh schedule, and the plain and JSON output.  The documents are a real
daemon's, built in-process on a fake clock.
"""

from __future__ import annotations

import io
import json
import re
from typing import Any

import pytest
from twisted.internet.testing import MemoryReactorClock

from quicx.daemon import config as configuration
from quicx.daemon.control import StatusUnavailable
from quicx.daemon.service import QuicxDaemon, build_daemon
from quicx.documents.latency import LATENCY_BUCKETS, quantile
from quicx.status.activity import activity, percentiles
from quicx.status.text import NONE, latency, rate
from quicx.status.watch import PLAIN_WIDTH, polled, watch
from tests.fakes import FakePeer, producer_of, submit_to, worker_of


class Daemon:
    """A daemon built in-process on a fake clock, and a producer and a worker of it."""

    def __init__(self) -> None:
        self.reactor = MemoryReactorClock()
        self.daemon: QuicxDaemon = build_daemon(configuration.Config(), self.reactor)
        self.queue = self.daemon.queue
        self.producer = producer_of(self.queue)
        self.worker: FakePeer | None = None

    def submit(self, task_type: bytes, count: int, queue: str | None = None) -> None:
        for _ in range(count):
            submit_to(self.queue, self.producer.session, task_type, b"x", queue=queue)

    def run(self, outcomes: str, seconds: float) -> None:
        """The worker (connected on first use) runs tasks for C{seconds} each: d done, f failed."""
        if self.worker is None:
            self.worker = worker_of(self.queue)
        for outcome in outcomes:
            self.reactor.advance(seconds)
            (task_id,) = self.worker.session.tasks  # the one it holds
            if outcome == "d":
                self.queue.done(self.worker.session, task_id)
            else:
                self.queue.failed(self.worker.session, task_id, "no", permanent=True)

    def status(self) -> dict[str, Any]:
        return self.daemon.status()


@pytest.fixture
def daemon() -> Daemon:
    return Daemon()


def test_rates_are_what_was_counted_between_two_documents_over_their_interval(
    daemon: Daemon,
) -> None:
    daemon.submit(b"resize", 10)
    daemon.run("dd", 0.1)
    earlier = daemon.status()
    daemon.submit(b"resize", 4)
    daemon.submit(b"email", 2, queue="other")
    daemon.run("dddddf", 0.2)
    daemon.reactor.advance(0.8)  # 2 s in all
    later = daemon.status()

    moved = activity(earlier, later)
    assert moved.seconds == pytest.approx(2.0)
    assert not moved.since_start
    overall = moved.overall
    assert (overall.submitted, overall.done, overall.failed) == pytest.approx((3.0, 2.5, 0.5))
    assert [(q.name, q.submitted, q.done, q.moved) for q in moved.queues] == [
        ("default", 2.0, 2.5, 10),
        ("other", 1.0, 0.0, 2),
    ]
    assert [(t.name, t.moved) for t in moved.types] == [("resize", 10), ("email", 2)]
    # Since start: the first document's counts are in too.
    first = activity(None, later)
    assert first.since_start
    assert first.seconds == later["uptime"] == pytest.approx(2.2)
    assert first.overall.submitted * first.seconds == pytest.approx(16)
    assert first.overall.done * first.seconds == pytest.approx(7)


def test_percentiles_are_the_intervals_observations_only(daemon: Daemon) -> None:
    daemon.submit(b"t", 30)
    daemon.run("d" * 10, 3.0)  # runs of 3 s; each next task waited longer
    earlier = daemon.status()
    daemon.run("d" * 10, 0.002)  # runs of 2 ms
    later = daemon.status()

    moved = activity(earlier, later)
    (then,), (now,) = earlier["telemetry"]["tallies"], later["telemetry"]["tallies"]
    runs = [b - a for a, b in zip(then["run"]["counts"], now["run"]["counts"], strict=True)]
    waits = [b - a for a, b in zip(then["wait"]["counts"], now["wait"]["counts"], strict=True)]
    assert sum(runs) == sum(waits) == 10
    assert moved.overall.run == percentiles(runs, LATENCY_BUCKETS)
    assert all(p is not None and 0.001 < p <= 0.0025 for p in moved.overall.run)
    assert moved.overall.wait == tuple(quantile(waits, f) for f in (0.5, 0.95, 0.99))
    since_start = activity(None, later).overall.run
    assert since_start[2] is not None and 2.5 < since_start[2] <= 5.0


def test_no_observations_in_the_interval_have_no_percentiles(daemon: Daemon) -> None:
    daemon.submit(b"t", 3)
    daemon.run("d", 0.5)
    earlier = daemon.status()
    daemon.submit(b"t", 1)  # queued: the worker holds one already
    daemon.reactor.advance(1)
    later = daemon.status()
    moved = activity(earlier, later)
    assert moved.overall.wait == moved.overall.run == (None, None, None)
    assert moved.overall.submitted == 1.0
    assert activity(None, later).overall.run != (None, None, None)


def test_a_document_from_another_daemon_process_counts_from_its_start(daemon: Daemon) -> None:
    daemon.submit(b"t", 5)
    daemon.reactor.advance(5)
    before_restart = daemon.status()
    restarted = Daemon()
    restarted.submit(b"t", 2)
    restarted.reactor.advance(1)
    after = restarted.status()
    assert activity(before_restart, after).since_start  # its uptime went back
    assert activity(before_restart, after).overall.submitted == pytest.approx(2.0)
    another_pid = {**before_restart, "pid": before_restart["pid"] + 1, "uptime": 0.5}
    assert activity(another_pid, after).since_start
    assert not activity({**after, "uptime": 0.5}, after).since_start


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, NONE),
        (0.00025, "250µs"),
        (0.0009997, "1ms"),  # not 1e+03µs
        (0.0123, "12.3ms"),
        (0.9999, "1s"),
        (1.5, "1.5s"),
        (300.0, "5min"),
    ],
)
def test_latencies_show_three_digits_at_most_in_a_unit_that_fits(
    seconds: float | None, shown: str
) -> None:
    assert latency(seconds) == shown


@pytest.mark.parametrize(
    ("per_second", "shown"),
    [(0.0, "0"), (0.04, "0.0"), (2.25, "2.2"), (9.96, "10"), (1234.5, "1,234"), (1e6, "1,000,000")],
)
def test_rates_have_a_decimal_when_small_and_separators_when_large(
    per_second: float, shown: str
) -> None:
    assert rate(per_second) == shown


class FakeTime:
    """A clock that only sleeping (or a slow fetch) moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(round(seconds, 9))
        self.now += seconds


def test_fetches_keep_to_a_fixed_schedule_and_a_slow_one_moves_it() -> None:
    time = FakeTime()
    fetch_seconds = iter([0.25, 0.25, 1.5, 0.25, 0.25])

    def fetch() -> dict[str, Any]:
        started = time.now
        time.now += next(fetch_seconds)
        return {"at": started}

    fetched = [d["at"] for d in polled(fetch, 1.0, 5, time.sleep, lambda: time.now)]
    assert fetched == [0.0, 1.0, 2.0, 3.5, 4.5]
    assert time.slept == [0.75, 0.75, 0.75]
    assert list(polled(fetch, 1.0, 0, time.sleep, lambda: time.now)) == []


def flowing(daemon: Daemon, time: FakeTime) -> Any:
    """A sleep during which tasks are submitted and run, on the daemon's clock too."""

    def sleep(seconds: float) -> None:
        time.sleep(seconds)
        daemon.submit(b"resize", 20)
        daemon.run("d" * 8, seconds / 8)

    return sleep


def test_plain_output_is_a_block_per_refresh_with_no_escape_codes(daemon: Daemon) -> None:
    time = FakeTime()
    out = io.StringIO()
    daemon.submit(b"resize", 3)
    watch(daemon.status, out, 1.0, 3, sleep=flowing(daemon, time), clock=lambda: time.now)
    text = out.getvalue()
    assert "\x1b" not in text
    assert max(len(line) for line in text.splitlines()) <= PLAIN_WIDTH
    first, second, last = re.split(r"^(?=Quicx )", text, flags=re.MULTILINE)[1:]
    assert [block.splitlines()[0].split("   ")[-1] for block in (first, second, last)] == [
        "tasks per second since start",
        "tasks per second over the last 1.0 s",
        "tasks per second over the last 1.0 s",
    ]
    assert all(block.endswith("\n\n") for block in (first, second, last))

    def overall(block: str) -> list[str]:
        return next(line.split()[1:] for line in block.splitlines() if line.startswith("all "))

    assert overall(first) == ["0", "0", "0", *[NONE] * 6]
    # 20 submitted and 8 done in the second; the runs of 0.125 s are in the
    # bucket of 0.1 to 0.25 s: their median is its middle.
    assert overall(last)[:3] == ["20", "8.0", "0"]
    assert overall(last)[6] == "175ms"
    assert "queue default" in last and "type resize" in last
    assert "workers 1 (0 idle)   connections 2" in last


def test_json_output_is_a_document_per_line(daemon: Daemon) -> None:
    time = FakeTime()
    out = io.StringIO()
    watch(daemon.status, out, 0.5, 2, as_json=True, sleep=time.sleep, clock=lambda: time.now)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert [json.loads(line)["format"] for line in lines] == ["quicx-status/1"] * 2


def test_a_failed_fetch_ends_the_watch_after_what_was_shown(daemon: Daemon) -> None:
    time = FakeTime()
    answers = [daemon.status(), daemon.status()]

    def fetch() -> dict[str, Any]:
        if not answers:
            raise StatusUnavailable("no daemon answers")
        return answers.pop(0)

    out = io.StringIO()
    with pytest.raises(StatusUnavailable):
        watch(fetch, out, 1.0, None, sleep=time.sleep, clock=lambda: time.now)
    assert out.getvalue().count("tasks per second") == 2
