"""
The server protocol: a thin Twisted shell around L{QueueService}.

Each connection decodes its frames and hands each to its protocol version's
handler (L{quicx.daemon.handlers.tables}), which decodes the message and
asks the queue; the shell keeps what is the connection's: the first frame
(which sets the version), the roles a connection may take (taken from its
first SUBMIT or READY: a producer or a worker; STATS, HEARTBEAT and PONG
suit any connection and fix no role), the order of its answers, the errors
a handler raises (answered ERROR) and the connection's loss.

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
from time import perf_counter
from typing import Any, Final

from attrs import define, frozen
from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from quicx.daemon import speakers
from quicx.daemon.config import Limits
from quicx.daemon.handlers import tables
from quicx.daemon.handlers.connection import Handler, NotAuthorized, Roles
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.bulk import BulkActions
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.fastpath import FastPath
from quicx.daemon.queue.model import Refused, Session
from quicx.daemon.queue.shared import SharedData
from quicx.net.certificates import Authorization
from quicx.net.framer import FrameReceiver, OutputBatcher, set_no_delay
from quicx.net.tls import describe_peer, peer_identity
from quicx.net.twisted_types import Factory
from quicx.protocol import codec, link, monitor, replication, taskflow, wire
from quicx.protocol.bulk import MAX_BULK
from quicx.protocol.checkpoints import CHECKPOINT_FIXED
from quicx.protocol.frames import Frame, RejectedFrame
from quicx.protocol.outcomes import NACK_FIXED, PROGRESS_FIXED
from quicx.protocol.role import ROLE_SIZE
from quicx.protocol.session import IPeer, ProtocolViolation, Role
from quicx.protocol.shared_data import PUBLISH_FIXED
from quicx.protocol.wire import ErrorCode
from quicx.protocol.workers import ANNOUNCE_FIELDS_SIZE


class _Unknown(Enum):
    """A sentinel's type (a one-member Enum, so that C{is} narrows it away)."""

    UNKNOWN = "unknown"


_UNKNOWN: Final = _Unknown.UNKNOWN
"""A connection's certificate identity before it is first needed."""

_REFUSALS = (codec.MalformedMessage, ProtocolViolation, Refused, NotAuthorized)
"""What a handler raises to refuse its frame (see L{QuicxServerProtocol._refused})."""


@define
class _Held:
    """An answer that waits for the journal (see L{Session.wait_for})."""

    reply: bytes | None = None


@implementer(IPeer)
@frozen
class _GonePeer:
    """
    What a session refers to once its connection is lost: the peer's name,
    for the logs.  Not the protocol: a session lives on while tasks it
    submitted are owed an outcome, and through the protocol it would keep
    the transport and its unsent replies (up to C{max_output_buffer} and
    more) for as long.
    """

    peer_name: str

    def sendFrame(self, data: bytes) -> None:
        pass

    def disconnect(self) -> None:
        pass


@implementer(IPeer, IPushProducer)
class QuicxServerProtocol(FrameReceiver):
    """
    One client connection to the daemon: each frame goes to its handler
    (see L{quicx.daemon.handlers}), which sees it as a
    L{quicx.daemon.handlers.connection.Connection}.
    """

    log = Logger()
    factory: QuicxServerFactory
    session: Session | None = None
    identity: str | _Unknown | None = _UNKNOWN
    _versioned = False
    _first_frame_deadline: IDelayedCall | None = None
    _monitor_since = 0.0  # when this turn's first monitor query began
    _deferred: list[Frame | RejectedFrame] | None = None  # decoded, for a later turn
    _unread = b""  # read, from _unread_at on to be decoded in later turns
    _unread_at = 0
    _later: IDelayedCall | None = None  # the later turn, while one is due
    now = 0.0  # when the frames being handled were read

    def connectionMade(self) -> None:
        factory = self.factory
        transport: Any = self.transport
        self.maxLength = factory.max_length
        self.v2MaxLength = factory.v2_max_length
        self.v2TypeLimits = factory.v2_type_limits
        self.maxPayload = factory.queue.pool.max_size
        super().connectionMade()
        peer = transport.getPeer()
        host = getattr(peer, "host", None)
        self.peer_name = f"{host}:{peer.port}" if host else str(peer)
        self.queue = factory.queue
        self.admission = factory.admission
        self.fast = factory.fast
        self.limits = limits = factory.limits
        self.max_type = limits.max_type_length
        if len(self.queue.sessions) >= limits.max_connections:
            # Refused before it costs a session: one ERROR, then the close.
            refusal = factory.connection_refusal()
            transport.write(wire.encode_error(refusal.code, str(refusal)))
            transport.loseConnection()
            self.queue.limit_hit(self.peer_name, refusal)
            return
        set_no_delay(transport)
        self._batcher = factory.batcher
        self._output = self._batcher.output(transport)
        # sendFrame() without its own call: the kernel sends 3 frames a task.
        self.sendFrame = self._output.send  # type: ignore[method-assign]
        self.session = self.queue.open_session(self, speakers.V1)
        self.session.admin = factory.admin
        self._handlers = factory.handlers_v1
        self._clock = self.queue.clock
        # Twisted reads up to this much at once too; [limits] read_slice of a
        # read is decoded a turn (see dataReceived).
        transport.bufferSize = limits.max_output_buffer
        self._read_slice = limits.read_slice
        transport.registerProducer(self, True)
        if limits.first_frame_timeout:
            self._first_frame_deadline = factory.reactor.callLater(
                limits.first_frame_timeout, self._no_first_frame
            )

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._first_frame_deadline is not None and self._first_frame_deadline.active():
            self._first_frame_deadline.cancel()
        self._drop_input()
        super().connectionLost(reason)
        if self.session is not None:
            self.queue.close_session(self.session)
            # The session and this protocol referred to each other: a cycle
            # that only a full collection frees (the tuned collector seldom
            # runs one), and while its tasks live, no collection at all.
            self.session.peer = _GonePeer(self.peer_name)
            self.session = None

    def _no_first_frame(self) -> None:
        self._first_frame_deadline = None
        self.log.info(
            "closing {peer}: no whole frame within {seconds:g} s",
            log_id="connection.no_frame",
            peer=self.peer_name,
            seconds=self.limits.first_frame_timeout,
        )
        self.transport.abortConnection()

    # -- IPushProducer: the transport pauses us when our output piles up ----------

    def pauseProducing(self) -> None:
        assert self.session is not None
        self.session.paused = True
        self.transport.pauseProducing()
        self.queue.failures.limit(
            "not reading from {peer}: its unsent replies passed max_output_buffer"
            " ({size:,} bytes) until it reads them",
            log_id="limit.output_buffer",
            peer=self.peer_name,
            size=self.limits.max_output_buffer,
        )

    def resumeProducing(self) -> None:
        session = self.session
        assert session is not None
        session.paused = False
        if self._unread:  # the rest of a read first: reading resumes once it is handled
            self._wait()
        elif self._later is None:  # else once the frames deferred are handled
            self.transport.resumeProducing()
        self.queue.output_drained(session)

    def stopProducing(self) -> None:
        pass

    # -- IPeer -------------------------------------------------------------------

    def sendFrame(self, data: bytes) -> None:
        # Sent at the end of this reactor iteration, with the connection's
        # other frames (see OutputBatcher).
        self._output.send(data)

    def disconnect(self) -> None:
        # Nothing more of its input is handled: a TCP abort neither sets
        # disconnecting nor calls connectionLost before a later turn.
        self._drop_input()
        self.transport.abortConnection()

    def _drop_input(self) -> None:
        """Forget what is left of the input: the connection is closing."""
        if self._later is not None:
            self._later.cancel()
            self._later = None
        self._deferred = None
        self._unread, self._unread_at = b"", 0

    # -- frames --------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.session is None:
            return  # refused: closing
        self.session.last_received = self.now = self._clock()
        if self._unread or self._later is not None:
            # Read by a TLS transport while a later turn was due: after the rest.
            if self.transport.disconnecting:
                return  # refused: closing (a TLS transport must go on reading)
            self._unread = self._unread[self._unread_at :] + data
            self._unread_at = 0
            self._wait()
        elif len(data) > self._read_slice:
            self._decode(data, 0)
        else:
            self._round(self._parser.feed(data))

    def _decode(self, data: bytes, start: int) -> None:
        """
        Handle the frames of C{[limits] read_slice} bytes of C{data} from
        C{start} in this turn, and leave the rest for the next (Twisted reads
        up to the transport's buffer size, max_output_buffer): a megabyte of
        6-byte HEARTBEATs decoded at once was 175,000 frames, RSS 20 MiB up,
        which the allocators kept after.  The rest of a large frame (or of a
        refused one) decodes no frame: it is taken at once, so that a read is
        not held for a later turn only to be copied into its frame.
        """
        parser = self._parser
        end = start + self._read_slice
        events = parser.feed(data[start:end])  # (all of it: the same object, not a copy)
        if end < len(data) and (awaited := parser.awaited):
            events += parser.feed(data[end : end + awaited])
            end += awaited
        if end < len(data):
            self._unread, self._unread_at = data, end
            self._wait()
        else:
            self._unread, self._unread_at = b"", 0
        self._round(events)

    def _round(self, events: list[Frame | RejectedFrame]) -> None:
        """Handle frames read, in one turn of the reactor and one round of output."""
        self._monitor_since = 0.0
        batcher = self._batcher
        batcher.hold()
        try:
            self.deliverFrames(events)
        finally:
            # This peer's own replies (OKs, PONGs) go at once: a client
            # waiting for them is not kept for the rest of the round.  Frames
            # for other connections (TASKs, outcomes) go out together at its end.
            self._output.flush()
            batcher.release()

    def monitor_query(self) -> None:
        """
        A monitor query begins: the peer must be allowed to ask, and the
        turn may end once it is answered: a connection's monitor queries
        (STATS, QUEUES, PEEK, INSPECT, DEAD, SCHEDULES, WATCH, STATUS) may
        hold the reactor C{[limits] monitor_slice} in one turn; past it, the
        rest of what was read waits for the next turn, the connection unread
        until then, so other connections are served in between.
        """
        self.authorize("monitor")
        if not self._monitor_since:
            self._monitor_since = perf_counter()
        self.checkTurn = True

    def turnEnded(self) -> bool:
        return perf_counter() - self._monitor_since >= self.limits.monitor_slice

    def framesDeferred(self, events: list[Frame | RejectedFrame]) -> None:
        self._deferred = events
        self._wait()

    def _wait(self) -> None:
        """Stop reading; what is left of the input is handled in the next turn."""
        if self._later is None:
            self.transport.pauseProducing()
            self._later = self.factory.reactor.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        """
        Handle the frames a turn ended before, then the next slice of the
        read, then read again: what is left waits while the connection's
        output is over C{max_output_buffer} (L{resumeProducing} goes on).
        """
        self._later = None
        try:
            self._handle_turn()
        except Exception:
            # As Twisted does for dataReceived: log it and close, rather than
            # drop the rest of a slice or stay paused for good.
            self.log.failure(
                "handling {peer}'s frames failed: closing it",
                peer=self.peer_name,
                log_id="connection.failed",
            )
            self.disconnect()

    def _handle_turn(self) -> None:
        session = self.session
        assert session is not None  # connectionLost cancels this call
        self.now = self._clock()
        events, self._deferred = self._deferred, None
        if events is not None:
            self._round(events)
        if self._later is not None or session.paused or self.transport.disconnecting:
            return
        if self._unread:
            self._decode(self._unread, self._unread_at)
        if self._later is None and not session.paused:
            self.transport.resumeProducing()

    def _first_frame(self) -> None:
        """The connection's first frame: it sets the version, and the deadline is met."""
        self._versioned = True
        if self._first_frame_deadline is not None:
            self._first_frame_deadline.cancel()
            self._first_frame_deadline = None
        if self._parser.version == codec.VERSION:
            assert self.session is not None
            self.session.speaker = speakers.V2
            self._handlers = self.factory.handlers_v2

    def frameRejected(self, code: int, reason: str) -> None:
        encode = link.encode_error if self._parser.version == codec.VERSION else wire.encode_error
        self.reply(encode(code, reason))

    def deliverFrames(self, events: list[Frame | RejectedFrame]) -> None:
        """
        L{FrameReceiver.deliverFrames}, each known frame's handler called
        from the loop itself (the hot path: a task's frames are a call
        fewer each); the first frame, an unknown type and a rejection go
        L{frameReceived}'s and L{frameRejected}'s way.
        """
        if not self._versioned:
            super().deliverFrames(events)
            return
        transport, handlers = self.transport, self._handlers
        remaining = iter(events)
        for event in remaining:
            if transport.disconnecting:
                return
            if type(event) is not Frame:
                self.frameRejected(event.code, event.reason)
            elif (handler := handlers.get(event.message_type)) is None:
                self.frameReceived(event.message_type, event.payload)
            else:
                try:
                    handler(self, event.payload)
                except _REFUSALS as e:
                    self._refused(e)
            if self.checkTurn and self.turnOver(remaining):
                return

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        if not self._versioned:
            self._first_frame()
        handler = self._handlers.get(message_type)
        if handler is None:
            name = codec.MessageType(message_type).name
            self.frameRejected(
                ErrorCode.INVALID_MESSAGE, f"{name} is sent by the daemon, not to it"
            )
            return
        try:
            handler(self, payload)
        except _REFUSALS as e:
            self._refused(e)

    def _refused(self, e: Exception) -> None:
        """A handler refused its frame: answer ERROR (and close, if it was not authorized)."""
        if isinstance(e, codec.MalformedMessage | ProtocolViolation):
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
        elif isinstance(e, Refused):
            self.queue.limit_hit(self.peer_name, e)
            self.frameRejected(e.code, str(e))
        else:
            self.log.info(
                "refused {peer}: {reason}",
                log_id="connection.forbidden",
                peer=self.peer_name,
                reason=str(e),
            )
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
            self._output.flush()
            # A TLS transport will not close while a producer is registered,
            # nor before it reads the peer's close_notify: reading resumes.
            self._drop_input()
            self.transport.unregisterProducer()
            self.transport.loseConnection()
            self.transport.resumeProducing()

    # -- what the handlers ask of it (a handlers.connection.Connection) --------------

    @property
    def status(self) -> Callable[[], dict[str, Any]] | None:
        """Makes the daemon's status document (STATUS); C{None}: this listener serves none."""
        return self.factory.status

    @property
    def bulk(self) -> BulkActions | None:
        """The daemon's bulk actions (BULK); C{None}: this listener runs none."""
        return self.factory.bulk

    @property
    def replication(self) -> Roles | None:
        """This daemon's role in its shard (ROLE, HELLO); C{None}: replication is off."""
        return self.factory.replication

    def reply(self, frame: bytes) -> None:
        """Answer this peer's request, in order with its other answers."""
        assert self.session is not None
        self.session.reply(frame)

    def authorize(self, *roles: str) -> None:
        """
        @raise NotAuthorized: the [tls] role lists do not let this peer's
            certificate identity act as any of C{roles}.  An admin (the
            control socket, or an identity in C{admins}) may always read.
        """
        authorization = self.factory.authorization
        if authorization is None:
            return
        self.learn_identity()
        identity = self.identity
        assert identity is not _UNKNOWN
        if "monitor" in roles and (self.factory.admin or authorization.allows(identity, "admin")):
            return
        if not any(authorization.allows(identity, role) for role in roles):
            raise NotAuthorized(
                f"{describe_peer(self.transport)} may not act as a {' or '.join(roles)}"
            )

    def _check_key(self, key: bytes | None, what: str) -> None:
        limit = self.factory.max_key_length
        if key is not None and len(key) > limit:
            raise ProtocolViolation(f"{what} of {len(key)} bytes exceeds max_key_length ({limit})")

    def producer(
        self, task_type: bytes, key: bytes | None = None, fairness: bytes | None = None
    ) -> Session:
        """
        This connection's session, taking the producer role if it is new,
        to submit a task of C{task_type} with these keys.

        @raise ProtocolViolation: the type or a key is too long, or the
            connection is a worker.
        @raise NotAuthorized: its identity may not produce.
        """
        if len(task_type) > self.limits.max_type_length:
            raise ProtocolViolation(
                f"task type of {len(task_type)} bytes exceeds max_type_length"
                f" ({self.limits.max_type_length})"
            )
        if key is not None or fairness is not None:
            self._check_key(key, "idempotency key")
            self._check_key(fairness, "fairness key")
        session = self.session
        assert session is not None
        if session.role is not Role.PRODUCER:
            self.authorize("producer")
            self.queue.claim_role(session, Role.PRODUCER)
        return session

    def reply_when_durable(
        self, frame: bytes, failed: Callable[[str], bytes] | None = None
    ) -> None:
        """
        Answer once the journal holds what the request changed (with
        C{fsync = always}), in order with this peer's other answers; if it
        could not be written, C{ERROR 0x01}, or C{failed(why)} (the write's error).
        """
        durable = self.queue.journal.durable()
        session = self.session
        assert session is not None
        if durable is None:
            session.reply(frame)
            return
        held = _Held()
        session.wait_for(held)

        def decided(result: object) -> None:
            if isinstance(result, Failure):
                why = result.getErrorMessage()
                held.reply = (
                    link.encode_error(
                        ErrorCode.QUEUE_FULL,
                        f"done, but not journaled ({why}): a restart may undo it",
                    )
                    if failed is None
                    else failed(why)
                )
            else:
                held.reply = frame
            session.send_decided()

        durable.addBoth(decided)

    def require_admin(self, what: str) -> None:
        """@raise Refused: (FORBIDDEN) this peer is no admin, so may not ask for C{what}."""
        session = self.session
        assert session is not None
        self.learn_identity()
        if not session.admin:
            raise Refused(
                codec.ErrorCode.FORBIDDEN,
                f"{what} needs the admin role: the control socket, or a TLS"
                " identity listed in [tls] admins",
            )

    def learn_identity(self) -> None:
        """
        Learn this peer's certificate identity, once: it decides which role
        lists it is on, whether it is an admin, and whose tasks it may cancel.
        """
        authorization = self.factory.authorization
        if authorization is None or self.identity is not _UNKNOWN:
            return
        self.identity = identity = peer_identity(self.transport)
        session = self.session
        if session is not None and identity is not None:
            session.identity = identity
            session.admin = self.factory.admin or authorization.allows(identity, "admin")


class QuicxServerFactory(Factory[QuicxServerProtocol]):
    """
    Builds L{QuicxServerProtocol}s that share one L{QueueService}.

    @ivar max_length: the largest frame payload accepted: a SUBMIT of the
        largest size class with the longest task type, or a FAILED with the
        longest reason the limits allow, whichever is longer.
    @ivar v2_max_length: the same for version 2 (its SUBMIT options may add
        up to 2 + 4,096 bytes); C{None} when version 2 is turned off.
    @ivar v2_type_limits: the longest PROGRESS, PUBLISH, WATCH, CHECKPOINT,
        ANNOUNCE, STEER, WORKERS and BULK the limits allow, in place of
        C{v2_max_length}.
    @ivar admin: its connections have the admin role (the control socket's).
    @ivar status: makes the daemon's status document, which STATUS answers;
        C{None} (STATUS is answered not found) until the daemon sets it.
    @ivar bulk: the daemon's bulk actions, which BULK starts; C{None} (BULK
        is answered not found) until the daemon sets it.
    @ivar replication: this daemon's role in its shard (ROLE; HELLO tells
        it); C{None}: replication is off (ROLE is answered not found).
    @ivar handlers_v1: the handlers of a new connection's version-1 frames
        (L{tables.V1}, unless its role swaps them: see L{close_connections}).
    @ivar handlers_v2: the same for version 2 (L{tables.V2}).
    """

    protocol = QuicxServerProtocol
    noisy = False
    status: Callable[[], dict[str, Any]] | None = None
    bulk: BulkActions | None = None
    replication: Roles | None = None
    handlers_v1: dict[int, Handler] = tables.V1
    handlers_v2: dict[int, Handler] = tables.V2

    def __init__(
        self,
        queue: QueueService,
        reactor: Any = None,
        limits: Limits | None = None,
        authorization: Authorization | None = None,
        admin: bool = False,
    ) -> None:
        if reactor is None:
            from twisted.internet import reactor
        self.queue = queue
        self.admission = Admission(queue)
        self.fast = FastPath(queue, self.admission)
        self.authorization = authorization
        self.admin = admin
        self.reactor = reactor
        self.limits = limits or Limits()
        self.batcher = OutputBatcher(reactor)
        self.max_length = max(
            queue.pool.max_size + wire.SUBMIT_TYPE_OVERHEAD,
            codec.TASK_ID.size + self.limits.max_reason_length,
        )
        self.v2_max_length = (
            # A NACK has a token and flags more than a FAILED.
            max(
                self.max_length + NACK_FIXED - codec.TASK_ID.size,
                queue.pool.max_size + taskflow.SUBMIT_OVERHEAD,
            )
            if codec.VERSION in queue.limits.versions
            else None
        )
        # In place of v2_max_length, shorter or longer: a PUBLISH's flags, the
        # name and its length, and the most data (no more, refused at its
        # header); a WATCH's three lists full of the longest items.  A
        # PROGRESS: task id, token, fraction and the longest message, when
        # longer (a longer message is a bad message, not too large).  A
        # CHECKPOINT: task id, token, kind and the largest state (no more).
        self.v2_type_limits: dict[int, int] = {
            codec.MessageType.PROGRESS: max(
                self.v2_max_length or 0, PROGRESS_FIXED + queue.progress.settings.max_message
            ),
            codec.MessageType.WATCH: monitor.MAX_WATCH_SIZE,
            codec.MessageType.CHECKPOINT: CHECKPOINT_FIXED + queue.checkpoints.settings.max_size,
            # What a worker may announce; a STEER is 5 bytes, a WORKERS 4 at most.
            codec.MessageType.ANNOUNCE: 2
            + self.limits.max_worker_types * (1 + self.limits.max_type_length)
            + ANNOUNCE_FIELDS_SIZE,
            codec.MessageType.STEER: 5,
            codec.MessageType.WORKERS: 4,
            codec.MessageType.BULK: MAX_BULK,
            codec.MessageType.ROLE: ROLE_SIZE,
            # Replication's messages travel on the replication listener only.
            **dict.fromkeys(replication.DECODERS, 0),
        }
        shared = queue.shared
        if isinstance(shared, SharedData):
            publish = PUBLISH_FIXED + shared.limits.max_size
            self.v2_type_limits[codec.MessageType.PUBLISH] = publish
        self.max_key_length = queue.limits.max_key_length

    def connection_refusal(self, out_of_files: bool = False) -> Refused:
        """
        What a connection past C{max_connections} is answered; C{out_of_files}:
        one the process had no descriptor for, answered with the spare.
        """
        limit = f"max_connections = {self.limits.max_connections}"
        if out_of_files:
            reason = f"too many connections (out of file descriptors; {limit})"
            return Refused(codec.ErrorCode.QUEUE_FULL, reason, log_id="limit.descriptors")
        reason = f"too many connections ({limit})"
        return Refused(codec.ErrorCode.QUEUE_FULL, reason, log_id="limit.connections")

    def close_connections(self) -> int:
        """
        Close every connection of this factory (its role changed: a new one
        takes the handlers that now apply); how many.
        """
        closing = [
            session.peer
            for session in self.queue.sessions.values()
            if isinstance(session.peer, QuicxServerProtocol) and session.peer.factory is self
        ]
        for peer in closing:
            peer.disconnect()
        return len(closing)
