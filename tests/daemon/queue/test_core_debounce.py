"""
Debounce (docs/protocol.md, "Version 2: debounce and expiry"): a keyed
SUBMIT folds into the task of its key while that task waits to start, as
its mode says (drop, replace, extend); in the queue core on a
L{task.Clock}, with fakes.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from quicx.daemon.queue.policy import QueueLimits
from quicx.protocol import taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.start_options import Debounce, DebounceMode
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    FakePeer,
    make_queue,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)

START = 1_800_000_000.0
DROP, REPLACE, EXTEND = DebounceMode


def clock_at_start() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


def debounced(peer: FakePeer, payload: bytes, mode: DebounceMode, window_ms: int = 1000) -> None:
    submit_to(peer.queue, peer.session, b"t", payload, key=b"k", debounce=Debounce(mode, window_ms))


def payloads(worker: FakePeer) -> list[bytes]:
    return [m.payload for m in worker.take() if isinstance(m, taskflow.Task)]


def test_drop_keeps_the_first_payload_and_answers_the_rest_as_duplicates() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    debounced(producer, b"first", DROP)
    clock.advance(0.5)
    debounced(producer, b"second", DROP)
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(1, duplicate=True)]
    clock.advance(0.499)
    assert payloads(worker) == []
    clock.advance(0.001)
    assert payloads(worker) == [b"first"]
    assert queue.telemetry.total().debounced == 1


def test_replace_takes_the_newest_payload_and_keeps_the_due_time() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    debounced(producer, b"one", REPLACE)
    used = queue.pool.bytes_used
    for payload in (b"two", b"three"):
        clock.advance(0.3)
        debounced(producer, payload, REPLACE)
    assert producer.take() == [taskflow.Ok(1)] + [taskflow.Ok(1, duplicate=True)] * 2
    assert queue.pool.bytes_used == used and len(queue._live) == 1  # one block, one task
    assert journal.changes == [("replace", 1), ("replace", 1)]
    clock.advance(0.4)  # 1 s after the first SUBMIT
    assert payloads(worker) == [b"three"]
    queue.done(worker.session, 1)
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert queue.telemetry.total().debounced == 2


def test_extend_runs_once_the_key_is_quiet_for_the_window() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    for payload in (b"a", b"b", b"c"):
        clock.advance(0.8)
        debounced(producer, payload, EXTEND)
    clock.advance(0.998)  # 0.998 s after the last
    assert payloads(worker) == []
    clock.advance(0.004)
    assert payloads(worker) == [b"c"]


def test_extend_still_runs_at_max_delay_after_the_first_submit() -> None:
    clock = clock_at_start()
    queue = make_queue(clock, limits=QueueLimits(max_delay=3.0))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    for step in range(10):
        debounced(producer, bytes((step,)), EXTEND)
        clock.advance(0.5)
        if step < 5:
            assert payloads(worker) == []
    # Due 3 s after the first SUBMIT, though the key never went quiet.
    assert payloads(worker)[:1] == [b"\x05"]


def test_replace_keeps_a_queued_tasks_place() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    debounced(producer, b"old", REPLACE)
    clock.advance(2)  # due, queued: no worker yet
    submit_to(queue, producer.session, b"t", b"behind")
    debounced(producer, b"new", REPLACE)
    worker = v2_worker_of(queue, credits=2)
    assert payloads(worker) == [b"new", b"behind"]


def test_extend_delays_a_queued_task_again() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    debounced(producer, b"old", EXTEND)
    clock.advance(2)
    assert queue.queued == 1
    debounced(producer, b"new", EXTEND)
    assert queue.queued == 0 and queue.delays.count == 1
    worker = v2_worker_of(queue)
    assert payloads(worker) == []
    clock.advance(1)
    assert payloads(worker) == [b"new"]


def test_once_its_task_runs_replace_makes_a_new_task_and_drop_a_duplicate() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    worker.take()
    debounced(producer, b"first", REPLACE)
    clock.advance(1)
    assert payloads(worker) == [b"first"]
    debounced(producer, b"dup", DROP)
    debounced(producer, b"second", REPLACE)
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(1, duplicate=True), taskflow.Ok(2)]
    queue.done(worker.session, 1)
    assert payloads(worker) == []  # task 2 waits its own window
    clock.advance(1)
    assert payloads(worker) == [b"second"]


def test_another_type_under_the_key_is_a_conflict() -> None:
    queue = make_queue(clock_at_start())
    producer = v2_producer_of(queue)
    debounced(producer, b"x", REPLACE)
    submit_to(queue, producer.session, b"u", b"y", key=b"k", debounce=Debounce(REPLACE, 1000))
    ok, error = producer.take()
    assert ok == taskflow.Ok(1) and isinstance(error, wire.Error)
    assert error.code == ErrorCode.CONFLICT and "of type t, not u" in error.message


def test_a_fold_into_a_task_not_yet_journaled_is_answered_with_it() -> None:
    clock = clock_at_start()
    journal = FakeJournal()  # holds each SUBMIT until synced
    queue = make_queue(clock, journal)
    producer = v2_producer_of(queue)
    other = v2_producer_of(queue, "other")
    debounced(producer, b"one", EXTEND)
    debounced(other, b"two", EXTEND)
    assert producer.take() == other.take() == []
    journal.sync()
    assert producer.take() == [taskflow.Ok(1)]
    assert other.take() == [taskflow.Ok(1, duplicate=True)]
    worker = v2_worker_of(queue)
    clock.advance(1)
    assert payloads(worker) == [b"two"]


def test_a_window_past_max_delay_is_refused() -> None:
    queue = make_queue(clock_at_start(), limits=QueueLimits(max_delay=60.0))
    producer = v2_producer_of(queue)
    debounced(producer, b"x", DROP, window_ms=61_000)
    (error,) = producer.take()
    assert isinstance(error, wire.Error) and "max_delay" in error.message
    assert not queue._live and queue.pool.bytes_used == EMPTY_POOL_BYTES
