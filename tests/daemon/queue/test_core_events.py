"""
Live events in-process: the event bus records only while someone listens
(attached while a subscriber watches, detached after the last leaves), each
subscriber gets the events its filter passes, as the files' lines, a new
filter replaces the old, a stop ends them, a subscriber that reads too
slowly is held to C{max_held} events and told what it missed, and there are
at most C{max_subscribers}.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.task import Clock

from quicx.daemon.observe.eventbus import FLUSH_AT, LIVE_FLUSH_EVERY, EventBus
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import SubscriberLimits
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.monitor import Events, Watch
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of


def live(**limits: int) -> tuple[QueueService, EventBus, Clock]:
    """A queue and its started event bus, with no events files."""
    clock = Clock()
    queue = make_queue(clock)
    bus = EventBus(queue, clock, limits=SubscriberLimits(**limits), clock=clock.seconds)
    queue.plug(events=bus)
    bus.startService()
    return queue, bus, clock


def subscriber(queue: QueueService, bus: EventBus, **watch: Any) -> FakePeer:
    """A version-2 connection that sent WATCH with C{watch}'s lists."""
    peer = FakePeer(queue, "monitor", version=2)
    answer = bus.watch(peer.session, Watch(**watch))
    assert answer == {
        "watching": {
            "queues": list(watch.get("queues", ())),
            "types": [t.decode() for t in watch.get("types", ())],
            "kinds": list(watch.get("kinds", ())),
        }
    }
    return peer


def heard(peer: FakePeer) -> list[dict[str, Any]]:
    """The events in the EVENTS frames C{peer} got since last asked (and nothing else)."""
    records: list[dict[str, Any]] = []
    for message in peer.take():
        assert isinstance(message, Events) and message.missed == 0, message
        records += [json.loads(line) for line in message.lines]
    return records


def run(queue: QueueService, queue_name: str, task_type: bytes = b"t") -> int:
    """Submit a task to C{queue_name}, and have a worker take it and ACK it."""
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=(queue_name,))
    submit_to(queue, producer.session, task_type, b"x", queue_name)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token)
    producer.disconnect()
    worker.disconnect()
    return task.task_id


def test_events_are_recorded_only_while_a_subscriber_watches() -> None:
    queue, bus, clock = live()
    assert queue.events is None and queue.event_bus is bus
    run(queue, "a")  # nobody listens: nothing is recorded
    peer = subscriber(queue, bus)
    assert queue.events is bus
    task_id = run(queue, "a")
    assert peer.take() == []  # not before the flush...
    clock.advance(LIVE_FLUSH_EVERY)
    records = heard(peer)  # ...and then only the task run while it watched
    assert [(r["event"], r["task"]) for r in records] == [
        ("submitted", task_id),
        ("dispatched", task_id),
        ("done", task_id),
    ]
    assert records[0]["queue"] == "a" and records[1]["attempt"] == 1
    peer.disconnect()
    assert queue.events is None and bus.live.count == 0
    run(queue, "a")
    clock.advance(1)
    assert not clock.getDelayedCalls()  # no timer runs for nobody


def test_each_subscriber_gets_what_its_filter_passes() -> None:
    queue, bus, clock = live()
    everything = subscriber(queue, bus)
    mail = subscriber(queue, bus, queues=("mail",))
    sms_done = subscriber(queue, bus, types=(b"sms",), kinds=("done",))
    failures = subscriber(queue, bus, kinds=("failed", "rejected"))
    run(queue, "mail", b"send")
    run(queue, "other", b"sms")
    run(queue, "mail", b"sms")
    clock.advance(LIVE_FLUSH_EVERY)
    assert len(heard(everything)) == 9
    assert {(r["queue"], r["type"]) for r in heard(mail)} == {("mail", "send"), ("mail", "sms")}
    assert [(r["event"], r["queue"]) for r in heard(sms_done)] == [
        ("done", "other"),
        ("done", "mail"),
    ]
    assert heard(failures) == []


def test_a_second_watch_replaces_the_filter_and_a_stop_ends_the_events() -> None:
    queue, bus, clock = live()
    peer = subscriber(queue, bus, queues=("a",))
    run(queue, "a")
    run(queue, "b")
    # Events recorded before the new filter go by the old one, before its answer.
    answer = bus.watch(peer.session, Watch(queues=("b",)))
    assert {r["queue"] for r in heard(peer)} == {"a"}
    assert answer["watching"]["queues"] == ["b"]
    run(queue, "a")
    run(queue, "b")
    clock.advance(LIVE_FLUSH_EVERY)
    assert {r["queue"] for r in heard(peer)} == {"b"}
    run(queue, "b")
    assert bus.watch(peer.session, Watch(stop=True)) == {"watching": None}
    assert len(heard(peer)) == 3  # sent before the stop's answer
    assert queue.events is None
    run(queue, "b")
    clock.advance(LIVE_FLUSH_EVERY)
    assert peer.take() == []
    # A stop from a connection that was not watching is answered the same.
    assert bus.watch(peer.session, Watch(stop=True)) == {"watching": None}


def test_a_subscriber_that_reads_too_slowly_is_held_to_max_held_and_told_what_it_missed() -> None:
    queue, bus, clock = live(max_held=4)
    slow, fast = subscriber(queue, bus), subscriber(queue, bus)
    slow.session.paused = True  # its output is backed up
    ids = [run(queue, "q") for _ in range(3)]  # 9 events
    clock.advance(LIVE_FLUSH_EVERY)
    ids.append(run(queue, "q"))  # 3 more, another flush
    clock.advance(LIVE_FLUSH_EVERY)
    assert slow.take() == [] and len(heard(fast)) == 12
    assert bus.dropped == 8 and bus.live.dropped == 8
    slow.session.paused = False
    queue.output_drained(slow.session)
    (events,) = slow.take()
    assert isinstance(events, Events) and events.missed == 8
    # The newest 4 are what was held: the last task's 3 and the one before's done.
    held = [json.loads(line) for line in events.lines]
    assert [(r["event"], r["task"]) for r in held] == [
        ("done", ids[2]),
        ("submitted", ids[3]),
        ("dispatched", ids[3]),
        ("done", ids[3]),
    ]
    # Caught up: the next frame misses nothing, and the count stays for status.
    run(queue, "q")
    clock.advance(LIVE_FLUSH_EVERY)
    assert len(heard(slow)) == 3 and bus.dropped == 8


def test_max_held_zero_holds_nothing_and_still_tells_the_count() -> None:
    queue, bus, clock = live(max_held=0)
    peer = subscriber(queue, bus)
    peer.session.paused = True
    run(queue, "q")
    clock.advance(LIVE_FLUSH_EVERY)
    peer.session.paused = False
    queue.output_drained(peer.session)
    assert peer.take() == [Events((), 3)]


def test_a_burst_is_flushed_at_once_past_flush_at() -> None:
    queue, bus, _ = live()
    peer = subscriber(queue, bus, kinds=("rejected",))
    producer = v2_producer_of(queue)
    queue.allowed_types = frozenset({b"allowed"})  # every SUBMIT below is refused
    for _ in range(FLUSH_AT - 1):
        submit_to(queue, producer.session, b"other", b"x")
    assert peer.take() == []
    submit_to(queue, producer.session, b"other", b"x")
    records = heard(peer)  # at once, before any timer
    assert len(records) == FLUSH_AT and records[0]["code"] == ErrorCode.UNKNOWN_TASK_TYPE


def test_there_are_at_most_max_subscribers_and_a_replace_is_always_taken() -> None:
    queue, bus, _ = live(max_subscribers=2)
    first, second = subscriber(queue, bus), subscriber(queue, bus)
    third = FakePeer(queue, "third", version=2)
    with pytest.raises(Refused) as caught:
        bus.watch(third.session, Watch())
    assert caught.value.code == ErrorCode.QUEUE_FULL and "max_subscribers = 2" in str(caught.value)
    assert bus.watch(second.session, Watch(kinds=("done",)))["watching"]["kinds"] == ["done"]
    first.disconnect()
    assert bus.watch(third.session, Watch())["watching"] is not None
    assert bus.live.count == 2


def test_max_subscribers_zero_turns_live_events_off() -> None:
    queue, bus, _ = live(max_subscribers=0)
    with pytest.raises(Refused):
        bus.watch(FakePeer(queue, "m", version=2).session, Watch())
    assert queue.events is None
