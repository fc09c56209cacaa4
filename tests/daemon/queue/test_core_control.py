"""
Cancel, pause, resume, purge, idempotent submit and introspection in the
queue core, in-process on a task.Clock.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from quicx.daemon.config import Limits
from quicx.daemon.queue import introspect
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.server import QuicxServerFactory
from quicx.protocol import admin, codec, link, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.frames import FrameParser
from tests.fakes import (
    FakeJournal,
    make_queue,
    producer_of,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)

# -- cancel ------------------------------------------------------------------------------


def test_a_producer_cancels_its_queued_task_and_hears_cancelled() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    producer.take()
    used = queue.pool.bytes_used
    assert queue.cancel(producer.session, 1) == {"id": 1, "state": "cancelled", "queue": "default"}
    assert producer.take() == [admin.Cancelled(1)]
    assert journal.outcomes == [(1, "cancelled")]
    assert queue.pool.bytes_used < used
    worker = v2_worker_of(queue)
    assert worker.take() == [wire.Wait()]
    assert queue.counters().cancelled == 1


def test_a_v1_producer_hears_failed_cancelled() -> None:
    queue = make_queue()
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    admin = v2_producer_of(queue, "admin")
    admin.session.admin = True
    queue.cancel(admin.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Failed(1, "cancelled")]


@pytest.mark.parametrize(
    ("setup", "code"),
    [
        ("unknown", ErrorCode.NOT_FOUND),
        ("other", ErrorCode.FORBIDDEN),
        ("running", ErrorCode.CONFLICT),
    ],
)
def test_cancel_refusals(setup: str, code: ErrorCode) -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    canceller = producer
    if setup == "other":
        canceller = v2_producer_of(queue, "other")
    elif setup == "running":
        v2_worker_of(queue)
    task_id = 99 if setup == "unknown" else 1
    with pytest.raises(Refused) as caught:
        queue.cancel(canceller.session, task_id)
    assert caught.value.code == code
    assert queue.task(1).task_id == 1  # nothing lost


def test_the_same_tls_identity_may_cancel_across_connections() -> None:
    queue = make_queue()
    first = v2_producer_of(queue, "first")
    first.session.identity = "billing"
    submit_to(queue, first.session, b"t", b"x")
    second = v2_producer_of(queue, "second")
    second.session.identity = "billing"
    assert queue.cancel(second.session, 1)["state"] == "cancelled"


# -- pause, resume, purge ---------------------------------------------------------------


def test_a_paused_queue_accepts_but_dispatches_nothing_until_resumed() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    worker = v2_worker_of(queue, queues=("mail",))
    worker.take()
    assert queue.set_paused("mail", True) == {"queue": "mail", "paused": True}
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "mail")
    assert producer.take() == [taskflow.Ok(1)]
    assert worker.take() == []
    queue.set_paused("mail", False)
    assert worker.task_ids() == [1]
    assert journal.pauses == [("mail", True), ("mail", False)]


def test_pausing_a_new_queue_creates_it_and_resuming_an_unknown_one_is_not_found() -> None:
    queue = make_queue()
    queue.set_paused("later", True)
    assert queue.queues["later"].paused
    with pytest.raises(Refused) as caught:
        queue.set_paused("nowhere", False)
    assert caught.value.code == ErrorCode.NOT_FOUND


def test_purge_cancels_the_queued_tasks_and_leaves_running_ones() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", "q")
    worker = v2_worker_of(queue, queues=("q",))
    assert worker.task_ids() == [1]
    producer.take()
    assert queue.purge("q") == {"queue": "q", "purged": 2}
    assert producer.take() == [admin.Cancelled(2), admin.Cancelled(3)]
    queue.done(worker.session, 1)
    assert producer.take() == [taskflow.Done(1)]


# -- idempotent submit --------------------------------------------------------------------


def test_a_second_submit_of_a_key_gets_the_first_id_and_queues_nothing() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", key=b"order-7")
    submit_to(queue, producer.session, b"t", b"x", key=b"order-7")
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(1, duplicate=True)]
    assert queue.queued == 1


def test_keys_are_per_queue() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "a", key=b"k")
    submit_to(queue, producer.session, b"t", b"x", "b", key=b"k")
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(2)]


def test_a_duplicate_of_a_finished_task_hears_its_outcome_within_the_window() -> None:
    clock = Clock()
    queue = make_queue(clock, limits=QueueLimits(dedup_window=60))
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    worker = v2_worker_of(queue)
    queue.failed(worker.session, worker.task_ids()[0], "smtp down")
    producer.take()
    clock.advance(30)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    answers = producer.take()
    assert answers[0] == taskflow.Ok(1, duplicate=True)
    assert isinstance(answers[1], wire.Failed) and answers[1].task_id == 1
    clock.advance(31)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    assert producer.take() == [taskflow.Ok(2)]  # the window is over: a new task


def test_a_resubmit_after_a_reconnect_takes_over_the_outcome() -> None:
    queue = make_queue()
    first = v2_producer_of(queue, "first")
    submit_to(queue, first.session, b"t", b"x", key=b"k")
    first.disconnect()
    second = v2_producer_of(queue, "second")
    submit_to(queue, second.session, b"t", b"x", key=b"k")
    worker = v2_worker_of(queue)
    queue.done(worker.session, worker.task_ids()[0])
    assert second.take() == [taskflow.Ok(1, duplicate=True), taskflow.Done(1)]


def test_a_duplicate_of_a_task_not_yet_durable_waits_for_its_answer() -> None:
    journal = FakeJournal(waits=True)
    queue = make_queue(journal=journal)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    assert producer.take() == []
    journal.sync()
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(1, duplicate=True)]


def test_a_refused_submit_forgets_its_key() -> None:
    journal = FakeJournal(waits=True)
    queue = make_queue(journal=journal)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    journal.fail()
    answers = producer.take()
    assert [a.code for a in answers] == [1, 1]
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    journal.sync()
    assert producer.take() == [taskflow.Ok(2)]


def test_the_key_table_is_bounded_oldest_first() -> None:
    queue = make_queue(limits=QueueLimits(max_dedup_keys=2))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=10)
    for key in (b"a", b"b", b"c"):
        submit_to(queue, producer.session, b"t", b"x", key=key)
    for task_id in worker.task_ids():
        queue.done(worker.session, task_id)
    assert len(queue.keys) == 2 and queue.keys.evicted == 1
    producer.take()
    submit_to(queue, producer.session, b"t", b"x", key=b"a")  # forgotten: runs again
    submit_to(queue, producer.session, b"t", b"x", key=b"c")
    assert producer.take()[:2] == [taskflow.Ok(4), taskflow.Ok(3, duplicate=True)]


# -- introspection ------------------------------------------------------------------------


def test_peek_shows_the_next_tasks_in_dispatch_order_without_taking_them() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"low", b"x", "q", 1)
    submit_to(queue, producer.session, b"high", b"xyz", "q", 8)
    peeked = introspect.peek(queue, "q", 5)
    assert [(t["id"], t["type"], t["priority"], t["state"], t["size"]) for t in peeked] == [
        (2, "high", 8, "queued", 3),
        (1, "low", 1, "queued", 1),
    ]
    assert queue.queued == 2
    with pytest.raises(Refused):
        introspect.peek(queue, "nowhere", 1)


def test_queues_lists_depth_per_priority_pause_and_workers() -> None:
    clock = Clock()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "q", 3)
    submit_to(queue, producer.session, b"t", b"x", "q", 3)
    submit_to(queue, producer.session, b"t", b"x", "q", 7)
    queue.set_paused("q", True)
    v2_worker_of(queue, queues=("q",))
    clock.advance(2)
    (default, described) = introspect.queues(queue)
    assert default["name"] == "default"
    assert described["name"] == "q"
    assert described["depth"] == 3 and described["paused"] and described["workers"] == 1
    assert described["priorities"] == {"7": 1, "3": 2}
    assert described["oldest_age"] == 2.0


def test_why_a_task_waits() -> None:
    clock = Clock()
    limits = QueueLimits(declared={"q": QueuePolicy(key_concurrency=1)})
    queue = make_queue(clock, limits=limits)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "q", 5, fairness=b"acme")
    submit_to(queue, producer.session, b"t", b"x", "q", 9)
    submit_to(queue, producer.session, b"t", b"x", "q", 5, fairness=b"acme")
    answer = introspect.inspect(queue, 3)
    reasons = {r["reason"]: r for r in answer["why"]}
    assert set(reasons) == {"no_workers", "ahead"}
    assert (reasons["ahead"]["ahead"], reasons["ahead"]["higher_priority"]) == (2, 1)
    assert answer["estimated_start"] is None  # nothing has drained yet
    worker = v2_worker_of(queue, credits=5, queues=("q",))
    started = worker.task_ids()
    assert started == [2, 1]  # acme may run one at a time
    reasons = {r["reason"]: r for r in introspect.inspect(queue, 3)["why"]}
    assert reasons["key_concurrency"]["running"] == 1
    clock.advance(10)
    queue.done(worker.session, 2)
    assert introspect.inspect(queue, 1)["state"] == "running"
    queue.set_paused("q", True)
    assert "paused" in {r["reason"] for r in introspect.inspect(queue, 3)["why"]}
    assert introspect.inspect(queue, 3)["estimated_start"] is not None


def test_cancelling_or_purging_the_last_task_of_an_unserved_queue_forgets_it_once() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "lonely")
    assert queue.cancel(producer.session, 1)["state"] == "cancelled"
    assert "lonely" not in queue.queues
    submit_to(queue, producer.session, b"t", b"x", "lonely")
    assert queue.purge("lonely") == {"queue": "lonely", "purged": 1}
    assert "lonely" not in queue.queues


def test_a_finished_tasks_key_does_not_shadow_a_newer_live_one() -> None:
    clock = Clock()
    queue = make_queue(clock, limits=QueueLimits(dedup_window=60))
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    worker = v2_worker_of(queue)
    queue.done(worker.session, worker.task_ids()[0])
    clock.advance(61)  # the window is over: a new task takes the key
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    producer.take()
    # The first task's entry again (as a journal may replay it): the live task keeps the key.
    from quicx.daemon.journal.interface import KeyEntry

    queue.keys.finish(KeyEntry("default", b"k", 1, clock.seconds() - 61, "done"), clock.seconds())
    submit_to(queue, producer.session, b"t", b"x", key=b"k")
    assert producer.take() == [taskflow.Ok(2, duplicate=True)]


# -- monitor queries share the reactor --------------------------------------------------------


def monitor_connection(slice_seconds: float) -> tuple[Clock, StringTransport, Any]:
    """A daemon connection on a Clock, its monitor queries given C{slice_seconds} a turn."""
    clock = Clock()
    queue = make_queue(clock)
    factory = QuicxServerFactory(queue, clock, Limits(monitor_slice=slice_seconds))
    server = factory.buildProtocol(None)
    transport = StringTransport()
    server.makeConnection(transport)
    producer = v2_producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    return clock, transport, server


def answers(transport: StringTransport) -> list[int]:
    """The types of the frames written so far, taking them."""
    parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)
    written = parser.feed(transport.value())
    transport.clear()
    return [frame.message_type for frame in written]  # type: ignore[union-attr]


def next_turn(clock: Clock) -> None:
    """
    One turn of the reactor: the calls due now, not those they schedule
    (C{Clock.advance} would run those too, as if in the same turn).
    """
    due = [call for call in clock.getDelayedCalls() if call.getTime() <= clock.seconds()]
    for call in due:
        clock.calls.remove(call)
        call.func(*call.args, **call.kw)


def test_pipelined_monitor_queries_past_their_slice_wait_for_the_next_turn() -> None:
    """
    Past its slice of the reactor, the rest of a read's frames wait for the
    next turn (the connection unread meanwhile), then are handled in order.
    """
    clock, transport, server = monitor_connection(0.0)  # one monitor query a turn
    inspect, queues, heartbeat = (
        admin.encode_inspect(3),
        admin.encode_queues(),
        link.HEARTBEAT_FRAME,
    )
    server.dataReceived(inspect * 3 + heartbeat + queues + heartbeat)
    assert answers(transport) == [codec.MessageType.INFO]  # the first INSPECT's
    assert transport.producerState == "paused"
    turns = []
    while transport.producerState == "paused":
        next_turn(clock)
        turns.append(answers(transport))
    info, pong = codec.MessageType.INFO, codec.MessageType.PONG
    assert turns == [[info], [info], [pong, info], [pong]]


def test_monitor_queries_within_their_slice_are_answered_in_the_same_turn() -> None:
    _, transport, server = monitor_connection(60.0)
    server.dataReceived(admin.encode_inspect(3) * 50 + link.HEARTBEAT_FRAME)
    assert answers(transport) == [codec.MessageType.INFO] * 50 + [codec.MessageType.PONG]
    assert transport.producerState == "producing"


def test_a_connection_lost_with_frames_waiting_drops_them() -> None:
    clock, transport, server = monitor_connection(0.0)
    server.dataReceived(admin.encode_inspect(3) * 5)
    answers(transport)
    server.connectionLost(Failure(ConnectionDone()))
    clock.advance(0)
    assert answers(transport) == []


# -- a long read is decoded a slice a turn --------------------------------------------------


def sliced_connection(read_slice: int) -> tuple[Clock, StringTransport, Any]:
    """A daemon connection on a Clock that decodes C{read_slice} bytes of its input a turn."""
    clock = Clock()
    factory = QuicxServerFactory(make_queue(clock), clock, Limits(read_slice=read_slice))
    server = factory.buildProtocol(None)
    transport = StringTransport()
    server.makeConnection(transport)
    return clock, transport, server


def test_a_read_past_its_slice_is_decoded_a_slice_a_turn_in_order() -> None:
    """
    A read longer than C{[limits] read_slice} is decoded a slice a turn
    (the connection unread until the last), and frames cut by a slice's end
    are whole in the next.
    """
    clock, transport, server = sliced_connection(4096)
    heartbeat = link.HEARTBEAT_FRAME
    server.dataReceived(heartbeat * 2000)  # 12,000 bytes: three slices
    turns = [answers(transport)]
    while transport.producerState == "paused":
        next_turn(clock)
        turns.append(answers(transport))
    pong = codec.MessageType.PONG
    assert turns == [[pong] * (4096 // 6), [pong] * (8192 // 6 - 4096 // 6), [pong] * 635]
    assert clock.getDelayedCalls() == []


def test_a_read_within_its_slice_is_handled_in_its_own_turn() -> None:
    _, transport, server = sliced_connection(4096)
    server.dataReceived(link.HEARTBEAT_FRAME * 682)  # 4,092 bytes
    assert answers(transport) == [codec.MessageType.PONG] * 682
    assert transport.producerState == "producing"


def test_the_rest_of_a_read_waits_while_the_output_is_over_its_limit() -> None:
    """
    Once the connection's output passes C{max_output_buffer} (its transport
    pauses it), the rest of the read waits until the output drains, and what
    a TLS transport reads meanwhile comes after it.
    """
    clock, transport, server = sliced_connection(4096)
    server.dataReceived(link.HEARTBEAT_FRAME * 1000 + admin.encode_queues())
    assert len(answers(transport)) == 4096 // 6
    server.pauseProducing()  # as the transport does past max_output_buffer
    next_turn(clock)
    assert answers(transport) == []
    assert clock.getDelayedCalls() == []
    server.dataReceived(link.HEARTBEAT_FRAME)  # read ahead by a TLS transport
    next_turn(clock)
    assert answers(transport) == []
    server.resumeProducing()
    while transport.producerState == "paused":
        next_turn(clock)
    pong, info = codec.MessageType.PONG, codec.MessageType.INFO
    assert answers(transport) == [pong] * (1000 - 4096 // 6) + [info, pong]


class TcpLikeTransport(StringTransport):
    """
    A StringTransport whose abort is TCP's: C{disconnecting} stays false and
    C{connectionLost} comes in a later turn (twisted.internet.tcp._AbortingMixin).
    """

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.aborted = False

    def abortConnection(self) -> None:
        if not self.aborted:
            self.aborted = True
            self.clock.callLater(0, self.protocol.connectionLost, Failure(ConnectionDone()))


def test_a_dropped_connection_handles_nothing_more_of_its_read() -> None:
    """
    Once the daemon drops a connection (heartbeat silence, a terminated
    worker's grace, a change of role), the rest of its read is not handled:
    it was, a slice, before connectionLost came.
    """
    clock = Clock()
    factory = QuicxServerFactory(make_queue(clock), clock, Limits(read_slice=4096))
    server = factory.buildProtocol(None)
    transport = TcpLikeTransport(clock)
    server.makeConnection(transport)
    transport.protocol = server
    server.dataReceived(link.HEARTBEAT_FRAME * 2000)
    assert len(answers(transport)) == 4096 // 6
    server.disconnect()
    next_turn(clock)
    assert answers(transport) == []
    assert server.session is None
    assert clock.getDelayedCalls() == []


def test_a_handler_failing_in_a_later_turn_closes_the_connection() -> None:
    """
    A handler's unexpected exception in a later turn closes the connection,
    as Twisted does for one in dataReceived (the reactor would log it, and
    the connection would go on without the rest of the slice, or stay
    paused for good).
    """
    clock = Clock()
    factory = QuicxServerFactory(make_queue(clock), clock, Limits(read_slice=4096))
    heartbeat = factory.handlers_v1[wire.MessageType.HEARTBEAT]
    handled = []

    def failing(connection: Any, payload: bytes) -> None:
        handled.append(payload)
        if len(handled) == 1990:
            raise RuntimeError("a handler's bug")
        heartbeat(connection, payload)

    factory.handlers_v1 = {**factory.handlers_v1, wire.MessageType.HEARTBEAT: failing}
    server = factory.buildProtocol(None)
    transport = StringTransport()
    server.makeConnection(transport)
    server.dataReceived(wire.encode_heartbeat() * 2000)
    while clock.getDelayedCalls():
        next_turn(clock)
    assert len(answers(transport)) == 1989
    assert transport.disconnecting


def test_the_rest_of_a_large_frame_is_taken_in_the_turn_it_was_read() -> None:
    """
    The rest of a frame gathered whole (or of a refused one, skipped)
    decodes nothing: a read past its slice is not held for a later turn
    only to be copied into its frame (100 connections that each sent most
    of a 1 MiB PUBLISH left RSS 17 MiB up once they had gone).
    """
    clock, transport, server = sliced_connection(4096)
    heartbeat = link.HEARTBEAT_FRAME
    large = wire.encode_submit(b"t", bytes(200_000))  # past the pool's largest block: refused
    server.dataReceived(heartbeat + large[:150_000])
    assert answers(transport) == [codec.MessageType.PONG, codec.MessageType.ERROR]
    assert server._unread == b"" and clock.getDelayedCalls() == []
    server.dataReceived(large[150_000:] + heartbeat)  # its rest now, what follows next turn
    assert server._unread_at == len(large) - 150_000
    next_turn(clock)
    assert answers(transport) == [codec.MessageType.PONG]
    assert server._unread == b"" and clock.getDelayedCalls() == []
