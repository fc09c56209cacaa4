"""
The dashboard's history (quicx.daemon.observe.web.history): a sample a second of
the core's figures, rates and that second's latency percentiles, in a ring
bounded by [web] history.  In-process, on a L{task.Clock}.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from quicx.daemon.observe.web.history import FIELDS, History, Sample
from quicx.daemon.periodic import every
from quicx.documents.latency import LATENCY_BUCKETS
from tests.fakes import make_queue, producer_of, submit_to, worker_of


def test_the_first_call_sets_the_start_and_each_next_one_samples_rates_and_counts() -> None:
    clock = Clock()
    queue = make_queue(clock)
    history = History(queue, 60)
    assert history.sample() is None and history.latest is None
    producer = producer_of(queue)
    for n in range(6):
        submit_to(queue, producer.session, b"t", b"%d" % n)
    clock.advance(2.0)
    sample = history.sample()
    assert isinstance(sample, Sample)
    assert (sample.submitted, sample.submitted_rate, sample.done_rate) == (6, 3.0, 0.0)
    assert (sample.queued, sample.running, sample.workers, sample.connections) == (6, 0, 0, 1)
    assert sample.pool_used == queue.pool.bytes_used
    assert (sample.wait_p50, sample.run_p95) == (None, None)  # nothing was dispatched

    worker = worker_of(queue)  # takes task 1 now: it waited 2 s
    clock.advance(0.004)
    queue.done(worker.session, 1)  # ran 4 ms; task 2 is sent at once
    queue.failed(worker.session, 2, "no")  # ran 0 s
    clock.advance(0.996)
    sample = history.sample()
    assert isinstance(sample, Sample)
    assert (sample.done, sample.failed, sample.done_rate, sample.failed_rate) == (1, 1, 1.0, 1.0)
    assert (sample.queued, sample.running, sample.workers) == (3, 1, 1)
    # Tasks 1 to 3 waited 2 s (the 2.5 s bucket); 1 ran 4 ms (the 5 ms bucket), 2 no time.
    assert sample.wait_p50 is not None and 1.0 < sample.wait_p50 <= 2.5
    assert sample.run_p50 == LATENCY_BUCKETS[0]
    assert sample.run_p95 is not None and 0.0025 < sample.run_p95 <= 0.005
    assert history.latest is sample


def test_percentiles_are_of_that_second_only() -> None:
    clock = Clock()
    queue = make_queue(clock)
    history = History(queue, 60)
    history.sample()
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"slow")
    clock.advance(20.0)
    queue.done(worker.session, 1)
    slow = history.sample()
    submit_to(queue, producer.session, b"t", b"fast")
    clock.advance(0.0004)
    queue.done(worker.session, 2)
    clock.advance(0.9996)
    fast = history.sample()
    assert slow is not None and fast is not None
    assert slow.run_p50 is not None and slow.run_p50 > 10.0
    assert fast.run_p50 is not None and fast.run_p50 <= LATENCY_BUCKETS[0]
    assert fast.wait_p95 is not None and fast.wait_p95 <= LATENCY_BUCKETS[0]


def test_a_timer_samples_every_second_into_a_ring_of_history_seconds() -> None:
    clock = Clock()
    queue = make_queue(clock)
    history = History(queue, 3)
    heard: list[Sample] = []
    history.listen(heard.append)
    timer = every(1.0, history.sample, clock)
    timer.startService()
    producer = producer_of(queue)
    for _ in range(5):
        submit_to(queue, producer.session, b"t", b"")
        clock.advance(1.0)
    timer.stopService()
    assert [s.submitted for s in heard] == [1, 2, 3, 4, 5]
    assert list(history.samples) == heard[-3:]
    document = history.as_dict()
    assert document["seconds"] == 3 and document["fields"] == list(FIELDS)
    assert [dict(zip(FIELDS, row, strict=True)) for row in document["rows"]] == [
        s.as_dict() for s in heard[-3:]
    ]


def test_no_history_keeps_no_samples_but_the_latest() -> None:
    clock = Clock()
    history = History(make_queue(clock), 0)
    history.sample()
    clock.advance(1.0)
    sample = history.sample()
    assert sample is not None and history.latest is sample
    assert not history.samples
