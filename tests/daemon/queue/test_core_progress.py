"""
Progress reports in the queue core on a L{task.Clock}: forwarded in order to
a producer that asked, throttled to one per interval with the latest held,
dropped once the task's outcome is decided, and fenced like TOUCH.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue import introspect
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import ProgressSettings
from quicx.protocol import outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of

START = 1_800_000_000.0


def started(
    interval: float = 0.1, max_message: int = 16, task_timeout: float = 0.0
) -> tuple[Clock, QueueService]:
    clock = Clock()
    clock.advance(START)
    settings = ProgressSettings(interval, max_message)
    return clock, make_queue(clock, progress=settings, task_timeout=task_timeout)


def running(queue: QueueService, progress: bool = True) -> tuple[FakePeer, FakePeer, taskflow.Task]:
    """A producer, a worker, and the task the producer submitted (with the progress option)."""
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    submit_to(queue, producer.session, b"t", b"x", progress=progress)
    assert producer.take() == [taskflow.Ok(1)]
    (task,) = worker.take()
    return producer, worker, task


def report(
    queue: QueueService, worker: FakePeer, task: taskflow.Task, fraction: int, text: str
) -> None:
    queue.report_progress(worker.session, task.task_id, task.token, fraction, text)


def heard(producer: FakePeer) -> list[tuple[int, str]]:
    """The (fraction, message) of each PROGRESS the producer got since the last call."""
    messages = producer.take()
    assert all(isinstance(m, outcomes.Progress) for m in messages), messages
    return [(m.fraction, m.message) for m in messages]


def test_reports_reach_the_producer_unchanged_in_order_and_before_the_outcome() -> None:
    clock, queue = started()
    producer, worker, task = running(queue)
    for step in range(1, 4):
        report(queue, worker, task, step * 2500, f"step {step}")
        clock.advance(0.1)
    assert producer.take() == [
        outcomes.Progress(task.task_id, task.token, step * 2500, f"step {step}")
        for step in range(1, 4)
    ]
    queue.ack(worker.session, task.task_id, task.token)
    assert producer.take() == [taskflow.Done(task.task_id)]


def test_a_producer_that_did_not_ask_hears_no_progress_but_inspect_shows_the_last() -> None:
    clock, queue = started(max_message=256)
    producer, worker, task = running(queue, progress=False)
    report(queue, worker, task, 1000, "started")
    clock.advance(0.5)
    report(queue, worker, task, 4000, "resized 40 of 100")
    clock.advance(1)
    assert producer.take() == []
    shown = introspect.inspect(queue, task.task_id)
    assert shown["progress"] == {"fraction": 0.4, "message": "resized 40 of 100", "at": START + 0.5}
    queue.ack(worker.session, task.task_id, task.token)
    assert producer.take() == [taskflow.Done(task.task_id)]


def test_reports_sooner_than_the_interval_are_held_and_the_latest_goes_at_its_end() -> None:
    clock, queue = started(interval=0.1)
    producer, worker, task = running(queue)
    report(queue, worker, task, 100, "a")
    assert heard(producer) == [(100, "a")]
    clock.advance(0.01)
    report(queue, worker, task, 200, "b")
    clock.advance(0.04)
    report(queue, worker, task, 300, "c")
    clock.advance(0.049)
    assert heard(producer) == []
    assert queue.progress.coalesced == 1
    clock.advance(0.001)
    # At the interval's end, the latest held report; the replaced one never.
    assert heard(producer) == [(300, "c")]
    # The next interval counts from that one.
    clock.advance(0.05)
    report(queue, worker, task, 400, "d")
    clock.advance(0.049)
    assert heard(producer) == []
    clock.advance(0.001)
    assert heard(producer) == [(400, "d")]
    # A report after a quiet interval goes at once.
    clock.advance(0.3)
    report(queue, worker, task, 500, "e")
    assert heard(producer) == [(500, "e")]
    assert queue.progress.coalesced == 1


def test_an_interval_of_zero_sends_every_report() -> None:
    _, queue = started(interval=0)
    producer, worker, task = running(queue)
    for fraction in range(5):
        report(queue, worker, task, fraction, "")
    assert heard(producer) == [(fraction, "") for fraction in range(5)]


@pytest.mark.parametrize("outcome", ["ack", "nack"])
def test_a_held_report_is_dropped_when_the_task_finishes_first(outcome: str) -> None:
    clock, queue = started()
    producer, worker, task = running(queue)
    report(queue, worker, task, 100, "a")
    clock.advance(0.01)
    report(queue, worker, task, 9000, "almost")
    if outcome == "ack":
        queue.ack(worker.session, task.task_id, task.token)
        final: taskflow.Done | wire.Failed = taskflow.Done(task.task_id)
    else:
        queue.nack(worker.session, task.task_id, task.token, "broke", False)
        final = wire.Failed(task.task_id, "broke")
    clock.advance(1)
    assert producer.take() == [outcomes.Progress(task.task_id, task.token, 100, "a"), final]
    assert queue.progress.last(task.task_id) is None
    assert not clock.getDelayedCalls()


def test_a_report_with_a_stale_token_is_refused_and_counted() -> None:
    clock, queue = started(task_timeout=1.0)
    producer, worker, task = running(queue)
    with pytest.raises(Refused) as refused:
        report(queue, worker, task._replace(token=task.token + 1), 100, "wrong")
    assert refused.value.code == ErrorCode.STALE
    assert queue.counters().stale_outcomes == 1
    # Taken back at its lease's end: the old delivery's reports are stale too.
    clock.advance(1)
    queue.expire_overdue()
    with pytest.raises(Refused) as refused:
        report(queue, worker, task, 100, "late")
    assert refused.value.code == ErrorCode.STALE
    assert heard(producer) == []


def test_a_report_for_a_task_not_held_is_a_protocol_violation() -> None:
    _, queue = started()
    producer, worker, task = running(queue)
    other = v2_worker_of(queue, name="other")
    with pytest.raises(ProtocolViolation, match="not held by this worker"):
        report(queue, other, task, 100, "not mine")
    with pytest.raises(ProtocolViolation, match="a producer connection reported"):
        report(queue, producer, task, 100, "not a worker")
    queue.ack(worker.session, task.task_id, task.token)
    with pytest.raises(ProtocolViolation, match="not held"):
        report(queue, worker, task, 100, "after its outcome")


def test_a_message_longer_than_max_message_is_refused_and_one_at_it_taken() -> None:
    _, queue = started(max_message=16)
    producer, worker, task = running(queue)
    with pytest.raises(ProtocolViolation, match=r"17 bytes exceeds \[progress\] max_message"):
        # 8 characters, 17 bytes: the limit is in bytes.
        report(queue, worker, task, 100, "é" * 8 + "x")
    assert queue.progress.last(task.task_id) is None
    report(queue, worker, task, 100, "é" * 8)
    assert heard(producer) == [(100, "é" * 8)]


def test_a_producer_gone_misses_the_reports_and_the_last_is_still_kept() -> None:
    clock, queue = started()
    producer, worker, task = running(queue)
    producer.disconnect()
    report(queue, worker, task, 7000, "on")
    clock.advance(1)
    last = queue.progress.last(task.task_id)
    assert last is not None and (last.fraction, last.message) == (7000, "on")


def test_a_producer_that_stops_reading_is_kept_the_latest_report_of_each_task() -> None:
    _, queue = started(interval=0)
    producer, worker, task = running(queue)
    other = v2_worker_of(queue)
    other.take()
    submit_to(queue, producer.session, b"t", b"y", progress=True)
    (second,) = [m for m in other.take() if isinstance(m, taskflow.Task)]
    producer.take()
    producer.session.paused = True  # its output is backed up
    for step in range(1, 1001):
        report(queue, worker, task, step, f"a{step}")
        report(queue, other, second, step, f"b{step}")
    assert producer.take() == []
    assert len(producer.session.held_progress) == 2  # not 2,000 frames
    assert queue.progress.coalesced == 1998
    producer.session.paused = False
    queue.output_drained(producer.session)
    assert heard(producer) == [(1000, "a1000"), (1000, "b1000")]
    # A task that finishes while its report is held: the outcome supersedes it.
    producer.session.paused = True
    report(queue, worker, task, 5, "late")
    queue.ack(worker.session, task.task_id, task.token)
    producer.session.paused = False
    queue.output_drained(producer.session)
    assert producer.take() == [taskflow.Done(task.task_id)]
