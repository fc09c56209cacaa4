"""
The private Twisted attributes of L{quicx.net.private}, checked against the
installed Twisted: a release that renames or changes one fails here, loudly,
rather than making the daemon slower or its exit status wrong in silence.
"""

from __future__ import annotations

import configparser
import inspect
import select
import socket
import time
from pathlib import Path

from packaging.requirements import Requirement
from twisted.application import app
from twisted.internet import abstract, base, tcp, unix
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.epollreactor import EPollReactor
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import MemoryReactor
from twisted.web.client import HTTPConnectionPool
from twisted.web.client import _HTTP11ClientFactory as HTTP11ClientFactory

import twisted
from quicx.net import private
from quicx.net.busypoll import SpinningPoller, enable_busy_poll


def test_twisted_is_within_the_bound_setup_cfg_declares() -> None:
    setup = configparser.ConfigParser()
    setup.read(Path(__file__).parents[2] / "setup.cfg")
    requirements = [
        Requirement(line.split("#")[0])
        for line in setup["options"]["install_requires"].splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    (pin,) = [r for r in requirements if r.name == "twisted"]
    assert any(spec.operator == "<" for spec in pin.specifier), "Twisted needs an upper bound"
    assert pin.specifier.contains(twisted.__version__), (
        f"Twisted {twisted.__version__} is outside {pin.specifier}: check quicx.net.private"
        " against it, then move the bound"
    )


def test_unsent_output_is_read_from_both_of_a_transports_buffers() -> None:
    # The socket transports keep their output in FileDescriptor's buffers.
    for transport in (tcp.Server, tcp.Client, unix.Server, unix.Client):
        assert issubclass(transport, abstract.FileDescriptor)
    descriptor = abstract.FileDescriptor(MemoryReactor())
    descriptor.connected = True
    assert not private.has_unsent_output(descriptor)
    descriptor.write(b"frame")
    assert descriptor._tempDataBuffer == [b"frame"]
    assert private.has_unsent_output(descriptor)
    descriptor.dataBuffer, descriptor._tempDataBuffer = b"frame", []
    assert private.has_unsent_output(descriptor)


def test_the_epoll_reactor_polls_through_the_object_it_keeps() -> None:
    reactor = EPollReactor()
    try:
        original = private.epoll_of(reactor)
        assert isinstance(original, select.epoll)
        enable_busy_poll(reactor, 0.001)
        spinning = private.epoll_of(reactor)
        assert isinstance(spinning, SpinningPoller)
        # The reactor really polls through the wrapper.
        reactor.doIteration(0)
        reactor.callLater(0, lambda: None)
        reactor.doIteration(0)
    finally:
        original.close()  # type: ignore[attr-defined]


def test_twistd_exits_with_the_signal_the_reactor_keeps() -> None:
    # Every reactor starts with none; twistd reads it after the reactor stops.
    assert base.ReactorBase._exitSignal is None
    assert "reactor._exitSignal" in inspect.getsource(app.ApplicationRunner)
    reactor = EPollReactor()
    try:
        private.set_exit_signal(reactor, 15)
        assert reactor._exitSignal == 15
    finally:
        private.epoll_of(reactor).close()  # type: ignore[attr-defined]


def test_a_listening_port_accepts_through_the_socket_it_keeps() -> None:
    reactor = EPollReactor()
    accepted: list[object] = []

    class Recording:
        def __init__(self, listener: socket.socket) -> None:
            self.listener = listener

        def accept(self) -> tuple[socket.socket, object]:
            client = self.listener.accept()
            accepted.append(client)
            return client

        def __getattr__(self, name: str) -> object:
            return getattr(self.listener, name)

    port = reactor.listenTCP(0, Factory.forProtocol(Protocol), interface="127.0.0.1")
    try:
        listener = private.listening_socket(port)
        assert isinstance(listener, socket.socket)
        private.replace_listening_socket(port, Recording(listener))
        with socket.create_connection(("127.0.0.1", port.getHost().port)):
            deadline = time.monotonic() + 10
            while not accepted:
                assert time.monotonic() < deadline
                port.doRead()
    finally:
        port.stopListening()
        reactor.runUntilCurrent()
        private.epoll_of(reactor).close()  # type: ignore[attr-defined]


def test_a_quiet_connection_pool_connects_with_a_factory_that_logs_nothing() -> None:
    reactor = MemoryReactor()
    pool = HTTPConnectionPool(reactor)
    assert Factory.noisy and issubclass(pool._factory, Factory)
    private.quiet_connection_pool(pool)
    pool.getConnection("etcd", TCP4ClientEndpoint(reactor, "127.0.0.1", 2379))
    (_, _, factory, _, _), *_ = reactor.tcpClients
    while hasattr(factory, "_wrappedFactory"):  # the endpoint's wrapping
        factory = factory._wrappedFactory
    assert isinstance(factory, HTTP11ClientFactory) and factory.noisy is False
