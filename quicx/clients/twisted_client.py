"""
The Twisted producer client.

    from twisted.internet.endpoints import clientFromString
    from quicx.clients.twisted_client import connect

    client = await connect(reactor, "tcp:127.0.0.1:16381")
    task_id = await client.submit("send_email", b'{"to": "user@gmail.com"}')
    await client.outcome(task_id)        # raises TaskFailed if a worker failed it

Every call returns a L{Deferred}.  Any number of SUBMITs may be outstanding on
one connection: the daemon answers them in order.  For a long-lived service
that must survive daemon restarts, use L{ProducerService}.
"""

from __future__ import annotations

from collections import deque
from typing import Any, cast

from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.endpoints import (
    HostnameEndpoint,
    clientFromString,
    connectProtocol,
    wrapClientTLS,
)
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory, connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure

from quicx.clients.address import (
    CLIENT_MAX_LENGTH,
    DEFAULT_ADDRESS,
    as_bytes,
    normalize_address,
    parse_address,
)
from quicx.clients.outcomes import DEFAULT_KEEP, OutcomeBook, outcome_of
from quicx.net.framer import FrameReceiver, set_no_delay
from quicx.net.tls import client_tls
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, QuicxError, error_from
from quicx.protocol.wire import ErrorCode


class QuicxClientProtocol(FrameReceiver):
    """
    A producer (and monitor) connection.

    @ivar keep_outcomes: how many outcomes nobody has asked for are kept.
    """

    log = Logger()
    maxLength = CLIENT_MAX_LENGTH
    checkTypes = False

    def __init__(self, keep_outcomes: int = DEFAULT_KEEP) -> None:
        self._replies: deque[Deferred[int]] = deque()
        self._stats: deque[Deferred[wire.StatsResponse]] = deque()
        self._book = OutcomeBook(keep_outcomes)
        self._waiters: dict[int, list[Deferred[None]]] = {}
        self._closed: Failure | None = None

    def connectionMade(self) -> None:
        super().connectionMade()
        set_no_delay(self.transport)

    # -- requests -----------------------------------------------------------------

    def submit(self, task_type: str | bytes, payload: str | bytes) -> Deferred[int]:
        """
        Submit a task.

        @return: fires with the task id, or fails with L{QueueFull},
            L{PayloadTooLarge}, L{UnknownTaskType}, L{InvalidMessage} or
            L{ConnectionLost}.
        """
        if self._closed is not None:
            return fail(self._closed)
        data = wire.encode_submit(as_bytes(task_type), as_bytes(payload))
        reply: Deferred[int] = Deferred()
        self._replies.append(reply)
        self.transport.write(data)
        return reply

    def outcome(self, task_id: int) -> Deferred[None]:
        """
        The outcome of a task submitted on this connection.

        @return: fires with C{None} on DONE; fails with L{TaskFailed} carrying
            the worker's reason, or L{OutcomeUnknown} if the connection closes
            first.  An outcome that arrived before this call is kept (up to
            C{keep_outcomes} of them) and delivered at once.
        @raise KeyError: C{task_id} was not submitted on this connection, or
            its outcome was already taken or forgotten.
        """
        if self._book.pending(task_id):
            waiter: Deferred[None] = Deferred()
            self._waiters.setdefault(task_id, []).append(waiter)
            return waiter
        result = self._book.take(task_id)
        return succeed(None) if result is None else fail(result)

    async def submit_and_wait(self, task_type: str | bytes, payload: str | bytes) -> int:
        """Submit a task and wait for its outcome; return its id."""
        task_id = await self.submit(task_type, payload)
        await self.outcome(task_id)
        return task_id

    def stats(self) -> Deferred[wire.StatsResponse]:
        """Fires with the daemon's L{wire.StatsResponse}."""
        if self._closed is not None:
            return fail(self._closed)
        reply: Deferred[wire.StatsResponse] = Deferred()
        self._stats.append(reply)
        self.transport.write(wire.STATS_FRAME)
        return reply

    def close(self) -> None:
        self.transport.loseConnection()

    # -- replies ----------------------------------------------------------------------

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self.log.error("daemon sent a frame this client refuses: {reason}", reason=reason)
        self.transport.loseConnection()

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        try:
            message = wire.decode(message_type, payload)
        except wire.MalformedMessage as e:
            self.frameRejected(ErrorCode.INVALID_MESSAGE, str(e))
            return
        if isinstance(message, wire.Ok):
            self._book.expect(message.task_id)
            self._replies.popleft().callback(message.task_id)
        elif isinstance(message, wire.Error):
            if self._replies:
                self._replies.popleft().errback(error_from(message))
            else:
                self.log.error("unexpected ERROR from the daemon: {e}", e=message.message)
        elif (settled := outcome_of(message)) is not None:
            self._deliver(*settled)
        elif isinstance(message, wire.StatsResponse):
            self._stats.popleft().callback(message)
        elif isinstance(message, wire.Heartbeat):
            self.transport.write(wire.PONG_FRAME)
        elif not isinstance(message, wire.Pong):
            self.frameRejected(
                ErrorCode.INVALID_MESSAGE, f"{type(message).__name__} is not for a producer"
            )

    def _deliver(self, task_id: int, failure: QuicxError | None) -> None:
        waiters = self._waiters.pop(task_id, None)
        if not waiters:
            self._book.arrived(task_id, failure)
            return
        self._book.settle(task_id)
        for waiter in waiters:
            if failure is None:
                waiter.callback(None)
            else:
                waiter.errback(failure)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._closed = Failure(ConnectionLost(f"connection to the daemon closed: {reason.value}"))
        replies, self._replies = self._replies, deque()
        stats, self._stats = self._stats, deque()
        pending: tuple[Deferred[Any], ...] = (*replies, *stats)
        for request in pending:
            request.errback(self._closed)
        for task_id in self._book.lose_all():
            waiters = self._waiters.pop(task_id, None)
            if waiters:
                unknown = self._book.take(task_id)
                for waiter in waiters:
                    waiter.errback(unknown)


class QuicxClientFactory(Factory):
    """Builds L{QuicxClientProtocol}s, for C{endpoint.connect(factory)}."""

    protocol = QuicxClientProtocol
    noisy = False

    def __init__(self, keep_outcomes: int = DEFAULT_KEEP) -> None:
        self.keep_outcomes = keep_outcomes

    def buildProtocol(self, addr: Any) -> QuicxClientProtocol:
        return QuicxClientProtocol(self.keep_outcomes)


def endpoint_for(reactor: Any, address: str) -> IStreamClientEndpoint:
    """
    A client endpoint for C{address}: an endpoint string (C{tcp:HOST:PORT},
    C{unix:PATH}, C{tls:HOST:PORT}) or a bare C{HOST:PORT}.

    A C{tls:} address takes the blocking client's options, read the same way:
    C{trustRoots=} may name a PEM bundle as well as a directory (Twisted's
    own C{tls:} parser takes only a directory, and one certificate a file).

    @raise ValueError: a malformed C{tls:} address, or a
        L{quicx.net.tls.TlsConfigError} for a file it names.
    """
    address = normalize_address(address)
    if not address.startswith("tls:"):
        return clientFromString(reactor, address)
    # Imported here: quicx.clients.blocking imports this module.

    _, sockaddr, options = parse_address(address)
    assert isinstance(sockaddr, tuple) and options is not None
    host, port = sockaddr
    creator = client_tls(host, options.trust_roots, options.certificate, options.private_key)
    return wrapClientTLS(creator, HostnameEndpoint(reactor, host, port))


async def connect(
    reactor: Any, address: str = DEFAULT_ADDRESS, keep_outcomes: int = DEFAULT_KEEP
) -> QuicxClientProtocol:
    """
    Connect a producer to the daemon at C{address}.

    @param keep_outcomes: how many outcomes nobody has asked for yet to keep.
    """
    protocol = QuicxClientProtocol(keep_outcomes)
    return await connectProtocol(endpoint_for(reactor, address), protocol)


class ProducerService(ClientService):
    """
    A producer that stays connected: reconnects with backoff (up to 3 s apart)
    whenever the connection drops, and sends each submit on the connection
    current at the time.

    A submit outstanding when the connection drops fails with
    L{ConnectionLost}; outcomes outstanding fail with L{OutcomeUnknown}.
    Resubmitting after L{ConnectionLost} is safe only for idempotent tasks.
    """

    def __init__(self, reactor: Any, address: str = DEFAULT_ADDRESS) -> None:
        super().__init__(
            endpoint_for(reactor, address),
            QuicxClientFactory(),
            retryPolicy=backoffPolicy(initialDelay=0.1, maxDelay=3.0),
            clock=reactor,
        )

    async def submit(self, task_type: str | bytes, payload: str | bytes) -> int:
        # Twisted types whenConnected's protocol as any IProtocol: here it is
        # always QuicxClientFactory's.
        client = cast(QuicxClientProtocol, await self.whenConnected(failAfterFailures=None))
        return await client.submit(task_type, payload)

    async def submit_and_wait(self, task_type: str | bytes, payload: str | bytes) -> int:
        client = cast(QuicxClientProtocol, await self.whenConnected(failAfterFailures=None))
        return await client.submit_and_wait(task_type, payload)


__all__ = [
    "ProducerService",
    "QuicxClientFactory",
    "QuicxClientProtocol",
    "connect",
    "endpoint_for",
]
