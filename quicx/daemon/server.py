"""
The server protocol: a thin Twisted shell around L{QueueService}.

Each connection decodes its frames, checks that the message suits the
connection's role (taken from its first SUBMIT or READY: a producer or a
worker), and hands the message to the queue.  STATS, HEARTBEAT and PONG suit
any connection and fix no role.

Each connection is held to the factory's L{Limits}: the number of
connections, a deadline for the first frame, the length of task types and
FAILED reasons, and the unsent output it may pile up.  A connection whose
output passes the limit is not read from until the output drains (it is its
transport's push producer), so a client that never reads cannot make the
daemon buffer without end.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any, Final

from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from quicx.daemon.core import QueueService, Task
from quicx.daemon.settings import Limits
from quicx.net.certificates import Authorization
from quicx.net.framer import FrameReceiver, OutputBatcher, set_no_delay
from quicx.net.tls import describe_peer, peer_identity
from quicx.net.twisted_types import Factory
from quicx.protocol import wire
from quicx.protocol.session import IPeer, ProtocolViolation, Role, Session
from quicx.protocol.wire import ErrorCode, MessageType


class _Unknown(Enum):
    """A sentinel's type (a one-member Enum, so that C{is} narrows it away)."""

    UNKNOWN = "unknown"


_UNKNOWN: Final = _Unknown.UNKNOWN
"""A connection's certificate identity before it is first needed."""


class NotAuthorized(Exception):
    """The peer's identity may not take the role it asked for (ERROR, then closed)."""


@implementer(IPeer, IPushProducer)
class QuicxServerProtocol(FrameReceiver):
    """One client connection to the daemon."""

    log = Logger()
    factory: QuicxServerFactory
    session: Session[Task] | None = None
    identity: str | _Unknown | None = _UNKNOWN
    _first_frame_deadline: IDelayedCall | None = None

    def connectionMade(self) -> None:
        factory = self.factory
        transport: Any = self.transport
        self.maxLength = factory.max_length
        super().connectionMade()
        peer = transport.getPeer()
        host = getattr(peer, "host", None)
        self.peer_name = f"{host}:{peer.port}" if host else str(peer)
        self.queue = factory.queue
        self.limits = limits = factory.limits
        if len(self.queue.sessions) >= limits.max_connections:
            # Refused before it costs a session: one ERROR, then the close.
            transport.write(
                wire.encode_error(
                    ErrorCode.QUEUE_FULL,
                    f"too many connections (max_connections = {limits.max_connections})",
                )
            )
            transport.loseConnection()
            return
        set_no_delay(transport)
        self._batcher = factory.batcher
        self._output = self._batcher.output(transport)
        self.session = self.queue.open_session(self)
        self._clock = self.queue.clock
        transport.bufferSize = limits.max_output_buffer
        transport.registerProducer(self, True)
        if limits.first_frame_timeout:
            self._first_frame_deadline = factory.reactor.callLater(
                limits.first_frame_timeout, self._no_first_frame
            )

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._first_frame_deadline is not None and self._first_frame_deadline.active():
            self._first_frame_deadline.cancel()
        if self.session is not None:
            self.queue.close_session(self.session)

    def _no_first_frame(self) -> None:
        self._first_frame_deadline = None
        self.log.info(
            "closing {peer}: no whole frame within {seconds:g} s",
            peer=self.peer_name,
            seconds=self.limits.first_frame_timeout,
        )
        self.transport.abortConnection()

    def _authorize(self, role: str) -> None:
        """
        @raise NotAuthorized: the [tls] role lists do not let this peer's
            certificate identity act as C{role}.
        """
        authorization = self.factory.authorization
        if authorization is None:
            return
        if self.identity is _UNKNOWN:
            self.identity = peer_identity(self.transport)
        if not authorization.allows(self.identity, role):
            raise NotAuthorized(f"{describe_peer(self.transport)} may not act as a {role}")

    # -- IPushProducer: the transport pauses us when our output piles up ----------

    def pauseProducing(self) -> None:
        assert self.session is not None
        self.session.paused = True
        self.transport.pauseProducing()

    def resumeProducing(self) -> None:
        assert self.session is not None
        self.session.paused = False
        self.transport.resumeProducing()

    def stopProducing(self) -> None:
        pass

    # -- IPeer -------------------------------------------------------------------

    def sendFrame(self, data: bytes) -> None:
        # Sent at the end of this reactor iteration, with the connection's
        # other frames (see OutputBatcher).
        self._output.send(data)

    def disconnect(self) -> None:
        self.transport.abortConnection()

    # -- frames --------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.session is None:
            return  # refused: closing
        self.session.last_received = self._clock()
        batcher = self._batcher
        batcher.hold()
        try:
            super().dataReceived(data)
        finally:
            # This peer's own replies (OKs, PONGs) go at once: a client
            # waiting for them is not kept for the rest of the round.  Frames
            # for other connections (TASKs, outcomes) go out together at its end.
            self._output.flush()
            batcher.release()

    def _reply(self, frame: bytes) -> None:
        """Answer this peer's request, in order with its other answers."""
        assert self.session is not None
        self.session.reply(frame)

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self._reply(wire.encode_error(code, reason))

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        if self._first_frame_deadline is not None:
            self._first_frame_deadline.cancel()
            self._first_frame_deadline = None
        handler = _HANDLERS.get(message_type)
        if handler is None:
            self.frameRejected(
                ErrorCode.INVALID_MESSAGE,
                f"{MessageType(message_type).name} is sent by the daemon, not to it",
            )
            return
        try:
            handler(self, payload)
        except (wire.MalformedMessage, ProtocolViolation) as e:
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
        except NotAuthorized as e:
            self.log.info("refused {peer}: {reason}", peer=self.peer_name, reason=str(e))
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
            self._output.flush()
            # A TLS transport will not close while a producer is registered.
            self.transport.unregisterProducer()
            self.transport.loseConnection()

    def _submit(self, payload: bytes) -> None:
        task_type, body = wire.submit_fields(payload)
        if len(task_type) > self.limits.max_type_length:
            raise ProtocolViolation(
                f"task type of {len(task_type)} bytes exceeds max_type_length"
                f" ({self.limits.max_type_length})"
            )
        session = self.session
        assert session is not None
        if session.role is not Role.PRODUCER:
            self._authorize("producer")
            self.queue.claim_role(session, Role.PRODUCER)
        self.queue.submit(session, task_type, body)

    def _ready(self, payload: bytes) -> None:
        credits = wire.decode_ready(payload).credits
        session = self.session
        assert session is not None
        if session.role is not Role.WORKER:
            self._authorize("worker")
        self.queue.claim_role(session, Role.WORKER)
        # More than the limit is not an error: the worker is granted the limit
        # and simply never sees more tasks at once.
        self.queue.ready(session, min(credits, self.limits.max_credits))

    def _done(self, payload: bytes) -> None:
        session = self.session
        assert session is not None
        self.queue.done(session, wire.done_task_id(payload))

    def _failed(self, payload: bytes) -> None:
        message = wire.decode_failed(payload)
        reason_length = len(payload) - wire.TASK_ID.size
        if reason_length > self.limits.max_reason_length:
            # Refused, not cut: the worker still holds the task and may send
            # a shorter reason.
            raise ProtocolViolation(
                f"FAILED reason of {reason_length} bytes exceeds max_reason_length"
                f" ({self.limits.max_reason_length})"
            )
        session = self.session
        assert session is not None
        self.queue.failed(session, message.task_id, message.reason)

    def _heartbeat(self, payload: bytes) -> None:
        wire.decode_heartbeat(payload)
        self._reply(wire.PONG_FRAME)

    def _pong(self, payload: bytes) -> None:
        # Its arrival already counted as a sign of life.
        wire.decode_pong(payload)

    def _stats(self, payload: bytes) -> None:
        wire.decode_stats(payload)
        self._authorize("monitor")
        # Any connection may ask, and asking does not fix its role: a client
        # may look at the queue before it submits.
        self._reply(wire.encode_stats_response(self.queue.stats()))


_HANDLERS: dict[int, Callable[[QuicxServerProtocol, bytes], None]] = {
    MessageType.SUBMIT: QuicxServerProtocol._submit,
    MessageType.READY: QuicxServerProtocol._ready,
    MessageType.DONE: QuicxServerProtocol._done,
    MessageType.FAILED: QuicxServerProtocol._failed,
    MessageType.HEARTBEAT: QuicxServerProtocol._heartbeat,
    MessageType.PONG: QuicxServerProtocol._pong,
    MessageType.STATS: QuicxServerProtocol._stats,
}


class QuicxServerFactory(Factory[QuicxServerProtocol]):
    """
    Builds L{QuicxServerProtocol}s that share one L{QueueService}.

    @ivar max_length: the largest frame payload accepted: a SUBMIT of the
        largest size class with the longest task type, or a FAILED with the
        longest reason the limits allow, whichever is longer.
    """

    protocol = QuicxServerProtocol
    noisy = False

    def __init__(
        self,
        queue: QueueService,
        reactor: Any = None,
        limits: Limits | None = None,
        authorization: Authorization | None = None,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.queue = queue
        self.authorization = authorization
        self.reactor = reactor
        self.limits = limits or Limits()
        self.batcher = OutputBatcher(reactor)
        self.max_length = max(
            queue.pool.max_size + wire.SUBMIT_TYPE_OVERHEAD,
            wire.TASK_ID.size + self.limits.max_reason_length,
        )
