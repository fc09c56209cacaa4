"""
The control socket: a local UNIX socket that answers C{quicx status}.

The 28-byte STATS_RESPONSE is the protocol's and stays exactly that.  What a
person wants to see -- version, pid, uptime, task totals, per-class blocks --
comes over this separate channel: the client sends the line C{status} and the
daemon answers one JSON document (see C{docs/operations.md}) and closes.  It
listens with mode 0600, so only the daemon's user may ask.

The same socket also speaks the Quicx protocol: a connection whose first
byte is a frame's version byte (1 or 2) is served as any client connection,
with the admin role (pause, resume, purge, cancel any task).
"""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import ITransport
from twisted.protocols.basic import LineOnlyReceiver

from quicx.documents.status import STATUS_FORMAT
from quicx.net.twisted_types import Factory


class ControlProtocol(LineOnlyReceiver):
    """
    Answers one request line, then closes -- or, when the first byte is a
    Quicx frame's version byte, hands the connection to a Quicx server
    protocol with the admin role.
    """

    delimiter = b"\n"
    MAX_LENGTH = 64
    factory: ControlFactory
    transport: ITransport  # set by makeConnection, before any line
    _sniffed = False

    def dataReceived(self, data: bytes) -> None:
        if not self._sniffed and data:
            self._sniffed = True
            quicx = self.factory.quicx
            if quicx is not None and data[0] in (1, 2):
                protocol = quicx.buildProtocol(self.transport.getPeer())
                assert protocol is not None
                # The transport delivers to whichever protocol it holds.
                self.transport.protocol = protocol  # type: ignore[attr-defined]
                protocol.makeConnection(self.transport)
                protocol.dataReceived(data)
                return
        super().dataReceived(data)  # type: ignore[no-untyped-call]

    def lineReceived(self, line: bytes) -> None:
        command = line.strip().decode("ascii", "replace")
        if command == "status":
            answer: dict[str, Any] = self.factory.status()
        else:
            answer = {"format": STATUS_FORMAT, "error": f"unknown command {command!r}"}
        self.transport.write(json.dumps(answer).encode() + b"\n")
        self.transport.loseConnection()

    def lineLengthExceeded(self, line: bytes) -> None:
        self.transport.loseConnection()


class ControlFactory(Factory[ControlProtocol]):
    protocol = ControlProtocol
    noisy = False

    def __init__(
        self, status: Callable[[], dict[str, Any]], quicx: Factory[Any] | None = None
    ) -> None:
        self.status = status
        self.quicx = quicx


class StatusUnavailable(Exception):
    """The daemon could not be asked, or answered in another format."""


def fetch_status(path: str, timeout: float = 5.0) -> dict[str, Any]:
    """
    Ask the daemon behind control socket C{path} for its status.

    @raise StatusUnavailable: with a one-line reason.
    """
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"status\n")
            data = b""
            while chunk := sock.recv(1 << 16):
                data += chunk
    except FileNotFoundError:
        raise StatusUnavailable(f"no daemon: control socket {path} does not exist") from None
    except OSError as e:
        raise StatusUnavailable(f"no daemon answers on {path}: {e.strerror or e}") from None
    try:
        status = json.loads(data)
    except ValueError:
        raise StatusUnavailable(
            f"the daemon on {path} speaks another status format (not JSON)"
        ) from None
    if not isinstance(status, dict) or status.get("format") != STATUS_FORMAT:
        found = status.get("format") if isinstance(status, dict) else type(status).__name__
        raise StatusUnavailable(
            f"the daemon on {path} speaks another status format ({found!r},"
            f" expected {STATUS_FORMAT!r})"
        )
    return status
