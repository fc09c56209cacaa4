"""
Delays, retries with backoff, dead letters, leases and fencing tokens, in
the queue core on a L{task.Clock}: no reactor, no sockets, no sleeping.
"""

from __future__ import annotations

from typing import cast

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.retries import retry_wait
from quicx.protocol import outcomes, registry, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    submit_to,
    v2_producer_of,
    v2_worker_of,
    worker_of,
)

START = 1_800_000_000.0
FIXED_1S = Backoff(BackoffKind.FIXED, 1000, 1000, 0)


def clock_at_start() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


def tasks(peer: FakePeer) -> list[taskflow.Task]:
    found = [m for m in peer.take() if isinstance(m, taskflow.Task | wire.Task)]
    return cast(list[taskflow.Task], found)  # v1 tasks only where no v2 field is read


def one_task(queue: QueueService, version: int = 2) -> tuple[FakePeer, FakePeer, taskflow.Task]:
    """A producer and a worker of C{version}, and the one task submitted and sent."""
    producer = (v2_producer_of if version == 2 else producer_of)(queue)
    worker = (v2_worker_of if version == 2 else worker_of)(queue)
    worker.take()
    submit_to(queue, producer.session, b"t", b"x")
    producer.take()
    (task,) = tasks(worker)
    return producer, worker, task


def queue_with(clock: Clock, **limits: object) -> QueueService:
    return make_queue(clock, limits=QueueLimits(**limits))  # type: ignore[arg-type]


# -- delays ---------------------------------------------------------------------------


def test_a_delayed_task_waits_for_its_time_then_runs() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    submit_to(queue, producer.session, b"t", b"later", delay_ms=1500)
    assert producer.take() == [taskflow.Ok(1)]
    assert queue.delays.count == 1 and queue.default_queue.delayed == 1
    assert queue.queued == 0
    clock.advance(1.499)
    assert tasks(worker) == []
    clock.advance(0.001)
    (task,) = tasks(worker)
    assert task.payload == b"later" and queue.delays.count == 0
    assert queue.default_queue.delayed == 0


def test_delayed_tasks_run_in_due_order_whatever_their_submit_order() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    for payload, delay in [(b"c", 3000), (b"a", 1000), (b"b", 2000)]:
        submit_to(queue, producer.session, b"t", payload, delay_ms=delay)
    # Only one timer is armed at a time: the earliest.
    assert len(clock.getDelayedCalls()) == 1
    clock.advance(5)
    worker = v2_worker_of(queue, credits=3)
    assert [t.payload for t in tasks(worker)] == [b"a", b"b", b"c"]


def test_a_run_at_in_the_past_runs_at_once_and_one_past_max_delay_is_refused() -> None:
    clock = clock_at_start()
    queue = queue_with(clock, max_delay=60.0)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    submit_to(queue, producer.session, b"t", b"past", run_at_ms=int((START - 10) * 1000))
    assert [t.payload for t in tasks(worker)] == [b"past"]
    submit_to(queue, producer.session, b"t", b"far", delay_ms=61_000)
    (answer,) = [m for m in producer.take() if isinstance(m, wire.Error)]
    assert answer.code == ErrorCode.INVALID_MESSAGE and "max_delay" in answer.message
    assert queue.delays.count == 0


def test_max_delayed_refuses_a_delayed_submit_past_it_and_frees_nothing() -> None:
    clock = clock_at_start()
    queue = queue_with(clock, max_delayed=2)
    producer = v2_producer_of(queue)
    for _ in range(2):
        submit_to(queue, producer.session, b"t", b"x", delay_ms=1000)
    used = queue.pool.bytes_used
    submit_to(queue, producer.session, b"t", b"x", delay_ms=1000)
    errors = [m for m in producer.take() if isinstance(m, wire.Error)]
    assert [e.code for e in errors] == [ErrorCode.QUEUE_FULL]
    assert "max_delayed = 2" in errors[0].message
    assert queue.pool.bytes_used == used and queue.delays.count == 2
    # Not delayed: not held to it.
    submit_to(queue, producer.session, b"t", b"now")
    assert producer.take() == [taskflow.Ok(3)]


def test_a_delayed_task_can_be_cancelled_and_never_runs() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", delay_ms=1000)
    producer.take()
    assert queue.cancel(producer.session, 1)["state"] == "cancelled"
    assert producer.take() == [registry.decode(0x0F, b"\x00\x00\x00\x01")]
    assert queue.delays.count == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES
    worker = v2_worker_of(queue)
    clock.advance(2)
    assert tasks(worker) == []


def test_cancelled_leftovers_never_make_the_heap_grow_without_bound() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    for task_id in range(1, 2001):
        submit_to(queue, producer.session, b"t", b"x", delay_ms=3_600_000)
        queue.cancel(producer.session, task_id)
    assert queue.delays.count == 0
    assert len(queue.delays._heap) <= 64


def test_purge_cancels_the_delayed_tasks_of_the_queue_too() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"now", "mail")
    submit_to(queue, producer.session, b"t", b"later", "mail", delay_ms=1000)
    submit_to(queue, producer.session, b"t", b"other", "video", delay_ms=1000)
    assert queue.purge("mail") == {"queue": "mail", "purged": 2}
    assert queue.delays.count == 1


# -- retries and backoff ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backoff", "waits"),
    [
        (Backoff(BackoffKind.FIXED, 2000, 2000, 0), [2.0, 2.0, 2.0, 2.0]),
        (Backoff(BackoffKind.EXPONENTIAL, 1000, 5000, 0), [1.0, 2.0, 4.0, 5.0]),
        (Backoff(BackoffKind.EXPONENTIAL, 250, 1 << 31, 0), [0.25, 0.5, 1.0, 2.0]),
    ],
)
def test_backoff_sequences(backoff: Backoff, waits: list[float]) -> None:
    assert [retry_wait(backoff, n, lambda: 0.0) for n in range(1, 5)] == waits


def test_jitter_takes_at_most_its_share_off_and_never_passes_the_cap() -> None:
    backoff = Backoff(BackoffKind.EXPONENTIAL, 1000, 8000, 25)
    for failures in range(1, 8):
        plain = retry_wait(backoff._replace(jitter=0), failures, lambda: 0.0)
        low = retry_wait(backoff, failures, lambda: 0.999999)
        assert plain * 0.75 <= low <= plain <= 8.0
        assert retry_wait(backoff, failures, lambda: 0.0) == plain


def test_a_huge_failure_count_saturates_at_the_cap() -> None:
    assert retry_wait(Backoff(BackoffKind.EXPONENTIAL, 1000, 60_000, 0), 60_000, lambda: 0.5) == 60


def retrying_queue(clock: Clock, retries: int = 2, **limits: object) -> QueueService:
    policy = QueuePolicy(retries=retries, backoff=FIXED_1S)
    return queue_with(clock, defaults=policy, **limits)


def test_a_failed_task_with_retries_comes_back_after_its_backoff_and_its_producer_hears_once() -> (
    None
):
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal, limits=QueueLimits(defaults=QueuePolicy(retries=2)))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    submit_to(
        queue,
        producer.session,
        b"t",
        b"x",
        backoff=Backoff(BackoffKind.EXPONENTIAL, 1000, 10_000, 0),
    )
    producer.take()
    seen = []
    for _ in range(2):
        (task,) = tasks(worker)
        seen.append((task.attempt, task.failures, task.retries))
        queue.nack(worker.session, task.task_id, task.token, "boom", False)
        (notice,) = producer.take()
        assert isinstance(notice, outcomes.Retrying)
        assert notice.attempt == task.attempt and notice.reason == "boom"
        wait = (notice.due_ms / 1000) - clock.seconds()
        assert wait == pytest.approx(1.0 * 2 ** (task.failures), abs=0.001)
        clock.advance(wait - 0.01)
        assert tasks(worker) == []
        clock.advance(0.01)
    (task,) = tasks(worker)
    seen.append((task.attempt, task.failures, task.retries))
    queue.ack(worker.session, task.task_id, task.token)
    assert seen == [(1, 0, 2), (2, 1, 2), (3, 2, 2)]
    assert producer.take() == [taskflow.Done(1)]
    assert journal.changes == [("retry", 1), ("retry", 1)]
    assert journal.outcomes == [(1, "done")]
    assert queue.counters().retried == 2


def test_a_v1_producer_hears_only_the_final_outcome_and_a_v1_worker_failure_counts() -> None:
    clock = clock_at_start()
    queue = retrying_queue(clock, retries=1)
    producer, worker, task = one_task(queue, version=1)
    queue.failed(worker.session, task.task_id, "first")
    assert producer.take() == []
    clock.advance(1)
    (task,) = tasks(worker)
    queue.failed(worker.session, task.task_id, "second")
    assert producer.take() == [wire.Failed(1, "second")]


def test_out_of_retries_a_task_goes_to_the_dead_letter_set_with_its_story() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(
        clock, journal, limits=QueueLimits(defaults=QueuePolicy(retries=1, backoff=FIXED_1S))
    )
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("mail",), name="w1")
    worker.take()
    submit_to(queue, producer.session, b"t", b"payload", "mail")
    producer.take()
    (task,) = tasks(worker)
    queue.nack(worker.session, task.task_id, task.token, "first", False)
    clock.advance(1)
    (task,) = tasks(worker)
    queue.nack(worker.session, task.task_id, task.token, "last", False)
    notices = producer.take()
    assert [type(n) for n in notices] == [outcomes.Retrying, wire.Failed]
    assert notices[-1] == wire.Failed(1, "last")
    listing = queue.dead_tasks(None, 10)
    assert listing["total"] == 1
    (dead,) = listing["tasks"]
    assert (dead["id"], dead["queue"], dead["failures"], dead["reason"], dead["worker"]) == (
        1,
        "mail",
        2,
        "last",
        "w1",
    )
    assert queue.queues["mail"].dead == 1
    assert journal.changes == [("retry", 1), ("dead", 1)]
    # Kept in the pool until replayed or dropped.
    assert queue.pool.bytes_used > EMPTY_POOL_BYTES


def test_a_permanent_failure_skips_the_retries_left() -> None:
    clock = clock_at_start()
    queue = retrying_queue(clock, retries=5)
    producer, worker, task = one_task(queue)
    queue.nack(worker.session, task.task_id, task.token, "bad input", True)
    assert producer.take() == [wire.Failed(1, "bad input")]
    assert queue.dead_tasks(None, 10)["total"] == 1


def test_without_retries_a_failure_is_final_and_nothing_is_kept() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer, worker, task = one_task(queue)
    queue.nack(worker.session, task.task_id, task.token, "bad", True)
    assert producer.take() == [wire.Failed(1, "bad")]
    assert queue.dead_tasks(None, 10)["total"] == 0
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


def kill(queue: QueueService, clock: Clock, count: int, name: str = "mail") -> None:
    """Make C{count} tasks of queue C{name} die, a second apart."""
    producer = v2_producer_of(queue, "killer")
    worker = v2_worker_of(queue, queues=(name,), name="reaper")
    worker.take()
    for _ in range(count):
        submit_to(queue, producer.session, b"t", b"x", name, retries=1)
        (task,) = tasks(worker)
        queue.nack(worker.session, task.task_id, task.token, "doomed", True)
        clock.advance(1)
    worker.disconnect()
    producer.disconnect()


def test_the_dead_letter_set_drops_its_oldest_past_max_count() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal, limits=QueueLimits(dead_max_count=3))
    kill(queue, clock, 5)
    assert [t["id"] for t in queue.dead_tasks("mail", 10)["tasks"]] == [3, 4, 5]
    assert queue.counters().dead_dropped == 2
    assert (1, "failed") in journal.outcomes and (2, "failed") in journal.outcomes


def test_the_dead_letter_set_drops_tasks_past_max_age() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, limits=QueueLimits(dead_max_age=10.0))
    kill(queue, clock, 3)  # died at START, +1, +2
    clock.advance(10 - 3 + 0.5)  # the first is 10.5 s old
    assert [t["id"] for t in queue.dead_tasks(None, 10)["tasks"]] == [2, 3]
    clock.advance(2)
    assert queue.dead_tasks(None, 10)["total"] == 0
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert "mail" not in queue.queues  # nothing left refers to it


def test_max_count_zero_keeps_no_dead_task() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, limits=QueueLimits(dead_max_count=0))
    kill(queue, clock, 2)
    assert queue.dead_tasks(None, 10)["total"] == 0
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_replay_puts_a_dead_task_back_with_its_failures_reset() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal)
    kill(queue, clock, 2)
    assert queue.replay(1, None) == {"replayed": [1]}
    worker = v2_worker_of(queue, queues=("mail",))
    (task,) = tasks(worker)
    assert (task.task_id, task.failures, task.retries) == (1, 0, 1)
    assert ("replay", 1) in journal.changes
    assert queue.replay(0, "mail") == {"replayed": [2]}
    with pytest.raises(Refused) as refused:
        queue.replay(1, None)
    assert refused.value.code == ErrorCode.NOT_FOUND


def test_purging_the_dead_letter_set_frees_the_pool() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    kill(queue, clock, 2, "mail")
    kill(queue, clock, 1, "video")
    assert queue.purge_dead("mail") == {"purged": 2}
    assert queue.dead_tasks(None, 10)["total"] == 1
    assert queue.purge_dead(None) == {"purged": 1}
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_a_dead_task_cannot_be_cancelled() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    kill(queue, clock, 1)
    admin = v2_producer_of(queue, "admin")
    admin.session.admin = True
    with pytest.raises(Refused) as refused:
        queue.cancel(admin.session, 1)
    assert refused.value.code == ErrorCode.CONFLICT


# -- leases and fencing tokens ------------------------------------------------------------


def test_every_delivery_has_a_new_larger_token() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, task_timeout=5)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=2)
    submit_to(queue, producer.session, b"t", b"a")
    submit_to(queue, producer.session, b"t", b"b")
    first, second = tasks(worker)
    assert 0 < first.token < second.token
    assert first.lease_ms == 5000


def test_an_outcome_with_a_stale_token_is_refused_and_never_applied() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, task_timeout=5)
    producer = v2_producer_of(queue)
    slow = v2_worker_of(queue, name="slow")
    submit_to(queue, producer.session, b"t", b"x")
    producer.take()
    (old,) = tasks(slow)
    clock.advance(5)
    queue.expire_overdue()
    fast = v2_worker_of(queue, name="fast")
    (new,) = tasks(fast)
    assert new.token > old.token
    with pytest.raises(Refused) as refused:
        queue.ack(slow.session, old.task_id, old.token)
    assert refused.value.code == ErrorCode.STALE
    assert queue.counters().stale_outcomes == 1
    assert producer.take() == []  # not applied
    # The stale worker got its credit back.
    assert slow.session.free_credits == 1
    queue.ack(fast.session, new.task_id, new.token)
    assert producer.take() == [taskflow.Done(1)]


def test_a_wrong_token_on_a_held_task_is_stale_and_the_delivery_stands() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = tasks(worker)
    with pytest.raises(Refused):
        queue.ack(worker.session, task.task_id, task.token + 1)
    queue.ack(worker.session, task.task_id, task.token)


def test_an_outcome_for_a_task_never_sent_is_a_protocol_violation() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    worker = v2_worker_of(queue)
    with pytest.raises(ProtocolViolation):
        queue.ack(worker.session, 7, 1)
    with pytest.raises(ProtocolViolation):
        queue.touch(worker.session, 7, 1, 10)


def test_touch_extends_the_lease_up_to_max_lease() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, task_timeout=5, limits=QueueLimits(max_lease=30.0))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = tasks(worker)
    clock.advance(4)
    queue.touch(worker.session, task.task_id, task.token, 10)
    clock.advance(9.9)  # 13.9 s after dispatch, 9.9 after the touch
    queue.expire_overdue()
    assert queue.counters().timed_out == 0
    queue.touch(worker.session, task.task_id, task.token, 1000)  # cut to 30
    clock.advance(29.9)
    queue.expire_overdue()
    assert queue.counters().timed_out == 0
    clock.advance(0.1)
    queue.expire_overdue()
    assert queue.counters().timed_out == 1
    with pytest.raises(Refused) as refused:
        queue.touch(worker.session, task.task_id, task.token, 10)
    assert refused.value.code == ErrorCode.STALE


def test_touch_on_a_queue_without_a_timeout_changes_nothing() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = tasks(worker)
    assert task.lease_ms == 0
    queue.touch(worker.session, task.task_id, task.token, 10)
    clock.advance(3600)
    queue.expire_overdue()
    assert queue.counters().timed_out == 0


def test_count_lost_makes_a_lost_worker_a_failure_with_backoff() -> None:
    clock = clock_at_start()
    queue = retrying_queue(clock, retries=1, count_lost=True)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, name="doomed")
    submit_to(queue, producer.session, b"t", b"x")
    producer.take()
    tasks(worker)
    worker.disconnect()
    (notice,) = producer.take()
    assert isinstance(notice, outcomes.Retrying) and "disconnected" in notice.reason
    assert queue.delays.count == 1
    other = v2_worker_of(queue, name="other")
    clock.advance(1)
    assert len(tasks(other)) == 1
    other.disconnect()
    (final,) = producer.take()
    assert isinstance(final, wire.Failed)
    (dead,) = queue.dead_tasks(None, 1)["tasks"]
    assert dead["worker"] == "other"


def test_without_count_lost_a_lost_worker_requeues_at_once_uncounted() -> None:
    clock = clock_at_start()
    queue = retrying_queue(clock, retries=1)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    tasks(worker)
    worker.disconnect()
    assert queue.queued == 1 and queue.delays.count == 0
    other = v2_worker_of(queue)
    (task,) = tasks(other)
    assert task.failures == 0
