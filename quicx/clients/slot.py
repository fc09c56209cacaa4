"""
One worker connection (a slot): a pump of frames between the daemon and the worker's handlers.

It opens with HELLO (falling back to version 1), FOLLOWs the shared data
if it is the worker's follower, sends READY with its credits (chosen by
its handlers' pace unless given: L{quicx.clients.adaptive.AutoCredits}),
runs each TASK through the worker, and reports each outcome
(L{quicx.clients.reports.report}), the outcomes of one read in one write.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Protocol, cast

from attrs import define, field
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from quicx.clients import failover, operations, shares
from quicx.clients.address import CLIENT_MAX_LENGTH
from quicx.clients.checkpoints import Saves
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    Rejected,
    Send,
    Unanswered,
)
from quicx.clients.credits import Credited
from quicx.clients.following import Following
from quicx.clients.handlers import Registration, Timed
from quicx.clients.leases import Lease
from quicx.clients.reports import (
    MAX_LOGGED_REASON,
    MAX_REASON,
    Unrecoverable,
    cut_reason,
    failure_reason,
    report,
)
from quicx.net.framer import FrameReceiver, set_no_delay, write_now
from quicx.protocol import codec, outcomes, shared_data, taskflow, wire, workers
from quicx.protocol.errors import NotPrimary
from quicx.protocol.wire import ErrorCode

HELLO_TIMEOUT = 10.0
"""Seconds a slot waits for the answer to its HELLO before it closes the
connection and tries again: a host that takes connections and never answers
(hung, or not a daemon) would hold its share of the worker's capacity."""


RESULTS_REMEMBERED = 1024
"""How many ACKs with a result a connection remembers, the latest, in case the
daemon refuses one as too large (the protocol does not say its ERROR names the
task: it is the largest)."""

_ACK_SIZE = len(outcomes.encode_ack(1, 1))
"""The size of an ACK frame without a result."""
_TASK, _V2 = int(wire.MessageType.TASK), codec.VERSION


class Worker(Protocol):
    """What a slot needs of its worker (L{quicx.clients.worker.Worker})."""

    credits: int | None
    protocol: int
    failover: bool
    queues: tuple[str, ...]
    follow: tuple[str, ...]
    auto_extend: bool
    members: list[Member]
    _slots: set[WorkerProtocol]
    _following: Following[WorkerProtocol]
    _reactor: Any
    _handlers: dict[bytes, Registration]

    def run(
        self,
        task: wire.Task | taskflow.Task,
        lease: Lease | None = None,
        timed: Timed | None = None,
    ) -> object: ...

    def _slot_connected(self, slot: WorkerProtocol) -> None: ...

    def _slot_greeted(self, slot: WorkerProtocol) -> bool: ...

    def _slot_lost(self, slot: WorkerProtocol) -> None: ...

    def followed(self, following: object, slot: WorkerProtocol) -> None: ...

    def announcement(self) -> bytes: ...

    def told_to_stop(self, stop: workers.Stop, slot: WorkerProtocol) -> None: ...

    def shared_arrived(self, shared: shared_data.Shared, slot: WorkerProtocol) -> None: ...


@define(eq=False)
class Member(shares.Member["WorkerProtocol"]):
    """One of the worker's daemons (L{shares.Member}), and how to reach it."""

    endpoint: IStreamClientEndpoint = field(kw_only=True)


class WorkerProtocol(FrameReceiver, Credited):
    """
    One worker connection: READY once, then up to C{credits} tasks at a time.

    @ivar place: its daemon and its place among that daemon's slots
        (C{None}: a connection made by hand, with the worker's credits).
    @ivar running: tasks received and not yet answered.
    @ivar capabilities: what the daemon says it can do, in answer to HELLO.
    @ivar max_result: the largest result the daemon takes, in bytes, as its
        answer to HELLO says (C{None}: it did not say).
    @ivar saves: its handlers' checkpoints waiting for their answers.
    """

    log = Logger()
    maxLength = CLIENT_MAX_LENGTH
    v2MaxLength = CLIENT_MAX_LENGTH
    checkTypes = False

    def __init__(self, worker: Worker, place: tuple[Member, int] | None = None) -> None:
        self.worker = worker
        self.place = place
        if place is not None and len(worker.members) > 1:
            # Its lines name its daemon, one of several.
            self.log = Logger(f"{self.log.namespace}@{place[0].address}", self)
        # The worker's credits, or chosen by the connection itself (the user gave none).
        self._choose_credits(worker.credits)
        # The handshake, heartbeats, FOLLOW's answer and ERRORs; TASKs are read here.
        self._conn = ClientConnection(worker.protocol)
        self.version = worker.protocol
        # Closes the connection if HELLO is not answered in time.
        self._unanswered: IDelayedCall | None = None
        self.running = 0
        self.stopping = False
        self.quiet = False  # the daemon told it so: it is sent no more tasks
        self.closed: Deferred[None] = Deferred()
        self._answered = False
        self.capabilities: frozenset[str] = frozenset()
        self.max_result: int | None = None
        self.max_reason = MAX_REASON
        self.saves = Saves(None)
        # With failover: the daemon said it is not the primary (at HELLO, or refusing a request).
        self.refusal: NotPrimary | None = None
        self.primary = False  # its daemon answered HELLO as one that serves workers
        # The latest ACKs with a result: task id -> (token, frame size).
        self._results_sent: OrderedDict[int, tuple[int, int]] = OrderedDict()
        # Outcomes found while a read is handled, sent together at its end.
        self._replies: list[bytes] | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        set_no_delay(self.transport)
        self.worker._slots.add(self)
        hello = self._conn.connect()
        if hello:
            self.transport.write(hello)
            if self.place is not None:
                self._unanswered = self.worker._reactor.callLater(HELLO_TIMEOUT, self._no_answer)
        else:
            self.worker._slot_connected(self)
            self._ready()

    def _ready(self) -> None:
        # Once only: after DONE/FAILED the daemon treats the worker as idle,
        # and after WAIT it pushes the next task without being asked again.
        self.transport.write(self._ready_frame(self.worker.queues))

    def _no_answer(self) -> None:
        """No answer to HELLO in L{HELLO_TIMEOUT} seconds: close, and try again."""
        self.log.warn(
            "no answer to HELLO in {timeout:.0f} s; closing this connection", timeout=HELLO_TIMEOUT
        )
        self.transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._unanswered is not None and self._unanswered.active():
            self._unanswered.cancel()
        if self.running:
            self.log.info(
                "{count} task(s) in hand as the connection closed: their outcomes are"
                " dropped, and the daemon delivers them again",
                count=self.running,
            )
        self.saves.lost(reason.getErrorMessage())
        self.worker._slots.discard(self)
        self.worker._slot_lost(self)
        self.closed.callback(None)

    def follow(self) -> None:
        """Follow the worker's shared data on this connection (its FOLLOW answer comes later)."""
        self.transport.write(self._conn.send(operations.follow(self.worker.follow)))

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self.log.error("daemon sent a frame this worker refuses: {reason}", reason=reason)
        self.transport.loseConnection()

    def dataReceived(self, data: bytes) -> None:
        replies: list[bytes] = []
        self._replies = replies
        self._received = 0
        try:
            super().dataReceived(data)
        finally:
            self._replies = None
            if self._received and self.auto is not None:
                self._pace(replies)
            if replies and self.connected:
                write_now(self.transport, b"".join(replies))
            if self.stopping and not self.running:
                self.transport.loseConnection()

    @property
    def _greeted(self) -> bool:
        return self._conn.greeted

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        if message_type == _TASK and self._conn.greeted:
            self._answered = True
            task: wire.Task | taskflow.Task = (
                taskflow.decode_task(payload) if self.version == _V2 else wire.decode_task(payload)
            )
            if self.running >= self.credits:
                # A daemon bug, worth a log line -- but the task is run: a task
                # sent and dropped would never finish.
                self.log.error(
                    "daemon sent task {id} beyond the {credits} this connection may hold;"
                    " running it anyway",
                    id=task.task_id,
                    credits=self.credits,
                )
            self.running += 1
            self._received += 1
            lease = None
            if type(task) is taskflow.Task and task.token:
                self._lease_seconds = task.lease_ms / 1000 if task.lease_ms else None
                lease = self._lease(task)
            outcome = self.worker.run(task, lease, None if self.auto is None else self.auto.ran)
            if type(outcome) is Deferred:
                outcome.addBoth(self._finished, task, lease)
            else:
                # A plain handler on the reactor has already returned.
                self._finished(outcome, task, lease)
        elif not self._conn.greeted:
            self._other(message_type, payload)  # the answer to HELLO
        elif message_type == wire.MessageType.WAIT:
            self._answered = True
        elif message_type == codec.MessageType.CHECKPOINT and self.version == codec.VERSION:
            try:
                self.saves.answered(payload)
            except codec.MalformedMessage as e:
                self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
        elif message_type == codec.MessageType.STOP and self.version == codec.VERSION:
            self.worker.told_to_stop(workers.decode_stop(payload), self)
        elif message_type == codec.MessageType.SHARED and self.version == codec.VERSION:
            self.worker.shared_arrived(shared_data.decode_shared(payload), self)
        else:
            self._other(message_type, payload)

    def _other(self, message_type: int, payload: bytes) -> None:
        """A frame that is no task: the connection's to read."""
        events: list[Event] = []
        self._conn.receive_frame(self._parser.version, message_type, payload, events)
        for event in events:
            self._event(event)

    def _event(self, event: Event) -> None:
        """What the connection made of a frame that is not a task."""
        if isinstance(event, Send):
            self.transport.write(event.data)  # a heartbeat's PONG
        elif isinstance(event, Greeted):
            self._hello_answered(event)
        elif isinstance(event, Answer):  # FOLLOW's: what exists of what it follows
            if isinstance(event.value, Exception):
                self.log.error(
                    "the daemon refuses to send shared data {names} ({message}): handlers see none",
                    names=", ".join(self.worker.follow),
                    message=str(event.value),
                )
                self.worker.followed({}, self)
            else:
                self.worker.followed(event.value.get("following", {}), self)
        elif isinstance(event, Unanswered) and isinstance(event.message, wire.Error):
            self._refused(event.message)
        elif isinstance(event, Rejected):
            self.frameRejected(ErrorCode.INVALID_MESSAGE, event.reason)

    def _refused(self, error: wire.Error) -> None:
        """An ERROR no request of the connection's is owed: of READY, or of a report."""
        chosen = self.auto is not None
        if (
            not self._answered
            and error.code == ErrorCode.INVALID_MESSAGE
            and self._credits_refused()
        ):
            # The first answer to a READY with credits is an ERROR: a
            # daemon without the extension (the reference one).
            if not chosen:
                self.log.warn(
                    "the daemon refuses READY credits ({message}); this connection"
                    " takes one task at a time",
                    message=error.message,
                )
            self._ready()
            return
        if error.code == codec.ErrorCode.NOT_PRIMARY:
            self._not_primary(NotPrimary(error.message, error.code))
            return
        if error.code == codec.ErrorCode.STALE:
            self.log.warn(
                "the daemon refused a stale report ({message}): the task's lease ran"
                " out and it went back to its queue, so this outcome does not count",
                message=error.message,
            )
            return
        if error.code == ErrorCode.PAYLOAD_TOO_LARGE and self._results_sent:
            self._result_refused(error.message)
            return
        self.log.error("daemon error: {message}", message=error.message)

    def _hello_answered(self, greeted: Greeted) -> None:
        """The answer to HELLO: INFO, or ERROR from a version-1 daemon."""
        if self._unanswered is not None:
            self._unanswered.cancel()
        self.version = greeted.version
        refusal = failover.not_primary(greeted.server) if self.worker.failover else None
        if refusal is not None:
            self._not_primary(refusal)
            return
        self.primary = True
        self.worker._slot_connected(self)
        if greeted.version == wire.PROTOCOL_VERSION:
            if self.worker.queues or self.worker.follow:
                self.log.warn(
                    "the daemon speaks protocol version 1 only: this worker serves its"
                    " default queue, not {queues}, and gets no shared data",
                    queues=", ".join(self.worker.queues) or "-",
                )
        else:
            self._learn(greeted.server)
            if "workers" in self.capabilities:
                # Before FOLLOW and READY: the daemon takes it only first.
                self.transport.write(self.worker.announcement())
            if self.worker.follow and "shared" not in self.capabilities:
                self.log.error(
                    "the daemon has no shared data: handlers see none of {names}",
                    names=", ".join(self.worker.follow),
                )
            elif self.worker.follow and not self.worker._slot_greeted(self):
                return  # its READY waits until the shared data has come
        self._ready()

    def _not_primary(self, refusal: NotPrimary) -> None:
        """
        The daemon is not its shard's primary: close; the worker connects to
        the primary it names (with failover), or here again later.  The
        tasks held are delivered again by the primary; their outcomes are dropped.
        """
        if self.refusal is None:
            self.refusal = refusal
            self.log.info(
                "the daemon is not the primary (primary: {primary}); closing this connection",
                primary=refusal.primary or "none known",
            )
        self.transport.loseConnection()

    def _learn(self, hello: object) -> None:
        """What the daemon's answer to HELLO says it can do, and its largest result."""
        if not isinstance(hello, dict):
            return
        capabilities, limits = hello.get("capabilities"), hello.get("limits")
        if isinstance(capabilities, list):
            self.capabilities = frozenset(map(str, capabilities))
        limits = limits if isinstance(limits, dict) else {}
        limit, reason = limits.get("max_result"), limits.get("max_reason")
        self.max_result = limit if isinstance(limit, int) else None
        saved = limits.get("max_checkpoint")
        if "checkpoints" in self.capabilities and isinstance(saved, int):
            self.saves.limit = saved
        if isinstance(reason, int) and reason > 0:
            self.max_reason = reason

    def _result_refused(self, message: str) -> None:
        """
        The daemon refused an ACK's result as too large (and holds the task
        still): fail the task for good.  Its ERROR need not say which ACK;
        those it took had smaller results, so it is the largest remembered.
        """
        sent = self._results_sent
        task_id = max(sent, key=lambda remembered: sent[remembered][1])
        token, _ = sent.pop(task_id)
        reason = f"the result is larger than the daemon takes: {message}"
        self.log.warn("task {id} failed: {reason}", id=task_id, reason=reason)
        self._write(outcomes.encode_nack(task_id, token, cut_reason(reason), permanent=True))

    def _in_hand(self) -> int:
        return self.running

    def _lease(self, task: taskflow.Task) -> Lease | None:
        """
        The lease of a delivery with a token, kept alive with C{auto_extend};
        none where nothing would use it (a handler without a context).
        """
        registration = self.worker._handlers.get(task.task_type)
        if not self.worker.auto_extend and (registration is None or not registration.wants_context):
            return None
        lease = Lease(
            self.worker._reactor,
            self._write,
            task.task_id,
            task.token,
            task.lease_ms,
            "progress" in self.capabilities,
            self.saves,
        )
        if self.worker.auto_extend:
            lease.keep_alive()
        return lease

    def _finished(
        self, result: object, task: wire.Task | taskflow.Task, lease: Lease | None
    ) -> None:
        self.running -= 1
        if lease is not None:
            lease.end()
        if result is None and type(task) is taskflow.Task and task.token:
            # Done without a result, a worker's every task: report()'s ACK, in one call.
            frame = outcomes.encode_ack(task.task_id, task.token)
        else:
            frame = self._report(result, task)
        self._write(frame)
        if self._replies is None and self.stopping and not self.running:
            self.transport.loseConnection()

    def _report(self, result: object, task: wire.Task | taskflow.Task) -> bytes:
        """The frame that reports C{task}'s outcome (L{report}), its failure logged."""
        failed = isinstance(result, Failure)
        if failed:
            self._log_failure(task, cast(Failure, result))
        try:
            frame = report(
                task,
                result,
                self.max_result,
                "results" in self.capabilities,
                self.max_reason,
                failed,
            )
        except Exception as e:
            # Never leave a task held for want of a frame: it fails, saying why.
            self.log.failure("task {id}: its outcome could not be reported", id=task.task_id)
            unsent = Failure(Unrecoverable(f"the outcome could not be sent: {e!r}"))
            frame = report(task, unsent, failed=True)
        if len(frame) > _ACK_SIZE and frame[1] == codec.MessageType.ACK:
            sent = self._results_sent
            sent[task.task_id] = (cast(taskflow.Task, task).token, len(frame))
            if len(sent) > RESULTS_REMEMBERED:
                sent.popitem(last=False)
        return frame

    def _log_failure(self, task: wire.Task | taskflow.Task, failure: Failure) -> None:
        """A handler failed: say which task, and why (with its traceback, if it has one)."""
        attempt = f", attempt {task.attempt}" if isinstance(task, taskflow.Task) else ""
        self.log.warn(
            "task {id} ({type}{attempt}) failed{permanent}: {reason}",
            id=task.task_id,
            type=task.task_type.decode("utf-8", "replace"),
            attempt=attempt,
            permanent=" for good" if failure.check(Unrecoverable) else "",
            reason=failure_reason(failure, MAX_LOGGED_REASON),
        )

    def _write(self, frame: bytes) -> None:
        """Send C{frame}: at the end of the read being handled, if any, else now."""
        if self._replies is not None:
            self._replies.append(frame)
        elif self.transport is not None and self.connected:
            write_now(self.transport, frame)

    def stop(self) -> Deferred[None]:
        """Finish the tasks in hand, if any, then disconnect."""
        self.stopping = True
        if not self.running:
            self.transport.loseConnection()
        return self.closed
