"""
The floor under a task's round trip: bare echo servers, each in a process of
its own, and the ping-pong that times them (C{tools.hops} runs them beside
the daemon).

    python -m tools.echo socket|epoll|twisted

serves one connection on an ephemeral port of 127.0.0.1, which it prints
first (C{listening on 127.0.0.1:PORT}), and echoes what it reads until the
peer closes:

  - C{socket}: a blocking C{recv} and C{sendall}, the least Python can do;
  - C{epoll}: the same socket, non-blocking, behind C{select.epoll}: what a
    reactor must do at the least;
  - C{twisted}: a L{Protocol} on Twisted's epoll reactor whose
    C{dataReceived} writes the data back with C{transport.write}.

The difference between the last two is what Twisted itself costs a read.
"""

from __future__ import annotations

import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from tools.launcher import tools_environment


def listener() -> socket.socket:
    server = socket.create_server(("127.0.0.1", 0))
    print(f"listening on 127.0.0.1:{server.getsockname()[1]}", flush=True)
    return server


def accept(server: socket.socket) -> socket.socket:
    connection, _ = server.accept()
    server.close()
    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return connection


def serve_socket() -> None:
    connection = accept(listener())
    while data := connection.recv(65536):
        connection.sendall(data)


def serve_epoll() -> None:
    connection = accept(listener())
    connection.setblocking(False)
    poller = select.epoll()
    poller.register(connection.fileno(), select.EPOLLIN)
    while True:
        poller.poll()
        try:
            data = connection.recv(65536)
        except BlockingIOError:
            continue
        if not data:
            return
        connection.send(data)  # a few bytes into an empty send buffer


def serve_spin() -> None:
    """Both sides awake: a non-blocking C{recv} tried again at once, never asleep."""
    connection = accept(listener())
    connection.setblocking(False)
    while True:
        try:
            data = connection.recv(65536)
        except BlockingIOError:
            continue
        if not data:
            return
        connection.send(data)


def serve_twisted() -> None:
    from twisted.internet import epollreactor

    epollreactor.install()
    from twisted.internet import reactor as installed
    from twisted.internet.protocol import Protocol, ServerFactory

    reactor: Any = installed

    class Echo(Protocol):
        transport: Any

        def connectionMade(self) -> None:
            self.transport.setTcpNoDelay(True)

        def dataReceived(self, data: bytes) -> None:
            self.transport.write(data)

        def connectionLost(self, reason: object = None) -> None:
            reactor.stop()

    port = reactor.listenTCP(0, ServerFactory.forProtocol(Echo), interface="127.0.0.1")
    print(f"listening on 127.0.0.1:{port.getHost().port}", flush=True)
    reactor.run()


@contextmanager
def echo_server(kind: str) -> Iterator[socket.socket]:
    """A connected socket to a C{kind} echo server in a new process, stopped after."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.echo", kind],
        stdout=subprocess.PIPE,
        env=tools_environment(),
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline().decode()
        if not line.startswith("listening on 127.0.0.1:"):
            raise RuntimeError(f"the {kind} echo server did not start: {line!r}")
        port = int(line.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            yield connection
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        assert process.stdout is not None
        process.stdout.close()


WARM_UP = 100


def ping_pong(connection: socket.socket, message: bytes, n: int, trips: int = 2) -> list[int]:
    """
    C{n} samples, each the nanoseconds C{trips} round trips of C{message}
    take one after the other (after L{WARM_UP} unmeasured ones).  On a
    non-blocking C{connection} the reads spin (the client stays awake).
    """
    size = len(message)
    samples = []
    for sample in range(WARM_UP + n):
        started = time.monotonic_ns()
        for _ in range(trips):
            connection.sendall(message)
            got = 0
            while got < size:
                try:
                    chunk = connection.recv(65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise RuntimeError("the echo server closed the connection")
                got += len(chunk)
        if sample >= WARM_UP:
            samples.append(time.monotonic_ns() - started)
    return samples


def floor(kind: str, message: bytes, n: int, trips: int = 2) -> list[int]:
    """
    L{ping_pong} against a new C{kind} echo server (C{spin}: the client
    spins too, both sides awake).
    """
    with echo_server(kind) as connection:
        if kind == "spin":
            connection.setblocking(False)
        return ping_pong(connection, message, n, trips)


SERVERS = {
    "socket": serve_socket,
    "epoll": serve_epoll,
    "spin": serve_spin,
    "twisted": serve_twisted,
}


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in SERVERS:
        raise SystemExit(f"usage: python -m tools.echo {'|'.join(SERVERS)}")
    SERVERS[sys.argv[1]]()
