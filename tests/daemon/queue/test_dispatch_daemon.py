"""
Which idle worker gets a task, against a real daemon over raw sockets: the
one idle last by default (C{[queues] dispatch = lifo}), the one idle longest
with C{fifo}, and a worker that fails every task at once passed over once it
has failed C{failing_streak} in a row; and a lower priority's overdue task
dealt before the top's (C{[queues] aging}).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from quicx.clients.blocking import QuicxClient
from quicx.protocol import wire
from tests.conftest import config_option
from tests.peer import Peer


def ready(worker: Peer) -> None:
    """READY, answered WAIT: the daemon has the worker idle."""
    assert worker.request(wire.encode_ready()) == wire.Wait()


@pytest.mark.parametrize(("dispatch", "served"), [("lifo", 2), ("fifo", 0)])
def test_the_task_goes_to_the_worker_idle_last_or_longest(
    tmp_path: Path, start_daemon, dispatch: str, served: int
) -> None:
    daemon = start_daemon(config_option(tmp_path, f"[queues]\ndispatch = {dispatch}\n"))
    with Peer(daemon.address) as producer:
        workers = [Peer(daemon.address) for _ in range(3)]
        try:
            for worker in workers:
                ready(worker)
            for n in range(3):
                task_id = producer.submit(b"t", b"%d" % n).task_id
                task = workers[served].receive()
                assert task == wire.Task(task_id, b"t", b"%d" % n)
                workers[served].send(wire.encode_done(task_id))
                assert producer.receive() == wire.Done(task_id)
                if dispatch == "fifo":
                    # The one that finished is now the one idle last.
                    served = (served + 1) % 3
            for worker in workers:
                assert worker.nothing_for(0.1)
        finally:
            for worker in workers:
                worker.close()


def test_a_worker_that_fails_every_task_is_passed_over(daemon) -> None:
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as good,
        Peer(daemon.address) as failing,
    ):
        ready(good)
        ready(failing)
        # Idle last, it gets the tasks until it has failed three in a row...
        for n in range(3):
            task_id = producer.submit(b"t", b"%d" % n).task_id
            assert failing.receive() == wire.Task(task_id, b"t", b"%d" % n)
            failing.send(wire.encode_failed(task_id, "broken"))
            assert producer.receive() == wire.Failed(task_id, "broken")
        # ...then the good worker, idle too, gets every one.
        for n in range(3, 10):
            task_id = producer.submit(b"t", b"%d" % n).task_id
            assert good.receive() == wire.Task(task_id, b"t", b"%d" % n)
            good.send(wire.encode_done(task_id))
            assert producer.receive() == wire.Done(task_id)
        assert failing.nothing_for(0.1)


@pytest.mark.parametrize(("aging", "first"), [("0.2", b"low"), ("0", b"top")])
def test_a_lower_priority_task_ready_for_aging_goes_before_the_top(
    tmp_path: Path, start_daemon, aging: str, first: bytes
) -> None:
    """
    A real daemon, a version-2 producer and a version-1 worker: once a
    priority-0 task has waited [queues] aging, it is dealt before the
    priority-9 tasks queued beside it (with aging = 0, after them all).
    """
    daemon = start_daemon(config_option(tmp_path, f"[queues]\naging = {aging}\n"))
    with QuicxClient(daemon.client_address) as producer, Peer(daemon.address) as worker:
        low = producer.submit("low", b"", priority=0)
        for _ in range(3):
            producer.submit("top", b"", priority=9)
        deadline = time.monotonic() + 30
        while producer.task(low)["age"] < 0.4:  # W = 0.2, and a margin past INSPECT's rounding
            assert time.monotonic() < deadline, "the task never aged"
            time.sleep(0.01)
        worker.send(wire.encode_ready())
        assert worker.receive().task_type == first
        (queue,) = [q for q in producer.queues() if q["name"] == "default"]
        assert queue["promoted"] == (first == b"low")
