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
from time import perf_counter
from typing import Any, Final

from attrs import define, frozen
from twisted.internet.interfaces import IDelayedCall, IPushProducer
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

import quicx
from quicx.daemon import speakers
from quicx.daemon.config import Limits
from quicx.daemon.observe.eventbus import EventBus
from quicx.daemon.queue import introspect
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused, Session
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.queue.shared import SharedData
from quicx.net.certificates import Authorization
from quicx.net.framer import FrameReceiver, OutputBatcher, set_no_delay
from quicx.net.tls import describe_peer, peer_identity
from quicx.net.twisted_types import Factory
from quicx.protocol import admin, codec, link, monitor, outcomes, shared_data, taskflow, wire
from quicx.protocol.frames import Frame, RejectedFrame
from quicx.protocol.outcomes import ACK_SIZE, NACK_FIXED, PROGRESS_FIXED, GroupOp
from quicx.protocol.session import IPeer, ProtocolViolation, Role
from quicx.protocol.shared_data import PUBLISH_FIXED
from quicx.protocol.wire import ErrorCode, MessageType

CAPABILITIES = (
    "queues",
    "priorities",
    "idempotency",
    "cancel",
    "pause",
    "purge",
    "peek",
    "inspect",
    "fairness",
    "rate-limits",
    "delays",
    "retries",
    "dead-letters",
    "leases",
    "schedules",
    "progress",
    "shared",
    "results",
    "groups",
    "events",
)
"""What a version-2 HELLO is told this daemon can do."""


class _Unknown(Enum):
    """A sentinel's type (a one-member Enum, so that C{is} narrows it away)."""

    UNKNOWN = "unknown"


_UNKNOWN: Final = _Unknown.UNKNOWN
"""A connection's certificate identity before it is first needed."""


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


class NotAuthorized(Exception):
    """The peer's identity may not take the role it asked for (ERROR, then closed)."""


@implementer(IPeer, IPushProducer)
class QuicxServerProtocol(FrameReceiver):
    """One client connection to the daemon."""

    log = Logger()
    factory: QuicxServerFactory
    session: Session | None = None
    identity: str | _Unknown | None = _UNKNOWN
    _versioned = False
    _first_frame_deadline: IDelayedCall | None = None
    _monitor_since = 0.0  # when this turn's first monitor query began
    _deferred: list[Frame | RejectedFrame] | None = None  # read, for a later turn

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
        self.limits = limits = factory.limits
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
        self.session = self.queue.open_session(self, speakers.V1)
        self.session.admin = factory.admin
        self._handlers = _HANDLERS
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
        super().connectionLost(reason)
        self._deferred = None
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

    def _authorize(self, *roles: str) -> None:
        """
        @raise NotAuthorized: the [tls] role lists do not let this peer's
            certificate identity act as any of C{roles}.  An admin (the
            control socket, or an identity in C{admins}) may always read.
        """
        authorization = self.factory.authorization
        if authorization is None:
            return
        self._learn_identity()
        identity = self.identity
        assert identity is not _UNKNOWN
        if "monitor" in roles and (self.factory.admin or authorization.allows(identity, "admin")):
            return
        if not any(authorization.allows(identity, role) for role in roles):
            raise NotAuthorized(
                f"{describe_peer(self.transport)} may not act as a {' or '.join(roles)}"
            )

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
        if self._deferred is None:  # else reading resumes once they are handled
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
        self.transport.abortConnection()

    # -- frames --------------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self.session is None:
            return  # refused: closing
        self.session.last_received = self._clock()
        if self._deferred is not None:  # bytes a TLS transport had read: after those
            self._deferred += self._parser.feed(data)
            return
        self._round(self._parser.feed(data))

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

    def _monitor(self) -> None:
        """
        A monitor query begins: the peer must be allowed to ask, and the
        turn may end once it is answered: a connection's monitor queries
        (STATS, QUEUES, PEEK, INSPECT, DEAD, SCHEDULES, WATCH, STATUS) may
        hold the reactor C{[limits] monitor_slice} in one turn; past it, the
        rest of what was read waits for the next turn, the connection unread
        until then, so other connections are served in between.
        """
        self._authorize("monitor")
        if not self._monitor_since:
            self._monitor_since = perf_counter()
        self.checkTurn = True

    def turnEnded(self) -> bool:
        return perf_counter() - self._monitor_since >= self.limits.monitor_slice

    def framesDeferred(self, events: list[Frame | RejectedFrame]) -> None:
        self._deferred = events
        self.transport.pauseProducing()
        self.factory.reactor.callLater(0, self._next_turn)

    def _next_turn(self) -> None:
        """Handle the frames a turn ended before, then read again."""
        events, self._deferred = self._deferred, None
        session = self.session
        if events is None or session is None:
            return  # the connection was lost meanwhile
        self._round(events)
        if self._deferred is None and not session.paused:
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
            self._handlers = _HANDLERS_V2

    def _reply(self, frame: bytes) -> None:
        """Answer this peer's request, in order with its other answers."""
        assert self.session is not None
        self.session.reply(frame)

    def frameRejected(self, code: int, reason: str) -> None:
        encode = link.encode_error if self._parser.version == codec.VERSION else wire.encode_error
        self._reply(encode(code, reason))

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
        except (codec.MalformedMessage, ProtocolViolation) as e:
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
        except Refused as e:
            self.queue.limit_hit(self.peer_name, e)
            self.frameRejected(e.code, str(e))
        except NotAuthorized as e:
            self.log.info(
                "refused {peer}: {reason}",
                log_id="connection.forbidden",
                peer=self.peer_name,
                reason=str(e),
            )
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
            self._output.flush()
            # A TLS transport will not close while a producer is registered.
            self.transport.unregisterProducer()
            self.transport.loseConnection()

    def _submit(self, payload: bytes) -> None:
        task_type, body = wire.submit_fields(payload)
        self.admission.submit(self._producer(task_type), task_type, body)

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
        reason_length = len(payload) - codec.TASK_ID.size
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
        self._monitor()
        # Any connection may ask, and asking does not fix its role: a client
        # may look at the queue before it submits.
        self._reply(wire.encode_stats_response(self.queue.stats()))

    # -- version 2 ------------------------------------------------------------------

    def _check_key(self, key: bytes | None, what: str) -> None:
        limit = self.factory.max_key_length
        if key is not None and len(key) > limit:
            raise ProtocolViolation(f"{what} of {len(key)} bytes exceeds max_key_length ({limit})")

    def _submit_v2(self, payload: bytes) -> None:
        fields = taskflow.submit_fields(payload)
        if fields is not None:
            # No option but a queue and a priority: the common SUBMIT.
            task_type, body, options = fields
            self.admission.submit(self._producer(task_type), task_type, body, options)
            return
        task_type, body, options = taskflow.decode_submit(payload)
        session = self._producer(task_type, options.key, options.fairness)
        self.admission.submit(session, task_type, body, options)

    def _producer(
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
            self._authorize("producer")
            self.queue.claim_role(session, Role.PRODUCER)
        return session

    def _ready_v2(self, payload: bytes) -> None:
        message = taskflow.decode_ready(payload)
        session = self.session
        assert session is not None
        if session.role is not Role.WORKER:
            self._authorize("worker")
        self.queue.claim_role(session, Role.WORKER)
        if message.queues:
            self.queue.subscribe(session, message.queues)
        self.queue.ready(session, min(message.credits, self.limits.max_credits))

    def _heartbeat_v2(self, payload: bytes) -> None:
        wire.decode_heartbeat(payload)
        self._reply(link.PONG_FRAME)

    def _stats_v2(self, payload: bytes) -> None:
        wire.decode_stats(payload)
        self._monitor()
        self._reply(monitor.encode_stats_response(self.queue.stats()))

    def _hello(self, payload: bytes) -> None:
        message = link.decode_hello(payload)
        session = self.session
        assert session is not None
        session.client = " ".join(filter(None, (message.name, message.version)))
        limits = self.queue.limits
        shared = self._shared().limits
        subscribers = self._events().limits
        self._reply(
            link.encode_info(
                {
                    "server": "quicx",
                    "version": quicx.__version__,
                    "protocol": sorted(limits.versions),
                    "capabilities": list(CAPABILITIES),
                    "missing": [c for c in message.capabilities if c not in CAPABILITIES],
                    "limits": {
                        "max_payload": self.queue.pool.max_size,
                        "max_credits": self.limits.max_credits,
                        "max_queues": limits.max_queues,
                        "max_key_length": limits.max_key_length,
                        "max_type_length": self.limits.max_type_length,
                        "max_progress_message": self.queue.progress.settings.max_message,
                        "max_shared_size": shared.max_size,
                        "max_shared_names": shared.max_names,
                        "max_shared_memory": shared.max_memory,
                        "max_result": self.queue.max_result,
                        "max_reason": self.limits.max_reason_length,
                        "max_result_ttl": limits.results.max_ttl,
                        "max_wait": limits.results.max_wait,
                        "max_waiters_per_connection": limits.results.max_waiters_per_connection,
                        "max_groups": limits.groups.max_groups,
                        "max_subscribers": subscribers.max_subscribers,
                        "max_held_events": subscribers.max_held,
                    },
                }
            )
        )

    def _cancel(self, payload: bytes) -> None:
        task_id = admin.decode_cancel(payload).task_id
        session = self.session
        assert session is not None
        self._learn_identity()
        self._reply_when_durable(link.encode_info(self.queue.cancel(session, task_id)))

    def _queue_action(self, payload: bytes, action: codec.MessageType) -> None:
        name = admin.decode_queue_action(action, payload).queue
        session = self.session
        assert session is not None
        self._require_admin(action.name)
        if action is codec.MessageType.PURGE:
            answer = self.queue.purge(name)
        else:
            answer = self.queue.set_paused(name, action is codec.MessageType.PAUSE)
        self._reply_when_durable(link.encode_info(answer))

    def _reply_when_durable(self, frame: bytes) -> None:
        """
        Answer once the journal holds what the request changed (with
        C{fsync = always}), in order with this peer's other answers.
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
                held.reply = link.encode_error(
                    ErrorCode.QUEUE_FULL,
                    f"done, but not journaled ({result.getErrorMessage()}): a restart may undo it",
                )
            else:
                held.reply = frame
            session.send_decided()

        durable.addBoth(decided)

    def _pause(self, payload: bytes) -> None:
        self._queue_action(payload, codec.MessageType.PAUSE)

    def _resume(self, payload: bytes) -> None:
        self._queue_action(payload, codec.MessageType.RESUME)

    def _purge(self, payload: bytes) -> None:
        self._queue_action(payload, codec.MessageType.PURGE)

    def _queues(self, payload: bytes) -> None:
        admin.decode_queues(payload)
        self._monitor()
        self._reply(link.encode_info(introspect.queues(self.queue)))

    def _peek(self, payload: bytes) -> None:
        message = admin.decode_peek(payload)
        self._monitor()
        self._reply(link.encode_info(introspect.peek(self.queue, message.queue, message.count)))

    def _inspect(self, payload: bytes) -> None:
        task_id = admin.decode_inspect(payload).task_id
        self._monitor()
        self._reply(link.encode_info(introspect.inspect(self.queue, task_id)))

    # -- version 2, part 2: fenced outcomes, leases, dead letters ------------------

    def _unfenced(self, payload: bytes) -> None:
        raise ProtocolViolation(
            "a version-2 worker reports with ACK or NACK, quoting the delivery's token"
        )

    def _ack(self, payload: bytes) -> None:
        # The queue refuses a report from a connection that holds no such
        # task, a worker's or not.
        session = self.session
        assert session is not None
        if len(payload) == ACK_SIZE:  # no result: the common ACK, in one unpack
            task_id, token = outcomes.ID_TOKEN.unpack(payload)
            if task_id:
                self.queue.ack(session, task_id, token)
                return
        # With a result, or bad: decoding says why.
        self.queue.ack(session, *outcomes.decode_ack(payload))

    def _nack(self, payload: bytes) -> None:
        reason_length = len(payload) - NACK_FIXED
        if reason_length > self.limits.max_reason_length:
            raise ProtocolViolation(
                f"NACK reason of {reason_length} bytes exceeds max_reason_length"
                f" ({self.limits.max_reason_length})"
            )
        message = outcomes.decode_nack(payload)
        session = self.session
        assert session is not None
        self.queue.nack(session, message.task_id, message.token, message.reason, message.permanent)

    def _touch(self, payload: bytes) -> None:
        message = outcomes.decode_touch(payload)
        session = self.session
        assert session is not None
        self.queue.touch(session, message.task_id, message.token, message.seconds)

    # -- version 2, part 3: results and groups ------------------------------------------

    def _await(self, payload: bytes) -> None:
        message = outcomes.decode_await(payload)
        session = self.session
        assert session is not None
        self._authorize("producer", "monitor")
        self.queue.await_outcome(session, message.task_id, message.timeout_ms)

    def _group(self, payload: bytes) -> None:
        message = outcomes.decode_group(payload)
        session = self.session
        assert session is not None
        op = message.op
        if op is GroupOp.OPEN or op is GroupOp.CLOSE:
            if session.role is not Role.PRODUCER:
                self._authorize("producer")
                self.queue.claim_role(session, Role.PRODUCER)
            if op is GroupOp.OPEN:
                answer = self.queue.open_group(session)
            else:
                answer = self.queue.close_group(message.group)
            self._reply_when_durable(link.encode_info(answer))
            return
        self._authorize("producer", "monitor")
        if op is GroupOp.STATE:
            self._reply(link.encode_info(self.queue.groups.describe(message.group)))
        else:
            self.queue.await_group(session, message.group, message.timeout_ms)

    def _require_admin(self, what: str) -> None:
        session = self.session
        assert session is not None
        self._learn_identity()
        if not session.admin:
            raise Refused(
                codec.ErrorCode.FORBIDDEN,
                f"{what} needs the admin role: the control socket, or a TLS"
                " identity listed in [tls] admins",
            )

    def _dead(self, payload: bytes) -> None:
        message = admin.decode_dead(payload)
        self._monitor()
        self._reply(link.encode_info(self.queue.dead_tasks(message.queue, message.limit)))

    def _replay(self, payload: bytes) -> None:
        message = admin.decode_replay(payload)
        self._require_admin("REPLAY")
        answer = self.queue.replay(message.task_id, message.queue)
        self._reply_when_durable(link.encode_info(answer))

    def _dead_purge(self, payload: bytes) -> None:
        message = admin.decode_dead_purge(payload)
        self._require_admin("DEAD_PURGE")
        self._reply_when_durable(link.encode_info(self.queue.purge_dead(message.queue)))

    def _schedules(self, payload: bytes) -> None:
        admin.decode_schedules(payload)
        self._monitor()
        book = self.queue.schedules
        schedules = book.describe() if isinstance(book, ScheduleBook) else []
        self._reply(link.encode_info(schedules))

    def _schedule(self, payload: bytes) -> None:
        message = admin.decode_schedule(payload)
        self._require_admin("SCHEDULE")
        self._reply_when_durable(link.encode_info(self._book().add(message, payload)))

    def _unschedule(self, payload: bytes) -> None:
        name = admin.decode_unschedule(payload).name
        self._require_admin("UNSCHEDULE")
        self._reply_when_durable(link.encode_info(self._book().remove(name)))

    def _book(self) -> ScheduleBook:
        book = self.queue.schedules
        if not isinstance(book, ScheduleBook):
            raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon runs no schedules")
        return book

    # -- version 2, part 3: progress and shared data -------------------------------

    def _progress(self, payload: bytes) -> None:
        message = outcomes.decode_progress(payload)
        session = self.session
        assert session is not None
        self.queue.report_progress(
            session, message.task_id, message.token, message.fraction, message.message
        )

    def _publish(self, payload: bytes) -> None:
        message = shared_data.decode_publish(payload)
        session = self.session
        assert session is not None
        self._learn_identity()
        if not session.admin:
            try:
                self._authorize("producer")
            except NotAuthorized as e:
                raise Refused(
                    codec.ErrorCode.FORBIDDEN, f"{e}: PUBLISH needs the producer or admin role"
                ) from None
        answer = self._shared().publish(session, message.name, message.data, message.delete)
        self._reply_when_durable(link.encode_info(answer))

    def _follow(self, payload: bytes) -> None:
        names = shared_data.decode_follow(payload).names
        session = self.session
        assert session is not None
        if session.role is not Role.WORKER:
            self._authorize("worker")
        self._reply(link.encode_info(self._shared().follow(session, names)))

    def _shared(self) -> SharedData:
        shared = self.queue.shared
        if not isinstance(shared, SharedData):
            raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon keeps no shared data")
        return shared

    # -- version 2, part 4: live events -------------------------------------------------

    def _watch(self, payload: bytes) -> None:
        message = monitor.decode_watch(payload)
        session = self.session
        assert session is not None
        self._monitor()
        self._reply(link.encode_info(self._events().watch(session, message)))

    def _status(self, payload: bytes) -> None:
        monitor.decode_status(payload)
        self._monitor()
        status = self.factory.status
        if status is None:
            raise Refused(codec.ErrorCode.NOT_FOUND, "this listener serves no status document")
        self._reply(link.encode_info(status()))

    def _events(self) -> EventBus:
        bus = self.queue.event_bus
        if not isinstance(bus, EventBus):
            raise Refused(codec.ErrorCode.NOT_FOUND, "this daemon serves no live events")
        return bus

    def _learn_identity(self) -> None:
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


_HANDLERS: dict[int, Callable[[QuicxServerProtocol, bytes], None]] = {
    MessageType.SUBMIT: QuicxServerProtocol._submit,
    MessageType.READY: QuicxServerProtocol._ready,
    MessageType.DONE: QuicxServerProtocol._done,
    MessageType.FAILED: QuicxServerProtocol._failed,
    MessageType.HEARTBEAT: QuicxServerProtocol._heartbeat,
    MessageType.PONG: QuicxServerProtocol._pong,
    MessageType.STATS: QuicxServerProtocol._stats,
}

_HANDLERS_V2: dict[int, Callable[[QuicxServerProtocol, bytes], None]] = {
    codec.MessageType.SUBMIT: QuicxServerProtocol._submit_v2,
    codec.MessageType.READY: QuicxServerProtocol._ready_v2,
    codec.MessageType.DONE: QuicxServerProtocol._unfenced,
    codec.MessageType.FAILED: QuicxServerProtocol._unfenced,
    codec.MessageType.HEARTBEAT: QuicxServerProtocol._heartbeat_v2,
    codec.MessageType.PONG: QuicxServerProtocol._pong,
    codec.MessageType.STATS: QuicxServerProtocol._stats_v2,
    codec.MessageType.HELLO: QuicxServerProtocol._hello,
    codec.MessageType.CANCEL: QuicxServerProtocol._cancel,
    codec.MessageType.PAUSE: QuicxServerProtocol._pause,
    codec.MessageType.RESUME: QuicxServerProtocol._resume,
    codec.MessageType.PURGE: QuicxServerProtocol._purge,
    codec.MessageType.QUEUES: QuicxServerProtocol._queues,
    codec.MessageType.PEEK: QuicxServerProtocol._peek,
    codec.MessageType.INSPECT: QuicxServerProtocol._inspect,
    codec.MessageType.ACK: QuicxServerProtocol._ack,
    codec.MessageType.NACK: QuicxServerProtocol._nack,
    codec.MessageType.TOUCH: QuicxServerProtocol._touch,
    codec.MessageType.DEAD: QuicxServerProtocol._dead,
    codec.MessageType.REPLAY: QuicxServerProtocol._replay,
    codec.MessageType.DEAD_PURGE: QuicxServerProtocol._dead_purge,
    codec.MessageType.SCHEDULES: QuicxServerProtocol._schedules,
    codec.MessageType.SCHEDULE: QuicxServerProtocol._schedule,
    codec.MessageType.UNSCHEDULE: QuicxServerProtocol._unschedule,
    codec.MessageType.PROGRESS: QuicxServerProtocol._progress,
    codec.MessageType.PUBLISH: QuicxServerProtocol._publish,
    codec.MessageType.FOLLOW: QuicxServerProtocol._follow,
    codec.MessageType.AWAIT: QuicxServerProtocol._await,
    codec.MessageType.GROUP: QuicxServerProtocol._group,
    codec.MessageType.WATCH: QuicxServerProtocol._watch,
    codec.MessageType.STATUS: QuicxServerProtocol._status,
}


class QuicxServerFactory(Factory[QuicxServerProtocol]):
    """
    Builds L{QuicxServerProtocol}s that share one L{QueueService}.

    @ivar max_length: the largest frame payload accepted: a SUBMIT of the
        largest size class with the longest task type, or a FAILED with the
        longest reason the limits allow, whichever is longer.
    @ivar v2_max_length: the same for version 2 (its SUBMIT options may add
        up to 2 + 4,096 bytes); C{None} when version 2 is turned off.
    @ivar v2_type_limits: the longest PROGRESS, PUBLISH and WATCH the
        limits allow, in place of C{v2_max_length}.
    @ivar admin: its connections have the admin role (the control socket's).
    @ivar status: makes the daemon's status document, which STATUS answers;
        C{None} (STATUS is answered not found) until the daemon sets it.
    """

    protocol = QuicxServerProtocol
    noisy = False
    status: Callable[[], dict[str, Any]] | None = None

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
        # longer (a longer message is a bad message, not too large).
        self.v2_type_limits: dict[int, int] = {
            codec.MessageType.PROGRESS: max(
                self.v2_max_length or 0, PROGRESS_FIXED + queue.progress.settings.max_message
            ),
            codec.MessageType.WATCH: monitor.MAX_WATCH_SIZE,
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
