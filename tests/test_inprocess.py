"""
The daemon's services in this process's reactor (pytest-twisted), with Twisted
clients on a real loopback port: for what only in-process code can observe.
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.endpoints import TCP4ClientEndpoint, connectProtocol

from quicx.daemon import service as service_module
from quicx.daemon import tap
from quicx.daemon.queue import pmad
from quicx.net.framer import FrameReceiver
from quicx.protocol import registry, wire
from quicx.protocol.wire import ErrorCode


class Client(FrameReceiver):
    """Collects decoded messages; C{next()} fires with the next one."""

    checkTypes = False

    def __init__(self, on_message=None) -> None:
        self.on_message = on_message
        self.inbox: list[registry.Message] = []
        self.waiting: list[defer.Deferred] = []

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        message = registry.decode(message_type, payload, wire.PROTOCOL_VERSION)
        if self.on_message is not None:
            self.on_message(message)
        if self.waiting:
            self.waiting.pop(0).callback(message)
        else:
            self.inbox.append(message)

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        raise AssertionError(reason)

    def next(self) -> defer.Deferred:
        if self.inbox:
            return defer.succeed(self.inbox.pop(0))
        d: defer.Deferred = defer.Deferred()
        self.waiting.append(d)
        return d

    def send(self, data: bytes) -> None:
        self.transport.write(data)


@pytest_twisted.async_yield_fixture
async def daemon(tmp_path: Path):
    options = tap.Options()
    # Its own control socket: the default one is a daemon's run beside the tests.
    options.parseOptions(["--listen=tcp:0:interface=127.0.0.1", f"--control={tmp_path / 'c.sock'}"])
    service = tap.makeService(options, reactor)
    service.privilegedStartService()
    service.startService()
    yield service
    await defer.ensureDeferred(defer.maybeDeferred(service.stopService))


def port_of(service: service_module.QuicxDaemon) -> int:
    listener = next(s for s in service if isinstance(s, service_module.ListenerService))
    return listener.port.getHost().port


async def connect(service, client: Client) -> Client:
    endpoint = TCP4ClientEndpoint(reactor, "127.0.0.1", port_of(service))
    return await connectProtocol(endpoint, client)


@pytest_twisted.ensureDeferred
async def test_block_is_free_before_the_producer_hears_done(daemon) -> None:
    pool: pmad.Pmad = daemon.queue.pool
    used_when_done: list[int] = []

    def on_message(message: wire.Message) -> None:
        if isinstance(message, wire.Done | wire.Failed):
            used_when_done.append(pool.bytes_used)

    producer = await connect(daemon, Client(on_message))
    worker = await connect(daemon, Client())
    for outcome in (wire.encode_done, lambda i: wire.encode_failed(i, "x")):
        producer.send(wire.encode_submit(b"t", b"p" * 500))
        ok = await producer.next()
        assert pool.bytes_used == pool.metadata_bytes + pmad.BLOCK_HEADER_SIZE + 512
        worker.send(wire.encode_ready())
        task = await worker.next()
        worker.send(outcome(task.task_id))
        await producer.next()
        assert task.task_id == ok.task_id
    assert used_when_done == [pool.metadata_bytes, pool.metadata_bytes]
    producer.transport.loseConnection()
    worker.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_pipelined_burst_is_answered_in_order(daemon) -> None:
    producer = await connect(daemon, Client())
    producer.send(b"".join(wire.encode_submit(b"t", b"%d" % i) for i in range(5000)))
    oks = [await producer.next() for _ in range(5000)]
    assert [ok.task_id for ok in oks] == list(range(1, 5001))
    assert daemon.queue.counters().submitted == 5000
    assert daemon.queue.stats().queue_depth == 5000
    producer.transport.loseConnection()


@pytest_twisted.ensureDeferred
async def test_a_started_daemon_settles_the_garbage_collector(daemon) -> None:
    """
    Once started, what the daemon built is frozen out of the collector's
    reach, and the youngest generation waits for more allocations.
    """
    assert gc.get_threshold()[0] == service_module.GC_YOUNG_THRESHOLD
    assert gc.get_freeze_count() > 0
