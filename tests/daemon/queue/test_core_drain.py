"""
Draining the queue core for a graceful stop: SUBMITs are refused, and the
drain fires once nothing is queued or running (or no worker is left to run
what is queued), or at its timeout, or when told to stop waiting.
"""

from __future__ import annotations

from typing import cast

from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher

from quicx.protocol import wire
from tests.fakes import make_queue, producer_of, submit_to, worker_of


def test_a_drain_with_nothing_left_fires_at_once() -> None:
    clock = Clock()
    queue = make_queue(clock)
    worker_of(queue)
    drained = queue.drain(60, clock)
    assert drained.called and queue.draining
    assert clock.getDelayedCalls() == [], "its timeout is cancelled"


def test_a_drain_fires_when_the_last_task_is_reported() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker = worker_of(queue, credits=2)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    drained = queue.drain(60, clock)
    queue.done(worker.session, 1)
    queue.done(worker.session, 2)
    assert not drained.called, "task 3 is still running"
    queue.failed(worker.session, 3, "no")
    assert drained.called
    assert producer.take()[-3:] == [wire.Done(1), wire.Done(2), wire.Failed(3, "no")]


def test_a_drain_with_tasks_queued_and_no_worker_fires_at_once() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    assert queue.drain(60, clock).called, "no worker can come: the listeners are closed"


def test_a_drain_fires_when_the_last_worker_leaves_with_tasks() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    submit_to(queue, producer.session, b"t", b"y")
    drained = queue.drain(60, clock)
    assert not drained.called
    worker.disconnect()
    assert drained.called and queue.stats().queue_depth == 2


def test_a_drain_fires_at_its_timeout_whatever_is_left() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    drained = queue.drain(30, clock)
    clock.advance(29.9)
    assert not drained.called
    clock.advance(0.1)
    assert drained.called and queue.tasks_running == 1


def test_stop_draining_fires_now_and_only_once() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    fired: list[None] = []
    queue.drain(30, clock).addCallback(fired.append)
    queue.stop_draining()
    assert fired == [None] and clock.getDelayedCalls() == []
    queue.done(worker.session, 1)  # would finish the drain: it is over already
    queue.stop_draining()
    assert fired == [None]


def test_a_drain_fires_when_a_timed_out_task_is_given_up() -> None:
    clock = Clock()
    queue = make_queue(clock, task_timeout=5.0, max_attempts=1)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    drained = queue.drain(60, clock)
    clock.advance(5)
    queue.expire_overdue()
    assert drained.called
    assert worker.session.overdue, "its worker still runs a copy: no matter"


def test_a_drain_does_not_wait_for_a_queue_no_worker_serves() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")  # default: the worker runs it
    submit_to(queue, producer.session, b"t", b"y", queue="mail")  # nobody serves mail
    drained = queue.drain(30, clock)
    assert not drained.called, "task 1 is running"
    queue.done(worker.session, 1)
    assert drained.called, "only mail's task is left, and no worker serves mail"


def test_a_drain_does_not_wait_for_a_paused_queue() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    queue.set_paused("default", True)
    submit_to(queue, producer.session, b"t", b"y")
    drained = queue.drain(30, clock)
    queue.done(worker.session, 1)
    assert drained.called, "task 2 waits for a resume that will not come"


def test_a_stop_without_a_journal_counts_the_delayed_tasks_it_drops() -> None:
    queue = make_queue(Clock())
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    submit_to(queue, producer.session, b"t", b"y", delay_ms=60_000)
    said: list[str] = []

    def observe(event: dict) -> None:
        if event.get("log_id") == "daemon.stopped" and event["log_level"] >= LogLevel.warn:
            said.append(event["log_format"].format(**event))

    globalLogPublisher.addObserver(cast(ILogObserver, observe))
    try:
        queue.startService()
        queue.stopService()
    finally:
        globalLogPublisher.removeObserver(cast(ILogObserver, observe))
    assert said == [
        "stopping with 1 queued, 1 delayed and 0 running tasks; without a journal they are dropped"
    ]
