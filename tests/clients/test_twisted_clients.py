"""
The Twisted producer client and the worker runner, together, against a real
C{twistd -n quicx} process (pytest-twisted drives this process's reactor).
"""

from __future__ import annotations

import socket
import threading
import time
from typing import cast

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from quicx.clients import requests
from quicx.clients.twisted_client import ProducerService, QuicxClientFactory, connect, endpoint_for
from quicx.clients.worker import Worker
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, OutcomeUnknown, QueueFull, TaskFailed
from quicx.protocol.taskflow import encode_ready
from quicx.protocol.wire import ErrorCode
from quicx.protocol.workers import encode_announce
from tests.conftest import DaemonProcess


def address(daemon: DaemonProcess) -> str:
    return f"tcp:127.0.0.1:{daemon.port}"


async def eventually(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await deferLater(reactor, 0.05, lambda: None)


@pytest_twisted.ensureDeferred
async def test_producer_and_worker_round_trip(daemon: DaemonProcess) -> None:
    seen: list[tuple[str, bytes]] = []
    # It announces no types: it takes every one, and fails one it has no handler for.
    worker = Worker(concurrency=2, types="all")

    @worker.handler("send_email")
    def send_email(payload: bytes) -> None:
        seen.append((threading.current_thread().name, payload))

    @worker.handler("explode")
    def explode(payload: bytes) -> None:
        raise RuntimeError(f"cannot handle {payload.decode()}")

    async def fetch(payload: bytes) -> None:
        await deferLater(reactor, 0.01, lambda: None)

    worker.register("fetch", fetch)
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    try:
        ids = await defer.gatherResults([client.submit("send_email", b"%d" % i) for i in range(50)])
        assert ids == list(range(1, 51))
        await defer.gatherResults([client.outcome(i) for i in ids])
        assert sorted(p for _, p in seen) == sorted(b"%d" % i for i in range(50))
        # A plain function starts in the thread pool (when its calls are
        # short it moves to the reactor: tests/clients/test_adaptive.py).
        assert "quicx-worker" in seen[0][0]

        assert await client.submit_and_wait("fetch", b"") == 51
        failing = await client.submit("explode", "boom")
        with pytest.raises(TaskFailed, match="cannot handle boom") as failed:
            await client.outcome(failing)
        first, header, *_ = failed.value.reason.split("\n")
        assert (first, header) == (
            "RuntimeError: cannot handle boom",
            "Traceback (most recent call last):",
        )
        unknown = await client.submit("no_such_type", b"")
        with pytest.raises(TaskFailed) as failed:
            await client.outcome(unknown)
        assert failed.value.reason == "no handler for: no_such_type"

        stats = await client.stats()
        assert (stats.queue_depth, stats.workers_total, stats.workers_idle) == (0, 2, 2)
    finally:
        client.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_outcome_that_arrived_before_it_was_asked_for(daemon: DaemonProcess) -> None:
    worker = Worker({"t": lambda payload: None})
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    try:
        task_id = await client.submit("t", b"")
        await eventually(lambda: defer.succeed(not client._book.pending(task_id)))
        await client.outcome(task_id)  # kept until asked for
        with pytest.raises(KeyError):
            client.outcome(task_id)  # and handed out once
    finally:
        client.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_queue_full_is_a_typed_error(tmp_path, start_daemon) -> None:
    conf = tmp_path / "q.conf"
    conf.write_text("[allocator]\npool_size = 2048\nclass = 32,100\n")
    daemon = start_daemon(f"--config={conf}", "--listen=tcp:0:interface=127.0.0.1")
    client = await connect(reactor, address(daemon))
    results = await defer.DeferredList(
        [client.submit("t", b"p") for _ in range(100)], consumeErrors=True
    )
    refused = [cast(Failure, r).value for ok, r in results if not ok]
    assert refused and all(isinstance(e, QueueFull) for e in refused)
    assert all(ok for ok, _ in results[: len(results) - len(refused)])
    client.close()


@pytest_twisted.ensureDeferred
async def test_connection_loss_fails_what_is_pending(start_daemon) -> None:
    daemon = start_daemon()
    client = await connect(reactor, address(daemon))
    task_id = await client.submit("t", b"p")
    outcome = client.outcome(task_id)
    daemon.kill()
    with pytest.raises(OutcomeUnknown):
        await outcome
    with pytest.raises(ConnectionLost):
        await client.submit("t", b"p")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest_twisted.ensureDeferred
async def test_worker_and_producer_service_reconnect_after_restart(start_daemon) -> None:
    port = free_port()
    listen = f"--listen=tcp:{port}:interface=127.0.0.1"
    daemon = start_daemon(listen)
    handled: list[bytes] = []
    worker = Worker({"t": handled.append})
    worker.start(reactor, f"tcp:127.0.0.1:{port}")
    producer = ProducerService(reactor, f"tcp:127.0.0.1:{port}")
    producer.startService()
    try:
        await producer.submit_and_wait("t", b"before")
        daemon.stop()
        daemon = start_daemon(listen)
        # This test blocked the reactor while it restarted the daemon: let it
        # see the old connections close.  (A submit racing that would fail
        # with ConnectionLost, as documented.)
        await deferLater(reactor, 0.3, lambda: None)
        # Both reconnect by themselves (the worker within its 3 s backoff cap).
        assert await producer.submit_and_wait("t", b"after") == 1
        assert handled == [b"before", b"after"]
    finally:
        await producer.stopService()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_graceful_stop_finishes_the_task_in_hand(daemon: DaemonProcess) -> None:
    started = threading.Event()

    def slow(payload: bytes) -> None:
        started.set()
        time.sleep(0.5)

    worker = Worker({"slow": slow})
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    task_id = await client.submit("slow", b"")
    outcome = client.outcome(task_id)
    await eventually(lambda: defer.succeed(started.is_set()))
    await worker.stop()
    await outcome  # DONE reached the producer: the task was not cut short
    stats = await client.stats()
    assert (stats.workers_total, stats.queue_depth) == (0, 0)
    client.close()


@pytest_twisted.ensureDeferred
async def test_threaded_handler_keeps_heartbeats_answered(start_daemon) -> None:
    daemon = start_daemon("--heartbeat-interval=0.2", "--heartbeat-timeout=0.6")
    worker = Worker({"sleep": lambda payload: time.sleep(float(payload))}, concurrency=2)
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    try:
        await client.submit_and_wait("sleep", b"1.5")
        # Both slots -- the busy one and the idle one -- answered every
        # heartbeat: neither was dropped.
        stats = await client.stats()
        assert (stats.workers_total, stats.workers_idle) == (2, 2)
        assert "silent for" not in daemon.log()
    finally:
        client.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_credit_worker_runs_a_connections_tasks_at_once(daemon: DaemonProcess) -> None:
    # Four tasks meet at a barrier: they only finish if all four run together,
    # on the one connection's four credits.
    barrier = threading.Barrier(4, timeout=5)
    worker = Worker({"meet": lambda payload: barrier.wait()}, concurrency=1, credits=4)
    worker.register("noop", lambda payload: None, thread=False)
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    try:
        ids = await defer.gatherResults([client.submit("meet", b"") for _ in range(4)])
        await defer.gatherResults([client.outcome(i) for i in ids])
        stats = await client.stats()
        assert (stats.workers_total, stats.workers_idle) == (1, 1)
        # Reactor handlers: a burst of tasks, answered a read's worth at a time.
        ids = await defer.gatherResults([client.submit("noop", b"") for _ in range(500)])
        await defer.gatherResults([client.outcome(i) for i in ids])
    finally:
        client.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_credit_worker_stop_finishes_every_task_in_hand(daemon: DaemonProcess) -> None:
    started = threading.Semaphore(0)

    def slow(payload: bytes) -> None:
        started.release()
        time.sleep(0.3)

    worker = Worker({"slow": slow}, credits=3)
    worker.start(reactor, address(daemon))
    client = await connect(reactor, address(daemon))
    ids = await defer.gatherResults([client.submit("slow", b"") for _ in range(3)])
    outcomes = defer.gatherResults([client.outcome(i) for i in ids])
    for _ in range(3):
        await eventually(lambda: defer.succeed(started.acquire(blocking=False)))
    await worker.stop()
    await outcomes
    stats = await client.stats()
    assert (stats.workers_total, stats.queue_depth) == (0, 0)
    client.close()


@pytest_twisted.ensureDeferred
async def test_credit_worker_falls_back_where_credits_are_refused() -> None:
    """
    A daemon without the extension (the reference one: READY must be empty)
    answers HELLO (version 2) with ERROR 0x02 and a READY with credits the
    same; the worker then speaks version 1, sends a plain READY and takes one
    task at a time.  Played here by a loopback socket.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def reference_daemon() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(10)
            received.append(connection.recv(64))
            connection.sendall(wire.encode_error(ErrorCode.INVALID_MESSAGE, "bad version 2"))
            received.append(connection.recv(64))
            connection.sendall(wire.encode_error(ErrorCode.INVALID_MESSAGE, "bad READY length"))
            received.append(connection.recv(64))
            connection.sendall(wire.encode_task(7, b"t", b"x"))
            received.append(connection.recv(64))

    thread = threading.Thread(target=reference_daemon)
    thread.start()
    worker = Worker({"t": lambda payload: None}, credits=8)
    worker.start(reactor, f"tcp:127.0.0.1:{listener.getsockname()[1]}")
    try:
        await eventually(lambda: defer.succeed(len(received) == 4))
    finally:
        await worker.stop()
        thread.join(10)
        listener.close()
    assert received == [
        requests.HELLO,
        wire.encode_ready(8),
        wire.encode_ready(),
        wire.encode_done(7),
    ]


def test_endpoint_strings() -> None:
    assert endpoint_for(reactor, "127.0.0.1:9")._port == 9
    assert QuicxClientFactory(keep_outcomes=5).buildProtocol(None)._book.keep == 5


@pytest_twisted.ensureDeferred
async def test_a_task_beyond_the_credits_is_run_not_dropped() -> None:
    """
    A daemon that sends more TASKs than the worker's credits has a bug; the
    worker runner logs it and still runs and answers every task it was sent.
    Played here by a loopback socket.
    """
    listener = socket.create_server(("127.0.0.1", 0))
    answers: list[bytes] = []

    def faulty_daemon() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.settimeout(10)
            assert connection.recv(64) == requests.HELLO
            connection.sendall(wire.encode_error(ErrorCode.INVALID_MESSAGE, "bad version 2"))
            assert connection.recv(64) == wire.encode_ready()
            connection.sendall(wire.encode_task(1, b"t", b"a") + wire.encode_task(2, b"t", b"b"))
            data = b""
            while len(data) < 2 * len(wire.encode_done(1)):
                data += connection.recv(64)
            answers.append(data)

    thread = threading.Thread(target=faulty_daemon)
    thread.start()
    ran: list[bytes] = []
    worker = Worker({"t": ran.append}, credits=1)
    worker.start(reactor, f"tcp:127.0.0.1:{listener.getsockname()[1]}")
    try:
        await eventually(lambda: defer.succeed(bool(answers)))
    finally:
        await worker.stop()
        thread.join(10)
        listener.close()
    assert ran == [b"a", b"b"]
    assert answers == [wire.encode_done(1) + wire.encode_done(2)]


@pytest_twisted.ensureDeferred
async def test_workers_reads_every_page(start_daemon) -> None:
    daemon = start_daemon()
    types = [b"%03d" % i + b"t" * 252 for i in range(256)]
    peers = []
    for n in range(6):  # about 400 KB of records: two pages
        peer = socket.create_connection(("127.0.0.1", daemon.port))
        peer.sendall(encode_announce(types, name=f"wide-{n}") + encode_ready(1, ["paged"]))
        peers.append(peer)
    client = await connect(reactor, address(daemon))
    try:
        names: list[str] = []
        deadline = time.monotonic() + 30
        while len(names) < 6:  # the ANNOUNCEs are read in their own time
            assert time.monotonic() < deadline
            names = sorted(w["name"] for w in await client.workers() if w["name"])
        assert names == [f"wide-{n}" for n in range(6)]
    finally:
        client.close()
        for peer in peers:
            peer.close()
