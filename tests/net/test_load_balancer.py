"""
Daemons behind a TCP load balancer: Debian's HAProxy in front of two real
daemons on loopback (docs/operations.md, "Behind a TCP load balancer").

Unchanged clients reach it at its address: each connection is pinned to the
daemon it reached, so a task, its outcome and its wait stay on one daemon.
HAProxy cuts a connection silent past its C{timeout client}/C{timeout
server}; the daemon's HEARTBEAT (answered with PONG by the Twisted clients)
keeps idle connections open through it.  Skipped, saying what to install,
where HAProxy is missing.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import deferLater

from quicx.clients.blocking import QuicxClient
from quicx.clients.twisted_client import connect
from quicx.clients.worker import Worker
from tests.conftest import DaemonProcess

HAPROXY = os.environ.get("QUICX_HAPROXY", "/usr/sbin/haproxy")
QUICX = str(Path(sys.executable).with_name("quicx"))
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    not Path(HAPROXY).exists(), reason=f"no {HAPROXY}: apt-get install haproxy"
)

TIMEOUT = 1.5
"""HAProxy's C{timeout client} and C{timeout server}, in seconds."""
HEARTBEAT = 0.25
"""The daemons' C{heartbeat_interval}: well under L{TIMEOUT}, as the docs ask."""
IDLE = TIMEOUT + 1.0
"""How long the clients stay silent: past HAProxy's timeouts."""

# The configuration of docs/operations.md, with short timeouts, bound to a
# socket the test made (no port race), plus a control frontend in front of a
# peer that never says anything.
CONFIG = """\
global
    log stderr format short local0 info

defaults
    mode tcp
    log global
    option tcplog
    timeout connect 1s
    timeout client {timeout_ms}ms
    timeout server {timeout_ms}ms

frontend quicx
    bind fd@{fd}
    default_backend daemons

backend daemons
    balance roundrobin
{servers}
frontend control
    bind fd@{silent_fd}
    default_backend silent

backend silent
    server silent 127.0.0.1:{silent_port}
"""


class Balancer:
    """An HAProxy process in front of C{daemons}, its log in C{directory/haproxy.log}."""

    def __init__(self, directory: Path, daemons: list[DaemonProcess]) -> None:
        self.log_path = directory / "haproxy.log"
        self.front = listener()
        self.silent_front = listener()
        self.silent_peer = listener()  # accepts (in the kernel) and never sends
        servers = "".join(
            f"    server d{n} {daemon.address[0]}:{daemon.port}\n"
            for n, daemon in enumerate(daemons)
        )
        config = directory / "haproxy.cfg"
        config.write_text(
            CONFIG.format(
                timeout_ms=round(TIMEOUT * 1000),
                fd=self.front.fileno(),
                silent_fd=self.silent_front.fileno(),
                silent_port=self.silent_peer.getsockname()[1],
                servers=servers,
            )
        )
        fds = (self.front.fileno(), self.silent_front.fileno())
        checked = subprocess.run(
            [HAPROXY, "-c", "-f", str(config)],
            capture_output=True,
            text=True,
            timeout=30,
            pass_fds=fds,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [HAPROXY, "-db", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                pass_fds=fds,
            )

    @property
    def address(self) -> str:
        return f"tcp:127.0.0.1:{self.front.getsockname()[1]}"

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for sock in (self.front, self.silent_front, self.silent_peer):
            sock.close()


def listener() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def eventually(check: Callable[[], bool], what: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not {what} within {timeout:g} s"
        time.sleep(0.05)


@pytest.fixture
def daemons(start_daemon) -> list[DaemonProcess]:
    # The daemons drop a silent peer only after 30 s: the blocking client
    # answers heartbeats only while it is in a call.
    flags = (f"--heartbeat-interval={HEARTBEAT}", "--heartbeat-timeout=30")
    return [start_daemon(*flags), start_daemon(*flags)]


@pytest.fixture
def balancer(daemons: list[DaemonProcess], tmp_path: Path) -> Iterator[Balancer]:
    balancer = Balancer(tmp_path, daemons)
    try:
        yield balancer
    finally:
        balancer.stop()


def stats(daemons: list[DaemonProcess], field: str) -> list[int]:
    """A STATS field of each daemon, asked at its own address (not through HAProxy)."""
    found = []
    for daemon in daemons:
        with QuicxClient(daemon.client_address) as direct:
            found.append(getattr(direct.stats(), field))
    return found


def ended_sessions(balancer: Balancer) -> list[str]:
    """HAProxy's log lines of connections to a daemon that ended (C{option tcplog})."""
    return [line for line in balancer.log().splitlines() if " quicx daemons/" in line]


def test_pinned_clients_and_heartbeats_through_haproxy(
    daemons: list[DaemonProcess], balancer: Balancer, tmp_path: Path
) -> None:
    # Round robin: the two producers (version 2, version 1) reach one daemon each.
    v2_client = QuicxClient(balancer.address, timeout=10)
    v1_client = QuicxClient(balancer.address, timeout=10, protocol=1)
    v2_ids = [v2_client.submit("t", b"v2") for _ in range(3)]
    v1_ids = [v1_client.submit("t", b"v1") for _ in range(3)]
    assert (v2_client.version, v1_client.version) == (2, 1)
    assert stats(daemons, "queue_depth") == [3, 3], "the tasks are spread over the daemons"

    # A `quicx worker` of two slots: one connection to each daemon drains it.
    (tmp_path / "handlers.py").write_text("handlers = {'t': lambda payload: payload}\n")
    worker_log = tmp_path / "worker.log"
    env = {**os.environ, "QUICX_ADDRESS": balancer.address, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    with worker_log.open("wb") as out:
        worker = subprocess.Popen(
            [QUICX, "worker", "handlers:handlers", "-n", "2"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        eventually(lambda: stats(daemons, "workers_total") == [1, 1], "a worker slot on each")
        for task_id in v2_ids:
            v2_client.wait(task_id, timeout=10)
        for task_id in v1_ids:
            v1_client.wait(task_id, timeout=10)
        assert stats(daemons, "queue_depth") == [0, 0]

        # Silent past HAProxy's timeouts: the control connection (whose peer
        # never sends) is cut; the daemons' heartbeats keep every client's open.
        control = socket.create_connection(balancer.silent_front.getsockname(), timeout=10)
        time.sleep(IDLE)
        assert control.recv(1) == b"", "HAProxy cut the silent connection"
        control.close()
        assert "lost the daemon" not in worker_log.read_text()
        v2_client.wait(v2_client.submit("t", b"again"), timeout=10)
        v1_client.wait(v1_client.submit("t", b"again"), timeout=10)
        assert stats(daemons, "workers_total") == [1, 1]
        assert ended_sessions(balancer) == [], "no connection to a daemon ended"
    finally:
        worker.terminate()
        worker.wait(15)
        v2_client.close()
        v1_client.close()
    assert "lost the daemon" not in worker_log.read_text(), worker_log.read_text()


@pytest_twisted.ensureDeferred
async def test_twisted_producer_and_worker_stay_connected_through_haproxy(
    balancer: Balancer,
) -> None:
    client = await connect(reactor, balancer.address)
    worker = Worker(concurrency=2)  # round robin: a slot on each daemon, one beside the producer
    worker.register("t", lambda payload: payload)
    worker.start(reactor, balancer.address)
    try:
        assert await client.submit_and_wait("t", b"before") == 1
        await deferLater(reactor, IDLE, lambda: None)
        assert client.transport.connected
        assert await client.submit_and_wait("t", b"after") == 2  # the same daemon
        assert ended_sessions(balancer) == [], "no connection to a daemon ended"
    finally:
        client.close()
        await worker.stop()
