"""
Credits in the queue core: a worker holds at most its READY's credit count,
gets more without asking once it reports, and may lower its count.  (A count
above max_credits is cut by the server before the queue sees it.)
"""

from __future__ import annotations

from quicx.protocol import wire
from tests.fakes import make_queue, producer_of, submit_to, worker_of


def test_one_credit_means_one_task_at_a_time() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=1)
    assert worker.task_ids() == [1]
    queue.done(worker.session, 1)
    assert worker.task_ids() == [2], "a report frees the credit: no new READY needed"
    assert queue.stats().queue_depth == 1


def test_many_credits_take_that_many_tasks_and_no_more() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    for _ in range(6):
        submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=4)
    assert worker.task_ids() == [1, 2, 3, 4]
    assert worker.session.free_credits == 0
    assert queue.stats().workers_idle == 0 and queue.stats().queue_depth == 2
    queue.failed(worker.session, 2, "no")
    queue.done(worker.session, 4)
    assert worker.task_ids() == [5, 6]


def test_a_worker_with_credits_left_stays_idle_for_later_tasks() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=3)
    assert worker.take() == [wire.Task(1, b"t", b"x")], "one task, and no WAIT with it"
    assert queue.stats().workers_idle == 1
    submit_to(queue, producer.session, b"t", b"y")
    submit_to(queue, producer.session, b"t", b"z")
    assert worker.task_ids() == [2, 3]
    assert queue.stats().workers_idle == 0


def test_a_ready_from_a_worker_holding_all_it_may_is_not_answered() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=2)
    worker.take()
    queue.ready(worker.session, 2)
    assert worker.take() == [], "not an error, and no third task"
    assert queue.tasks_running == 2 and queue.stats().queue_depth == 1


def test_raising_credits_takes_more_tasks_at_once() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    for _ in range(4):
        submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=1)
    assert worker.task_ids() == [1]
    queue.ready(worker.session, 3)
    assert worker.task_ids() == [2, 3]


def test_lowering_credits_holds_back_tasks_until_below_the_new_count() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    for _ in range(6):
        submit_to(queue, producer.session, b"t", b"x")
    worker = worker_of(queue, credits=3)
    assert worker.task_ids() == [1, 2, 3]
    queue.ready(worker.session, 1)
    assert worker.take() == []
    queue.done(worker.session, 1)
    queue.done(worker.session, 2)
    assert worker.take() == [], "still holds one: its one credit is taken"
    assert queue.stats().workers_idle == 0
    queue.done(worker.session, 3)
    assert worker.task_ids() == [4]
    queue.done(worker.session, 4)
    assert worker.task_ids() == [5], "one at a time from now on"
