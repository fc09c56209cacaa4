"""
The queue core with a journal that syncs each SUBMIT: the OK, and every
answer after it, waits for the record; a task is queued only once durable;
a refused record is answered ERROR in its place, one in doubt not at all.
"""

from __future__ import annotations

from quicx.protocol import wire
from tests.fakes import EMPTY_POOL_BYTES, FakeJournal, make_queue, producer_of, submit_to, worker_of

# -- replies leave in request order -----------------------------------------------


def test_answers_queue_behind_a_submit_waiting_for_its_sync() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal, allowed_types=frozenset({b"t"}))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"one")
    submit_to(queue, producer.session, b"other", b"refused at once")
    producer.session.reply(wire.PONG_FRAME)
    submit_to(queue, producer.session, b"t", b"two")
    assert producer.take() == [], "nothing may overtake the first OK"
    journal.sync()
    replies = producer.take()
    assert [type(r) for r in replies] == [wire.Ok, wire.Error, wire.Pong, wire.Ok]
    assert [r.task_id for r in replies if isinstance(r, wire.Ok)] == [1, 2]
    # Nothing waits now: the next answer goes at once.
    producer.session.reply(wire.PONG_FRAME)
    assert producer.take() == [wire.Pong()]


def test_a_refused_waiting_submit_is_answered_in_its_place() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"one")
    producer.session.reply(wire.PONG_FRAME)
    journal.fail()
    first, second = producer.take()
    assert isinstance(first, wire.Error) and first.code == wire.ErrorCode.QUEUE_FULL
    assert "journal write failed: No space left on device" in first.message
    assert second == wire.Pong()
    assert queue.stats().queue_depth == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert queue.counters().rejected == 1


def test_a_submit_in_doubt_is_not_answered_at_all() -> None:
    # The record may have survived: neither OK nor ERROR would be true.
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"one")
    journal.fail(in_doubt=True)
    assert producer.take() == []
    assert not producer.session.connected
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


# -- a task is queued once durable ------------------------------------------------


def test_a_task_waiting_for_its_record_is_neither_queued_nor_counted() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    worker = worker_of(queue)
    assert worker.take() == [wire.Wait()]
    submit_to(queue, producer.session, b"t", b"x")
    assert queue.stats().queue_depth == 0 and queue.counters().submitted == 0
    assert worker.take() == [], "not dispatched before it is durable"
    assert queue.awaits_outcome(producer.session)
    journal.sync()
    assert producer.take() == [wire.Ok(1)]
    assert worker.take() == [wire.Task(1, b"t", b"x")]
    assert queue.counters().submitted == 1


def test_one_sync_answers_each_producer_its_own_oks_in_order() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    first, second = producer_of(queue, "a"), producer_of(queue, "b")
    for producer in (first, second, first, second, first):
        submit_to(queue, producer.session, b"t", b"x")
    journal.sync()
    assert first.take() == [wire.Ok(1), wire.Ok(3), wire.Ok(5)]
    assert second.take() == [wire.Ok(2), wire.Ok(4)]
    worker = worker_of(queue, credits=5)
    assert worker.task_ids() == [1, 2, 3, 4, 5]


def test_a_task_made_durable_after_its_producer_left_still_runs() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.disconnect()
    journal.sync()  # FakePeer fails if the producer is sent anything
    assert queue.stats().queue_depth == 1
    worker = worker_of(queue)
    queue.done(worker.session, 1)
    assert journal.outcomes == [(1, "done")]


def test_a_refused_record_of_a_producer_that_left_frees_its_block() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.disconnect()
    journal.fail()
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES and queue.stats().queue_depth == 0


def test_outcomes_are_recorded_for_done_failed_and_given_up() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal, max_attempts=1)
    producer = producer_of(queue)
    worker = worker_of(queue, credits=3)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    queue.failed(worker.session, 2, "no")
    queue.done(worker.session, 1)
    worker.disconnect()
    assert journal.outcomes == [(2, "failed"), (1, "done"), (3, "failed")]


def test_the_snapshot_holds_the_live_tasks_oldest_first() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    for payload in (b"one", b"two", b"three"):
        submit_to(queue, producer.session, b"t", payload)
    worker = worker_of(queue)
    queue.done(worker.session, 1)
    worker.take()  # task 2 is held, task 3 queued: both live
    assert [(t.task_id, t.task_type, p) for t, p in queue.snapshot().tasks] == [
        (2, b"t", b"two"),
        (3, b"t", b"three"),
    ]
