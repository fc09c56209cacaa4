"""
Task timeouts in the queue core: a task held too long is taken back and
queued at the tail; the first outcome of any of its deliveries wins, later
ones are counted and ignored; a copy never goes to a worker still running
one; after max_attempts deliveries the task fails.  And the service that runs
the check on the clock.
"""

from __future__ import annotations

from typing import NamedTuple

from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.timers import task_timeout_timer
from quicx.protocol import wire
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    submit_to,
    worker_of,
)

# -- task timeouts with credits: per delivery, first outcome wins --------------------


class TimedOut(NamedTuple):
    clock: Clock
    queue: QueueService
    producer: FakePeer
    worker: FakePeer


def a_task_timed_out(credits: int = 1) -> TimedOut:
    """Task 1 given to C{worker}, then taken back at its timeout (10 s)."""
    clock = Clock()
    queue = make_queue(clock, task_timeout=10.0)
    producer = producer_of(queue)
    worker = worker_of(queue, credits, name="first")
    submit_to(queue, producer.session, b"t", b"x")
    clock.advance(11)
    queue.expire_overdue()
    return TimedOut(clock, queue, producer, worker)


def test_a_timed_out_task_is_never_sent_again_to_the_worker_that_holds_it() -> None:
    _, queue, producer, worker = a_task_timed_out(credits=4)
    received = worker.take()
    assert [type(m) for m in received] == [wire.Wait, wire.Task], "no second copy"
    assert queue.stats().queue_depth == 1
    # Its late DONE still counts: the first outcome wins.
    queue.done(worker.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    assert queue.stats().queue_depth == 0
    assert queue.counters().completed == 1 and queue.counters().timed_out == 1
    # The queued copy is skipped, and the worker's credits are all free again.
    submit_to(queue, producer.session, b"t", b"next")
    assert [m.task_id for m in worker.take()] == [2]
    assert worker.session.free_credits == 3


def test_a_timed_out_task_goes_to_another_worker_and_the_first_outcome_wins() -> None:
    _, queue, producer, slow = a_task_timed_out(credits=2)
    fast = worker_of(queue, credits=2, name="fast")
    assert fast.take() == [wire.Task(1, b"t", b"x")]
    # The slow worker reports first: done; the fast one's report is late.
    queue.done(slow.session, 1)
    queue.done(fast.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    counters = queue.counters()
    assert (counters.completed, counters.late_outcomes) == (1, 1)
    assert slow.session.free_credits == fast.session.free_credits == 2
    assert queue.tasks_running == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_the_new_holder_finishing_first_makes_the_old_report_late() -> None:
    _, queue, producer, slow = a_task_timed_out()
    fast = worker_of(queue, name="fast")
    queue.failed(fast.session, 1, "boom")
    assert slow.session.free_credits == 0, "its credit stays taken until it reports"
    queue.done(slow.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Failed(1, "boom")]
    assert queue.counters().late_outcomes == 1
    assert slow.session.free_credits == 1


def test_an_overdue_worker_that_leaves_lets_the_task_go_elsewhere() -> None:
    _, queue, producer, first = a_task_timed_out(credits=2)
    second = worker_of(queue, credits=2, name="second")
    second.take()
    first.disconnect()
    assert queue.stats().queue_depth == 0
    assert queue.tasks_running == 1
    queue.done(second.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]


def test_a_ready_with_only_its_own_late_copy_queued_gets_wait() -> None:
    _, queue, _, worker = a_task_timed_out(credits=2)
    worker.take()
    queue.ready(worker.session, 2)
    assert worker.take() == [wire.Wait()], "a READY is always answered"


def test_a_drain_is_not_held_up_by_a_task_finished_while_queued() -> None:
    clock, queue, _, worker = a_task_timed_out(credits=2)
    queue.done(worker.session, 1)  # finished by its late copy, still in the deque
    assert queue.queued == 0 and queue.stats().queue_depth == 0
    drained = queue.drain(60, clock)
    assert drained.called, "nothing is left to wait for"


def test_a_task_kept_from_a_worker_running_its_late_copy_keeps_its_place() -> None:
    journal = FakeJournal(waits=False)
    clock = Clock()
    queue = make_queue(clock, journal=journal, task_timeout=10.0)
    producer = producer_of(queue)
    slow = worker_of(queue, credits=2, name="slow")
    submit_to(queue, producer.session, b"t", b"x")
    clock.advance(10)
    queue.expire_overdue()  # task 1 queued again; slow runs its late copy
    journal.waits = True
    submit_to(queue, producer.session, b"t", b"y")
    submit_to(queue, producer.session, b"t", b"z")
    journal.sync()  # 2 and 3 queued at once, behind 1: slow takes 2, not 1
    assert slow.task_ids() == [1, 2]
    other = worker_of(queue, credits=2, name="other")
    assert other.task_ids() == [1, 3]


def test_a_timed_out_task_is_requeued_behind_the_tasks_waiting() -> None:
    log: list[str] = []
    clock = Clock()
    queue = make_queue(clock, task_timeout=10.0, log=log)
    producer = producer_of(queue)
    stuck = worker_of(queue, name="stuck")
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    clock.advance(10)
    queue.expire_overdue()
    assert log == ["task 1 requeued: held for more than 10 s by stuck (attempt 1)"]
    counters = queue.counters()
    assert (counters.timed_out, counters.requeued) == (1, 1)
    assert stuck.session.free_credits == 0, "it keeps the credit until it reports"
    other = worker_of(queue, credits=3, name="other")
    assert other.task_ids() == [2, 3, 1]


def test_only_tasks_held_past_the_timeout_are_taken_back() -> None:
    clock = Clock()
    queue = make_queue(clock, task_timeout=10.0)
    producer = producer_of(queue)
    worker = worker_of(queue, credits=2)
    submit_to(queue, producer.session, b"t", b"early")
    clock.advance(6)
    submit_to(queue, producer.session, b"t", b"late")
    clock.advance(4)
    queue.expire_overdue()
    assert list(worker.session.tasks) == [2] and list(worker.session.overdue) == [1]
    clock.advance(5.9)
    queue.expire_overdue()
    assert list(worker.session.tasks) == [2]
    clock.advance(0.1)
    queue.expire_overdue()
    assert list(worker.session.overdue) == [1, 2]
    assert queue.counters().timed_out == 2


def test_the_timeout_service_takes_tasks_back_on_the_clock() -> None:
    clock = Clock()
    queue = make_queue(clock, task_timeout=2.0)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    service = task_timeout_timer(queue, clock)
    assert service is not None
    service.startService()
    # Checked every timeout / 4 (at most every second).
    assert [call.getTime() for call in clock.getDelayedCalls()] == [0.5]
    clock.pump([0.5] * 3)
    assert queue.counters().timed_out == 0
    clock.advance(0.5)
    assert queue.counters().timed_out == 1 and list(worker.session.overdue) == [1]
    service.stopService()
    assert clock.getDelayedCalls() == []


def test_the_timeout_service_checks_at_least_every_second() -> None:
    clock = Clock()
    service = task_timeout_timer(make_queue(clock, task_timeout=60.0), clock)
    assert service is not None
    service.startService()
    assert [call.getTime() for call in clock.getDelayedCalls()] == [1.0]
    service.stopService()


def test_no_task_timeout_means_no_timer() -> None:
    clock = Clock()
    assert task_timeout_timer(make_queue(clock), clock) is None


def test_a_task_delivered_max_attempts_times_fails() -> None:
    journal = FakeJournal(waits=False)
    clock = Clock()
    queue = make_queue(clock, journal=journal, task_timeout=10.0, max_attempts=2)
    producer = producer_of(queue)
    workers = [worker_of(queue, name="a"), worker_of(queue, name="b")]
    submit_to(queue, producer.session, b"t", b"x")
    first, second = sorted(workers, key=lambda worker: not worker.task_ids())
    clock.advance(10)
    queue.expire_overdue()  # attempt 1 taken back, given to the other worker
    assert second.task_ids() == [1]
    clock.advance(10)
    queue.expire_overdue()  # attempt 2 taken back: that was the last
    reason = (
        "given up after 2 attempts; last: held for more than 10 s by"
        f" {second.peer_name} (attempt 2)"
    )
    assert producer.take() == [wire.Ok(1), wire.Failed(1, reason)]
    counters = queue.counters()
    assert (counters.failed, counters.given_up, counters.requeued) == (1, 1, 1)
    assert journal.outcomes == [(1, "failed")]
    assert queue.queued == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert not queue.awaits_outcome(producer.session)
    # Both late reports are ignored, and free their credits.
    queue.done(first.session, 1)
    queue.done(second.session, 1)
    assert queue.counters().late_outcomes == 2
    assert first.session.free_credits == second.session.free_credits == 1


def test_a_task_whose_workers_keep_leaving_fails_after_max_attempts() -> None:
    queue = make_queue(max_attempts=2)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    worker_of(queue, name="one").disconnect()
    assert queue.stats().queue_depth == 1
    worker_of(queue, name="two").disconnect()
    reason = "given up after 2 attempts; last: worker two disconnected"
    assert producer.take() == [wire.Ok(1), wire.Failed(1, reason)]
    assert queue.stats().queue_depth == 0 and queue.counters().given_up == 1
