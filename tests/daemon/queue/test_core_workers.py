"""
Quiet and terminate from the daemon, in-process (L{quicx.daemon.queue.workers}):
what a steered worker is told and dealt, what becomes of what it holds, and
the worker records an admin (or a dashboard) reads.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.workers import credits, workers_of
from quicx.protocol import taskflow, workers
from quicx.protocol.codec import ErrorCode
from tests.fakes import make_queue, submit_to, v2_producer_of, v2_worker_of, worker_of


def test_a_quiet_worker_finishes_what_it_holds_and_is_dealt_no_more() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=2, name="w")
    for n in range(4):
        submit_to(queue, producer.session, b"t", b"%d" % n)
    assert worker.task_ids() == [1, 2]
    assert workers_of(queue).quiet(worker.session.session_id) == [worker.session.session_id]
    assert worker.take() == [workers.Stop(workers.Steer.QUIET, 0)]
    held = worker.session.tasks[1]
    queue.ack(worker.session, 1, held.token)  # what it holds still finishes
    queue.ready(worker.session, credits(worker.session, 5))  # a READY gives it nothing
    assert worker.task_ids() == []
    assert queue.queued == 2
    record = workers_of(queue).records()[0]
    assert (record["state"], record["credits"], record["holding"]) == ("quiet", 0, 1)
    # Another worker takes the rest.
    other = v2_worker_of(queue, credits=5, name="other")
    assert other.task_ids() == [3, 4]


def test_a_terminated_worker_s_tasks_run_elsewhere_and_its_connection_closes() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=2, name="w")
    submit_to(queue, producer.session, b"t", b"1")
    submit_to(queue, producer.session, b"t", b"2")
    assert worker.task_ids() == [1, 2]
    token = worker.session.tasks[1].token
    other = v2_worker_of(queue, credits=1, name="other")
    workers_of(queue).terminate(worker.session.session_id, 2.5)
    assert worker.take() == [workers.Stop(workers.Steer.TERMINATE, 2500)]
    # At once, at the head of the queue, in order: the first to the idle worker.
    assert other.task_ids() == [1]
    assert queue.queued == 1 and not worker.session.tasks
    # Its late outcome is refused as stale: the task is not finished twice.
    with pytest.raises(Refused) as refused:
        queue.ack(worker.session, 1, token)
    assert refused.value.code is ErrorCode.STALE
    assert queue.task(1).holder is other.session
    assert workers_of(queue).records()[0]["state"] == "terminating"
    clock.advance(2.4)
    assert worker.session.connected
    clock.advance(0.1)
    assert not worker.session.connected


def test_a_terminated_worker_that_leaves_first_is_not_closed_again() -> None:
    clock = Clock()
    queue = make_queue(clock)
    worker = v2_worker_of(queue, name="w")
    workers_of(queue).terminate(worker.session.session_id, 1.0)
    worker.disconnect()
    clock.advance(5)  # the grace's timer finds it gone
    assert not queue.sessions


def test_every_version_2_worker_at_once_and_never_a_version_1_one() -> None:
    queue = make_queue()
    first, second = v2_worker_of(queue, name="a"), v2_worker_of(queue, name="b")
    old = worker_of(queue, name="v1")
    steering = workers_of(queue)
    ids = [first.session.session_id, second.session.session_id]
    assert steering.quiet(0) == ids
    with pytest.raises(Refused) as refused:
        steering.quiet(old.session.session_id)
    assert refused.value.code is ErrorCode.UNSTEERABLE
    with pytest.raises(Refused) as refused:
        steering.terminate(999, 1.0)
    assert refused.value.code is ErrorCode.NOT_FOUND
    producer = v2_producer_of(queue)
    with pytest.raises(Refused, match="no worker"):
        steering.quiet(producer.session.session_id)
    # Quiet twice is quiet; terminate after quiet terminates; the frames say so once each.
    first.take()
    assert steering.quiet(ids[0]) == [ids[0]]
    assert first.take() == []
    steering.terminate(ids[0], 1.0)
    assert first.take() == [workers.Stop(workers.Steer.TERMINATE, 1000)]
    steering.terminate(0, 1.0)
    assert first.take() == []  # already terminating


def test_the_records_say_what_each_worker_announced_and_holds() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    from tests.daemon.queue.test_core_routing import typed_worker

    typed = typed_worker(queue, (b"mail", b"pdf"), credits=3, name="typed")
    typed.session.card.host, typed.session.card.pid = "h1", 42  # type: ignore[union-attr]
    submit_to(queue, producer.session, b"mail", b"x")
    clock.advance(1.5)
    plain = worker_of(queue, name="plain")
    [record, v1] = workers_of(queue).records()
    assert record == {
        "id": typed.session.session_id,
        "address": "typed",
        "protocol": 2,
        "client": "",
        "name": "typed",
        "host": "h1",
        "pid": 42,
        "queues": ["default"],
        "types": ["mail", "pdf"],
        "credits": 3,
        "holding": 1,
        "tasks": [{"id": 1, "type": "mail", "for": 1.5}],
        "state": "active",
    }
    assert (v1["id"], v1["protocol"], v1["types"], v1["pid"]) == (
        plain.session.session_id,
        1,
        None,
        None,
    )
    assert isinstance(typed.take()[-1], taskflow.Task)
