"""
One client connection, sans-I/O, in the manner of h11: bytes in, events
out, no sockets, no reactor, no clock.  The blocking client, the Twisted
client and the worker runner are byte pumps around it.

    connection = ClientConnection()
    sock.sendall(connection.connect())          # HELLO (nothing in version 1)
    submit = Request.submit([("resize", b"...")])
    sock.sendall(connection.send(submit))       # b"" until HELLO is answered
    for event in connection.receive(sock.recv(65536)):
        ...                                     # Greeted, Answer, Settled, Send...

It owns what every client did for itself:
  - the handshake: HELLO, and the fall back to version 1 when the daemon
    answers it with a version-1 ERROR (see L{quicx.clients.requests});
    requests made before the answer are held, and encoded for the version
    it decides (L{Send} carries them);
  - the order of the replies: the daemon answers requests in order, so each
    answer (L{Answer}) goes to the oldest request still owed one, an ERROR
    mapped to its exception (L{quicx.protocol.errors.error_from}); a wait
    on the daemon (AWAIT, GROUP's wait), answered out of order, may be
    I{fenced}: sent with a HEARTBEAT whose PONG, in order, says it was taken;
  - what comes unasked: outcomes and retry notices, filed in its
    L{OutcomeBook} (L{Settled}, L{Retried}), progress reports for their
    callbacks (L{Progressed}), the answers of waits (L{Waits}), live events
    (L{LiveEvents}), heartbeats (answered: L{Send}).

A connection object lives as long as its client wants the outcomes it
keeps: L{connect} starts each new transport connection, L{connection_lost}
ends it (its pending outcomes become unknown).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Container, Sequence
from functools import partial
from typing import Any, Generic, TypeVar

from attrs import define

from quicx.clients import awaits, requests
from quicx.clients.address import CLIENT_MAX_LENGTH, CLIENT_TYPE_LIMITS
from quicx.clients.awaits import Waiter, Waits
from quicx.clients.outcomes import DEFAULT_KEEP, Outcome, OutcomeBook, RetryNotice, outcome_of
from quicx.clients.progress import Listener, ProgressListeners, ProgressReport
from quicx.protocol import codec, link, monitor, outcomes, wire
from quicx.protocol.errors import QuicxError, TaskExpired, error_from
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.outcomes import OutcomeState


class Expect(enum.Enum):
    """What answers a request, in order."""

    OK = "a SUBMIT"
    INFO = "INFO"
    STATS = "STATS"
    HELLO = "HELLO"
    FENCE = "a wait's PONG"
    NOTHING = "nothing"  # an unfenced wait: only a refusal comes in order


T = TypeVar("T")


def same(value: Any) -> Any:
    """The answer as it came: what most requests return."""
    return value


@define(eq=False)
class Request(Generic[T]):
    """
    Something a client asks the daemon, before and after it is sent, and
    what its answer becomes: the value a client's call returns (or fires
    with); L{quicx.clients.operations} declares each.

    @ivar what: its name in messages (C{"submit"}, C{"queues"}...).
    @ivar encode: its frames for a connection of the version given.
    @ivar count: how many answers it is owed (a batch of SUBMITs: one each).
    @ivar listener: a SUBMIT's progress callback: it gets the task's
        reports once its OK has come (those that came before, at once).
    @ivar waiter: a wait's, once it is sent.
    @ivar tasks: a SUBMIT's tasks (whether each has a key tells whether it
        may be sent again: L{quicx.clients.failover.lost}).
    @ivar finish: what the answer becomes (a wait's: the answer of the
        wait, not its fence's).
    """

    what: str
    expect: Expect
    encode: Callable[[int], bytes]
    count: int = 1
    listener: Listener | None = None
    waits: Waits[Any] | None = None
    key: int = 0
    waiter: Waiter[Any] | None = None
    finish: Callable[[Any], T] = same
    tasks: Sequence[requests.AnyTask] = ()
    _make: Callable[[], bytes] | None = None
    _frame: bytes | None = None
    _refused: bool = False

    def prepare(self) -> bytes:
        """
        Make its frame now, once: a bad argument raises here, before
        anything is sent (SUBMITs and STATS make none ahead: C{b""}).

        @raise ValueError, TypeError: a bad argument.
        """
        if self._frame is None:
            self._frame = b"" if self._make is None else self._make()
        return self._frame

    @classmethod
    def submit(
        cls, tasks: Sequence[requests.AnyTask], progress: Listener | None = None
    ) -> Request[int]:
        """
        SUBMITs of C{tasks} (as L{requests.submit_frames} takes them),
        answered by task ids; C{progress}: the callback of a single task's.
        """
        encode = partial(requests.submit_frames, tasks=tasks)
        request: Request[int] = Request("a SUBMIT", Expect.OK, encode, len(tasks), progress)
        request.tasks = tasks
        return request

    @classmethod
    def info(
        cls, what: str, make: Callable[[], bytes], finish: Callable[[Any], T] = same
    ) -> Request[T]:
        """
        A version-2 request answered with INFO, the frame C{make} returns
        (made when it is sent, or by L{prepare}); its document, through C{finish}.
        """
        request: Request[T] = Request(what, Expect.INFO, _no_frame, finish=finish, make=make)

        def encode(version: int) -> bytes:
            requests.needs_version_2(version, what)
            return request.prepare()

        request.encode = encode
        return request

    @classmethod
    def stats(cls) -> Request[wire.StatsResponse]:
        return Request(
            "STATS",
            Expect.STATS,
            lambda version: monitor.STATS_FRAME if version == codec.VERSION else wire.STATS_FRAME,
        )

    @classmethod
    def wait(
        cls,
        what: str,
        waits: Waits[Any],
        key: int,
        seconds: float,
        make: Callable[[int], bytes],
        deadline: float,
        then: Callable[[Any], object] | None = None,
        fenced: bool = False,
        finish: Callable[[Any], T] = same,
    ) -> Request[T]:
        """
        A wait on the daemon, answered out of order (into C{waits}, on
        C{key}, calling C{then}): the frame C{make} makes of its
        milliseconds, for C{seconds}; C{deadline} orders it among the
        waits on C{key}.  A C{fenced} one is sent with a HEARTBEAT behind,
        whose PONG says the daemon took it; an unfenced one's refusal
        comes as L{Unanswered}.  C{finish} makes the value of the wait's answer.
        """
        request: Request[T] = Request(
            what,
            Expect.FENCE if fenced else Expect.NOTHING,
            _no_frame,
            waits=waits,
            key=key,
            finish=finish,
            make=lambda: make(awaits.wait_ms(seconds)),
        )

        def encode(version: int) -> bytes:
            requests.needs_version_2(version, what)
            frame = request.prepare()
            request.waiter = waits.add(key, deadline, then)
            request._refused = False  # sent again (a client that follows the primary)
            return frame + link.HEARTBEAT_FRAME if fenced else frame

        request.encode = encode
        return request


def _no_frame(version: int) -> bytes:
    raise AssertionError("a request's encode is set once it is made")


@define
class Greeted:
    """
    The handshake is over: the connection speaks C{version}.

    @ivar server: what the daemon said of itself (empty in version 1).
    @ivar fell_back: the daemon speaks only version 1, and refused HELLO.
    @ivar error: the answer to HELLO was neither (the connection is of no use).
    """

    version: int
    server: dict[str, Any]
    fell_back: bool = False
    error: QuicxError | None = None


@define
class Answer:
    """
    A request's answer, in order: a task id, an INFO's document, a
    L{wire.StatsResponse}, C{None} for a fence; or the exception (an
    ERROR's L{quicx.protocol.errors.DaemonError}; a L{QuicxError} for an
    answer of the wrong type; the exception its encoding raised, for a
    request held until the handshake).
    """

    request: Request[Any]
    value: Any


@define
class Settled:
    """A task submitted here finished: its outcome is in the book."""

    task_id: int


@define
class Retried:
    """A task submitted here will run again: the notice is in the book."""

    task_id: int


@define
class Progressed:
    """A progress report, for its task's callback."""

    listener: Listener
    report: ProgressReport


@define
class LiveEvents:
    """Live lifecycle events (see L{quicx.clients.watching.items})."""

    message: monitor.Events


@define
class Send:
    """Bytes to send: a heartbeat's PONG, requests held until the handshake."""

    data: bytes


@define
class Unanswered:
    """A reply that no request is owed: an unfenced wait's refusal, or a daemon's mistake."""

    message: object


@define
class Rejected:
    """The daemon sent a bad frame or message: the connection is of no more use."""

    reason: str


Event = (
    Greeted | Answer | Settled | Retried | Progressed | LiveEvents | Send | Unanswered | Rejected
)

_OK = Expect.OK
_TASK_ID_OF, _ID_SIZE = codec.TASK_ID.unpack_from, codec.TASK_ID.size
_OK_TYPE, _DONE_TYPE = int(codec.MessageType.OK), int(codec.MessageType.DONE)
_OK_SIZES: dict[int | None, int] = {
    wire.PROTOCOL_VERSION: codec.TASK_ID.size,
    codec.VERSION: codec.TASK_ID.size + 1,
}
"""An OK's payload in each version: its task id, and in version 2 its flags."""
_ANSWERS = {
    Expect.OK: requests.OK_TYPES,
    Expect.INFO: (link.Info,),
    Expect.STATS: (wire.StatsResponse,),
}


class ClientConnection:
    """
    A producer's (or monitor's) connection to the daemon, sans-I/O.

    @ivar protocol: the version asked for (2, falling back to 1; or 1).
    @ivar version: the version spoken (the one asked for until the handshake).
    @ivar greeted: whether the handshake is over.
    @ivar server: what the daemon said of itself in answer to HELLO.
    @ivar hello: the HELLO each connection opens with.
    @ivar book: outcomes and retry notices of the tasks submitted here.
    @ivar progress: the progress callbacks, by task.
    @ivar awaits: the waits on tasks (AWAIT); C{group_waits}: on groups.
    @ivar announce: whether an outcome filed in C{book} is an event too
        (L{Settled}, L{Retried}): a client that reads the book when asked
        (the blocking one) has no use for them, one a call per task less.
    @ivar watched: with C{announce}, the tasks whose outcomes are events
        (C{None}: every task's): a client that wakes those who wait (the
        asyncio one) is told of the outcomes awaited, the others filed only.
    """

    def __init__(
        self,
        protocol: int = 2,
        keep_outcomes: int = DEFAULT_KEEP,
        hello: bytes = requests.HELLO,
        announce: bool = True,
    ) -> None:
        if protocol not in (1, 2):
            raise ValueError(f"protocol is 1 or 2, not {protocol}")
        self.protocol = protocol
        self.version = protocol
        self.greeted = protocol == wire.PROTOCOL_VERSION
        self.server: dict[str, Any] = {}
        self.hello = hello
        self.announce = announce
        self.watched: Container[int] | None = None
        self.book = OutcomeBook(keep_outcomes)
        self.progress = ProgressListeners()
        self.awaits = awaits.outcome_waits()
        self.group_waits = awaits.group_waits()
        self._parser = client_parser()
        # Requests sent and owed answers, oldest first; those held until the handshake.
        self._owed: deque[Request[Any]] = deque()
        self._left = 0  # answers the oldest owed request still awaits
        self._held: list[Request[Any]] = []

    # -- the life of a transport connection ------------------------------------------------

    def connect(self) -> bytes:
        """A transport connection opened: what to send first (HELLO, in version 2)."""
        self._parser = client_parser()
        self._owed.clear()
        self._held = []
        if self.protocol == wire.PROTOCOL_VERSION:
            self.greeted = True
            return b""
        self.greeted = False
        self._expect(Request("hello", Expect.HELLO, _no_frame))
        return self.hello

    def connection_lost(self) -> list[int]:
        """
        The transport connection closed: requests get no answer, waits and
        progress end, and every pending outcome becomes an
        L{OutcomeUnknown} in the book.

        @return: the tasks whose outcomes are lost.
        """
        self._owed.clear()
        self._held = []
        self._parser.release()
        self.progress.clear()
        self.awaits.clear()
        self.group_waits.clear()
        return self.book.lose_all()

    @property
    def owed(self) -> bool:
        """Whether answers are owed to requests sent (the handshake's included)."""
        return bool(self._owed)

    # -- requests ---------------------------------------------------------------------------

    def send(self, request: Request[Any]) -> bytes:
        """
        The bytes of C{request}, to send now: C{b""} while the handshake
        goes on (it is held, and sent in a L{Send} once it is over).

        @raise QuicxError, ValueError, TypeError: it cannot be encoded
            (L{NeedsVersion2} in version 1, an option out of range...).
        """
        if not self.greeted:
            self._held.append(request)
            return b""
        data = request.encode(self.version)
        if request.expect is not Expect.NOTHING:
            self._expect(request)
        return data

    def _expect(self, request: Request[Any]) -> None:
        if not self._owed:
            self._left = request.count
        self._owed.append(request)

    def refused(self, request: Request[Any]) -> None:
        """An unfenced wait was refused (the client read its ERROR as L{Unanswered})."""
        if request.waits is not None and request.waiter is not None:
            request.waits.refused(request.key, request.waiter)

    # -- what the daemon sends ------------------------------------------------------------

    def receive(self, data: bytes) -> list[Event]:
        """The events of C{data}, read from the daemon; L{Rejected} ends them."""
        events: list[Event] = []
        parser = self._parser
        frames = parser.feed(data)
        ok_size = _OK_SIZES.get(parser.version)
        owed, book, task_id_of = self._owed, self.book, _TASK_ID_OF
        for frame in frames:
            if type(frame) is not Frame:
                events.append(Rejected(f"a bad frame: {frame.reason}"))
                break
            # The common cases, a batch's thousands, read from the bytes
            # without a message object: an OK for a SUBMIT, a DONE without a
            # result (any other, or a malformed one, is decoded below).
            message_type, payload = frame
            if (
                message_type == _OK_TYPE
                and len(payload) == ok_size
                and owed
                and owed[0].expect is _OK
            ):
                task_id = task_id_of(payload)[0]
                request = self._next()
                book.expect(task_id)
                if request.listener is not None:
                    self._listen(request.listener, task_id, events)
                events.append(Answer(request, task_id))
                continue
            if message_type == _DONE_TYPE and len(payload) == _ID_SIZE:
                self._settle(task_id_of(payload)[0], None, events)
                continue
            try:
                message = requests.decode(parser.version, message_type, payload)
            except codec.MalformedMessage as e:
                events.append(Rejected(f"a malformed message: {e}"))
                break
            if not self._file(parser.version, message, events):
                break
        return events

    def receive_frame(
        self, version: int | None, message_type: int, payload: bytes, events: list[Event]
    ) -> bool:
        """
        Add the events of one frame, of C{version}, parsed by the caller
        (a Twisted L{quicx.net.framer.FrameReceiver}), to C{events}.

        @return: whether the connection is still of use.
        """
        try:
            message = requests.decode(version, message_type, payload)
        except codec.MalformedMessage as e:
            events.append(Rejected(f"a malformed message: {e}"))
            return False
        return self._file(version, message, events)

    def _file(self, version: int | None, message: Any, events: list[Event]) -> bool:
        settled = outcome_of(message)
        if settled is not None:
            self._settle(*settled, events)
        elif isinstance(message, outcomes.Progress):
            found = self.progress.report(message)
            if found is not None:
                events.append(Progressed(*found))
        elif isinstance(message, outcomes.Outcome):
            task_id = message.task_id
            if message.state == OutcomeState.EXPIRED and self.book.pending(task_id):
                # A task of this producer's, never started: its outcome (an AWAIT's comes after).
                self._settle(task_id, TaskExpired(task_id, message.reason), events)
            else:
                self.awaits.answer(task_id, message)
        elif isinstance(message, outcomes.GroupState):
            self.group_waits.answer(message.group, message)  # or the opener's notice: dropped
        elif isinstance(message, outcomes.Retrying):
            self.book.notice(RetryNotice.of(message))
            if self.announce:
                events.append(Retried(message.task_id))
        elif isinstance(message, monitor.Events):
            events.append(LiveEvents(message))
        elif isinstance(message, wire.Heartbeat):
            events.append(Send(link.PONG_FRAME if version == codec.VERSION else wire.PONG_FRAME))
        elif not self._owed:
            if not isinstance(message, wire.Pong):  # one nobody asked for
                events.append(Unanswered(message))
        elif self._owed[0].expect is Expect.FENCE:
            return self._fence(message, events)
        elif isinstance(message, wire.Pong):
            pass  # a PONG this client did not ask for
        else:
            self._answer(version, message, events)
        return True

    def _settle(self, task_id: int, outcome: Outcome, events: list[Event]) -> None:
        """A task of this producer's has its C{outcome}."""
        self.book.arrived(task_id, outcome)
        self.progress.forget(task_id)
        if self.announce and (self.watched is None or task_id in self.watched):
            events.append(Settled(task_id))

    def _next(self) -> Request[Any]:
        """The oldest request owed an answer, which the answer that came is."""
        request = self._owed[0]
        self._left -= 1
        if not self._left:
            self._owed.popleft()
            if self._owed:
                self._left = self._owed[0].count
        return request

    def _answer(self, version: int | None, message: Any, events: list[Event]) -> None:
        request = self._next()
        expect = request.expect
        value: Any
        if expect is Expect.HELLO:
            self._greet(version, message, events)
            return
        if type(message) is wire.Error:
            value = error_from(message)
        elif isinstance(message, _ANSWERS[expect]):
            answer: Any = message
            if expect is Expect.OK:
                value = answer.task_id
                self.book.expect(value)
                if request.listener is not None:
                    self._listen(request.listener, value, events)
            elif expect is Expect.INFO:
                value = answer.document
            else:
                value = answer
        else:
            value = QuicxError(f"unexpected {type(message).__name__} for {request.what}")
        events.append(Answer(request, value))

    def _listen(self, listener: Listener, task_id: int, events: list[Event]) -> None:
        """Hand C{task_id}'s progress reports to C{listener}, those that came already now."""
        for report in self.progress.listen(task_id, listener):
            events.append(Progressed(listener, report))

    def _fence(self, message: Any, events: list[Event]) -> bool:
        """A wait's ERROR (its PONG follows), or the PONG: the wait was taken."""
        fence = self._owed[0]
        if isinstance(message, wire.Pong):
            self._next()
            if not fence._refused:
                events.append(Answer(fence, None))
        elif isinstance(message, wire.Error) and not fence._refused:
            fence._refused = True
            self.refused(fence)
            events.append(Answer(fence, error_from(message)))
        else:
            events.append(Rejected(f"{type(message).__name__} where {Expect.FENCE.value} was due"))
            return False
        return True

    def _greet(self, version: int | None, message: Any, events: list[Event]) -> None:
        """The answer to HELLO decides the version; the held requests go out."""
        fell_back = requests.refuses_version_2(version, message)
        error = None
        if fell_back:
            self.version = wire.PROTOCOL_VERSION
        elif isinstance(message, link.Info) and isinstance(message.document, dict):
            self.version = codec.VERSION
            self.server = message.document
        else:
            error = QuicxError(f"unexpected {type(message).__name__} for HELLO")
        self.greeted = True
        held, self._held = self._held, []
        frames = []
        for request in held:
            try:
                frames.append(self.send(request))
            except (QuicxError, ValueError, TypeError) as e:
                events.append(Answer(request, e))
        if frames:
            events.append(Send(b"".join(frames)))
        events.append(Greeted(self.version, self.server, fell_back, error))


def client_parser() -> FrameParser:
    """A parser of what a daemon sends a client (the worker reads its TASKs with one)."""
    return FrameParser(
        CLIENT_MAX_LENGTH,
        check_types=False,
        v2_max_length=CLIENT_MAX_LENGTH,
        v2_type_limits=CLIENT_TYPE_LIMITS,
    )
