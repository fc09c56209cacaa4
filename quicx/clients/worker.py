"""
The worker runner.

    worker = Worker()

    @worker.handler("send_email")
    def send_email(payload: bytes) -> None:
        ...

    worker.start(reactor, "tcp:127.0.0.1:16381")

Handlers take the task's payload (C{bytes}), and may take a second argument,
the task's L{TaskContext} (id, queue, priority, attempt, enqueue time, keys,
the delivery's fencing token and lease, its failures and retries, progress
reports, shared data).  Returning normally means done, and what the handler
returns (C{bytes}, C{str}, or anything JSON-serialisable; C{None}: nothing)
is the task's result; raising means failed, with the exception's type,
message and traceback as the reason (see L{failure_reason}; the worker logs
it too), L{Unrecoverable}: failed for good, not to be retried.  To a version-2
daemon the worker reports with ACK, with the result, and NACK, quoting the
delivery's token; to a version-1 daemon, with DONE and FAILED (and no
result).  A result that cannot be sent (not serialisable, or larger than
the daemon takes) fails the task for good, saying why.  Plain functions
start in a thread pool, so the reactor stays free to answer heartbeats while
they work, and move to the reactor while their calls are short (under a
millisecond: see L{quicx.clients.adaptive}); C{thread=True} keeps one in the
threads for good.  C{async def} handlers, and handlers registered with
C{thread=False} (which may return a L{Deferred}), run on the reactor thread.

Each of C{concurrency} slots is one connection.  A slot holds one task at a
time, as the protocol page has it, or with C{credits} above 1 up to that many
(Quicx's READY credit extension): the daemon then sends several TASKs in one
write and the slot answers the outcomes of a read in one write.  Without
C{credits}, each slot chooses its own by its handlers' pace
(L{quicx.clients.adaptive.AutoCredits}).  Against a daemon without the
extension a slot falls back to one task at a time.  Slots
reconnect with backoff (at most 3 s apart, as the reference worker waits)
whenever the daemon goes away.  Given several daemons (a cluster), the
worker keeps C{concurrency} slots on each, and the daemons share its
capacity, the daemons it reaches taking a gone one's share until it comes
back (L{quicx.clients.shares}).

Each slot speaks protocol version 2: it opens with HELLO, then FOLLOWs the
worker's shared data (C{follow}: the daemon sends the current version of
each name before any task, and every later one), and READY names the
worker's C{queues}, served in that order.  Against a daemon that speaks
only version 1 it falls back to version 1: it serves the default queue, and
a handler's context has the queue C{None}, priority 0 and the time the task
arrived, and no token or lease.

A delivery's lease runs out after the queue's task timeout unless it is
extended: by the handler (L{TaskContext.extend}), or, with
C{Worker(auto_extend=True)}, every half lease while the handler runs.  A
report the daemon refuses as stale (C{ERROR 0x08}: the lease ran out and the
task went back to the queue) is logged as a warning.
"""

from __future__ import annotations

import inspect
import os
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, cast

from attrs import define, field, frozen
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    ensureDeferred,
)
from twisted.internet.interfaces import IDelayedCall, IStreamClientEndpoint
from twisted.internet.protocol import Factory, connectionDone
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

import twisted
from quicx.clients import operations
from quicx.clients.adaptive import AUTO_MAX, AutoCredits, Placement
from quicx.clients.address import CLIENT_MAX_LENGTH, DEFAULT_ADDRESS, split_addresses
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    Rejected,
    Send,
    Unanswered,
)
from quicx.clients.leases import Lease, touch_seconds
from quicx.clients.progress import ten_thousandths
from quicx.clients.shares import slot_credits
from quicx.clients.stuck import StuckWatch
from quicx.clients.twisted_client import endpoint_for
from quicx.net.framer import FrameReceiver, set_no_delay, write_now
from quicx.protocol import lifecycle, results, v2, wire
from quicx.protocol.wire import ErrorCode

Handler = Callable[..., Any]


class Unrecoverable(Exception):
    """
    Raised by a handler: the task failed, and running it again would not
    help (a malformed payload, a refused card).  A version-2 worker reports
    it with NACK's permanent flag, so the daemon does not retry it (it goes
    to the dead-letter set if it had retries); to a daemon without leases it
    is a plain failure.  Its message is the reason.
    """


@frozen
class TaskContext:
    """
    What a handler may know of its task besides the payload.

    @ivar queue: its queue (C{None} from a version-1 daemon).
    @ivar priority: 0 to 255.
    @ivar attempt: 1 for its first delivery, more when it is run again.
    @ivar enqueued_at: when the daemon accepted it (Unix seconds).
    @ivar key: its idempotency key; C{fairness_key}: its fairness key.
    @ivar token: this delivery's fencing token, larger for every later
        delivery: pass it to your own writes (C{UPDATE ... WHERE fence <
        :token}) to fence out a delivery that was taken back (0: none, from a
        daemon without leases).
    @ivar lease: the seconds this delivery may be held before it is taken
        back, counted from its delivery, unless extended (C{None}: no limit).
    @ivar failures: the failed attempts before this one; C{retries}: how many
        the task may have (0 when it may not retry).
    @ivar shared: the newest version of each shared-data name the worker
        follows (C{Worker(follow=...)}), by name: read-only, and kept up to
        date as new versions come, also while the handler runs.
    """

    task_id: int
    task_type: str
    queue: str | None
    priority: int
    attempt: int
    enqueued_at: float
    key: bytes | None = None
    fairness_key: bytes | None = None
    token: int = 0
    lease: float | None = None
    failures: int = 0
    retries: int = 0
    shared: Mapping[str, bytes] = field(factory=dict, eq=False, repr=False)
    _delivery: Lease | None = field(default=None, eq=False, repr=False)

    @classmethod
    def of(
        cls,
        task: wire.Task | v2.Task,
        delivery: Lease | None = None,
        shared: Mapping[str, bytes] | None = None,
    ) -> TaskContext:
        task_type = task.task_type.decode("utf-8", "replace")
        shared = {} if shared is None else shared
        if isinstance(task, wire.Task):
            return cls(task.task_id, task_type, None, 0, 1, time.time(), shared=shared)
        return cls(
            task.task_id,
            task_type,
            task.queue,
            task.priority,
            task.attempt,
            task.enqueued_ms / 1000,
            task.key,
            task.fairness,
            task.token,
            task.lease_ms / 1000 if task.lease_ms else None,
            task.failures,
            task.retries,
            shared,
            delivery,
        )

    def extend(self, seconds: float) -> None:
        """
        Set the lease to run out C{seconds} from now (rounded up to whole
        seconds; the daemon cuts it to its C{max_lease}).  Safe from any
        thread; sent at once, without an answer.  Once the handler has
        finished, or without a token (a daemon without leases), it does
        nothing.

        @raise ValueError: C{seconds} is not more than 0 (or past 2**32).
        """
        touch_seconds(seconds)
        if self._delivery is not None:
            self._delivery.extend_soon(seconds)

    def progress(self, fraction: float, message: str = "") -> None:
        """
        Say how far the handler has got: C{fraction} of the work (0 to 1,
        sent in ten-thousandths) and a short C{message}, for the producer
        that asked for progress, and the daemon's events.  Safe from any
        thread; sent at once, without an answer (the daemon passes on at
        most one a task per C{[progress] interval}, the newest).  Once the
        handler has finished, or without a token (a daemon without leases),
        it does nothing; so it does to a daemon without progress reports.

        @raise ValueError: C{fraction} is not from 0 to 1.
        """
        encoded = ten_thousandths(fraction)
        if self._delivery is not None:
            self._delivery.progress_soon(encoded, message)


RETRY_FIRST = 0.1
RETRY_MAX = 3.0
"""Reconnect delays double from RETRY_FIRST up to RETRY_MAX (the reference's 3 s)."""

HELLO_TIMEOUT = 10.0
"""Seconds a slot waits for the answer to its HELLO before it closes the
connection and tries again: a host that takes connections and never answers
(hung, or not a daemon) would hold its share of the worker's capacity."""


@frozen
class Registration:
    """
    A handler and where it runs: always in the thread pool (C{in_thread}),
    where its L{Placement} says, or else on the reactor.
    """

    function: Handler
    in_thread: bool
    wants_context: bool = False
    placement: Placement | None = None


Timed = Callable[[float, bool], None]
"""Told how long a handler's call took, and whether it ran on the reactor."""


MAX_REASON = 1024
"""FAILED reasons are cut to this many bytes unless the daemon says how many
it takes (C{max_reason} in its answer to HELLO): the daemon's default
max_reason_length, which refuses longer ones."""

RESULTS_REMEMBERED = 1024
"""How many ACKs with a result a connection remembers, the latest, in case the
daemon refuses one as too large (the protocol does not say its ERROR names the
task: it is the largest)."""

_ACK_SIZE = len(lifecycle.encode_ack(1, 1))
"""The size of an ACK frame without a result."""

MAX_LOGGED_REASON = 16 * 1024
"""The most of a failure the worker's log line shows: more than it sends."""

_TRACEBACK = "Traceback (most recent call last):\n"
_CALLERS = (__file__, os.path.dirname(twisted.__file__) + os.sep)
"""Where the frames that call a handler are (this module, and Twisted's
threads and Deferreds): left out of a failure's traceback."""


def cut_reason(reason: str, limit: int = MAX_REASON) -> str:
    """C{reason}, cut to C{limit} bytes."""
    # "replace": a message may hold lone surrogates (os.fsdecode of a bad name).
    encoded = reason.encode("utf-8", "replace")
    if len(encoded) <= limit:
        return encoded.decode("utf-8")
    return encoded[: max(0, limit - 3)].decode("utf-8", "ignore") + "..."[: max(0, limit)]


def failure_reason(failure: Failure, limit: int = MAX_REASON) -> str:
    """
    The FAILED reason for a handler's exception, at most C{limit} bytes: a
    first line that says what went wrong, C{KeyError: 'missing'} (an
    L{Unrecoverable}'s message alone), then, where the exception was raised
    (not made by the worker itself), its traceback, as Python prints it
    without the exception's line, cut to what fits: the last frames, where
    it was raised, are kept, and the handler's callers in this module left
    out.
    """
    error = failure.value
    assert error is not None  # a Failure always holds its exception
    raised, start = failure.frames, 0
    while start < len(raised) and raised[start][1].startswith(_CALLERS):
        start += 1
    frames = raised[start:]
    if isinstance(error, Unrecoverable) or not raised:
        first = str(error) or type(error).__name__
    else:
        first = "".join(traceback.format_exception_only(type(error), error)).rstrip("\n")
    cause = error.__cause__ or (None if error.__suppress_context__ else error.__context__)
    if cause is not None:
        first += "\n(from " + "".join(traceback.format_exception_only(type(cause), cause))
        first = first.rstrip("\n") + ")"
    head = cut_reason(first, limit)
    room = limit - len(head.encode("utf-8")) - 1 - len(_TRACEBACK)
    if not frames or room <= 0:
        return head
    # Frame by frame, the last first, until the room is spent: not the
    # summary's own format(), which folds repeated lines (a recursion) into one.
    stack = traceback.StackSummary.from_list([(f[1], f[2], f[0], None) for f in frames])
    kept: list[str] = []
    for frame in reversed(stack):
        text = stack.format_frame_summary(frame)
        cut = len(stack) - len(kept) - 1
        note = f"  ... ({cut} earlier frame{'' if cut == 1 else 's'} cut)\n" if cut else ""
        size = len(text.encode("utf-8", "replace"))
        if size + len(note) > room:
            break
        kept.append(text)
        room -= size
    if not kept:
        return head
    cut = len(stack) - len(kept)
    if cut:
        kept.append(f"  ... ({cut} earlier frame{'' if cut == 1 else 's'} cut)\n")
    body = (_TRACEBACK + "".join(reversed(kept))).rstrip("\n")
    return head + "\n" + body.encode("utf-8", "replace").decode("utf-8")


@define(eq=False)
class Member:
    """
    One of the worker's daemons (one, or each of a cluster's).

    @ivar address: where it is (normalized: L{split_addresses}).
    @ivar slots: its connections open and answered now, by their place (0 to
        C{concurrency - 1}).
    @ivar reached: whether a connection to it has opened and been answered.
    @ivar counted: whether it has a share of the worker's capacity: from the
        start, and again whenever a connection to it opens and is answered
        (its HELLO), until it has none left open and one closes, fails to
        open or goes unanswered (L{HELLO_TIMEOUT}).
    """

    address: str
    endpoint: IStreamClientEndpoint
    slots: dict[int, WorkerProtocol] = field(factory=dict)
    counted: bool = True
    reached: bool = False


class WorkerProtocol(FrameReceiver):
    """
    One worker connection: READY once, then up to C{credits} tasks at a time.

    @ivar place: its daemon and its place among that daemon's slots
        (C{None}: a connection made by hand, with the worker's credits).
    @ivar running: tasks received and not yet answered.
    @ivar capabilities: what the daemon says it can do, in answer to HELLO.
    @ivar max_result: the largest result the daemon takes, in bytes, as its
        answer to HELLO says (C{None}: it did not say).
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
        self.credits = worker.credits or 1
        # Credits chosen by the connection itself (the user gave none).
        self.auto = AutoCredits() if worker.credits is None else None
        # READY was sent, with credits in the extension's form unless refused.
        self._asked = False
        self._refused_credits = False
        self._received = 0  # TASKs in the read being handled
        self._lease_seconds: float | None = None  # the last delivery's lease
        # The handshake, heartbeats, FOLLOW's answer and ERRORs; TASKs are read here.
        self._conn = ClientConnection(worker.protocol)
        self.version = worker.protocol
        # Closes the connection if HELLO is not answered in time.
        self._unanswered: IDelayedCall | None = None
        self.running = 0
        self.stopping = False
        self.closed: Deferred[None] = Deferred()
        self._answered = False
        self.capabilities: frozenset[str] = frozenset()
        self.max_result: int | None = None
        self.max_reason = MAX_REASON
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
        self._asked = True
        if self.version == v2.VERSION:
            self.transport.write(v2.encode_ready(self.credits, self.worker.queues))
        elif self.auto is not None:
            # Credits of 1, spelt out: a daemon without the extension says so
            # now, before this connection asks for more.
            self.transport.write(wire.frame(wire.MessageType.READY, wire.CREDITS.pack(1)))
        else:
            self.transport.write(wire.encode_ready(self.credits))

    def _no_answer(self) -> None:
        """No answer to HELLO in L{HELLO_TIMEOUT} seconds: close, and try again."""
        self.log.warn(
            "no answer to HELLO in {timeout:.0f} s; closing this connection", timeout=HELLO_TIMEOUT
        )
        self.transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._unanswered is not None and self._unanswered.active():
            self._unanswered.cancel()
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
        if not self._conn.greeted:
            self._other(message_type, payload)  # the answer to HELLO
        elif message_type == wire.MessageType.TASK:
            self._answered = True
            task: wire.Task | v2.Task = (
                v2.decode_task(payload) if self.version == v2.VERSION else wire.decode_task(payload)
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
            lease = self._lease(task)
            outcome = self.worker.run(task, lease, None if self.auto is None else self.auto.ran)
            if type(outcome) is Deferred:
                outcome.addBoth(self._finished, task, lease)
            else:
                # A plain handler on the reactor has already returned.
                self._finished(outcome, task, lease)
        elif message_type == wire.MessageType.WAIT:
            self._answered = True
        elif message_type == v2.MessageType.SHARED and self.version == v2.VERSION:
            if self.worker._follower is self:
                self.worker.shared_arrived(results.decode_shared(payload))
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
        if (
            (self.credits > 1 or self.auto is not None)
            and not self._answered
            and error.code == ErrorCode.INVALID_MESSAGE
        ):
            # The first answer to a READY with credits is an ERROR: a
            # daemon without the extension (the reference one).
            if self.auto is None:
                self.log.warn(
                    "the daemon refuses READY credits ({message}); this connection"
                    " takes one task at a time",
                    message=error.message,
                )
            self.credits, self.auto, self._refused_credits = 1, None, True
            self._ready()
            return
        if error.code == v2.ErrorCode.STALE:
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
            if self.worker.follow and "shared" not in self.capabilities:
                self.log.error(
                    "the daemon has no shared data: handlers see none of {names}",
                    names=", ".join(self.worker.follow),
                )
            elif self.worker.follow and not self.worker._slot_greeted(self):
                return  # its READY waits until the shared data has come
        self._ready()

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
        self._write(lifecycle.encode_nack(task_id, token, cut_reason(reason), permanent=True))

    def _pace(self, replies: list[bytes]) -> None:
        """
        After a read that brought tasks: ask for more or fewer, if the pace
        says so, before the read's outcomes (the daemon would refill the old
        credits on each outcome before it reads a READY that follows them).
        """
        assert self.auto is not None
        credits = self.auto.after_read(self._received, self._lease_seconds, self.running)
        if credits is not None:
            self.credits = credits
            codec = v2 if self.version == v2.VERSION else wire
            replies.insert(0, codec.encode_ready(credits))

    def allot(self, credits: int) -> None:
        """
        The worker's share of its capacity for this connection is now
        C{credits} (see L{quicx.clients.shares}): with credits given, ask for
        that many; with credits chosen, choose no more.  A READY that
        changes the count goes at once if READY was sent, else it is the
        first READY's.  A connection whose daemon refused credits keeps 1.
        """
        if self.auto is not None:
            self.auto.maximum = credits
            if self.auto.credits <= credits:
                return
            self.auto.credits = credits
        elif self._refused_credits or credits == self.credits:
            return
        self.credits = credits
        if self._asked and not self.stopping:
            codec = v2 if self.version == v2.VERSION else wire
            self._write(codec.encode_ready(credits))

    def _lease(self, task: wire.Task | v2.Task) -> Lease | None:
        """The lease of a delivery with a token (kept alive with C{auto_extend})."""
        if not isinstance(task, v2.Task) or not task.token:
            return None
        self._lease_seconds = task.lease_ms / 1000 if task.lease_ms else None
        lease = Lease(
            self.worker._reactor,
            self._write,
            task.task_id,
            task.token,
            task.lease_ms,
            "progress" in self.capabilities,
        )
        if self.worker.auto_extend:
            lease.keep_alive()
        return lease

    def _finished(self, result: object, task: wire.Task | v2.Task, lease: Lease | None) -> None:
        self.running -= 1
        if lease is not None:
            lease.end()
        if isinstance(result, Failure):
            self._log_failure(task, result)
        try:
            frame = report(
                task, result, self.max_result, "results" in self.capabilities, self.max_reason
            )
        except Exception as e:
            # Never leave a task held for want of a frame: it fails, saying why.
            self.log.failure("task {id}: its outcome could not be reported", id=task.task_id)
            frame = report(task, Failure(Unrecoverable(f"the outcome could not be sent: {e!r}")))
        if len(frame) > _ACK_SIZE and frame[1] == v2.MessageType.ACK:
            sent = self._results_sent
            sent[task.task_id] = (cast(v2.Task, task).token, len(frame))
            if len(sent) > RESULTS_REMEMBERED:
                sent.popitem(last=False)
        self._write(frame)
        if self._replies is None and self.stopping and not self.running:
            self.transport.loseConnection()

    def _log_failure(self, task: wire.Task | v2.Task, failure: Failure) -> None:
        """A handler failed: say which task, and why (with its traceback, if it has one)."""
        attempt = f", attempt {task.attempt}" if isinstance(task, v2.Task) else ""
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


def report(
    task: wire.Task | v2.Task,
    result: object,
    max_result: int | None = None,
    results: bool = True,
    max_reason: int = MAX_REASON,
) -> bytes:
    """
    The frame that reports C{task}'s outcome, C{result} (a L{Failure}, or
    the handler's return value for done): ACK or NACK quoting the delivery's
    token (NACK permanent for L{Unrecoverable}); DONE or FAILED to a daemon
    that gave no token (version 1, or version 2 without leases), which
    takes no result.

    @param max_result: the largest result the daemon takes, in bytes, if known.
    @param results: whether the daemon takes results (else the ACK has none).
    @param max_reason: the longest reason the daemon takes, in bytes.
    """
    if isinstance(task, v2.Task) and task.token:
        task_id, token = task.task_id, task.token
        if isinstance(result, Failure):
            permanent = result.check(Unrecoverable) is not None
            reason = failure_reason(result, max_reason)
            return lifecycle.encode_nack(task_id, token, reason, permanent)
        if result is None or not results:
            return lifecycle.encode_ack(task_id, token)
        # A result that cannot be sent would not be one on a retry either.
        try:
            value = v2.Result.of(result)
        except TypeError as e:
            return lifecycle.encode_nack(task_id, token, cut_reason(f"no result: {e}"), True)
        if max_result is not None and len(value.data) > max_result:
            reason = (
                f"the result is {len(value.data):,} bytes, more than the daemon takes"
                f" ({max_result:,}: the daemon's [results] max_size, or its largest"
                " [allocator] class if that is smaller)"
            )
            return lifecycle.encode_nack(task_id, token, reason, permanent=True)
        return lifecycle.encode_ack(task_id, token, value)
    codec = v2 if isinstance(task, v2.Task) else wire
    if isinstance(result, Failure):
        return codec.encode_failed(task.task_id, failure_reason(result, max_reason))
    return codec.encode_done(task.task_id)


class Worker:
    """
    Runs handlers for tasks from one daemon, or from each of several (a
    cluster), which share its capacity (L{quicx.clients.shares}).

    @ivar concurrency: how many connections to each daemon it keeps.
    @ivar credits: how many tasks each connection may hold at once; up to
        C{concurrency * credits} tasks run at once.  C{None} (the default):
        each connection chooses, by its handlers' pace (L{AutoCredits}): as
        many as its short handlers run on the reactor in 2 ms, one while a
        handler runs in a thread.  With several daemons, that many run at once
        in all (see L{quicx.clients.shares}).
    @ivar queues: the queues it serves, in order (empty: the daemon's
        default queue).
    @ivar protocol: 2, falling back to 1 where the daemon speaks only 1; or 1.
    @ivar auto_extend: while a handler runs, extend its task's lease every
        half lease (a task whose lease would otherwise run out before its
        handler is done; a handler stuck for good then holds it for good too).
    @ivar follow: the shared-data names it follows (at most 32).
    @ivar shared: the newest version of each of them, by name (read-only;
        what each task's C{context.shared} is).
    @ivar members: its daemons, in the order given, once started.
    """

    log = Logger()

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        concurrency: int = 1,
        credits: int | None = None,
        queues: Sequence[str] = (),
        protocol: int = 2,
        auto_extend: bool = False,
        follow: Sequence[str] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if credits is not None and not 1 <= credits <= wire.MAX_CREDITS:
            raise ValueError(f"credits must be 1 to {wire.MAX_CREDITS}")
        self.concurrency = concurrency
        self.credits = credits
        self.queues = tuple(queues)
        self.follow = tuple(follow)
        if protocol not in (1, 2) or (protocol == 1 and (self.queues or self.follow)):
            raise ValueError("protocol is 2, or 1 without queues or shared data")
        self.protocol = protocol
        self.auto_extend = auto_extend
        v2.encode_ready(1, self.queues)  # checks the names and their number
        if self.follow:
            results.encode_follow(self.follow)  # the same
        self._shared: dict[str, bytes] = {}
        self.shared: Mapping[str, bytes] = MappingProxyType(self._shared)
        # One slot follows the shared data for all (the follower); the
        # others' READYs wait until its first FOLLOW answer has come.
        self._follower: WorkerProtocol | None = None
        self._shared_known = False
        self._held: list[WorkerProtocol] = []
        self._handlers: dict[bytes, Registration] = {}
        for name, function in (handlers or {}).items():
            self.register(name, function)
        self._loops: list[Deferred[None]] = []
        self._waiting: set[Deferred[Any]] = set()
        self._stopping = False
        self._slots: set[WorkerProtocol] = set()
        self.members: list[Member] = []
        self._capacity = 0  # the tasks it may hold, whatever its daemons
        # Logs a call moved to the reactor that runs for long (the worker stalls).
        self.stuck = StuckWatch()
        # Times the calls on the reactor (a test may give a clock of its own).
        self.timer: Callable[[], float] = time.perf_counter
        self._threads: ThreadPool | None = None
        self._reactor: Any = None  # its clock, its threads and its connections are used

    def register(self, task_type: str, function: Handler, thread: bool | None = None) -> None:
        """
        Run C{function} for tasks of C{task_type}.

        @param thread: C{True}: always in the thread pool; C{False}: always
            on the reactor (it may return a L{Deferred}).  By default an
            C{async def} function runs on the reactor, and a plain one starts
            in the thread pool and moves to the reactor while its calls are
            short (see L{Placement}): register a function that is quick
            except now and then, when it blocks for long, with C{True}.
        """
        placed = thread is None and not inspect.iscoroutinefunction(function)
        self._handlers[task_type.encode("utf-8")] = Registration(
            function, bool(thread), _takes_context(function), Placement() if placed else None
        )

    def handler(self, task_type: str, thread: bool | None = None) -> Callable[[Handler], Handler]:
        """Decorator form of L{register}."""

        def decorate(function: Handler) -> Handler:
            self.register(task_type, function, thread)
            return function

        return decorate

    def _slot_greeted(self, slot: WorkerProtocol) -> bool:
        """
        A slot's daemon has shared data: the first such slot follows it (its
        FOLLOW goes before its READY, so the data comes before any task).

        @return: whether C{slot} may send READY now (not before the data has come).
        """
        if self._follower is None:
            self._follower = slot
            slot.follow()
            return True
        if self._shared_known:
            return True
        self._held.append(slot)
        return False

    def _slot_connected(self, slot: WorkerProtocol) -> None:
        """
        A slot's connection opened and was answered: its daemon is counted,
        and it learns its credits.
        """
        if slot.place is None:
            return
        member, place = slot.place
        member.slots[place] = slot
        came = not member.counted
        member.counted = True
        if came or not member.reached:
            self.log.info(
                "{what} {address} (protocol version {version})",
                what="reconnected to" if member.reached else "connected to",
                address=member.address,
                version=slot.version,
            )
            member.reached = True
        self._share_out(came)

    def _slot_gone(self, member: Member) -> None:
        """A slot of C{member} lost its connection or could not open one."""
        if member.counted and not member.slots and not self._stopping:
            member.counted = False
            self._share_out(True)

    def _share_out(self, changed: bool) -> None:
        """
        Every open slot is told its credits now; C{changed}: because a daemon
        came or went (which a cluster's worker logs).
        """
        counted = [m.counted for m in self.members]
        if changed and len(counted) > 1:
            self.log.info(
                "{count} of {total} daemons have a share of this worker's capacity ({capacity}):"
                " {addresses}",
                count=sum(counted),
                total=len(counted),
                capacity=self._capacity,
                addresses=", ".join(m.address for m in self.members if m.counted) or "none",
            )
        table = slot_credits(self._capacity, self.concurrency, counted)
        for member, credits in zip(self.members, table, strict=True):
            for place, slot in member.slots.items():
                slot.allot(credits[place])

    def _slot_lost(self, slot: WorkerProtocol) -> None:
        """A slot's connection closed: another slot follows, if it followed."""
        if slot.place is not None:
            member, place = slot.place
            if member.slots.get(place) is slot:
                del member.slots[place]
            self._slot_gone(member)
        if slot in self._held:
            self._held.remove(slot)
        if self._follower is not slot:
            return
        self._follower = None
        for other in self._slots:
            if other._greeted and "shared" in other.capabilities and not other.stopping:
                self._follower = other
                other.follow()
                return

    def followed(self, following: object, slot: WorkerProtocol) -> None:
        """
        The follower's FOLLOW was answered (C{following}: each name's current
        version, 0 for none): forget the names that no longer exist; the
        held slots may now ask for tasks.
        """
        if slot is not self._follower:
            return
        if isinstance(following, dict):
            for name, version in following.items():
                if not version:
                    self._shared.pop(name, None)
        self._shared_known = True
        held, self._held = self._held, []
        for other in held:
            other._ready()

    def shared_arrived(self, shared: results.Shared) -> None:
        """
        The follower got a version of shared data: the newest, as the daemon
        sends them in order (versions count again from 1 after a delete, or
        after a restart without a journal); version 0 deletes the name.
        """
        if shared.version:
            self._shared[shared.name] = shared.data
        else:
            self._shared.pop(shared.name, None)

    def run(
        self, task: wire.Task | v2.Task, lease: Lease | None = None, timed: Timed | None = None
    ) -> object:
        """
        Run the handler for C{task}, whose context extends C{lease}; tell
        C{timed} how long its call took, if known.

        @return: a L{Deferred} of its outcome; or, for a handler that ran on
            the reactor and returned a plain value, the outcome itself: its
            return value (done) or a L{Failure} (no handler, or it raised).
            Skipping the Deferred for the common case halves the worker's
            cost per task.
        """
        registration = self._handlers.get(task.task_type)
        if registration is None:
            name = task.task_type.decode("utf-8", "replace")
            return Failure(LookupError(f"no handler for: {name}"))
        args: tuple[Any, ...] = (task.payload,)
        if registration.wants_context:
            args += (TaskContext.of(task, lease, self.shared),)
        placement = registration.placement
        if placement is not None and not placement.inline:
            assert self._threads is not None and self._reactor is not None
            called = deferToThreadPool(
                self._reactor, self._threads, _timed_call, registration.function, args
            )
            return called.addCallback(_note_time, placement, timed)
        if registration.in_thread:
            assert self._threads is not None and self._reactor is not None
            if timed is not None:
                timed(0.0, False)
            return deferToThreadPool(self._reactor, self._threads, registration.function, *args)
        started = self.timer()
        if placement is not None:
            self.stuck.begin(task.task_type)
        try:
            result = registration.function(*args)
        except (Exception, SystemExit):  # sys.exit() in a handler fails its task
            result = Failure()
        finally:
            if placement is not None:
                self.stuck.end()
        if inspect.isawaitable(result):
            if timed is not None:
                timed(0.0, False)
            return ensureDeferred(result)  # type: ignore[arg-type]
        seconds = self.timer() - started
        if placement is not None:
            placement.ran(seconds, True)
        if timed is not None:
            timed(seconds, True)
        return result

    def start(self, reactor: Any, address: str | Sequence[str] = DEFAULT_ADDRESS) -> None:
        """
        Connect C{concurrency} slots to the daemon at C{address}, or to each
        daemon of a list (C{"tcp:h1:16381,tcp:h2:16381"}, or a sequence:
        see L{split_addresses}), which share the worker's capacity (see
        L{quicx.clients.shares}).

        @raise ValueError: the list is empty, or names a daemon twice; or
            a malformed C{tls:} address (see L{endpoint_for}).
        """
        addresses = split_addresses(address)
        self.members = [Member(each, endpoint_for(reactor, each)) for each in addresses]
        self._reactor = reactor
        self._stopping = False
        self._capacity = self.concurrency * (self.credits or AUTO_MAX)
        # A thread per credit, so that no task held waits for another's
        # thread; threads start only when tasks wait for one.  (A slot
        # holds one at least: with many daemons, more than the capacity.)
        self._threads = ThreadPool(
            minthreads=0,
            maxthreads=max(self._capacity, self.concurrency * len(self.members)),
            name="quicx-worker",
        )
        self._threads.start()
        self.stuck.start()
        self.log.info(
            "worker for {addresses}: queues {queues}; handlers {handlers};"
            " {concurrency} connection(s) to each, {credits} credits",
            addresses=", ".join(addresses),
            queues=", ".join(self.queues) or "the default queue",
            handlers=", ".join(sorted(t.decode("utf-8", "replace") for t in self._handlers))
            or "none",
            concurrency=self.concurrency,
            credits="automatic" if self.credits is None else self.credits,
        )
        self._loops = [
            ensureDeferred(self._keep_connected(member, place))
            for member in self.members
            for place in range(self.concurrency)
        ]

    async def _keep_connected(self, member: Member, place: int) -> None:
        """One slot: connect, serve until the connection ends, reconnect."""
        delay = RETRY_FIRST
        address = member.address
        while not self._stopping:
            attempt = member.endpoint.connect(_SlotFactory(self, member, place))
            try:
                slot = await self._cancellable(attempt)
            except CancelledError:
                return
            except Exception as e:
                self._slot_gone(member)
                self.log.warn(
                    "cannot reach {address} ({error}); retrying in {delay:.1f} s",
                    address=address,
                    error=e,
                    delay=delay,
                )
            else:
                delay = RETRY_FIRST
                await slot.closed
                if self._stopping:
                    return
                self.log.warn("lost the daemon at {address}; reconnecting", address=address)
            try:
                await self._cancellable(deferLater(self._reactor, delay, lambda: None))
            except CancelledError:
                return
            delay = min(delay * 2, RETRY_MAX)

    def _cancellable(self, waiting: Deferred[Any]) -> Deferred[Any]:
        """Track C{waiting} so that L{stop} can cancel it."""
        self._waiting.add(waiting)
        return waiting.addBoth(_passthrough_after, self._waiting.discard, waiting)

    async def stop(self) -> None:
        """
        Stop gracefully: every slot finishes its task in hand and reports it,
        then disconnects.  Tasks are not interrupted.
        """
        self._stopping = True
        for waiting in list(self._waiting):
            waiting.cancel()
        await DeferredList([slot.stop() for slot in list(self._slots)])
        await DeferredList(self._loops)
        self._loops = []
        if self._threads is not None:
            threads, self._threads = self._threads, None
            threads.stop()
        self.stuck.stop()


class _SlotFactory(Factory):
    """Builds one slot's connection (quietly: no log line per connection)."""

    noisy = False

    def __init__(self, worker: Worker, member: Member, place: int) -> None:
        self.worker = worker
        self.place = (member, place)

    def buildProtocol(self, addr: Any) -> WorkerProtocol:
        return WorkerProtocol(self.worker, self.place)


def _takes_context(function: Handler) -> bool:
    """Whether C{function} takes a second positional argument: the task's context."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in positional)


def _timed_call(function: Handler, args: tuple[Any, ...]) -> tuple[object, float]:
    """In a pool thread: C{function(*args)} (or the L{Failure} it raised), and its seconds."""
    started = time.perf_counter()
    try:
        result: object = function(*args)
    except (Exception, SystemExit):
        result = Failure()
    return result, time.perf_counter() - started


def _note_time(called: tuple[object, float], placement: Placement, timed: Timed | None) -> object:
    """Back on the reactor: note how long a call in a thread took; its outcome."""
    result, seconds = called
    placement.ran(seconds, False)
    if timed is not None:
        timed(seconds, False)
    return result


def _passthrough_after(result: object, forget: Callable[[Any], None], item: object) -> object:
    forget(item)
    return result
