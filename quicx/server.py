"""
The server protocol: a thin Twisted shell around L{QueueService}.

Each connection decodes its frames, checks that the message suits the
connection's role (taken from its first SUBMIT or READY: a producer or a
worker), and hands the message to the queue.  STATS, HEARTBEAT and PONG suit
any connection and fix no role.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.protocol import Factory
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from quicx import wire
from quicx.framing import FrameReceiver, OutputBatcher, set_no_delay
from quicx.queue import IPeer, ProtocolViolation, QueueService, Role, Session
from quicx.wire import ErrorCode, MessageType


@implementer(IPeer)
class QuicxServerProtocol(FrameReceiver):
    """One client connection to the daemon."""

    log = Logger(namespace="quicx.server")
    factory: QuicxServerFactory
    session: Session

    def connectionMade(self) -> None:
        self.maxLength = self.factory.max_length
        super().connectionMade()
        peer = self.transport.getPeer()  # type: ignore[union-attr]
        host = getattr(peer, "host", None)
        self.peer_name = f"{host}:{peer.port}" if host else str(peer)
        set_no_delay(self.transport)
        self._batcher = self.factory.batcher
        self._output = self._batcher.output(self.transport)
        self.queue = self.factory.queue
        self.session = self.queue.open_session(self)
        self._clock = self.queue.clock

    def connectionLost(self, reason: Failure) -> None:  # type: ignore[override]
        self.queue.close_session(self.session)

    # -- IPeer -------------------------------------------------------------------

    def sendFrame(self, data: bytes) -> None:
        # Sent at the end of this reactor iteration, with the connection's
        # other frames (see OutputBatcher).
        self._output.send(data)

    def disconnect(self) -> None:
        self.transport.abortConnection()  # type: ignore[union-attr]

    # -- frames --------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
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

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self.sendFrame(wire.encode_error(code, reason))

    def frameReceived(self, message_type: int, payload: bytes) -> None:
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

    def _submit(self, payload: bytes) -> None:
        task_type, body = wire.submit_fields(payload)
        session = self.session
        if session.role is not Role.PRODUCER:
            self.queue.claim_role(session, Role.PRODUCER)
        self.queue.submit(session, task_type, body)

    def _ready(self, payload: bytes) -> None:
        wire.decode_ready(payload)
        self.queue.claim_role(self.session, Role.WORKER)
        self.queue.ready(self.session)

    def _done(self, payload: bytes) -> None:
        self.queue.done(self.session, wire.done_task_id(payload))

    def _failed(self, payload: bytes) -> None:
        message = wire.decode_failed(payload)
        self.queue.failed(self.session, message.task_id, message.reason)

    def _heartbeat(self, payload: bytes) -> None:
        wire.decode_heartbeat(payload)
        self.sendFrame(wire.PONG_FRAME)

    def _pong(self, payload: bytes) -> None:
        # Its arrival already counted as a sign of life.
        wire.decode_pong(payload)

    def _stats(self, payload: bytes) -> None:
        wire.decode_stats(payload)
        # Any connection may ask, and asking does not fix its role: a client
        # may look at the queue before it submits.
        self.sendFrame(wire.encode_stats_response(self.queue.stats()))


_HANDLERS: dict[int, Callable[[QuicxServerProtocol, bytes], None]] = {
    MessageType.SUBMIT: QuicxServerProtocol._submit,
    MessageType.READY: QuicxServerProtocol._ready,
    MessageType.DONE: QuicxServerProtocol._done,
    MessageType.FAILED: QuicxServerProtocol._failed,
    MessageType.HEARTBEAT: QuicxServerProtocol._heartbeat,
    MessageType.PONG: QuicxServerProtocol._pong,
    MessageType.STATS: QuicxServerProtocol._stats,
}


class QuicxServerFactory(Factory):
    """
    Builds L{QuicxServerProtocol}s that share one L{QueueService}.

    @ivar max_length: the largest frame payload accepted: a SUBMIT of the
        largest size class with the longest task type.
    """

    protocol = QuicxServerProtocol
    noisy = False

    def __init__(self, queue: QueueService, reactor: Any = None) -> None:
        if reactor is None:
            from twisted.internet import reactor  # type: ignore[no-redef]
        self.queue = queue
        self.batcher = OutputBatcher(reactor)
        self.max_length = queue.pool.max_size + wire.SUBMIT_TYPE_OVERHEAD
