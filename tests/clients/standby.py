"""
A scripted loopback server that plays a replicated shard's other daemons for
the clients' failover tests, on real sockets: a standby (HELLO answered with
its C{role} and the primary's address, every request with C{ERROR 0x0C}), a
fenced former primary (HELLO answered as a primary would, then C{0x0C}), or
a proxy to a real daemon that can drop a connection after the daemon took a
SUBMIT and before its answer reaches the client, and can be fenced.
"""

from __future__ import annotations

import contextlib
import select
import socket
import threading
from typing import Any

from quicx.protocol import codec, link
from quicx.protocol.codec import HEADER, HEADER_SIZE, MessageType


class Scripted:
    """
    One scripted daemon on an ephemeral loopback port.

    @ivar role: the C{role} its HELLO answer says (C{None}: it says none,
        as a primary, or a daemon without replication, would).
    @ivar primary: the C{host:port} its refusals (and HELLO) name, C{""}: none.
    @ivar upstream: the real daemon it proxies to, while not fenced.
    @ivar cut_submits: how many connections it still drops after the daemon
        took a SUBMIT, before its answer reaches the client.
    @ivar connections: how many connections it accepted.
    @ivar refused: how many requests it refused with C{0x0C}.
    """

    def __init__(
        self,
        role: str | None = "standby",
        primary: str = "",
        upstream: tuple[str, int] | None = None,
        cut_submits: int = 0,
    ) -> None:
        self.role = role
        self.primary = primary
        self.upstream = upstream
        self.cut_submits = cut_submits
        self.connections = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.address = f"tcp:127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True).start()

    def fence(self, role: str | None = "fenced", primary: str = "") -> None:
        """From now on a daemon that is not the primary: its connections are closed."""
        with self._lock:
            self.upstream, self.role, self.primary = None, role, primary
            for sock in list(self._open):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.fence()
        self._listener.close()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError:
                return
            with self._lock:
                self.connections += 1
                self._open.add(sock)
                upstream = self.upstream
            target = self._proxy if upstream is not None else self._standby
            threading.Thread(target=target, args=(sock,), daemon=True).start()

    def _standby(self, sock: socket.socket) -> None:
        buffer = b""
        try:
            while data := sock.recv(65536):
                buffer += data
                frames, buffer = _split(buffer)
                for message_type, _ in frames:
                    sock.sendall(self._answer(message_type))
        except OSError:
            pass
        finally:
            self._forget(sock)

    def _answer(self, message_type: int) -> bytes:
        if message_type == MessageType.HELLO:
            document: dict[str, Any] = {"version": "scripted", "capabilities": ["workers"]}
            if self.role is not None:
                document.update(role=self.role, epoch=1, primary=self.primary)
            return link.encode_info(document)
        if message_type == MessageType.HEARTBEAT:
            return link.PONG_FRAME
        with self._lock:
            self.refused += 1
        return link.encode_error(codec.ErrorCode.NOT_PRIMARY, self.primary)

    def _proxy(self, sock: socket.socket) -> None:
        assert self.upstream is not None
        daemon = socket.create_connection(self.upstream)
        with self._lock:
            self._open.add(daemon)
        buffer, cutting = b"", False
        try:
            while True:
                readable, _, _ = select.select([sock, daemon], [], [])
                if sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    buffer += data
                    frames, buffer = _split(buffer)
                    for message_type, raw in frames:
                        daemon.sendall(raw)
                        if message_type == MessageType.SUBMIT:
                            with self._lock:
                                if self.cut_submits > 0:
                                    self.cut_submits -= 1
                                    cutting = True
                if daemon in readable:
                    data = daemon.recv(65536)
                    if not data or cutting:
                        return  # cut: the daemon took the SUBMIT; its answer is lost
                    sock.sendall(data)
        except OSError:
            pass
        finally:
            self._forget(sock)
            self._forget(daemon)

    def _forget(self, sock: socket.socket) -> None:
        with self._lock:
            self._open.discard(sock)
        sock.close()


def _split(buffer: bytes) -> tuple[list[tuple[int, bytes]], bytes]:
    """The whole frames at the start of C{buffer} (type, bytes), and what is left."""
    frames = []
    while len(buffer) >= HEADER_SIZE:
        _, message_type, length = HEADER.unpack_from(buffer)
        end = HEADER_SIZE + length
        if len(buffer) < end:
            break
        frames.append((message_type, buffer[:end]))
        buffer = buffer[end:]
    return frames, buffer
