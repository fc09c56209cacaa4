"""
Every private Twisted attribute this project reaches, in one place.

Twisted offers no public way to do these five things, and each is worth it:

  - L{has_unsent_output}: a socket transport's pending output, read so that
    a frame can go out with one C{send} instead of two C{epoll_ctl} calls
    (L{quicx.net.framer.write_now}): C{dataBuffer} and C{_tempDataBuffer}
    of L{twisted.internet.abstract.FileDescriptor};
  - L{epoll_of} / L{replace_epoll}: the epoll reactor's poller, wrapped for
    busy polling (L{quicx.net.busypoll}): C{EPollReactor._poller};
  - L{set_exit_signal}: the signal twistd re-raises at exit
    (C{ReactorBase._exitSignal}, read by C{twisted.application.app}): set
    by the daemon's own signal handler, and cleared after a clean drain so
    that the daemon exits 0;
  - L{listening_socket} / L{replace_listening_socket}: the socket a TCP,
    UNIX or TLS port accepts on (C{Port.socket} of
    L{twisted.internet.tcp}), wrapped so that a connection past the
    open-file limit is answered (L{quicx.net.spare});
  - L{quiet_connection_pool}: the factory an C{HTTPConnectionPool} builds
    its connections with (C{HTTPConnectionPool._factory}), made quiet: the
    lease store's client (L{quicx.daemon.replication.etcd}) connects every
    few seconds while etcd is down, two log lines each otherwise.

C{tests/net/test_twisted_private.py} checks each against the installed Twisted,
so a release that changes one fails loudly there, and C{setup.cfg} bounds
Twisted to the releases checked.
"""

from __future__ import annotations

from typing import Any


def has_unsent_output(transport: Any) -> bool:
    """Whether a socket transport still holds bytes it has not sent."""
    return bool(transport.dataBuffer or transport._tempDataBuffer)


def epoll_of(reactor: Any) -> object | None:
    """The reactor's poller (a C{select.epoll} for the epoll reactor), if any."""
    return getattr(reactor, "_poller", None)


def replace_epoll(reactor: Any, poller: object) -> None:
    """Make the epoll reactor poll through C{poller} (wrapping its epoll)."""
    reactor._poller = poller


def set_exit_signal(reactor: Any, number: int | None) -> None:
    """
    The signal twistd re-raises once the reactor stops (C{None}: exit
    normally, status 0).
    """
    reactor._exitSignal = number


def listening_socket(port: Any) -> Any:
    """The socket a listening TCP, UNIX or TLS port accepts connections on."""
    return port.socket


def replace_listening_socket(port: Any, listener: object) -> None:
    """Make C{port} accept through C{listener} (wrapping its socket)."""
    port.socket = listener


def quiet_connection_pool(pool: Any) -> None:
    """Make a C{twisted.web.client.HTTPConnectionPool}'s connections log nothing."""
    pool._factory = type("QuietHTTP11ClientFactory", (pool._factory,), {"noisy": False})
