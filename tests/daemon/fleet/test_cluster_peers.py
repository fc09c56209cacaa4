"""
The cluster view's polling of its peers (quicx/daemon/fleet/peers.py) against
peers that misbehave: one that accepts and never answers, one that answers
garbage, a frame past C{max_status}, or a document that is no status
document, one that closes mid-frame; and a poll whose address cannot be
used.  Each is shown as down with its reason, within the timeout, and the
poll goes on.  The peers are small servers on loopback, in this process.
"""

from __future__ import annotations

import json
import struct
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import reactor, task
from twisted.internet.defer import Deferred
from twisted.internet.protocol import Factory, Protocol
from twisted.logger import ILogObserver, formatEvent, globalLogPublisher
from twisted.python.failure import Failure

from quicx.daemon.fleet.peers import SELF, ClusterPoller, ask_status, why
from quicx.documents.cluster import Member
from quicx.documents.status import STATUS_FORMAT
from quicx.protocol import monitor

MAX = 64 << 10


def info(document: Any) -> bytes:
    """A version-2 INFO frame carrying C{document}."""
    payload = json.dumps(document).encode()
    return struct.pack(">BBI", 2, 0x16, len(payload)) + payload


class Scripted(Protocol):
    """Answers the first bytes it reads with C{answer}; closes after if told."""

    def __init__(self, answer: bytes, close: bool, heard: list[bytes]) -> None:
        self.answer, self.close, self.heard = answer, close, heard

    def dataReceived(self, data: bytes) -> None:
        self.heard.append(data)
        assert self.transport is not None
        self.transport.write(self.answer)
        if self.close:
            self.transport.loseConnection()


def peer(answer: bytes, close: bool = False) -> tuple[str, list[bytes], Any]:
    """A loopback peer answering C{answer}: its address, what it read, its port."""
    heard: list[bytes] = []
    port = reactor.listenTCP(
        0, Factory.forProtocol(lambda: Scripted(answer, close, heard)), interface="127.0.0.1"
    )
    return f"tcp:127.0.0.1:{port.getHost().port}", heard, port  # type: ignore[attr-defined]


async def poll(answer: bytes, close: bool = False, timeout: float = 2.0) -> str:
    """Ask a peer that answers C{answer}; the reason it is down ('' if it is up)."""
    address, heard, port = peer(answer, close)
    try:
        await ask_status(reactor, address, timeout, MAX)
    except Exception as e:
        return why(Failure(e))
    finally:
        await port.stopListening()
    assert heard[0].startswith(monitor.STATUS_FRAME)
    return ""


@pytest_twisted.ensureDeferred
async def test_a_poll_logs_nothing() -> None:
    """A poll every C{[cluster] interval} adds no line to the daemon's log."""
    address, _, port = peer(info({"format": STATUS_FORMAT, "uptime": 1.0}))
    logged: list[str] = []

    def observer(event: dict[str, Any]) -> None:
        logged.append(formatEvent(event))

    globalLogPublisher.addObserver(cast(ILogObserver, observer))
    try:
        await ask_status(reactor, address, 2.0, MAX)
        await task.deferLater(reactor, 0.1, lambda: None)  # its connection closes
    finally:
        globalLogPublisher.removeObserver(cast(ILogObserver, observer))
        await port.stopListening()
    assert logged == []


@pytest_twisted.ensureDeferred
async def test_a_peer_with_a_status_document_is_up() -> None:
    assert await poll(info({"format": STATUS_FORMAT, "uptime": 1.0})) == ""


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (b"", "no answer in time"),
        (b"\x02\x16\x00\x00\x10", "no answer in time"),  # half a header, then silence
        (b"\x07\x16\x00\x00\x00\x00", "unsupported protocol version 7"),
        (b"GET / HTTP/1.1\r\n\r\n", "refused"),
        (struct.pack(">BBI", 2, 0x16, MAX + 1), f"exceeds the limit of {MAX}"),
        (struct.pack(">BBI", 2, 0x16, 0xFFFFFFFF), "exceeds the limit"),
        (struct.pack(">BBI", 2, 0x16, 3) + b"{x}", "malformed"),
        (info({"format": "other"}), f"not a {STATUS_FORMAT} document"),
        (info([1, 2]), f"not a {STATUS_FORMAT} document"),
        (struct.pack(">BBI", 2, 0x03, 5) + b"\x02nope", "ERROR 0x02: nope"),
        (struct.pack(">BBI", 2, 0x0A, 0), "message type 0x0a, not INFO"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_peer_that_answers_no_status_document_is_down(answer: bytes, reason: str) -> None:
    assert reason in await poll(answer, timeout=0.3)


@pytest.mark.parametrize("sent", [b"", b"\x02\x16\x00\x00", info({"format": STATUS_FORMAT})[:-3]])
@pytest_twisted.ensureDeferred
async def test_a_peer_that_closes_before_its_whole_answer_is_down(sent: bytes) -> None:
    assert await poll(sent, close=True) == "the connection closed before the answer"


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("tls:localhost:1:trustRoots=/nonexistent/ca.pem", "/nonexistent/ca.pem"),
        ("tcp:localhost:port", "tcp:localhost:port"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_an_address_that_cannot_be_used_fails_the_poll_not_the_poller(
    address: str, reason: str
) -> None:
    answered: Deferred[None] = Deferred()

    def ask(peer: str) -> Deferred[Any]:
        return ask_status(reactor, peer, 1.0, MAX).addBoth(
            lambda result: (reactor.callLater(0, answered.callback, None), result)[1]
        )

    poller = ClusterPoller(lambda: {"format": STATUS_FORMAT, "uptime": 1.0}, [address], ask)
    poller.poll()  # does not raise
    await answered
    member = poller.members[address]
    assert member.status is None and reason in member.error
    assert poller.members[SELF].status is not None and not poller.asking


def test_a_document_with_a_garbage_uptime_is_not_taken_for_the_same_run() -> None:
    first = {"format": STATUS_FORMAT, "pid": 1, "started_at": 5.0, "uptime": 3.0}
    member = Member("p").answered(first)
    for uptime in ("later", None, [4]):
        again = member.answered({**first, "uptime": uptime})
        assert again.status is not None and again.earlier is None
