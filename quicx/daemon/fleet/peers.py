"""
The cluster view's polling: each peer's status document, never waited for on the reactor.

The cluster view's polling: every C{[cluster] interval}, this daemon asks
each of its C{[cluster] peers} for its status document over the wire (one
STATUS, answered with INFO, on a connection of its own), without ever
waiting for one on the reactor: a peer that does not connect or answer
within C{[cluster] timeout} is shown as down, as is one whose document is
longer than C{[cluster] max_status} or not a status document.

A small protocol of its own rather than the Twisted client's: the daemon
does not import the clients (they are of the same layer), and a poll needs
one request and one answer, no session.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, fail
from twisted.internet.interfaces import ITransport
from twisted.internet.protocol import Factory, Protocol
from twisted.python.failure import Failure

from quicx.documents.cluster import Member, Status, cluster_view
from quicx.documents.status import STATUS_FORMAT
from quicx.net.tls import client_endpoint
from quicx.protocol import codec, link, monitor, wire
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame

SELF = "self"
"""This daemon's address in its own cluster view (and its C{daemon} label)."""


class PeerUnavailable(Exception):
    """A peer did not answer with a status document; the message says why."""


class StatusQuery(Protocol):
    """
    Sends one STATUS, and fires C{answer} with the status document that
    comes back (or fails it with L{PeerUnavailable}); then closes.
    """

    transport: ITransport

    def __init__(self, max_size: int) -> None:
        # Version 1 frames are not expected: a small limit rejects them.
        self.parser = FrameParser(64, check_types=False, v2_max_length=max_size)
        self.answer: Deferred[dict[str, Any]] = Deferred(lambda _: self.abort())

    def connectionMade(self) -> None:
        self.transport.write(monitor.STATUS_FRAME)

    def dataReceived(self, data: bytes) -> None:
        if self.answer.called:
            return
        for event in self.parser.feed(data):
            self._settle(event)
            break

    def _settle(self, event: Frame | RejectedFrame) -> None:
        try:
            self.answer.callback(status_document(event))
        except PeerUnavailable as e:
            self.answer.errback(Failure(e))
        self.abort()

    def abort(self) -> None:
        abort = getattr(self.transport, "abortConnection", None)
        if abort is not None:
            abort()

    def connectionLost(self, reason: Failure = Failure(ConnectionError())) -> None:  # noqa: B008
        if not self.answer.called:
            self.answer.errback(Failure(PeerUnavailable("the connection closed before the answer")))


def status_document(event: Frame | RejectedFrame) -> dict[str, Any]:
    """
    The status document of a peer's answer (a frame from L{FrameParser}).

    @raise PeerUnavailable: it is an ERROR, too long, or no status document.
    """
    if isinstance(event, RejectedFrame):
        raise PeerUnavailable(f"its answer was refused: {event.reason}")
    message_type, payload = event
    try:
        if message_type == codec.MessageType.ERROR:
            error = wire.decode_error(payload)
            raise PeerUnavailable(f"it answered ERROR 0x{error.code:02x}: {error.message}")
        if message_type != codec.MessageType.INFO:
            raise PeerUnavailable(f"it answered message type 0x{message_type:02x}, not INFO")
        document = link.decode_info(payload).document
    except codec.MalformedMessage as e:
        raise PeerUnavailable(f"its answer is malformed: {e}") from None
    if not isinstance(document, dict) or document.get("format") != STATUS_FORMAT:
        raise PeerUnavailable(f"its answer is not a {STATUS_FORMAT} document")
    return document


class QueryFactory(Factory):
    """
    Builds the one L{StatusQuery} of a poll, quietly: a poll every
    C{[cluster] interval} logs nothing when its connection opens or closes.
    """

    noisy = False

    def __init__(self, query: StatusQuery) -> None:
        self.query = query

    def buildProtocol(self, addr: Any) -> StatusQuery:
        return self.query


def ask_status(reactor: Any, address: str, timeout: float, max_size: int) -> Deferred[Any]:
    """
    Fires with the status document of the daemon at C{address} (a client
    endpoint string, read as the clients read it: L{client_endpoint}), or
    fails with L{PeerUnavailable} or the connection's error (a C{tls:}
    address whose files cannot be read: L{TlsConfigError}); within
    C{timeout} seconds either way.
    """
    query = StatusQuery(max_size)
    try:
        endpoint = client_endpoint(reactor, address)
    except ValueError as e:  # TlsConfigError too
        return fail(PeerUnavailable(f"{address}: {e}"))
    connecting = endpoint.connect(QueryFactory(query))

    def cancel(_: Deferred[Any]) -> None:
        connecting.cancel()
        query.abort()

    answer: Deferred[Any] = Deferred(cancel)
    connecting.addCallbacks(lambda _: query.answer.chainDeferred(answer), answer.errback)
    return answer.addTimeout(timeout, reactor)


def why(failure: Failure) -> str:
    """One line: why a poll got no document."""
    if failure.check(CancelledError, TimeoutError):
        return "no answer in time"
    return failure.getErrorMessage() or repr(failure.value)


class ClusterPoller:
    """
    The members of this daemon's cluster view: itself (L{SELF}) and each
    peer, polled by L{poll} (called every C{[cluster] interval}).

    @ivar members: each member as last polled, by address, in order.
    @ivar asking: the peers whose poll is under way (not asked again).
    """

    def __init__(
        self,
        status: Callable[[], Status],
        peers: Iterable[str],
        ask: Callable[[str], Deferred[Any]],
    ) -> None:
        self.status = status
        self.ask = ask
        self.members = {SELF: Member(SELF, error="not polled yet")}
        self.members.update((peer, Member(peer, error="not polled yet")) for peer in peers)
        self.asking: set[str] = set()

    def poll(self) -> None:
        """Take this daemon's status; ask every peer not still asked."""
        self.members[SELF] = self.members[SELF].answered(self.status())
        for peer in self.members:
            if peer != SELF and peer not in self.asking:
                self.asking.add(peer)
                self.ask(peer).addCallbacks(
                    lambda document, peer=peer: self._answered(peer, document),
                    lambda failure, peer=peer: self._failed(peer, why(failure)),
                )

    def _answered(self, peer: str, document: Status) -> None:
        self.asking.discard(peer)
        self.members[peer] = self.members[peer].answered(document)

    def _failed(self, peer: str, reason: str) -> None:
        self.asking.discard(peer)
        self.members[peer] = self.members[peer].failed(reason)

    def view(self) -> dict[str, Any]:
        """The cluster document (L{cluster_view}) of the members as last polled."""
        return cluster_view(self.members.values())
