"""
The HTTP listeners' connection cap (quicx.daemon.observe.http_limits), in-process:
over TLS, a refusal's 503 waits for the client's handshake, so the
refusals waiting are bounded and each is aborted after a while.  (Against a
real daemon: tests/test_promises.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet import ssl
from twisted.internet.address import IPv4Address
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.protocols.tls import TLSMemoryBIOFactory

from quicx.daemon.observe import http_limits
from quicx.daemon.observe.http_limits import REFUSAL_TIMEOUT, ConnectionCap
from tests.certs import Authority


def test_tls_refusals_waiting_for_a_handshake_are_bounded_and_timed_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(http_limits._Refusal, "callLater", clock.callLater)
    cert, key = Authority(tmp_path, "ca").issue("server", ("localhost",))
    options = ssl.PrivateCertificate.loadPEM(cert.read_bytes() + key.read_bytes()).options()
    cap = ConnectionCap(Factory.forProtocol(Protocol), 2, "[web] max_connections")
    tls = TLSMemoryBIOFactory(options, False, cap)
    address = IPv4Address("TCP", "127.0.0.1", 40000)
    transports = []
    for _ in range(7):  # 2 held, 2 refusals waiting for a handshake, 3 closed at once
        transport = StringTransport()
        tls.buildProtocol(address).makeConnection(transport)
        transports.append(transport)
    assert [t.disconnecting for t in transports] == [False] * 4 + [True] * 3
    assert len(cap.refusing) == 2
    clock.advance(REFUSAL_TIMEOUT - 0.1)
    assert not any(t.disconnecting for t in transports[2:4])
    clock.advance(0.1)  # no handshake came: closed, and no longer counted
    assert all(t.disconnecting for t in transports[2:4])
    assert not any(t.disconnecting for t in transports[:2])
