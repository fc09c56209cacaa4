"""
Dispatch in the queue core: who gets which task, in which order; outcomes
reaching producers; connections leaving; STATS; the roles.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.dispatch import DispatchSettings, Order
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.protocol import wire
from quicx.protocol.session import ProtocolViolation, Role
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    submit_to,
    v2_producer_of,
    worker_of,
)

FIFO = DispatchSettings(Order.FIFO)


def dispatching(
    dispatch: DispatchSettings, clock: Clock | None = None, **policy: object
) -> QueueService:
    """A queue that deals tasks as C{dispatch} says, its default queue with C{policy}."""
    limits = QueueLimits(defaults=QueuePolicy(**policy), dispatch=dispatch)  # type: ignore[arg-type]
    return make_queue(clock, limits=limits)


def submit_many(queue: QueueService, producer: FakePeer, count: int) -> None:
    for n in range(count):
        submit_to(queue, producer.session, b"t", b"payload %d" % n)


# -- READY ----------------------------------------------------------------------------


def test_a_ready_with_nothing_queued_is_answered_wait_every_time() -> None:
    queue = make_queue()
    worker = worker_of(queue)
    queue.ready(worker.session)
    assert worker.take() == [wire.Wait(), wire.Wait()]
    assert queue.stats().workers_idle == 1


def test_a_waiting_worker_gets_the_next_task_without_asking_again() -> None:
    queue = make_queue()
    worker = worker_of(queue)
    worker.take()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"resize", b"img")
    assert worker.take() == [wire.Task(1, b"resize", b"img")]
    assert queue.stats().queue_depth == 0 and queue.tasks_running == 1
    assert queue.stats().workers_idle == 0


def test_a_ready_with_tasks_queued_gets_a_task_and_no_wait() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    submit_many(queue, producer, 2)
    worker = worker_of(queue)
    assert worker.take() == [wire.Task(1, b"t", b"payload 0")]
    assert queue.stats().queue_depth == 1


# -- order ----------------------------------------------------------------------------


def test_tasks_go_out_oldest_first_across_producers() -> None:
    queue = make_queue()
    first, second = producer_of(queue, "a"), producer_of(queue, "b")
    for producer in (first, second, second, first):
        submit_to(queue, producer.session, b"t", producer.peer_name.encode())
    worker = worker_of(queue)
    order = []
    for _ in range(4):
        (task,) = worker.take()
        assert isinstance(task, wire.Task)
        order.append((task.task_id, task.payload))
        queue.done(worker.session, task.task_id)
    assert order == [(1, b"a"), (2, b"b"), (3, b"b"), (4, b"a")]


def test_idle_workers_are_served_last_idle_first_by_default() -> None:
    queue = make_queue()
    workers = [worker_of(queue, name=f"w{n}") for n in range(3)]
    producer = producer_of(queue)
    submit_many(queue, producer, 3)
    assert [w.task_ids() for w in workers] == [[3], [2], [1]]
    # The last to finish is the first served next.
    queue.done(workers[2].session, 1)
    queue.done(workers[0].session, 3)
    submit_many(queue, producer, 2)
    assert [w.task_ids() for w in workers] == [[4], [], [5]]


def test_with_fifo_idle_workers_are_served_longest_waiting_first() -> None:
    queue = dispatching(FIFO)
    workers = [worker_of(queue, name=f"w{n}") for n in range(3)]
    producer = producer_of(queue)
    submit_many(queue, producer, 3)
    assert [w.task_ids() for w in workers] == [[1], [2], [3]]
    # The first to finish is the first served next.
    queue.done(workers[2].session, 3)
    queue.done(workers[0].session, 1)
    submit_many(queue, producer, 2)
    assert [w.task_ids() for w in workers] == [[5], [], [4]]


@pytest.mark.parametrize(
    ("dispatch", "dealt"), [(DispatchSettings(), ([2, 4], [1, 3, 5])), (FIFO, ([1, 3, 5], [2, 4]))]
)
def test_tasks_are_dealt_round_robin_to_workers_with_credits(
    dispatch: DispatchSettings, dealt: tuple[list[int], list[int]]
) -> None:
    queue = dispatching(dispatch)
    first = worker_of(queue, credits=3, name="first")
    second = worker_of(queue, credits=3, name="second")
    producer = producer_of(queue)
    submit_many(queue, producer, 5)
    assert (first.task_ids(), second.task_ids()) == dealt


@pytest.mark.parametrize(
    ("dispatch", "reporter_served"), [(DispatchSettings(), True), (FIFO, False)]
)
def test_a_worker_with_credits_that_reports_is_served_first_under_lifo_only(
    dispatch: DispatchSettings, reporter_served: bool
) -> None:
    queue = dispatching(dispatch)
    workers = [worker_of(queue, credits=3, name=f"w{n}") for n in range(2)]
    producer = producer_of(queue)
    submit_many(queue, producer, 2)
    reporter, other = sorted(workers, key=lambda worker: 2 not in worker.task_ids())
    # The worker that just reported, with credits free already, is still awake.
    queue.done(reporter.session, 2)
    submit_many(queue, producer, 1)
    assert (reporter.task_ids(), other.task_ids()) == (([3], []) if reporter_served else ([], [3]))


# -- outcomes --------------------------------------------------------------------------


def test_done_reaches_the_producer_and_frees_the_worker() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    worker.take()
    queue.done(worker.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    assert journal.outcomes == [(1, "done")]
    assert queue.counters().completed == 1
    assert queue.tasks_running == 0 and queue.stats().workers_idle == 1
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert not queue.awaits_outcome(producer.session)


def test_failed_reaches_the_producer_with_its_reason_and_is_logged() -> None:
    journal = FakeJournal(waits=False)
    log: list[str] = []
    queue = make_queue(journal=journal, log=log)
    producer = producer_of(queue)
    worker = worker_of(queue, name="10.0.0.5:4242")
    submit_to(queue, producer.session, b"resize", b"x")
    queue.failed(worker.session, 1, "image is corrupt")
    assert producer.take() == [wire.Ok(1), wire.Failed(1, "image is corrupt")]
    assert journal.outcomes == [(1, "failed")]
    assert queue.counters().failed == 1 and queue.counters().completed == 0
    assert log == ["task 1 (resize) failed on 10.0.0.5:4242: image is corrupt"]
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


class PoolWatchingPeer(FakePeer):
    """Notes the pool's bytes in use as each outcome arrives."""

    def __init__(self, queue: QueueService, name: str) -> None:
        super().__init__(queue, name)
        self.used_at_outcome: list[int] = []

    def sendFrame(self, data: bytes) -> None:
        super().sendFrame(data)
        if isinstance(self.received[-1], wire.Done | wire.Failed):
            self.used_at_outcome.append(self.queue.pool.bytes_used)


def test_the_block_is_free_before_the_producer_hears_the_outcome() -> None:
    queue = make_queue()
    producer = PoolWatchingPeer(queue, "producer")
    queue.claim_role(producer.session, Role.PRODUCER)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    queue.done(worker.session, 1)
    submit_to(queue, producer.session, b"t", b"y")
    queue.failed(worker.session, 2, "no")
    assert producer.used_at_outcome == [EMPTY_POOL_BYTES, EMPTY_POOL_BYTES]


# -- connections leaving ------------------------------------------------------------------


def test_a_leaving_worker_s_tasks_go_back_to_the_head_in_order() -> None:
    log: list[str] = []
    queue = make_queue(log=log)
    producer = producer_of(queue)
    leaving = worker_of(queue, credits=3, name="leaving")
    submit_many(queue, producer, 5)
    assert leaving.task_ids() == [1, 2, 3]
    leaving.disconnect()
    assert queue.stats().queue_depth == 5 and queue.stats().workers_total == 0
    assert queue.counters().requeued == 3
    assert log[0] == "task 3 requeued: worker leaving disconnected"
    successor = worker_of(queue, credits=5, name="successor")
    assert successor.task_ids() == [1, 2, 3, 4, 5]


def test_a_leaving_worker_s_task_goes_at_once_to_a_waiting_worker() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    leaving = worker_of(queue, name="leaving")
    submit_to(queue, producer.session, b"t", b"x")
    waiting = worker_of(queue, name="waiting")
    assert waiting.take() == [wire.Wait()]
    leaving.disconnect()
    assert waiting.take() == [wire.Task(1, b"t", b"x")]
    queue.done(waiting.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]


def test_a_leaving_idle_worker_is_no_longer_counted_or_served() -> None:
    queue = make_queue()
    leaving, staying = worker_of(queue, name="leaving"), worker_of(queue, name="staying")
    leaving.disconnect()
    assert (queue.stats().workers_total, queue.stats().workers_idle) == (1, 1)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    assert staying.task_ids() == [1]


@pytest.mark.parametrize("version", [1, 2])
def test_a_leaving_producer_s_tasks_still_run_unreported(version: int) -> None:
    queue = make_queue()
    producer = producer_of(queue) if version == 1 else v2_producer_of(queue)
    submit_many(queue, producer, 2)
    producer.disconnect()
    assert queue.stats().queue_depth == 2
    worker = worker_of(queue)
    queue.done(worker.session, 1)  # FakePeer fails if its producer is sent anything
    queue.failed(worker.session, 2, "no")
    assert queue.counters().completed == 1 and queue.counters().failed == 1
    # A version-2 producer may ask for their outcomes when it comes back: they
    # are kept.  A version-1 one never could: nothing is, the pool as before.
    assert len(queue.kept) == (2 if version == 2 else 0)
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES + queue.kept.memory


# -- STATS ----------------------------------------------------------------------------


def test_stats_counts_queued_tasks_workers_and_pool_bytes() -> None:
    queue = make_queue()
    assert queue.stats() == wire.StatsResponse(0, 0, 0, EMPTY_POOL_BYTES, 1 << 20)
    monitor = FakePeer(queue, "monitor")  # asks STATS only: no role, not counted
    producer = producer_of(queue)
    busy = worker_of(queue, name="busy")
    submit_many(queue, producer, 3)
    with_credits_left = worker_of(queue, credits=4, name="credits left")
    waiting = worker_of(queue, name="waiting")
    assert busy.task_ids() == [1] and with_credits_left.task_ids() == [2, 3]
    assert waiting.take() == [wire.Wait()]
    stats = queue.stats()
    # Idle: every worker that may be sent a task now.
    assert (stats.queue_depth, stats.workers_total, stats.workers_idle) == (0, 3, 2)
    used = stats.pmad_bytes_used
    assert used > EMPTY_POOL_BYTES and stats.pmad_bytes_total == 1 << 20
    submit_to(queue, producer.session, b"t", b"x" * 300)
    assert queue.stats().pmad_bytes_used > used
    monitor.disconnect()
    assert queue.stats().workers_total == 3


# -- roles ----------------------------------------------------------------------------


def test_a_producer_cannot_act_as_a_worker_nor_a_worker_as_a_producer() -> None:
    queue = make_queue()
    producer, worker = producer_of(queue), worker_of(queue)
    with pytest.raises(ProtocolViolation, match="a producer connection cannot act as a worker"):
        queue.claim_role(producer.session, Role.WORKER)
    with pytest.raises(ProtocolViolation, match="a worker connection cannot act as a producer"):
        queue.claim_role(worker.session, Role.PRODUCER)
    queue.claim_role(worker.session, Role.WORKER)  # again: no second count
    assert queue.stats().workers_total == 1


@pytest.mark.parametrize(
    ("role", "message"),
    [
        (Role.NEW, "a new connection reported task 1; only the worker holding a task may"),
        (Role.PRODUCER, "a producer connection reported task 1; only the worker holding"),
    ],
)
def test_only_a_worker_may_report_an_outcome(role: Role, message: str) -> None:
    queue = make_queue()
    peer = FakePeer(queue, "peer")
    if role is not Role.NEW:
        queue.claim_role(peer.session, role)
    with pytest.raises(ProtocolViolation, match=message):
        queue.done(peer.session, 1)
    with pytest.raises(ProtocolViolation, match=message):
        queue.failed(peer.session, 1, "no")


@pytest.mark.parametrize(
    ("held", "described"),
    [
        (0, "no task"),
        (1, "task 1"),
        (2, "tasks 1, 2"),
        (7, "tasks 1, 2, 3, 4, 5 and 2 more"),
    ],
)
def test_a_report_for_a_task_not_held_names_what_the_worker_holds(
    held: int, described: str
) -> None:
    queue = make_queue()
    producer = producer_of(queue)
    worker = worker_of(queue, credits=max(held, 1))
    submit_many(queue, producer, held)
    with pytest.raises(ProtocolViolation) as raised:
        queue.done(worker.session, 99)
    assert str(raised.value) == f"task 99 is not held by this worker ({described})"
    assert queue.tasks_running == held, "a wrong report changes nothing"


def test_a_task_reported_twice_is_a_protocol_violation() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    queue.done(worker.session, 1)
    with pytest.raises(ProtocolViolation, match="task 1 is not held by this worker"):
        queue.failed(worker.session, 1, "no")
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    assert queue.counters().completed == 1 and queue.counters().failed == 0


# -- the failing guard (lifo) -----------------------------------------------------------

FAST_RETRY = Backoff(BackoffKind.FIXED, 1000, 1000, 0)


def good_and_failing(queue: QueueService) -> tuple[FakePeer, FakePeer, FakePeer]:
    """A producer, a good worker, and a failing one that went idle last."""
    producer = producer_of(queue)
    good = worker_of(queue, name="good")
    failing = worker_of(queue, name="failing")
    return producer, good, failing


def fail_in_a_row(queue: QueueService, producer: FakePeer, worker: FakePeer, count: int) -> None:
    """Submit C{count} tasks, one at a time, each dealt to C{worker} and failed at once."""
    for _ in range(count):
        submit_to(queue, producer.session, b"t", b"x")
        (task_id,) = worker.task_ids()
        queue.failed(worker.session, task_id, "broken")


@pytest.mark.parametrize(
    ("dispatch", "failed"),
    [
        (DispatchSettings(), 3),  # its failing_streak, then none while the good one is idle
        (DispatchSettings(failing_streak=5), 5),
        (DispatchSettings(failing_streak=0), 30),  # no guard: the black hole
        (FIFO, 15),  # its turn, every other task
    ],
)
def test_a_worker_that_fails_at_once_does_not_eat_the_tasks(
    dispatch: DispatchSettings, failed: int
) -> None:
    clock = Clock()
    queue = dispatching(dispatch, clock)
    producer, good, failing = good_and_failing(queue)
    dealt = {"good": 0, "failing": 0}
    for _ in range(30):
        # Light load: one task at a time, each submitted when the last is finished.
        submit_to(queue, producer.session, b"t", b"x")
        for worker in (good, failing):
            for task_id in worker.task_ids():
                dealt[worker.peer_name] += 1
                if worker is failing:
                    queue.failed(worker.session, task_id, "broken")
                else:
                    clock.advance(0.01)
                    queue.done(worker.session, task_id)
    assert dealt == {"good": 30 - failed, "failing": failed}
    assert queue.counters().failed == failed


def test_a_failing_worker_still_gets_a_task_when_no_other_worker_is_idle() -> None:
    queue = make_queue()
    producer, good, failing = good_and_failing(queue)
    fail_in_a_row(queue, producer, failing, 3)
    submit_many(queue, producer, 2)
    assert (good.task_ids(), failing.task_ids()) == ([4], [5])


@pytest.mark.parametrize(("wait", "served"), [(9.99, "good"), (10.0, "failing")])
def test_a_worker_is_failing_for_failing_window_after_its_latest_failure(
    wait: float, served: str
) -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer, good, failing = good_and_failing(queue)
    clock.advance(5)
    fail_in_a_row(queue, producer, failing, 3)
    clock.advance(wait)
    submit_to(queue, producer.session, b"t", b"x")
    assert {w.peer_name: w.task_ids() for w in (good, failing)}[served] == [4]


def test_a_success_ends_the_streak() -> None:
    queue = make_queue()
    producer, good, failing = good_and_failing(queue)
    fail_in_a_row(queue, producer, failing, 3)
    submit_many(queue, producer, 2)
    assert (good.task_ids(), failing.task_ids()) == ([4], [5])
    queue.done(good.session, 4)
    queue.done(failing.session, 5)
    # It went idle last, and is no longer failing.
    submit_to(queue, producer.session, b"t", b"x")
    assert (good.task_ids(), failing.task_ids()) == ([], [6])


@pytest.mark.parametrize("alone", [False, True])
def test_a_retried_task_goes_to_another_worker_than_the_one_it_failed_on(alone: bool) -> None:
    clock = Clock()
    queue = dispatching(DispatchSettings(), clock, retries=1, backoff=FAST_RETRY)
    producer = producer_of(queue)
    other = None if alone else worker_of(queue, name="other")
    worker = worker_of(queue, name="worker")
    submit_to(queue, producer.session, b"t", b"x")
    queue.failed(worker.session, 1, "flaky")
    # It went idle last, and one failure does not make it failing...
    clock.advance(1.0)
    if other is None:
        # ...and with no other worker, the retry does not wait for one.
        assert worker.task_ids() == [1, 1]
    else:
        # ...but the task is offered to the other worker first.
        assert (worker.task_ids(), other.task_ids()) == ([1], [1])


def test_a_retried_task_goes_to_the_worker_it_failed_on_rather_than_to_a_failing_one() -> None:
    clock = Clock()
    queue = dispatching(DispatchSettings(), clock, retries=1, backoff=FAST_RETRY)
    producer = producer_of(queue)
    good = worker_of(queue, name="good")
    submit_to(queue, producer.session, b"t", b"x")
    assert good.task_ids() == [1]
    queue.failed(good.session, 1, "flaky")  # once: the task's fault, most likely
    broken = worker_of(queue, name="broken")
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", retries=0)
        (task_id,) = broken.task_ids()
        queue.failed(broken.session, task_id, "broken")
    # Due again, with both idle and the broken one idle last: the worker it
    # failed on once is a better bet than one that fails everything.
    clock.advance(1.0)
    assert (good.task_ids(), broken.task_ids()) == ([1], [])
