"""
The READY credit extension against a real daemon: a worker that asks for N
credits holds up to N tasks at once, dealt round-robin, and loses none of
them when it goes away.  Workers that send the protocol page's empty READY
are unaffected (the rest of the suite).
"""

from __future__ import annotations

from pathlib import Path

from quicx.protocol import wire
from tests.conftest import config_option
from tests.peer import Peer


def received(peer: Peer, count: int) -> list[wire.Task]:
    tasks = [peer.receive() for _ in range(count)]
    assert all(isinstance(task, wire.Task) for task in tasks), tasks
    return tasks


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
