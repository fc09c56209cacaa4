"""
The worker's side of fenced outcomes and leases, against a fake daemon: a
L{WorkerProtocol} on a string transport, its time a L{Clock}.  What it sends
(ACK, NACK, TOUCH; DONE and FAILED to daemons without tokens) is decoded and
checked; handlers run on the "reactor" and finish when the test says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import ILogObserver, LogLevel, globalLogPublisher

from quicx import __version__
from quicx.clients.leases import Lease, touch_seconds
from quicx.clients.worker import TaskContext, Unrecoverable, Worker, WorkerProtocol
from quicx.protocol import codec, link, outcomes, registry, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser

LEASE_MS = 10_000


class ThreadedClock(Clock):
    """A clock that also takes calls from threads: each runs at the next advance."""

    def callFromThread(self, f: Callable[..., object], *args: object) -> None:
        self.callLater(0, f, *args)


class FakeDaemon:
    """
    A worker slot connected to nothing: feeds it frames, decodes what it writes.

    @ivar before_ready: what the slot sent between HELLO and READY (FOLLOW).
    """

    def __init__(self, worker: Worker, hello: dict[str, Any] | None = None) -> None:
        self.clock = ThreadedClock()
        worker._reactor = self.clock
        self.slot = WorkerProtocol(worker)
        self.transport = StringTransport()
        self.parser = FrameParser(1 << 22, check_types=False, v2_max_length=1 << 22)
        self.slot.makeConnection(self.transport)
        if worker.protocol == codec.VERSION:
            assert self.sent() == [link.Hello("quicx-python", __version__, ())]
            self.feed(link.encode_info(hello or {"server": "quicx"}))
        *self.before_ready, ready = self.sent()
        assert isinstance(ready, taskflow.Ready | wire.Ready)

    def feed(self, data: bytes) -> None:
        self.slot.dataReceived(data)

    def sent(self) -> list[Any]:
        data = self.transport.value()
        self.transport.clear()
        messages = []
        for frame in self.parser.feed(data):
            assert isinstance(frame, Frame)
            version = self.parser.version or wire.PROTOCOL_VERSION
            messages.append(registry.decode(frame.message_type, frame.payload, version))
        return messages

    def task(
        self, task_id: int, token: int = 0, lease_ms: int = LEASE_MS, kind: bytes = b"t"
    ) -> None:
        context = taskflow.task_context(None, None, token, lease_ms, failures=1, retries=3)
        self.feed(taskflow.encode_task(task_id, kind, b"x", b"\x07default", 0, 2, 0, context))


class Handler:
    """A reactor handler whose outcome the test gives; it keeps each context."""

    def __init__(self) -> None:
        self.contexts: list[TaskContext] = []
        self.outcomes: list[Deferred[None]] = []

    def __call__(self, payload: bytes, context: TaskContext) -> Deferred[None]:
        self.contexts.append(context)
        self.outcomes.append(Deferred())
        return self.outcomes[-1]


def worker_with(handler: Handler, **options: Any) -> Worker:
    worker = Worker(**options)
    worker.register("t", handler, thread=False)
    return worker


def test_a_version_2_worker_acks_and_nacks_quoting_the_token() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler))
    daemon.task(1, token=71)
    daemon.task(2, token=72)
    daemon.task(3, token=73)
    assert daemon.sent() == []
    handler.outcomes[0].callback(None)
    handler.outcomes[1].errback(RuntimeError("smtp timed out"))
    handler.outcomes[2].errback(Unrecoverable("no such address"))
    assert daemon.sent() == [
        outcomes.Ack(1, 71),
        outcomes.Nack(2, 72, "smtp timed out", permanent=False),
        outcomes.Nack(3, 73, "no such address", permanent=True),
    ]


def test_the_context_has_the_token_lease_failures_and_retries() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler))
    daemon.task(1, token=71)
    daemon.task(2, token=72, lease_ms=0)
    first, unlimited = handler.contexts
    assert (first.token, first.lease, first.failures, first.retries) == (71, 10.0, 1, 3)
    assert (first.attempt, first.queue) == (2, "default")
    assert unlimited.lease is None


def test_without_a_token_a_version_2_worker_says_done_and_failed() -> None:
    # A daemon of protocol part 1 gives no token, and knows no ACK.
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler))
    daemon.task(1)
    daemon.task(2)
    handler.outcomes[0].callback(None)
    handler.outcomes[1].errback(Unrecoverable("bad"))
    assert daemon.sent() == [taskflow.Done(1), wire.Failed(2, "bad")]
    assert daemon.parser.version == codec.VERSION
    assert handler.contexts[0].token == 0 and handler.contexts[0].lease is None


def test_a_version_1_worker_is_unchanged() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, protocol=1))
    daemon.feed(wire.encode_task(5, b"t", b"x"))
    daemon.feed(wire.encode_task(6, b"t", b"x"))
    handler.outcomes[0].callback(None)
    handler.outcomes[1].errback(Unrecoverable("bad"))
    assert daemon.sent() == [wire.Done(5), wire.Failed(6, "bad")]
    assert (handler.contexts[0].token, handler.contexts[0].lease) == (0, None)


def test_extend_sends_touch_until_the_outcome() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler))
    daemon.task(1, token=71)
    (context,) = handler.contexts
    context.extend(29.2)  # whole seconds, rounded up; sent by the reactor thread
    assert daemon.sent() == []
    daemon.clock.advance(0)
    assert daemon.sent() == [outcomes.Touch(1, 71, 30)]
    with pytest.raises(ValueError, match="a positive number of seconds"):
        context.extend(0)
    context.extend(60)
    handler.outcomes[0].callback(None)
    daemon.clock.advance(0)  # the TOUCH asked for before the outcome comes too late: not sent
    assert daemon.sent() == [outcomes.Ack(1, 71)]


def test_extend_without_a_token_does_nothing() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, protocol=1))
    daemon.feed(wire.encode_task(5, b"t", b"x"))
    handler.contexts[0].extend(30)
    daemon.clock.advance(0)
    assert daemon.sent() == []


def test_auto_extend_touches_every_half_lease_while_the_handler_runs() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, auto_extend=True))
    daemon.task(1, token=71)
    daemon.clock.advance(4.9)
    assert daemon.sent() == []
    daemon.clock.advance(0.1)
    assert daemon.sent() == [outcomes.Touch(1, 71, 10)]
    daemon.clock.advance(5)
    assert daemon.sent() == [outcomes.Touch(1, 71, 10)]
    # A longer extension by hand stands: no TOUCH until it has a lease left.
    handler.contexts[0].extend(30)
    daemon.clock.advance(0)
    assert daemon.sent() == [outcomes.Touch(1, 71, 30)]
    daemon.clock.pump([5, 5, 5])
    assert daemon.sent() == []
    daemon.clock.advance(5)  # 10 s of the 30 left
    assert daemon.sent() == [outcomes.Touch(1, 71, 10)]
    handler.outcomes[0].callback(None)
    assert daemon.sent() == [outcomes.Ack(1, 71)]
    daemon.clock.pump([5] * 10)
    assert daemon.sent() == [] and daemon.clock.getDelayedCalls() == []


def test_auto_extend_leaves_tasks_without_a_lease_alone() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, auto_extend=True))
    daemon.task(1, token=71, lease_ms=0)
    assert daemon.clock.getDelayedCalls() == []
    handler.outcomes[0].callback(None)
    assert daemon.sent() == [outcomes.Ack(1, 71)]


def test_a_stale_report_is_a_warning_and_the_slot_goes_on() -> None:
    events: list[dict[str, Any]] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    try:
        handler = Handler()
        daemon = FakeDaemon(worker_with(handler))
        daemon.task(1, token=71)
        handler.outcomes[0].callback(None)
        stale = "stale ACK of task 1: token 71 is not its current delivery (72)"
        daemon.feed(link.encode_error(codec.ErrorCode.STALE, stale))
        daemon.task(2, token=73)
        handler.outcomes[1].callback(None)
    finally:
        globalLogPublisher.removeObserver(observer)
    assert daemon.sent() == [outcomes.Ack(1, 71), outcomes.Ack(2, 73)]
    assert not daemon.transport.disconnecting
    (warning,) = [e for e in events if e.get("message") == stale]
    assert warning["log_level"] == LogLevel.warn


def test_touch_seconds_are_whole_and_in_range() -> None:
    assert [touch_seconds(s) for s in (0.001, 1, 1.5, 0xFFFFFFFF)] == [1, 1, 2, 0xFFFFFFFF]
    for bad in (0, -1, 0x100000000, float("nan")):
        with pytest.raises(ValueError):
            touch_seconds(bad)


def test_a_lease_ended_sends_nothing() -> None:
    sent: list[bytes] = []
    clock = ThreadedClock()
    lease = Lease(clock, sent.append, 1, 71, 2000)
    lease.keep_alive()
    clock.advance(1)
    assert sent == [outcomes.encode_touch(1, 71, 2)]
    lease.end()
    lease.extend(5)
    clock.advance(5)
    assert sent == [outcomes.encode_touch(1, 71, 2)]
