"""
Heartbeats on the queue's sessions: a HEARTBEAT after C{interval} seconds of
silence (again every C{interval}), the peer dropped after C{timeout} --
except a producer still owed an outcome, and, with C{spare_busy_workers}, a
worker holding a task.
"""

from __future__ import annotations

import pytest
from twisted.application.internet import TimerService
from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.timers import Heartbeats, heartbeat_timer
from quicx.protocol import wire
from tests.fakes import FakePeer, make_queue, producer_of, submit_to, worker_of

INTERVAL, TIMEOUT = 4.0, 12.0


def heartbeats(
    spare_busy_workers: bool = False,
) -> tuple[Clock, QueueService, TimerService]:
    clock = Clock()
    queue = make_queue(clock)
    service = heartbeat_timer(Heartbeats(queue, INTERVAL, TIMEOUT, clock, spare_busy_workers))
    assert service is not None
    service.startService()
    return clock, queue, service


def heard_from(clock: Clock, peer: FakePeer) -> None:
    """What the server does as anything arrives from C{peer}."""
    peer.session.last_received = clock.seconds()


def test_a_silent_peer_is_sent_heartbeats_every_interval_then_dropped() -> None:
    clock, queue, _ = heartbeats()
    peer = FakePeer(queue, "silent")
    clock.pump([1.0] * 3)
    assert peer.take() == []
    clock.advance(1.0)
    assert peer.take() == [wire.Heartbeat()]
    clock.pump([1.0] * 3)
    assert peer.take() == [], "not again before another interval"
    clock.advance(1.0)
    assert peer.take() == [wire.Heartbeat()]
    clock.pump([1.0] * 3)
    assert peer.session.connected
    clock.advance(1.0)
    assert not peer.session.connected and queue.sessions == {}
    assert peer.take() == []


def test_any_frame_from_the_peer_puts_off_the_heartbeat_and_the_drop() -> None:
    clock, queue, _ = heartbeats()
    peer = FakePeer(queue, "chatty")
    for _ in range(10):
        clock.pump([1.0] * 3)
        heard_from(clock, peer)
    clock.pump([1.0] * 3)
    assert peer.take() == [] and peer.session.connected


def test_a_dropped_worker_s_task_goes_back_to_the_queue() -> None:
    clock, queue, _ = heartbeats()
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    clock.pump([1.0] * int(TIMEOUT))
    assert not worker.session.connected
    assert queue.stats().queue_depth == 1 and queue.stats().workers_total == 0


def test_a_producer_owed_an_outcome_is_never_dropped() -> None:
    clock, queue, _ = heartbeats()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.take()
    clock.pump([1.0] * 100)
    assert producer.session.connected
    assert producer.take() == [wire.Heartbeat()] * 25
    # Once told, it may be dropped like anyone.
    worker = worker_of(queue)
    queue.done(worker.session, 1)
    clock.advance(1.0)
    assert not producer.session.connected


@pytest.mark.parametrize("spared", [False, True])
def test_a_busy_worker_is_dropped_unless_busy_workers_are_spared(spared: bool) -> None:
    clock, queue, _ = heartbeats(spare_busy_workers=spared)
    producer = producer_of(queue)
    workers = [worker_of(queue, name=name) for name in ("a", "b")]
    submit_to(queue, producer.session, b"t", b"x")
    busy, idle = sorted(workers, key=lambda worker: not worker.session.tasks)
    clock.pump([1.0] * int(TIMEOUT))
    assert busy.session.connected is spared
    assert not idle.session.connected, "an idle worker is never spared"


def test_the_check_runs_every_quarter_interval_and_stops_with_the_service() -> None:
    clock, _, service = heartbeats()
    assert [call.getTime() for call in clock.getDelayedCalls()] == [INTERVAL / 4]
    service.stopService()
    assert clock.getDelayedCalls() == []


def test_an_interval_of_zero_turns_heartbeats_off() -> None:
    clock = Clock()
    queue = make_queue(clock)
    assert heartbeat_timer(Heartbeats(queue, 0.0, TIMEOUT, clock)) is None
