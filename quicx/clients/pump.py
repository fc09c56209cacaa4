"""
The blocking client's byte pump: a socket, and calls that read until their answer.

One socket at a time, a L{ClientConnection} over it, and calls that send a
request and read until its answer.

The pump connects when a call needs it (anew after the daemon closed the
connection between calls), opens each connection with HELLO (falling back
to version 1), hands progress reports to their callbacks and live events to
the feed, answers heartbeats, and turns a close, a reset or a bad frame into
L{ConnectionLost} or L{QuicxError}.  L{quicx.clients.blocking.QuicxClient}
is this pump plus its API, each call one line over L{quicx.clients.operations}.
"""

from __future__ import annotations

import logging
import select
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Self, TypeVar, cast

from service_identity import VerificationError

from quicx.clients import awaits, failover, watching
from quicx.clients.address import DEFAULT_ADDRESS, one_address, parse_address
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Event,
    Greeted,
    LiveEvents,
    Progressed,
    Rejected,
    Request,
    Send,
    Unanswered,
)
from quicx.clients.failover import FAILOVER_DEADLINE, Shard
from quicx.clients.outcomes import DEFAULT_KEEP
from quicx.clients.progress import Listener, ProgressReport
from quicx.clients.requests import AnyTask
from quicx.protocol import codec, wire
from quicx.protocol.errors import ConnectionLost, DaemonError, NotPrimary, QuicxError, error_from

T = TypeVar("T")

log = logging.getLogger("quicx.clients.blocking")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging


class SocketPump:
    """
    A connection to one daemon over a blocking socket, and the calls that
    use it: L{_call} (a request and its answer), L{_wait} (a wait on the
    daemon) and L{_pipeline} (SUBMITs, pipelined); with failover, the
    daemon is the shard's primary (L{_exchange}).  Calls are serialized by a lock.

    @ivar timeout: seconds any one call may wait for the daemon.
    @ivar version: the protocol version of the connection (2, unless the
        client was made with C{protocol=1} or the daemon speaks only 1).
    @ivar server: what the daemon said of itself in answer to HELLO.
    """

    def __init__(
        self,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
        timeout: float = 30.0,
        keep_outcomes: int = DEFAULT_KEEP,
        protocol: int = 2,
        failover: bool = False,
        failover_deadline: float = FAILOVER_DEADLINE,
    ) -> None:
        self._conn = ClientConnection(protocol, keep_outcomes, announce=False)
        self.protocol = protocol
        # With failover, the daemons of one replicated shard: it follows the primary.
        self._shard = Shard(address, failover_deadline) if failover else None
        if self._shard is None:
            several = "open_client or ClusterClient (quicx.clients.blocking_cluster)"
            address = one_address(cast(str, address), "QuicxClient", several)
        self._aim(cast(str, address) if self._shard is None else self._shard.current)
        self.timeout = timeout
        self._lock = threading.RLock()
        self._sock: socket.socket | None = None
        # Tells without a syscall's error whether the daemon sent or closed
        # anything since the last call (L{_closed_meanwhile}).
        self._readable = select.poll()
        # What the connection made of the bytes read, not yet handled.
        self._inbox: deque[Event] = deque()
        self._feed = watching.EventFeed()

    def _aim(self, address: str) -> None:
        """Connect to C{address} from now on."""
        self.address = address
        _, self._sockaddr, self._tls = parse_address(address)
        self._context = self._tls.context() if self._tls is not None else None

    @property
    def version(self) -> int:
        return self._conn.version

    @property
    def server(self) -> dict[str, Any]:
        return self._conn.server

    # -- connection -------------------------------------------------------------------

    def _connection(self) -> socket.socket:
        if self._sock is None:
            try:
                sockaddr = self._sockaddr
                if isinstance(sockaddr, str):  # a UNIX socket's path
                    sock = socket.socket(socket.AF_UNIX)
                    sock.settimeout(self.timeout)
                    sock.connect(sockaddr)
                else:
                    sock = socket.create_connection(sockaddr, self.timeout)
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    if self._tls is not None:
                        sock = self._tls.wrap(sock, self._context)
            except VerificationError as e:
                raise ConnectionLost(
                    f"cannot connect to {self.address}: its certificate is not for"
                    f" {self._tls.hostname if self._tls else '?'}: {e}"
                ) from None
            except OSError as e:
                raise ConnectionLost(
                    f"cannot connect to {self.address}: {e.strerror or e}"
                ) from None
            self._sock = sock
            self._readable = select.poll()
            self._readable.register(sock, select.POLLIN)
            self._inbox.clear()
            hello = self._conn.connect()
            if hello:
                try:
                    self._hello(hello)
                    if self._shard is not None:
                        self._check_primary()
                except BaseException:
                    self._drop()  # its answer may still come, as the answer to another
                    raise
        return self._sock

    def _hello(self, hello: bytes) -> None:
        """Open a version-2 connection with HELLO; fall back to 1 if refused."""
        was = self._conn.version
        self._send(hello)
        deadline = time.monotonic() + self.timeout
        while not isinstance(greeted := self._pump(deadline), Greeted):
            if greeted is not None:
                raise QuicxError(f"unexpected {type(greeted).__name__} for HELLO")
        if greeted.error is not None:
            raise greeted.error
        if greeted.fell_back and was == codec.VERSION:
            log.warning(
                "%s speaks protocol version 1 only: this client speaks version 1 to it"
                " (queues, priorities, keys, cancel and introspection are unavailable)",
                self.address,
            )

    def _check_primary(self) -> None:
        """@raise NotPrimary: HELLO's answer says the daemon is a standby (or fenced)."""
        refusal = failover.not_primary(self._conn.server)
        if refusal is not None:
            raise refusal

    def _begin(self, deadline: float, sends: bool = True) -> None:
        """
        Start a call: connect (anew if the daemon closed the connection
        since the last call, when the call C{sends} a request: one that
        only reads learns of a close as it reads), and read the answers
        owed to calls that gave up (their accepted tasks' outcomes are
        still kept).
        """
        if sends and self._closed_meanwhile():
            self._drop()
        self._connection()
        while self._conn.owed or self._inbox:
            self._pump(deadline)

    def _closed_meanwhile(self) -> bool:
        """
        Whether the daemon closed the connection between calls (an idle
        client past its C{heartbeat_timeout}, a restart), read without
        waiting; what it sent before is filed (outcomes, notices), nothing
        is answered.  Checked before a call sends anything, so that a call
        never sent is sent on a new connection, not lost with the old one.
        """
        sock = self._sock
        if sock is None:
            return False
        # One poll, no waiting: most calls follow another at once, with
        # nothing read since (TLS may hold decrypted bytes poll cannot see).
        if not self._readable.poll(0) and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
            return False
        sock.settimeout(0)
        try:
            while data := sock.recv(1 << 18):
                self._take_in(data)
        except (BlockingIOError, ssl.SSLWantReadError):
            sock.settimeout(self.timeout)
            return False  # open, and nothing more to read now
        except OSError:
            pass  # reset
        while self._inbox:
            event = self._inbox.popleft()
            if type(event) is not Send:
                self._handle(event)
        return True

    def _drop(self) -> None:
        """
        Forget the connection; pending outcomes become unknown, waits,
        progress and live events end.
        """
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._conn.connection_lost()
        self._feed.stop()

    def connect(self) -> None:
        """
        Connect now, if not connected (every call connects when it needs to).

        @raise ConnectionLost: the daemon cannot be reached.
        """
        with self._lock:
            self._begin(time.monotonic() + self.timeout)

    def close(self) -> None:
        with self._lock:
            self._drop()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _send(self, data: bytes) -> None:
        sock = self._connection()
        try:
            sock.sendall(data)
        except OSError as e:
            self._drop()
            raise ConnectionLost(f"connection to {self.address} failed: {e}") from None

    def _request(self, request: Request[Any]) -> None:
        """Send C{request} on the connection L{_begin} made."""
        self._send(self._conn.send(request))

    def _answer(self, request: Request[Any], deadline: float) -> Any:
        """The next answer, which is C{request}'s (L{_begin} read those owed before)."""
        while True:
            event = self._pump(deadline)
            if type(event) is Answer and event.request is request:
                return event.value
            if event is not None:
                self._drop()
                raise QuicxError(f"unexpected {_name(event)} for {request.what}")

    def _pump(self, deadline: float) -> Answer | Unanswered | Greeted | None:
        """
        Read one event: send what it sends, hand a progress report to its
        callback, file live events (and return C{None}); return an answer,
        or anything else that came.
        """
        event = self._read(deadline)
        if isinstance(event, (Answer, Unanswered, Greeted)):
            return event
        if isinstance(event, Send):
            if self._sock is not None:  # a PONG is not worth a new connection
                self._send(event.data)
        elif event is not None:
            self._handle(event)
        return None

    def _handle(self, event: Event) -> None:
        """Hand on what came unasked: progress reports, live events."""
        if type(event) is Progressed:
            self._tell_progress(event.listener, event.report)
        elif type(event) is LiveEvents:
            self._feed.arrived(event.message)

    def _tell_progress(self, listener: Listener, report: ProgressReport) -> None:
        # A callback's mistake is logged: raised here, it would end whichever
        # call happened to read the report.
        try:
            listener(report)
        except Exception:
            log.exception("the progress callback of task %s raised", report.task_id)

    def _read(self, deadline: float) -> Event | None:
        """The next event; C{None} when what was read made none (an outcome, a wait's answer)."""
        if self._inbox:
            return self._inbox.popleft()
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from {self.address} in time")
            sock = self._connection()
            sock.settimeout(remaining)
            try:
                data = sock.recv(1 << 18)
            except TimeoutError:
                continue
            except OSError as e:
                self._drop()
                raise ConnectionLost(f"connection to {self.address} failed: {e}") from None
            if not data:
                self._drop()
                raise ConnectionLost(f"{self.address} closed the connection")
            self._take_in(data)
            return self._inbox.popleft() if self._inbox else None

    def _take_in(self, data: bytes) -> None:
        """Read C{data} from the daemon into the inbox, as events."""
        events = self._conn.receive(data)
        if events and type(events[-1]) is Rejected:
            self._inbox.extend(events[:-1])
            reason = events[-1].reason
            self._drop()
            raise QuicxError(f"{self.address} sent {reason}")
        self._inbox.extend(events)

    def _call(self, request: Request[T]) -> T:
        """
        Send C{request} (its arguments checked first) and read until its
        answer: the value it makes of it, or the error it got.
        """
        request.prepare()
        with self._lock:
            if self._shard is None:  # the common case, as short as it goes
                deadline = time.monotonic() + self.timeout
                self._begin(deadline)
                self._request(request)
                value = self._answer(request, deadline)
            else:
                value = self._exchange(request, self.timeout, partial(self._answer, request))
        if isinstance(value, Exception):
            raise value
        return request.finish(value)

    def _exchange(self, request: Request[Any], seconds: float, read: Callable[[float], T]) -> T:
        """
        Connect (L{_begin}), send C{request} and C{read} its answer (by a
        deadline C{seconds} away): what C{read} returns.  With failover,
        this follows the shard's primary (L{quicx.clients.failover}):
        refused by a daemon that is not, or cut off before its answer when
        that is safe, the request is sent again to the next daemon.

        @raise PrimaryNotFound: no primary within the shard's deadline.
        @raise NotAcknowledged, ConnectionLost: its connection dropped
            before its answer, and it may have been applied.
        """
        shard = self._shard
        while True:
            deadline = time.monotonic() + seconds
            try:
                self._begin(deadline)
            except (ConnectionLost, NotPrimary, TimeoutError) as e:
                if shard is None:
                    raise
                self._follow(shard, e)  # nothing was sent
                continue
            try:
                self._request(request)
                value = read(deadline)
            except ConnectionLost as e:
                if shard is None:
                    raise
                refusal = failover.lost(request, self.address)
                if refusal is not None:
                    self._drop()
                    raise refusal from None
                self._follow(shard, e)
                continue
            except NotPrimary as e:  # a wait's refusal
                if shard is None:
                    raise
                self._follow(shard, e)
                continue
            if shard is not None:
                if isinstance(value, NotPrimary):
                    self._follow(shard, value)
                    continue
                shard.reached()
            return value

    def _follow(self, shard: Shard, error: Exception) -> None:
        """The daemon is not the primary, or cannot be reached: aim at the next."""
        self._drop()
        hop = shard.next(error, time.monotonic())
        log.info("%s (%s): trying %s in %.2f s", self.address, error, hop.address, hop.delay)
        time.sleep(hop.delay)
        self._aim(hop.address)

    def _wait(self, declare: Callable[[float, float], Request[T]], timeout: float | None) -> T:
        """
        Send the wait C{declare} makes of its seconds and deadline, and
        read until its answer: the daemon's wait, C{timeout} (default: the
        client's), and this client's C{timeout} more for the answer to come back.
        """
        wait = awaits.wait_seconds(self.timeout if timeout is None else timeout)
        request = declare(wait, time.monotonic() + wait + self.timeout)
        request.prepare()  # a bad argument is refused before anything is sent
        with self._lock:
            answer = self._exchange(request, wait + self.timeout, partial(self._waited, request))
        return request.finish(answer)

    def _waited(self, request: Request[Any], deadline: float) -> Any:
        """Read until the answer of C{request}, a wait sent."""
        waiter = request.waiter
        assert waiter is not None  # sent
        while waiter.answer is None:
            # Nothing else is owed to this call: an ERROR refuses the wait.
            event = self._pump(deadline)
            if event is None:
                continue
            self._conn.refused(request)
            if type(event) is Unanswered and type(event.message) is wire.Error:
                raise error_from(event.message)
            self._drop()
            raise QuicxError(f"unexpected {_name(event)} for {request.what}")
        return waiter.answer

    # -- SUBMITs, pipelined (L{quicx.clients.blocking.QuicxClient.submit_many}) ---------

    def _pipeline(self, tasks: Iterable[AnyTask], window: int) -> list[int | DaemonError]:
        """L{submit_many}'s SUBMITs to the daemon of the moment, and their answers."""
        results: list[int | DaemonError] = []
        batch: list[AnyTask] = []
        # The SUBMITs of the previous batch, sent and not yet read.
        unanswered: Request[int] | None = None
        sent = 0  # tasks that may have reached the daemon
        try:
            self._begin(time.monotonic() + self.timeout)
            for task in tasks:
                batch.append(task)
                if len(batch) == window:
                    request = self._send_submits(batch, unanswered, results)
                    sent += len(batch)
                    self._read_replies(unanswered, results)
                    unanswered, batch = request, []
            if batch:
                request = self._send_submits(batch, unanswered, results)
                sent += len(batch)
                self._read_replies(unanswered, results)
                unanswered = request
            self._read_replies(unanswered, results)
        except Exception as e:
            e.results = list(results)  # type: ignore[attr-defined]
            e.sent = sent  # type: ignore[attr-defined]
            raise
        return results

    def _submit_following(
        self, shard: Shard, tasks: list[AnyTask], window: int
    ) -> list[int | QuicxError]:
        """
        L{submit_many} to a shard's primary: what was refused as not the
        primary, not sent, or sent and safe to send again (L{failover.Batch})
        goes to the next daemon, until every task has its answer.
        """
        batch = failover.Batch(tasks)
        while not batch.done:
            error: Exception | None = None
            try:
                got: list[int | DaemonError] = self._pipeline(batch.pending(), window)
            except (ConnectionLost, NotPrimary, TimeoutError) as e:
                got, sent, error = getattr(e, "results", []), getattr(e, "sent", 0), e
                if isinstance(e, TimeoutError) and sent:
                    raise
            else:
                sent = len(got)
            error = batch.answered(got, sent, self.address) or error
            if error is not None:
                self._follow(shard, error)
        shard.reached()
        return cast(list[int | QuicxError], batch.results)

    def _send_submits(
        self,
        batch: list[AnyTask],
        unanswered: Request[int] | None,
        results: list[int | DaemonError],
    ) -> Request[int]:
        """
        Send C{batch}, encoded in the version of the connection L{_begin}
        made.  If a task of it cannot be, the answers to the C{unanswered}
        SUBMITs sent before it are read into C{results} before the error
        is raised: they are all that was sent.
        """
        request = Request.submit(batch)
        try:
            data = self._conn.send(request)
        except Exception:
            self._read_replies(unanswered, results)
            raise
        self._send(data)
        return request

    def _read_replies(
        self, request: Request[int] | None, results: list[int | DaemonError] | None = None
    ) -> list[int | DaemonError]:
        """
        Read the answers to C{request}'s SUBMITs (none if C{None}): task
        ids, or the refusals, each added to C{results} (a new list if none)
        as it comes.
        """
        results = [] if results is None else results
        if request is None:
            return results
        deadline = time.monotonic() + self.timeout
        inbox = self._inbox
        for _ in range(request.count):
            # Straight from the inbox, the common case, else through the pump.
            event = inbox[0] if inbox else None
            if type(event) is Answer and event.request is request:
                inbox.popleft()
                value = event.value
            else:
                value = self._answer(request, deadline)
            if type(value) is int or isinstance(value, DaemonError):
                results.append(value)
            else:
                self._drop()
                raise value
        return results


def _name(event: object) -> str:
    """What came, in a message: the message's type, for a reply nobody asked for."""
    return type(event.message if isinstance(event, Unanswered) else event).__name__
