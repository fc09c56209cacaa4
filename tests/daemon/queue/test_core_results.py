"""
Results, kept outcomes and AWAIT, in the queue core on a L{task.Clock}: a
worker's result reaches its producer; an outcome kept (asked by the SUBMIT
or the queue, or because the producer left) answers AWAIT from any
connection until its TTL, within its bounds; waits end at the outcome, at
their timeout or with their connection, within their limits.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from twisted.internet.task import Clock

from quicx.daemon.journal.interface import KeptEntry
from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.queue import pmad
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.results import ResultLimits, Share
from quicx.protocol import outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import Outcome, OutcomeState
from quicx.protocol.taskflow import Result, ResultKind
from tests.fakes import (
    BLOCK,
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    small_pool,
    submit_to,
    v2_producer_of,
    v2_worker_of,
    worker_of,
)

START = 1_800_000_000.0
ANSWER = Result(ResultKind.JSON, b'{"answer":42}')


def clock_at_start() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


def queue_with(clock: Clock, journal: FakeJournal | None = None, **results: object) -> QueueService:
    limits = QueueLimits(results=ResultLimits(**results))  # type: ignore[arg-type]
    return make_queue(clock, journal=journal, limits=limits)


def run(
    kernel: QueueService,
    producer: FakePeer,
    worker: FakePeer,
    result: Result | None = ANSWER,
    **options: object,
) -> int:
    """Submit one task from C{producer}, have C{worker} ACK it with C{result}; its id."""
    submit_to(kernel, producer.session, b"t", b"x", **options)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    kernel.ack(worker.session, task.task_id, task.token, result)
    return task.task_id


def awaited(queue: QueueService, task_id: int, timeout_ms: int = 0) -> Outcome:
    """What a new connection is answered when it awaits C{task_id} (at once)."""
    peer = FakePeer(queue, "asker", version=2)
    queue.await_outcome(peer.session, task_id, timeout_ms)
    (answer,) = peer.take()
    peer.disconnect()
    return answer


# -- results reach the producer --------------------------------------------------------


def test_a_result_reaches_a_version_2_producer_in_its_done() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker)
    assert producer.take() == [taskflow.Ok(task_id), taskflow.Done(task_id, ANSWER)]


def test_a_version_1_producer_hears_the_plain_done() -> None:
    queue = make_queue()
    producer, worker = producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker)
    assert producer.take() == [wire.Ok(task_id), wire.Done(task_id)]


def test_an_ack_without_a_result_is_a_done_without_one() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker, None)
    assert producer.take()[-1] == taskflow.Done(task_id, None)


def test_a_result_past_max_size_is_refused_and_the_task_stays_held() -> None:
    queue = queue_with(Clock(), max_size=10)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    with pytest.raises(Refused) as refused:
        queue.ack(worker.session, task.task_id, task.token, Result(ResultKind.BYTES, b"x" * 11))
    assert refused.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert "11 bytes" in str(refused.value) and "10 bytes" in str(refused.value)
    assert task.task_id in worker.session.tasks and queue.counters().completed == 0
    assert producer.take() == [taskflow.Ok(task.task_id)]
    # At the limit: taken.
    queue.ack(worker.session, task.task_id, task.token, Result(ResultKind.BYTES, b"x" * 10))
    assert producer.take() == [taskflow.Done(task.task_id, Result(ResultKind.BYTES, b"x" * 10))]


def test_a_result_is_held_to_the_pools_largest_block_too() -> None:
    queue = make_queue(pool=small_pool(4))
    assert queue.max_result == BLOCK
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    with pytest.raises(Refused, match=f"{BLOCK + 1} bytes exceeds the limit of {BLOCK} bytes"):
        queue.ack(worker.session, task.task_id, task.token, Result(ResultKind.BYTES, b"x" * 65))


# -- kept outcomes ---------------------------------------------------------------------


def test_a_kept_outcome_answers_another_connection_until_its_ttl() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = queue_with(clock, journal)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker, result_ttl=60)
    assert awaited(queue, task_id) == Outcome(task_id, OutcomeState.DONE, ANSWER)
    assert journal.results == [KeptEntry(task_id, OutcomeState.DONE, 3, START + 60, ANSWER.data)]
    assert queue.counters().results_kept == 1 and len(queue.kept) == 1
    clock.advance(59.999)
    assert awaited(queue, task_id).state == OutcomeState.DONE
    clock.advance(0.001)
    assert awaited(queue, task_id) == Outcome(task_id, OutcomeState.FORGOTTEN)
    assert queue.counters().results_expired == 1 and journal.results[-1] == task_id
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_the_result_option_0_keeps_for_the_default_ttl_and_max_ttl_caps_any() -> None:
    clock = clock_at_start()
    queue = queue_with(clock, ttl=30.0, max_ttl=100.0)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    default = run(queue, producer, worker, result_ttl=0)
    capped = run(queue, producer, worker, result_ttl=1_000_000)
    clock.advance(30)
    assert awaited(queue, default).state == OutcomeState.FORGOTTEN
    assert awaited(queue, capped).state == OutcomeState.DONE
    clock.advance(70)
    assert awaited(queue, capped).state == OutcomeState.FORGOTTEN


def test_an_outcome_not_kept_is_unknown_as_is_a_task_that_never_was() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker)
    assert awaited(queue, task_id) == Outcome(task_id, OutcomeState.UNKNOWN)
    assert awaited(queue, 999) == Outcome(999, OutcomeState.UNKNOWN)
    assert len(queue.kept) == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_the_outcome_of_a_task_whose_producer_left_is_kept() -> None:
    clock = clock_at_start()
    queue = queue_with(clock, ttl=120.0)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.disconnect()
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token, ANSWER)
    assert awaited(queue, task.task_id) == Outcome(task.task_id, OutcomeState.DONE, ANSWER)
    clock.advance(120)
    assert awaited(queue, task.task_id).state == OutcomeState.FORGOTTEN


def test_no_outcome_is_kept_for_a_version_1_producer_that_left() -> None:
    queue = make_queue()
    producer, worker = producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.disconnect()
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token, ANSWER)
    assert awaited(queue, task.task_id).state == OutcomeState.UNKNOWN
    assert len(queue.kept) == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_outcomes_kept_for_nobody_are_evicted_before_requested_ones() -> None:
    queue = queue_with(Clock(), max_count=2)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    asked = run(queue, producer, worker, result_ttl=0)
    gone = v2_producer_of(queue, "gone")
    for _ in range(3):
        submit_to(queue, gone.session, b"t", b"x")
    gone.disconnect()
    for _ in range(3):
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        queue.ack(worker.session, task.task_id, task.token)
    assert awaited(queue, asked).state == OutcomeState.DONE
    assert [awaited(queue, t).state for t in (2, 3, 4)] == [
        OutcomeState.FORGOTTEN,
        OutcomeState.FORGOTTEN,
        OutcomeState.DONE,
    ]
    assert awaited(queue, 2).reason == "evicted: past [results] max_count"
    # Requested ones go too, oldest first, once no automatic one is left.
    run(queue, producer, worker, result_ttl=0)
    run(queue, producer, worker, result_ttl=0)
    assert awaited(queue, asked) == Outcome(
        asked, OutcomeState.FORGOTTEN, None, "evicted: past [results] max_count"
    )


def test_a_full_pool_evicts_an_outcome_kept_for_nobody_before_a_requested_one() -> None:
    limits = QueueLimits(results=ResultLimits(max_memory=Share(percent=Decimal(100))))
    queue = make_queue(pool=small_pool(3), limits=limits)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    asked = [run(queue, producer, worker, result_ttl=0) for _ in range(2)]
    gone = v2_producer_of(queue, "gone")
    submit_to(queue, gone.session, b"t", b"x")  # the third block: the pool is full
    gone.disconnect()
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token, ANSWER)
    # Its payload's block was freed first: its outcome took it.
    assert [awaited(queue, t).state for t in (*asked, task.task_id)] == [OutcomeState.DONE] * 3
    # The next SUBMIT finds the pool full: the automatic one goes, and only it.
    run(queue, producer, worker, result_ttl=0)
    assert [awaited(queue, t).state for t in asked] == [OutcomeState.DONE] * 2
    assert awaited(queue, task.task_id).reason == "evicted: the pool is full"


@pytest.mark.parametrize(("versions", "kept"), [({1, 2}, True), ({1}, False)])
def test_a_recovered_tasks_outcome_is_kept_only_where_version_2_is_spoken(
    versions: set[int], kept: bool
) -> None:
    queue = make_queue(limits=QueueLimits(versions=frozenset(versions)))
    queue.restore(Recovery((RecoveredTask(7, b"t", b"x"),), 7, 0, 0, 0))
    worker = worker_of(queue)
    (task,) = [m for m in worker.take() if isinstance(m, wire.Task)]
    queue.done(worker.session, task.task_id)
    assert len(queue.kept) == int(kept)
    if not kept:
        assert queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_a_queue_that_keeps_results_keeps_them_for_its_ttl() -> None:
    clock = clock_at_start()
    policy = QueuePolicy(keep_results=True, result_ttl=5.0)
    queue = make_queue(clock, limits=QueueLimits(declared={"kept": policy}))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("kept", "default"))
    kept = run(queue, producer, worker, queue="kept")
    other = run(queue, producer, worker)
    assert awaited(queue, kept).state == OutcomeState.DONE
    assert awaited(queue, other).state == OutcomeState.UNKNOWN
    clock.advance(5)
    assert awaited(queue, kept).state == OutcomeState.FORGOTTEN


def test_failed_cancelled_and_dead_outcomes_are_kept_with_their_reasons() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=2, queues=("work",))
    submit_to(queue, producer.session, b"t", b"x", "work", result_ttl=0)
    submit_to(queue, producer.session, b"t", b"x", "work", result_ttl=0, retries=1)
    submit_to(queue, producer.session, b"t", b"x", "idle", result_ttl=0)
    failed, dead = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.nack(worker.session, failed.task_id, failed.token, "no such user", False)
    queue.nack(worker.session, dead.task_id, dead.token, "corrupt input", True)
    cancel = queue.cancel(producer.session, 3)
    assert awaited(queue, failed.task_id) == Outcome(
        failed.task_id, OutcomeState.FAILED, None, "no such user"
    )
    assert awaited(queue, dead.task_id) == Outcome(
        dead.task_id, OutcomeState.DEAD, None, "corrupt input"
    )
    assert awaited(queue, 3) == Outcome(3, OutcomeState.CANCELLED, None, "cancelled by producer")
    assert cancel["state"] == "cancelled"
    # A dead task, even one whose outcome is not kept, is answered while it is dead.
    queue.purge_dead(None)
    submit_to(queue, producer.session, b"t", b"x", "work", retries=1)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.nack(worker.session, task.task_id, task.token, "bad", True)
    assert awaited(queue, task.task_id) == Outcome(task.task_id, OutcomeState.DEAD, None, "bad")


def test_a_duplicate_submit_of_a_finished_task_hears_its_kept_result() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    task_id = run(queue, producer, worker, key=b"order-1", result_ttl=0)
    again = v2_producer_of(queue, "again")
    submit_to(queue, again.session, b"t", b"x", key=b"order-1")
    assert again.take() == [taskflow.Ok(task_id, True), taskflow.Done(task_id, ANSWER)]


# -- bounds and eviction ---------------------------------------------------------------


def test_past_max_count_the_oldest_outcome_is_evicted_and_remembered_as_expired() -> None:
    queue = queue_with(Clock(), max_count=2)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    first, second = (run(queue, producer, worker, result_ttl=0) for _ in range(2))
    assert queue.counters().results_evicted == 0
    third = run(queue, producer, worker, result_ttl=0)
    assert awaited(queue, first).state == OutcomeState.FORGOTTEN
    assert [awaited(queue, t).state for t in (second, third)] == [OutcomeState.DONE] * 2
    assert queue.counters().results_evicted == 1 and len(queue.kept) == 2


def test_past_max_memory_the_oldest_outcomes_are_evicted() -> None:
    # Each 13-byte result takes a 16-byte block of the default layout: 32 bytes.
    queue = queue_with(Clock(), max_memory=Share(64))
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    ids = [run(queue, producer, worker, result_ttl=0) for _ in range(2)]
    assert queue.kept.memory == 64 and queue.counters().results_evicted == 0
    ids.append(run(queue, producer, worker, result_ttl=0))
    assert [awaited(queue, t).state for t in ids] == [
        OutcomeState.FORGOTTEN,
        OutcomeState.DONE,
        OutcomeState.DONE,
    ]
    assert queue.counters().results_evicted == 1 and queue.kept.memory == 64


def test_max_memory_as_a_share_of_the_pool() -> None:
    queue = queue_with(Clock(), max_memory=Share(percent=Decimal(25)))
    assert queue.kept.max_memory == (1 << 20) // 4


def test_a_submit_that_finds_the_pool_full_evicts_the_oldest_kept_outcome() -> None:
    limits = QueueLimits(results=ResultLimits(max_memory=Share(percent=Decimal(100))))
    queue = make_queue(pool=small_pool(3), limits=limits)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    ids = [run(queue, producer, worker, result_ttl=0) for _ in range(3)]
    assert len(queue.kept) == 3 and queue.pool.blocks_used == [3]
    submit_to(queue, producer.session, b"t", b"new")
    assert producer.take()[-1] == taskflow.Ok(4)
    assert awaited(queue, ids[0]).state == OutcomeState.FORGOTTEN
    assert queue.counters().results_evicted == 1 and len(queue.kept) == 2
    # A full pool of live tasks still refuses.
    submit_to(queue, producer.session, b"t", b"a")
    submit_to(queue, producer.session, b"t", b"b")
    submit_to(queue, producer.session, b"t", b"c")
    assert [type(m) for m in producer.take()] == [taskflow.Ok, taskflow.Ok, wire.Error]


# -- AWAIT ------------------------------------------------------------------------------


def test_a_wait_is_answered_when_the_task_finishes_kept_or_not() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    first, second = FakePeer(queue, "a", 2), FakePeer(queue, "b", 2)
    for peer in (first, second):
        queue.await_outcome(peer.session, task.task_id, 10_000)
    assert first.take() == [] and queue.waits.count == 2
    queue.ack(worker.session, task.task_id, task.token, ANSWER)
    expected = [Outcome(task.task_id, OutcomeState.DONE, ANSWER)]
    assert first.take() == expected and second.take() == expected
    assert queue.waits.count == 0 and len(queue.kept) == 0


def test_a_wait_times_out_pending_and_max_wait_cuts_it() -> None:
    clock = Clock()
    queue = queue_with(clock, max_wait=2.0)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    waiter = FakePeer(queue, "waiter", 2)
    queue.await_outcome(waiter.session, 1, 0)
    assert waiter.take() == [Outcome(1, OutcomeState.PENDING)]
    queue.await_outcome(waiter.session, 1, 60_000)
    clock.advance(1.999)
    assert waiter.take() == []
    clock.advance(0.001)
    assert waiter.take() == [Outcome(1, OutcomeState.PENDING)]
    assert queue.waits.count == 0


def test_the_waiter_limits_hold_at_their_edges() -> None:
    queue = queue_with(Clock(), max_waiters=3, max_waiters_per_connection=2)
    producer = v2_producer_of(queue)
    for _ in range(4):
        submit_to(queue, producer.session, b"t", b"x")
    one, two = FakePeer(queue, "one", 2), FakePeer(queue, "two", 2)
    queue.await_outcome(one.session, 1, 1000)
    queue.await_outcome(one.session, 2, 1000)
    with pytest.raises(Refused, match="max_waiters_per_connection = 2") as refused:
        queue.await_outcome(one.session, 3, 1000)
    assert refused.value.code == ErrorCode.QUEUE_FULL
    queue.await_outcome(two.session, 3, 1000)
    with pytest.raises(Refused, match=r"max_waiters = 3\)"):
        queue.await_outcome(two.session, 4, 1000)
    # An answer at once is no wait: never refused.
    queue.await_outcome(two.session, 4, 0)
    assert two.take() == [Outcome(4, OutcomeState.PENDING)]
    queue.cancel(producer.session, 1)
    queue.await_outcome(two.session, 4, 1000)
    assert queue.waits.count == 3


def test_a_closed_connections_waits_are_dropped() -> None:
    queue = make_queue()
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    waiter = FakePeer(queue, "waiter", 2)
    queue.await_outcome(waiter.session, task.task_id, 10_000)
    assert queue.awaits_outcome(waiter.session)
    waiter.disconnect()
    assert queue.waits.count == 0
    # FakePeer fails if a frame is sent to a peer that left.
    queue.ack(worker.session, task.task_id, task.token, ANSWER)


def test_an_outcome_frame_names_the_reason_of_a_cancel() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "q")
    waiter = FakePeer(queue, "waiter", 2)
    queue.await_outcome(waiter.session, 1, 1000)
    queue.purge("q")
    assert waiter.take() == [Outcome(1, OutcomeState.CANCELLED, None, "its queue was purged")]
    assert (
        outcomes.decode_outcome(outcomes.encode_outcome(1, OutcomeState.CANCELLED)[6:]).reason == ""
    )


def test_a_kept_reason_longer_than_a_block_is_cut_to_it() -> None:
    queue = make_queue(pool=small_pool(4))
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", result_ttl=0)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.nack(worker.session, task.task_id, task.token, "x" + "é" * 40, False)
    outcome = awaited(queue, task.task_id)
    assert outcome.state == OutcomeState.FAILED and outcome.reason == "x" + "é" * 31
    assert queue.kept.memory == pmad.BLOCK_HEADER_SIZE + BLOCK


def test_a_replayed_task_whose_death_was_kept_keeps_its_new_outcome() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    submit_to(queue, producer.session, b"t", b"x", "work", retries=1)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    producer.disconnect()  # its death is kept: its producer is gone
    queue.nack(worker.session, task.task_id, task.token, "boom", True)
    assert awaited(queue, task.task_id) == Outcome(task.task_id, OutcomeState.DEAD, None, "boom")
    queue.replay(task.task_id, None)
    (again,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, again.task_id, again.token, taskflow.Result.of("all good"))
    assert awaited(queue, task.task_id) == Outcome(
        task.task_id, OutcomeState.DONE, taskflow.Result.of("all good")
    )


def test_no_waits_at_all_per_connection_refuses_the_first() -> None:
    queue = queue_with(Clock(), max_waiters_per_connection=0)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    with pytest.raises(Refused, match="max_waiters_per_connection = 0"):
        queue.await_outcome(FakePeer(queue, "one", 2).session, 1, 1000)
