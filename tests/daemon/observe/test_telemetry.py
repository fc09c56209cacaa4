"""
The counts and latencies per queue and task type (quicx.daemon.observe.telemetry),
kept by the core: proven in-process on a fake clock.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from quicx.daemon.observe.telemetry import OTHER, Histogram, Telemetry
from quicx.daemon.queue.core import QueueService
from quicx.documents.latency import LATENCY_BUCKETS, quantile
from quicx.documents.typed import as_json
from quicx.protocol.codec import ErrorCode
from tests.fakes import make_queue, producer_of, submit_to, worker_of


def tallies(queue: QueueService) -> dict[tuple[str, str], dict[str, Any]]:
    return {(t["queue"], t["type"]): t for t in as_json(queue.telemetry.document())["tallies"]}


def test_a_task_counts_its_submit_wait_run_and_outcome_in_its_queue_and_type() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"resize", b"a")
    submit_to(queue, producer.session, b"resize", b"b")
    submit_to(queue, producer.session, b"email", b"c")
    clock.advance(0.2)  # queued 0.2 s
    worker = worker_of(queue)
    clock.advance(3.0)  # runs 3 s
    queue.done(worker.session, 1)  # the next, 2, waited 3.2 s
    clock.advance(0.004)
    queue.failed(worker.session, 2, "no")
    resize = tallies(queue)["default", "resize"]
    assert (resize["submitted"], resize["done"], resize["failed"]) == (2, 1, 1)
    wait, run = resize["wait"], resize["run"]
    assert isinstance(wait, dict) and isinstance(run, dict)
    assert wait["counts"][LATENCY_BUCKETS.index(0.25)] == 1  # 0.2 s
    assert wait["counts"][LATENCY_BUCKETS.index(5.0)] == 1  # 3.2 s
    assert run["counts"][LATENCY_BUCKETS.index(5.0)] == 1  # 3 s
    assert run["counts"][LATENCY_BUCKETS.index(0.005)] == 1  # 4 ms
    assert abs(run["sum"] - 3.004) < 1e-6
    email = tallies(queue)["default", "email"]
    # Dispatched, not reported yet: its wait counts with its run, when it reports.
    assert (email["submitted"], email["done"], sum(email["wait"]["counts"])) == (1, 0, 0)


def test_types_past_max_types_count_as_other_and_pairs_past_max_series_as_queue_other() -> None:
    queue = make_queue(telemetry=Telemetry(max_types=2, max_series=3))
    producer = producer_of(queue)
    for task_type in (b"a", b"b", b"c", b"d"):
        submit_to(queue, producer.session, task_type, b"")
    assert {k: t["submitted"] for k, t in tallies(queue).items()} == {
        ("default", "a"): 1,
        ("default", "b"): 1,
        ("default", OTHER): 2,
    }
    # Past max_series, every new pair counts in one tally: queue other, type other.
    submit_to(queue, producer.session, b"a", b"", "mail")
    submit_to(queue, producer.session, b"b", b"", "mail")
    labels = [(t.queue, t.task_type) for t in queue.telemetry.tallies.values()]
    assert labels.count((OTHER, OTHER)) == 1 and len(labels) == 4
    assert tallies(queue)[OTHER, OTHER]["submitted"] == 2


def test_pairs_of_a_type_counted_as_other_count_against_max_series_too() -> None:
    """
    Each new queue given a type past max_types made a (queue, other) pair of
    its own, past max_series: 8,000 queues, 8,006 tallies and +19 MiB.
    """
    queue = make_queue(telemetry=Telemetry(max_types=1, max_series=3))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"a", b"")
    for n in range(50):
        submit_to(queue, producer.session, b"b", b"", f"queue{n}")
    assert {k: t["submitted"] for k, t in tallies(queue).items()} == {
        ("default", "a"): 1,
        ("queue0", OTHER): 1,
        ("queue1", OTHER): 1,
        (OTHER, OTHER): 48,
    }
    # An existing pair of other still counts in its own tally.
    submit_to(queue, producer.session, b"c", b"", "queue0")
    assert tallies(queue)["queue0", OTHER]["submitted"] == 2
    assert len(queue.telemetry.tallies) == 4


def test_rejections_count_by_error_code() -> None:
    queue = make_queue(allowed_types=frozenset({b"ok"}))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"nope", b"")
    assert queue.telemetry.rejected == {ErrorCode.UNKNOWN_TASK_TYPE.name.lower(): 1}


@given(st.lists(st.floats(0, 4000, allow_nan=False), min_size=1, max_size=200))
def test_a_quantile_lies_in_the_bucket_that_holds_it(samples: list[float]) -> None:
    histogram = Histogram()
    for sample in samples:
        histogram.observe(sample)
    assert histogram.count == len(samples)
    ordered = sorted(samples)
    bounds = (0.0, *LATENCY_BUCKETS)
    for fraction in (0.5, 0.9, 0.99):
        estimate = quantile(histogram.counts, fraction)
        assert estimate is not None
        exact = ordered[max(0, math.ceil(len(ordered) * fraction) - 1)]
        bucket = bisect_left(LATENCY_BUCKETS, exact)
        if bucket == len(LATENCY_BUCKETS):  # past the last bound: answered with it
            assert estimate == LATENCY_BUCKETS[-1]
        else:
            assert bounds[bucket] - 1e-9 <= estimate <= LATENCY_BUCKETS[bucket] + 1e-9
    assert quantile(Histogram().counts, 0.5) is None


def test_types_that_are_not_utf8_never_share_a_label() -> None:
    """b"\\xff" and b"\\xfe" both decode to U+FFFD: the second counts as other."""
    queue = make_queue()
    producer = producer_of(queue)
    for task_type in (b"\xff", b"\xfe", b"\xfe", b"ok"):
        submit_to(queue, producer.session, task_type, b"")
    labels = [(t.queue, t.task_type) for t in queue.telemetry.tallies.values()]
    assert len(labels) == len(set(labels))
    assert {k: t["submitted"] for k, t in tallies(queue).items()} == {
        ("default", "\N{REPLACEMENT CHARACTER}"): 1,
        ("default", OTHER): 2,
        ("default", "ok"): 1,
    }
