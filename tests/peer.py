"""
A blocking test peer: a real socket that speaks frames via L{quicx.protocol.wire}
(or L{quicx.protocol.registry}, once the connection's first frame was version 2).
"""

from __future__ import annotations

import socket
import time
from typing import Any

from quicx.protocol import registry, wire
from quicx.protocol.frames import Frame, FrameParser


class Peer:
    """One connection to a daemon, read with timeouts."""

    def __init__(self, address: tuple[str, int] | str | socket.socket) -> None:
        if isinstance(address, socket.socket):
            self.sock = address
        elif isinstance(address, str):  # a UNIX socket: the control socket
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(10)
            self.sock.connect(address)
        else:
            self.sock = socket.create_connection(address, timeout=10)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = FrameParser(1 << 30, check_types=False, v2_max_length=1 << 30)
        self.pending: list[Frame] = []
        self.closed = False

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def receive(self, timeout: float = 5.0) -> Any:
        """The next message, decoded; fails the test after C{timeout}."""
        frame = self.receive_frame(timeout)
        version = self.parser.version or wire.PROTOCOL_VERSION
        return registry.decode(frame.message_type, frame.payload, version)

    def receive_frame(self, timeout: float = 5.0) -> Frame:
        deadline = time.monotonic() + timeout
        while not self.pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no frame arrived")
            self.sock.settimeout(remaining)
            data = self.sock.recv(1 << 16)
            if not data:
                self.closed = True
                raise ConnectionError("the daemon closed the connection")
            for event in self.parser.feed(data):
                assert isinstance(event, Frame), event
                self.pending.append(event)
        return self.pending.pop(0)

    def nothing_for(self, seconds: float) -> bool:
        """True if no frame arrives within C{seconds}."""
        try:
            frame = self.receive_frame(seconds)
        except TimeoutError:
            return True
        self.pending.insert(0, frame)
        return False

    def request(self, data: bytes, timeout: float = 5.0) -> Any:
        self.send(data)
        return self.receive(timeout)

    def submit(self, task_type: bytes, payload: bytes) -> Any:
        """The reply, C{Any} as L{receive}'s: an C{Ok}, or an C{Error} a test expects."""
        return self.request(wire.encode_submit(task_type, payload))

    def stats(self) -> wire.StatsResponse:
        reply = self.request(wire.encode_stats())
        assert isinstance(reply, wire.StatsResponse)
        return reply

    def wait_closed(self, timeout: float = 5.0) -> None:
        """Block until the daemon closes the connection."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.receive_frame(deadline - time.monotonic())
            except ConnectionError:
                return
            except TimeoutError:
                break
        raise AssertionError("the daemon kept the connection open")

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Peer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
