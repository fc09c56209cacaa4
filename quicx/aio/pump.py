"""
The asyncio client's byte pump: a L{ClientConnection} over an asyncio transport.

One connection at a time, opened when a call needs it (anew after the
daemon closed it), with HELLO (falling back to version 1).  What the
daemon sends is read as it comes, on the loop, whatever the calls are
doing: answers resolve their calls' futures, outcomes and retry notices go
to the tasks' waiters (or are kept in the connection's book), progress
reports to their callbacks, live events to the feed, heartbeats are
answered.  A close, a reset or a bad frame fails what is owed with
L{ConnectionLost} (or L{QuicxError}), and every pending outcome becomes an
L{OutcomeUnknown}.  L{quicx.aio.client.AsyncClient} is this pump plus its
API, each call one line over L{quicx.clients.operations}.

Cheap per call, as the blocking client is: a call awaits its answer's
future itself (no task, no C{asyncio.timeout} scope); the requests sent in
one turn of the loop go in as few writes as it can (L{StreamPump._write});
the answers to requests, which come in order, are timed by one timer for
all (L{_Deadlines}), and a wait for an outcome by a timer handle of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import Any, TypeVar, cast

from service_identity import VerificationError

from quicx.clients import awaits, failover, watching
from quicx.clients.address import DEFAULT_ADDRESS, one_address, parse_address
from quicx.clients.connection import (
    Answer,
    ClientConnection,
    Greeted,
    LiveEvents,
    Progressed,
    Rejected,
    Request,
    Retried,
    Send,
    Settled,
    Unanswered,
)
from quicx.clients.failover import FAILOVER_DEADLINE, Shard, not_primary
from quicx.clients.outcomes import DEFAULT_KEEP, Outcome, RetryListener
from quicx.protocol import codec, wire
from quicx.protocol.errors import ConnectionLost, NotPrimary, QuicxError

T = TypeVar("T")


SEVERAL = "AsyncClusterClient or open_client (quicx.aio)"
"""What takes the addresses of several daemons, where L{StreamPump} takes one."""

log = logging.getLogger("quicx.aio")
log.addHandler(logging.NullHandler())  # silent unless the application configures logging


class _Deadlines:
    """
    The deadlines of the answers owed, in the order they are owed (the
    daemon answers in order, and each waits the client's timeout): one
    timer, for the first answer not yet come, fails each that is late with
    C{TimeoutError}.  Those answered leave from the front as others join,
    so it holds no more than the answers owed.
    """

    def __init__(self, late: Callable[[float | None], TimeoutError]) -> None:
        self._late = late
        self._owed: deque[tuple[float, asyncio.Future[Any]]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, seconds: float, future: asyncio.Future[Any]) -> None:
        owed, loop = self._owed, future.get_loop()
        while owed and owed[0][1].done():
            owed.popleft()
        owed.append((loop.time() + seconds, future))
        if self._timer is None or self._loop is not loop:
            self._loop = loop
            self._timer = loop.call_at(owed[0][0], self._expire)

    def _expire(self) -> None:
        self._timer = None
        owed, loop = self._owed, self._loop
        assert loop is not None
        now = loop.time()
        while owed and (owed[0][1].done() or owed[0][0] <= now):
            _, future = owed.popleft()
            if not future.done():
                future.set_exception(self._late(None))
        if owed:
            self._timer = loop.call_at(owed[0][0], self._expire)

    def clear(self) -> None:
        self._owed.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


class _Link(asyncio.Protocol):
    """One transport connection: what it reads and its end go to its pump."""

    def __init__(self, pump: StreamPump) -> None:
        self.pump = pump
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.pump._made(self)

    def data_received(self, data: bytes) -> None:
        if self.pump._link is self:
            self.pump._received(data)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.pump._link is self:
            self.pump._lost(exc)
        self.closed.set_result(None)


class StreamPump:
    """
    A connection to one daemon on the running asyncio loop, and the calls
    that use it: L{_call} (a request and its answer), L{_wait} (a wait on
    the daemon), L{_outcome} (a task's outcome).  Any number of calls may be
    outstanding at once: the daemon answers them in order.

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
        self._conn = ClientConnection(protocol, keep_outcomes)
        self.protocol = protocol
        # With failover, the daemons of one replicated shard: it follows the primary.
        self._shard = Shard(address, failover_deadline) if failover else None
        self._aimed = 0  # how many times it followed: a call follows once per refusal
        if self._shard is None:
            self._aim(one_address(cast(str, address), "AsyncClient", SEVERAL))
        else:
            self._aim(self._shard.current)
        self.timeout = timeout
        self._link: _Link | None = None
        self._opening = asyncio.Lock()
        self._greeted: asyncio.Future[Greeted] | None = None
        self._rejected: QuicxError | None = None  # why the link was cut, if this end cut it
        # The future of each request sent or held, until its answer; a batch's answers so far.
        self._replies: dict[Request[Any], asyncio.Future[Any]] = {}
        self._collecting: dict[Request[Any], list[Any]] = {}
        self._deadlines = _Deadlines(self._late)
        # What the requests of this turn of the loop send, written at its end
        # (the first since the daemon's last data goes at once: L{_write}).
        self._out: list[bytes] = []
        self._wrote = False
        # The waits sent (result, wait_group), until their answers.
        self._answers: set[asyncio.Future[Any]] = set()
        # Those waiting for the outcome of a task submitted here, and its retry notices.
        self._outcomes: dict[int, list[asyncio.Future[Outcome]]] = {}
        self._retries: dict[int, list[RetryListener]] = {}
        # Only an outcome awaited is an event (its retry listeners are those of its waits).
        self._conn.watched = self._outcomes
        self._feed = watching.EventFeed()
        self._fed: asyncio.Future[None] | None = None  # woken by live events

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

    # -- the connection -----------------------------------------------------------------

    async def connect(self) -> None:
        """
        Connect now, if not connected (every call connects when it needs to).

        @raise ConnectionLost: the daemon cannot be reached, or did not answer HELLO.
        """
        if self._link is not None:
            return
        async with self._opening:
            if self._link is None:
                await self._open()

    async def _open(self) -> None:
        loop = asyncio.get_running_loop()
        link = _Link(self)
        try:
            async with asyncio.timeout(self.timeout):
                if isinstance(self._sockaddr, str):  # a UNIX socket's path
                    await loop.create_unix_connection(lambda: link, self._sockaddr)
                else:
                    host, port = self._sockaddr
                    hostname = self._tls.hostname if self._tls is not None else None
                    await loop.create_connection(
                        lambda: link, host, port, ssl=self._context, server_hostname=hostname
                    )
                    if self._tls is not None and link.transport is not None:
                        self._tls.verify(link.transport.get_extra_info("ssl_object"))
                if self._greeted is not None:
                    greeted = await self._greeted
                    if greeted.error is not None:
                        raise greeted.error
                    refusal = None if self._shard is None else not_primary(greeted.server)
                    if refusal is not None:
                        raise refusal
                    if greeted.fell_back and self.protocol == codec.VERSION:
                        log.warning(
                            "%s speaks protocol version 1 only: this client speaks version 1"
                            " to it (queues, priorities, keys, cancel and introspection are"
                            " unavailable)",
                            self.address,
                        )
        except BaseException as e:
            if link.transport is not None:
                link.transport.abort()
            if isinstance(e, VerificationError):
                hostname = self._tls.hostname if self._tls else "?"
                raise ConnectionLost(
                    f"cannot connect to {self.address}: its certificate is not for {hostname}: {e}"
                ) from None
            if isinstance(e, TimeoutError | OSError):
                reason = getattr(e, "strerror", None) or e or "no answer in time"
                raise ConnectionLost(f"cannot connect to {self.address}: {reason}") from None
            raise

    def _made(self, link: _Link) -> None:
        """A transport connection opened: it opens with HELLO (in version 2)."""
        self._link, self._rejected = link, None
        hello = self._conn.connect()
        self._greeted = None
        if hello and link.transport is not None:
            self._greeted = asyncio.get_running_loop().create_future()
            link.transport.write(hello)

    async def close(self) -> None:
        """Close the connection (a later call opens another); return once it is closed."""
        link = self._link
        if link is not None and link.transport is not None:
            self._flush()
            link.transport.close()
            await link.closed

    async def __aenter__(self) -> StreamPump:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- requests -----------------------------------------------------------------------

    def _send(self, request: Request[Any], batch: bool = False) -> asyncio.Future[Any]:
        """
        Send C{request} on the connection L{connect} opened (at the end of
        this turn of the loop, with the others of the turn): the future of
        its answer (of a C{batch}'s: the list of its answers, ids or refusals).

        @raise QuicxError, ValueError, TypeError: it cannot be encoded.
        @raise ConnectionLost: the connection closed meanwhile.
        """
        link = self._link
        if link is None or link.transport is None:
            raise ConnectionLost(f"{self.address} closed the connection")
        data = self._conn.send(request)
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._replies[request] = reply
        if batch:
            self._collecting[request] = []
        if data:
            self._write(data)
        return reply

    def _write(self, data: bytes) -> None:
        """
        Send C{data}: at once if it is the first since the daemon's last
        data (a call that awaited an answer), else at the end of this turn
        of the loop, with the others of the turn (calls made at once).
        """
        out = self._out
        if not out and not self._wrote:
            link = self._link
            if link is not None and link.transport is not None:
                link.transport.write(data)
                self._wrote = True
            return
        if not out:
            asyncio.get_running_loop().call_soon(self._flush)
        out.append(data)

    def _flush(self) -> None:
        """Write what this turn's requests send, in one write."""
        out, self._out, self._wrote = self._out, [], False
        link = self._link
        if out and link is not None and link.transport is not None:
            link.transport.write(out[0] if len(out) == 1 else b"".join(out))

    def _late(self, seconds: float | None = None) -> TimeoutError:
        seconds = self.timeout if seconds is None else seconds
        return TimeoutError(f"no answer from {self.address} in {seconds:g} s")

    def _timed_out(self, future: asyncio.Future[Any], seconds: float) -> None:
        if not future.done():
            future.set_exception(self._late(seconds))

    async def _within(self, seconds: float | None, waiting: asyncio.Future[T]) -> T:
        """
        C{waiting}'s value, or C{TimeoutError} after C{seconds} (C{None}:
        the client's, for the answer to a request, which come in order):
        C{waiting}, this call's own, fails with it.
        """
        if seconds is None:
            self._deadlines.add(self.timeout, waiting)
            return await waiting
        timer = asyncio.get_running_loop().call_later(seconds, self._timed_out, waiting, seconds)
        try:
            return await waiting
        finally:
            timer.cancel()

    async def _call(self, request: Request[T]) -> T:
        """
        Send C{request} (its arguments checked first) and await its
        answer: the value it makes of it, or the error it got.
        """
        request.prepare()
        if self._shard is None:  # the common case, as short as it goes
            if self._link is None:
                await self.connect()
            reply = self._send(request)
            self._deadlines.add(self.timeout, reply)
            return request.finish(await reply)
        return await self._exchange(request, partial(self._answered, request))

    async def _answered(self, request: Request[T]) -> T:
        reply = self._send(request)
        self._deadlines.add(self.timeout, reply)
        return request.finish(await reply)

    async def _exchange(self, request: Request[Any], send: Callable[[], Awaitable[T]]) -> T:
        """
        Connect, then C{send} C{request} and await its answer (what C{send}
        returns).  With failover, this follows the shard's primary
        (L{quicx.clients.failover}): refused by a daemon that is not, or cut
        off when that is safe, the request is sent again to the next daemon.

        @raise PrimaryNotFound: no primary within the shard's deadline.
        @raise NotAcknowledged, ConnectionLost: its connection dropped
            before its answer, and it may have been applied.
        """
        shard = self._shard
        while True:
            aimed = self._aimed
            try:
                await self.connect()
            except (ConnectionLost, NotPrimary) as e:
                if shard is None:
                    raise
                await self._follow(shard, e, aimed)  # nothing was sent
                continue
            try:
                value = await send()
            except NotPrimary as e:
                if shard is None:
                    raise
                await self._follow(shard, e, aimed)
                continue
            except ConnectionLost as e:
                if shard is None:
                    raise
                refusal = failover.lost(request, self.address)
                if refusal is not None:
                    raise refusal from None
                await self._follow(shard, e, aimed)
                continue
            if shard is not None:
                shard.reached()
            return value

    async def _follow(self, shard: Shard, error: Exception, aimed: int) -> None:
        """
        The daemon is not the primary, or cannot be reached: aim at the
        next, once for all the calls that learnt it at once (C{aimed}: how
        many times the client had followed when this one was sent).  The
        connection to a daemon that is not the primary is cut: the calls
        it still owes answers fail with its refusal (a daemon that refused
        one request refuses those after it), and follow.
        """
        async with self._opening:
            if self._aimed != aimed:
                return  # another call followed already
            self._aimed += 1
            link = self._link
            if link is not None and link.transport is not None:
                if isinstance(error, NotPrimary):
                    self._rejected = error
                link.transport.abort()
                await link.closed
            hop = shard.next(error, time.monotonic())
            log.info("%s (%s): trying %s in %.2f s", self.address, error, hop.address, hop.delay)
            await asyncio.sleep(hop.delay)
            self._aim(hop.address)

    async def _wait(self, declare: Callable[..., Request[T]], timeout: float | None) -> T:
        """
        Send the wait C{declare} makes of its seconds, deadline and what
        its answer calls, fenced, and await its answer: the daemon's wait,
        C{timeout} (default: the client's), and the client's C{timeout}
        more for the answer to come back.
        """
        seconds = awaits.wait_seconds(self.timeout if timeout is None else timeout)
        # The answer of the wait sent last (with failover, it may be sent again).
        answers: list[asyncio.Future[Any]] = []

        def then(value: object) -> None:
            if answers and not answers[-1].done():
                answers[-1].set_result(value)

        request = declare(seconds, time.monotonic() + seconds, then, True)
        request.prepare()  # a bad argument is refused before anything is sent

        async def send() -> Any:
            answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            answers[:] = [answer]
            fence = self._send(request)
            self._answers.add(answer)
            try:
                async with asyncio.timeout(seconds + self.timeout):
                    await fence  # the daemon took the wait, or refused it (raised here)
                    return await answer
            except TimeoutError:
                raise TimeoutError(f"no answer from {self.address} in time") from None
            finally:
                self._answers.discard(answer)

        return request.finish(await self._exchange(request, send))

    async def _outcome(
        self, task_id: int, timeout: float | None, on_retry: RetryListener | None
    ) -> Outcome:
        """
        The outcome of C{task_id}, submitted here, once it comes (see
        L{quicx.aio.client.AsyncClient.wait}); its retry notices to C{on_retry}.

        @raise TimeoutError: none in C{timeout} seconds (the task is still pending).
        @raise NotSubmittedHere: not submitted here, or its outcome was taken.
        """
        book = self._conn.book
        if on_retry is not None:
            for notice in book.notices(task_id):
                _tell(on_retry, notice)
        if not book.pending(task_id):
            return book.take(task_id)
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[Outcome] = loop.create_future()
        waiters = self._outcomes.get(task_id)
        if waiters is None:
            waiters = self._outcomes[task_id] = [waiter]
        else:
            waiters.append(waiter)
        listeners: list[RetryListener] = []
        if on_retry is not None:
            listeners = self._retries.setdefault(task_id, [])
            listeners.append(on_retry)
        seconds = self.timeout if timeout is None else timeout
        timer = loop.call_later(seconds, self._timed_out, waiter, seconds)
        try:
            return await waiter
        finally:
            timer.cancel()
            if waiter in waiters:  # not delivered: it timed out, or was cancelled
                waiters.remove(waiter)
                if on_retry is not None:
                    listeners.remove(on_retry)

    # -- what the daemon sends ----------------------------------------------------------

    def _received(self, data: bytes) -> None:
        self._wrote = False
        collecting = self._collecting
        for event in self._conn.receive(data):
            if type(event) is Answer:  # the common cases first: a batch's answers, outcomes
                collected = collecting.get(event.request)
                if collected is not None and len(collected) + 1 < event.request.count:
                    collected.append(event.value)  # more to come
                else:
                    self._answer(event)
            elif type(event) is Settled:
                self._deliver(event.task_id)
            elif isinstance(event, Retried):
                self._retrying(event.task_id)
            elif isinstance(event, Send):
                self._write(event.data)
            elif isinstance(event, Progressed):
                _tell(event.listener, event.report)
            elif isinstance(event, LiveEvents):
                self._feed.arrived(event.message)
                self._wake()
            elif isinstance(event, Greeted):
                if self._greeted is not None and not self._greeted.done():
                    self._greeted.set_result(event)
            elif isinstance(event, Unanswered) and isinstance(event.message, wire.Error):
                log.error("unexpected ERROR from %s: %s", self.address, event.message.message)
            else:
                what = event.reason if isinstance(event, Rejected) else "a reply no request is owed"
                self._cut(QuicxError(f"{self.address} sent {what}"))
                return

    def _answer(self, answer: Answer) -> None:
        request = answer.request
        collected = self._collecting.get(request)
        if collected is not None:
            collected.append(answer.value)
            if len(collected) < request.count:
                return
            del self._collecting[request]
            value: Any = collected
        else:
            value = answer.value
        reply = self._replies.pop(request, None)
        if reply is None or reply.done():  # its call gave up (timed out, or was cancelled)
            return
        if isinstance(value, Exception):
            reply.set_exception(value)
        else:
            reply.set_result(value)

    def _deliver(self, task_id: int) -> None:
        if self._retries:
            self._retries.pop(task_id, None)
        waiting = self._outcomes.pop(task_id, None)
        if waiting is None:
            return  # kept in the book
        waiters = [w for w in waiting if not w.done()]
        if waiters:  # else kept in the book
            outcome = self._conn.book.take(task_id)
            for waiter in waiters:
                waiter.set_result(outcome)

    def _retrying(self, task_id: int) -> None:
        """Hand a retry notice to the task's listeners, or keep it for them."""
        listeners = self._retries.get(task_id)
        if listeners:
            for notice in self._conn.book.notices(task_id):
                for listener in listeners:
                    _tell(listener, notice)

    def _wake(self) -> None:
        if self._fed is not None and not self._fed.done():
            self._fed.set_result(None)

    def _cut(self, error: QuicxError) -> None:
        """The daemon sent what this client refuses: close, failing what is owed with C{error}."""
        log.error("%s", error)
        self._rejected = error
        if self._link is not None and self._link.transport is not None:
            self._link.transport.abort()

    def _lost(self, exc: Exception | None) -> None:
        """The connection closed: fail what it owed; pending outcomes become unknown."""
        self._link = None
        error = self._rejected or ConnectionLost(
            f"connection to {self.address} closed: {exc or 'closed by the daemon'}"
        )
        lost = self._conn.connection_lost()
        owed = [*self._replies.values(), *self._answers]
        if self._greeted is not None:
            owed.append(self._greeted)
        self._replies, self._collecting, self._answers = {}, {}, set()
        self._out, self._wrote = [], False
        self._deadlines.clear()
        for future in owed:
            if not future.done():
                future.set_exception(error)
        self._retries = {}
        for task_id in lost:
            self._deliver(task_id)  # each an OutcomeUnknown, filed by connection_lost
        self._feed.stop()
        self._wake()


def _tell(listener: Callable[[Any], object] | None, item: object) -> None:
    """Call a progress or retry callback; its mistake is logged, not raised into the loop."""
    if listener is None:
        return
    try:
        listener(item)
    except Exception:
        log.exception("a callback of the asyncio client raised")
