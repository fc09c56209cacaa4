"""
The failover matrix's cuttable proxy (tools.failover.proxy), a real process
in front of a real echo server on loopback: it forwards, a blackhole cut
silences every connection without closing it, a reset cut resets them, and
a heal forwards again.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tools.etcd import free_ports
from tools.failover.proxy import BLACKHOLE, OPEN, RESET, Proxy, ProxyError

WAIT = 30.0
"""Seconds an answer that must come may take (a loaded machine)."""
QUIET = 1.0
"""Seconds of silence taken as 'nothing forwarded' (a blackhole never answers)."""


def echo_server() -> tuple[socket.socket, int]:
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener, listener.getsockname()[1]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[Proxy]:
    listener, port = echo_server()
    (listen,) = free_ports(1)
    started = Proxy("echo", listen, f"127.0.0.1:{port}", tmp_path / "proxy.sock")
    started.start(tmp_path / "proxy.log")
    yield started
    started.stop()
    listener.close()


def connect(proxy: Proxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.listen), timeout=WAIT)


def echoes(sock: socket.socket, data: bytes = b"ping") -> bool:
    sock.sendall(data)
    return sock.recv(len(data)) == data


def silent(sock: socket.socket) -> bool:
    """Nothing comes back within L{QUIET}, and the connection stays open."""
    sock.settimeout(QUIET)
    try:
        sock.sendall(b"ping")
        sock.recv(4)
    except TimeoutError:
        return True
    return False


def was_reset(sock: socket.socket) -> bool:
    sock.settimeout(WAIT)
    try:
        sock.sendall(b"ping")
        return sock.recv(4) == b""
    except ConnectionError:
        return True


def new_one_reset(proxy: Proxy) -> bool:
    """A new connection is reset: at once (the RST may beat connect), or at its first use."""
    try:
        sock = connect(proxy)
    except ConnectionError:
        return True
    return was_reset(sock)


def test_forwards_then_a_blackhole_silences_old_and_new_connections(proxy: Proxy) -> None:
    old = connect(proxy)
    assert echoes(old)
    proxy.cut(BLACKHOLE)
    assert proxy.tell("mode") == BLACKHOLE
    assert silent(old)
    new = connect(proxy)  # accepted, as through a partition: SYN-ACK, then nothing
    assert silent(new)
    proxy.heal()
    assert proxy.tell("mode") == OPEN
    assert was_reset(old)
    assert was_reset(new)
    assert echoes(connect(proxy))


def test_a_reset_cut_resets_every_connection_until_healed(proxy: Proxy) -> None:
    old = connect(proxy)
    assert echoes(old)
    proxy.cut(RESET)
    assert was_reset(old)
    assert new_one_reset(proxy)
    proxy.heal()
    assert echoes(connect(proxy))


def test_an_unknown_command_is_refused(proxy: Proxy) -> None:
    with pytest.raises(ProxyError, match="unknown command 'cut sideways'"):
        proxy.tell("cut sideways")
    assert proxy.tell("mode") == OPEN
