"""
Busy polling: a real epoll object spins before it sleeps, never longer than
configured, and a daemon that busy-polls stops spinning when it falls idle.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from pathlib import Path

import pytest
from twisted.internet.selectreactor import SelectReactor

from quicx.daemon.config import ConfigError, parse
from quicx.net.busypoll import SpinningPoller, enable_busy_poll
from quicx.protocol import wire
from tests.conftest import config_option
from tests.peer import Peer
from tools.launcher import TWISTD, DaemonProcess, cpu_seconds


@pytest.fixture
def watched_pair():
    """An epoll object watching the read end of a socket pair."""
    reader, writer = socket.socketpair()
    poller = select.epoll()
    poller.register(reader.fileno(), select.EPOLLIN)
    yield SpinningPoller(poller, 0.05), writer
    poller.close()
    reader.close()
    writer.close()


def test_a_spin_finds_data_without_sleeping(watched_pair) -> None:
    poller, writer = watched_pair
    threading.Timer(0.01, writer.send, (b"x",)).start()
    started = time.perf_counter()
    events = poller.poll(-1)
    assert events and events[0][1] & select.EPOLLIN
    assert time.perf_counter() - started < 0.5


def test_a_spin_is_bounded_and_counts_against_the_timeout(watched_pair) -> None:
    poller, _ = watched_pair
    wall, cpu = time.perf_counter(), time.process_time()
    assert poller.poll(0.3) == []
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    # 0.3 s in all, not 0.3 s after a 0.05 s spin; and only the spin costs CPU.
    assert 0.29 <= wall < 0.34
    assert cpu < 0.15
    # A timeout shorter than the spin is the whole wait.
    wall = time.perf_counter()
    assert poller.poll(0.01) == []
    assert time.perf_counter() - wall < 0.04


def test_busy_polling_needs_the_epoll_reactor() -> None:
    reactor = SelectReactor()
    try:
        with pytest.raises(ValueError, match="needs the epoll reactor, not SelectReactor"):
            enable_busy_poll(reactor, 0.0001)
    finally:
        reactor.waker.connectionLost(None)


@pytest.mark.parametrize("text", ["0.011", "1", "-0.001"])
def test_busy_poll_is_at_most_10_ms(text: str) -> None:
    with pytest.raises(ConfigError, match=r":2: busy_poll: .* out of range"):
        parse(f"[server]\nbusy_poll = {text}\n", "f")
    assert parse("[server]\nbusy_poll = 0.01\n", "f").server.busy_poll == 0.01


def test_a_busy_polling_daemon_stops_spinning_when_idle(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(config_option(tmp_path, "busy_poll = 0.002\n"))
    assert "busy polling: 2000 µs before each sleep" in daemon.log()
    assert daemon.process is not None
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        assert worker.request(wire.encode_ready()) == wire.Wait()
        for n in range(200):
            ok = producer.submit(b"t", b"%d" % n)
            assert worker.receive() == wire.Task(ok.task_id, b"t", b"%d" % n)
            worker.send(wire.encode_done(ok.task_id))
            assert producer.receive() == wire.Done(ok.task_id)
        time.sleep(0.2)
        before = cpu_seconds(daemon.process.pid)
        time.sleep(1.0)
        idle_cpu = cpu_seconds(daemon.process.pid) - before
    assert idle_cpu < 0.1, f"{idle_cpu:.2f} s of CPU in an idle second"


def test_a_daemon_on_a_reactor_without_epoll_runs_without_busy_polling(tmp_path: Path) -> None:
    # Busy polling is on by default: twistd --reactor=poll (or another
    # platform's default reactor) must not stop the daemon from starting.
    twistd = tmp_path / "twistd-poll"
    twistd.write_text(f'#!/bin/sh\nexec {TWISTD} --reactor=poll "$@"\n')
    twistd.chmod(0o755)
    daemon = DaemonProcess(tmp_path, twistd=str(twistd)).start()
    try:
        log = daemon.log()
        assert "busy_poll is off: busy polling needs the epoll reactor, not PollReactor" in log
        assert "busy polling: " not in log
        with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
            assert worker.request(wire.encode_ready()) == wire.Wait()
            ok = producer.submit(b"t", b"x")
            assert worker.receive() == wire.Task(ok.task_id, b"t", b"x")
            worker.send(wire.encode_done(ok.task_id))
            assert producer.receive() == wire.Done(ok.task_id)
    finally:
        daemon.kill()
