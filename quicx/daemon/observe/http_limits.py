"""
What every HTTP listener holds to: a cap on connections, and no request bodies.

What every HTTP listener of the daemon (the dashboard, C{/metrics}) holds
to, so that what anyone may open costs a bounded share of the daemon's file
descriptors and memory: at most so many connections at once (one more is
answered 503 and closed, L{ConnectionCap}; over TLS, where that answer
waits for the client's handshake, at most as many again wait, each for
L{REFUSAL_TIMEOUT} seconds at most), and no request body (none of
their requests has one: one that declares or sends one is answered 413 from
its header and the connection closed, its body never read,
L{BodylessRequest}).
"""

from __future__ import annotations

from io import BytesIO
from typing import Any

from twisted.internet.interfaces import IAddress, IProtocolFactory
from twisted.internet.protocol import Protocol, connectionDone
from twisted.protocols.policies import ProtocolWrapper, TimeoutMixin, WrappingFactory
from twisted.protocols.tls import TLSMemoryBIOProtocol
from twisted.python.failure import Failure
from twisted.web.server import Request


def plain_answer(status: bytes, text: str) -> bytes:
    """A whole HTTP/1.1 answer of C{status} (C{b"503 Service Unavailable"}), then a close."""
    body = text.encode() + b"\n"
    return (
        b"HTTP/1.1 %s\r\ncontent-type: text/plain; charset=utf-8\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, len(body), body)
    )


TOO_LARGE = plain_answer(b"413 Content Too Large", "no request here has a body")

REFUSAL_TIMEOUT = 10.0
"""Seconds a refusal over TLS waits for the client's handshake to send its answer."""


class _Refusal(Protocol, TimeoutMixin):
    """
    Writes its answer as the connection opens, then closes it (reading
    nothing).  Over TLS the answer waits for the client's handshake: then it
    is one of C{waiting}, aborted after L{REFUSAL_TIMEOUT} seconds, or at
    once when C{limit} wait already.
    """

    def __init__(self, answer: bytes, waiting: set[_Refusal], limit: int) -> None:
        self.answer = answer
        self.waiting = waiting
        self.limit = limit

    def connectionMade(self) -> None:
        assert self.transport is not None
        if isinstance(self.transport, TLSMemoryBIOProtocol):
            if len(self.waiting) >= self.limit:
                self.transport.abortConnection()
                return
            self.waiting.add(self)
            self.setTimeout(REFUSAL_TIMEOUT)  # type: ignore[no-untyped-call]
        self.transport.write(self.answer)
        self.transport.loseConnection()

    def timeoutConnection(self) -> None:
        transport: Any = self.transport  # a TLS one: only those wait
        transport.abortConnection()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self.setTimeout(None)  # type: ignore[no-untyped-call]
        self.waiting.discard(self)


class ConnectionCap(WrappingFactory[ProtocolWrapper]):
    """
    C{wrapped}'s connections, at most C{limit} at once: one more is answered
    503, naming the C{setting}, and closed (over TLS, at most C{limit} such
    answers wait for their handshakes: past them, one more is closed at once).
    """

    noisy = False

    def __init__(self, wrapped: IProtocolFactory, limit: int, setting: str) -> None:
        super().__init__(wrapped)  # type: ignore[no-untyped-call]
        self.limit = limit
        self.refusal = plain_answer(
            b"503 Service Unavailable", f"too many connections ({setting} = {limit})"
        )
        self.refusing: set[_Refusal] = set()

    def buildProtocol(self, addr: IAddress | None) -> Any:
        if len(self.protocols) >= self.limit:
            return _Refusal(self.refusal, self.refusing, self.limit)
        return super().buildProtocol(addr)


class BodylessRequest(Request):
    """
    A request of a site where none has a body: one that declares one (a
    C{Content-Length} past 0, or chunks) is answered 413 from its header,
    and its connection closed with the body unread; none is ever kept.
    """

    refused = False

    def gotLength(self, length: int | None) -> None:
        self.content = BytesIO()
        if length or self.requestHeaders.hasHeader(b"transfer-encoding"):
            self._refuse()

    def handleContentChunk(self, data: bytes) -> None:
        if data:
            self._refuse()

    def _refuse(self) -> None:
        channel: Any = self.channel
        if self.refused or channel is None:
            return
        self.refused = True
        # Nothing more is read: no "100 Continue" asks for the body, and
        # what came with the header is dropped.
        self.requestHeaders.removeHeader(b"expect")
        channel.dataReceived = lambda data: None
        channel.transport.write(TOO_LARGE)
        channel.loseConnection()
