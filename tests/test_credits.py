"""
The READY credit extension against a real daemon: a worker that asks for N
credits holds up to N tasks at once, dealt round-robin, and loses none of
them when it goes away.  Workers that send the protocol page's empty READY
are unaffected (the rest of the suite).
"""

from __future__ import annotations

import time
from pathlib import Path

from quicx.daemon.control import fetch_status
from quicx.protocol import wire
from tests.conftest import config_option
from tests.peer import Peer


def received(peer: Peer, count: int) -> list[wire.Task]:
    tasks = [peer.receive() for _ in range(count)]
    assert all(isinstance(task, wire.Task) for task in tasks), tasks
    return tasks  # type: ignore[return-value]


def test_a_worker_holds_as_many_tasks_as_its_credits(daemon) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(5)]
        worker.send(wire.encode_ready(3))
        assert [task.task_id for task in received(worker, 3)] == ids[:3]
        assert worker.nothing_for(0.3)
        assert producer.stats().queue_depth == 2
        # Each outcome frees one credit: the next task comes without a READY.
        worker.send(wire.encode_done(ids[1]))
        assert worker.receive().task_id == ids[3]
        worker.send(wire.encode_done(ids[0]) + wire.encode_failed(ids[2], "no"))
        assert worker.receive().task_id == ids[4]
        assert worker.nothing_for(0.2)
        assert producer.receive() == wire.Done(ids[1])
        assert producer.receive() == wire.Done(ids[0])
        assert producer.receive() == wire.Failed(ids[2], "no")


def test_an_idle_credit_worker_gets_wait_then_tasks_pushed(daemon) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        assert worker.request(wire.encode_ready(2)) == wire.Wait()
        stats = producer.stats()
        assert (stats.workers_total, stats.workers_idle) == (1, 1)
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(3)]
        assert [task.task_id for task in received(worker, 2)] == ids[:2]
        assert producer.stats().workers_idle == 0


def test_tasks_are_dealt_round_robin_between_credit_workers(daemon) -> None:
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as first,
        Peer(daemon.address) as second,
    ):
        assert first.request(wire.encode_ready(2)) == wire.Wait()
        assert second.request(wire.encode_ready(2)) == wire.Wait()
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(5)]
        assert [task.task_id for task in received(first, 2)] == [ids[0], ids[2]]
        assert [task.task_id for task in received(second, 2)] == [ids[1], ids[3]]
        assert first.nothing_for(0.2) and second.nothing_for(0.01)


def test_credits_are_capped_at_max_credits(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(config_option(tmp_path, "[limits]\nmax_credits = 2\n"))
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as at_limit,
        Peer(daemon.address) as past_limit,
    ):
        for n in range(6):
            producer.submit(b"t", b"%d" % n)
        at_limit.send(wire.encode_ready(2))
        assert len(received(at_limit, 2)) == 2
        assert at_limit.nothing_for(0.2)
        # Asking for more is not an error: it is granted the limit.
        past_limit.send(wire.encode_ready(3))
        assert len(received(past_limit, 2)) == 2
        assert past_limit.nothing_for(0.2)
        assert producer.stats().queue_depth == 2


def test_a_lost_credit_worker_gives_back_every_task_in_order(daemon) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as rescuer:
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(4)]
        with Peer(daemon.address) as doomed:
            doomed.send(wire.encode_ready(3))
            held = received(doomed, 3)
            doomed.send(wire.encode_done(held[1].task_id))
            assert producer.receive() == wire.Done(ids[1])
        # Held tasks go back to the head, in their order, ahead of ids[3].
        rescuer.send(wire.encode_ready(4))
        assert [task.task_id for task in received(rescuer, 3)] == [ids[0], ids[2], ids[3]]
        assert rescuer.nothing_for(0.2)


def test_outcome_for_a_task_not_held_names_what_is_held(daemon) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(2)]
        worker.send(wire.encode_ready(2))
        received(worker, 2)
        reply = worker.request(wire.encode_done(999))
        assert isinstance(reply, wire.Error) and reply.code == wire.ErrorCode.INVALID_MESSAGE
        assert f"task 999 is not held by this worker (tasks {ids[0]}, {ids[1]})" in reply.message


def test_a_ready_that_lowers_credits_takes_effect_as_tasks_finish(daemon) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(5)]
        worker.send(wire.encode_ready(3))
        received(worker, 3)
        worker.send(wire.encode_ready(1))
        worker.send(wire.encode_done(ids[0]))
        worker.send(wire.encode_done(ids[1]))
        assert worker.nothing_for(0.3)
        worker.send(wire.encode_done(ids[2]))
        assert worker.receive().task_id == ids[3]
        assert worker.nothing_for(0.2)


def test_overdue_tasks_of_a_credit_worker_are_requeued(start_daemon) -> None:
    daemon = start_daemon("--task-timeout=0.4")
    with Peer(daemon.address) as producer, Peer(daemon.address) as slow:
        ids = [producer.submit(b"t", b"%d" % n).task_id for n in range(3)]
        slow.send(wire.encode_ready(2))
        received(slow, 2)
        slow.send(wire.encode_done(ids[0]))
        assert slow.receive().task_id == ids[2]
        time.sleep(0.9)
        with Peer(daemon.address) as fast:
            # ids[1] and ids[2] were taken back; each still takes one of the
            # slow worker's credits until it reports.
            fast.send(wire.encode_ready(5))
            assert sorted(task.task_id for task in received(fast, 2)) == [ids[1], ids[2]]
            slow.send(wire.encode_done(ids[1]))
            assert slow.nothing_for(0.2)
        status = fetch_status(str(daemon.control_path))
    assert status["tasks"]["timed_out"] == 2
