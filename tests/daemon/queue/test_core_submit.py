"""
SUBMIT in the queue core: accepted (OK, queued, counted) or rejected with the
ERROR that says why, nothing of a rejected task left behind; task ids.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.queue.core import QueueService
from quicx.protocol import codec, wire
from quicx.protocol.wire import ErrorCode
from tests.fakes import (
    BLOCK,
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    small_pool,
    submit_to,
    worker_of,
)


def test_an_accepted_task_is_answered_ok_and_queued() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"one")
    submit_to(queue, producer.session, b"t", b"two")
    assert producer.take() == [wire.Ok(1), wire.Ok(2)]
    assert queue.stats().queue_depth == queue.queued == 2
    assert queue.pool.bytes_used > EMPTY_POOL_BYTES
    assert queue.counters().submitted == 2
    assert queue.awaits_outcome(producer.session)


def test_an_empty_payload_is_accepted_and_still_takes_a_block() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"")
    assert producer.take() == [wire.Ok(1)]
    assert queue.pool.bytes_used > EMPTY_POOL_BYTES
    worker = worker_of(queue)
    assert worker.take() == [wire.Task(1, b"t", b"")]


def assert_rejected(queue: QueueService, producer: FakePeer, code: ErrorCode, message: str) -> None:
    (reply,) = producer.take()
    assert isinstance(reply, wire.Error)
    assert (reply.code, reply.message) == (code, message)
    assert queue.stats().queue_depth == 0
    assert queue.counters().rejected == 1 and queue.counters().submitted == 0
    assert not queue.awaits_outcome(producer.session)


def test_an_unknown_task_type_is_rejected() -> None:
    queue = make_queue(allowed_types=frozenset({b"resize"}))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"encode", b"x")
    assert_rejected(queue, producer, ErrorCode.UNKNOWN_TASK_TYPE, "unknown task type: encode")
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES
    submit_to(queue, producer.session, b"resize", b"x")
    assert producer.take() == [wire.Ok(1)]


def test_a_payload_larger_than_the_largest_block_is_rejected() -> None:
    queue = make_queue(pool=small_pool(2))
    empty = queue.pool.bytes_used
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x" * (BLOCK + 1))
    assert_rejected(
        queue,
        producer,
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"{BLOCK + 1} bytes exceeds the largest size class ({BLOCK} bytes);"
        " a larger [allocator] class takes it",
    )
    assert queue.pool.bytes_used == empty


def test_a_full_pool_rejects_until_a_task_finishes() -> None:
    queue = make_queue(pool=small_pool(2))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"a")
    submit_to(queue, producer.session, b"t", b"b")
    producer.take()
    submit_to(queue, producer.session, b"t", b"c")
    (reply,) = producer.take()
    assert isinstance(reply, wire.Error) and reply.code == ErrorCode.QUEUE_FULL
    assert reply.message.startswith("queue full: no free block for 1 bytes")
    assert reply.message.endswith("; a larger [allocator] pool_size holds more")
    assert queue.counters().rejected == 1
    worker = worker_of(queue)
    queue.done(worker.session, 1)
    submit_to(queue, producer.session, b"t", b"c")
    assert producer.take() == [wire.Done(1), wire.Ok(3)]


def test_a_draining_queue_rejects_submits() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")  # keeps the drain open
    producer.take()
    queue.drain(60, Clock())
    submit_to(queue, producer.session, b"t", b"y")
    (reply,) = producer.take()
    assert reply == wire.Error(ErrorCode.QUEUE_FULL, "the daemon is shutting down")
    assert queue.counters().rejected == 1


def test_a_broken_journal_rejects_submits() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    journal.broken = "write failed: disk full"
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    assert_rejected(
        queue, producer, ErrorCode.QUEUE_FULL, "journal unavailable: write failed: disk full"
    )
    assert journal.waiting == [] and queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_task_ids_increase_across_producers() -> None:
    queue = make_queue()
    first, second = producer_of(queue, "a"), producer_of(queue, "b")
    submit_to(queue, first.session, b"t", b"x")
    submit_to(queue, second.session, b"t", b"x")
    submit_to(queue, first.session, b"t", b"x")
    assert first.take() == [wire.Ok(1), wire.Ok(3)]
    assert second.take() == [wire.Ok(2)]


def test_restored_tasks_are_queued_in_order_with_their_ids() -> None:
    queue = make_queue()
    recovered = (RecoveredTask(7, b"t", b"seven"), RecoveredTask(9, b"u", b"nine"))
    queue.restore(Recovery(recovered, 12, 0, 0, 0))
    assert queue.stats().queue_depth == 2
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"new")
    assert producer.take() == [wire.Ok(13)], "ids resume after the journal's last"
    worker = worker_of(queue, credits=3)
    assert worker.take() == [
        wire.Task(7, b"t", b"seven"),
        wire.Task(9, b"u", b"nine"),
        wire.Task(13, b"t", b"new"),
    ]
    # A recovered task has no producer to tell; its outcome still counts.
    queue.done(worker.session, 7)
    queue.failed(worker.session, 9, "no")
    assert producer.take() == []
    assert (queue.counters().completed, queue.counters().failed) == (1, 1)


def test_task_ids_wrap_and_skip_ids_still_live() -> None:
    queue = make_queue()
    live = (RecoveredTask(1, b"t", b"one"),)
    queue.restore(Recovery(live, codec.MAX_TASK_ID - 1, 0, 0, 0))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    submit_to(queue, producer.session, b"t", b"x")
    assert producer.take() == [wire.Ok(codec.MAX_TASK_ID), wire.Ok(2)]
