"""
The daemon's hot path, driven in one process with a fixed rhythm, for counting.

C{python -m tools.hot_path N [PROTOCOL] [MIX]} builds the daemon
(L{build_daemon} on the benchmark's configuration), connects a producer and
2 workers (64 credits each) to its listener's factory through in-memory
transports, and runs N tasks end to end: SUBMITs fed 64 to a read, each
worker's TASKs answered DONE (version 1) or ACK (version 2) in one read, the
reactor's pending calls run between reads (the output batcher's flush).
Nothing here waits on a socket or a clock: the same N does the same work,
so the instructions it takes are repeatable on a loaded machine, where CPU
time is not (with C{PYTHONHASHSEED=0}: dictionary layouts move version 2's
count by a percent) (C{valgrind --tool=callgrind}, two N, the difference divided;
see docs/performance.md, "Round 3").  PROTOCOL 2 spreads the tasks over 4
queues and 3 priorities, as C{tools.bench} does; MIX gives each of its tasks
a version-2 feature, as C{tools.bench v2} does: C{delayed} (a millisecond's
delay: each read's tasks fall due through the delayed set), C{results} (a
16-byte result each), C{watched} (a WATCH subscriber of every event, its
events flushed each round), C{expiring} (a deadline to start).
"""

from __future__ import annotations

import sys
import time
from typing import Any, cast

from twisted.internet import reactor
from twisted.internet.address import IPv4Address
from twisted.internet.testing import StringTransport

from quicx.clients.requests import options_field
from quicx.daemon import config as configuration
from quicx.daemon.server import QuicxServerFactory, QuicxServerProtocol
from quicx.daemon.service import ListenerService, QuicxDaemon, build_daemon
from quicx.protocol import monitor, outcomes, registry, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser
from tools.bench.rig import (
    BENCH_CONFIG,
    BENCH_TYPE,
    SMALL_RESULT_SIZE,
    V2_DELAYED,
    V2_EXPIRING,
    V2_OPTIONS,
    V2_QUEUES,
    payload_of,
)

CHUNK = 64
"""SUBMITs per read, and each worker's credits."""


class Peer:
    """One in-memory connection to the daemon, and the frames it was sent."""

    def __init__(self, factory: QuicxServerFactory, port: int, protocol: int) -> None:
        address = IPv4Address("TCP", "127.0.0.1", port)
        built = factory.buildProtocol(address)
        assert isinstance(built, QuicxServerProtocol)
        self.protocol: QuicxServerProtocol = built
        self.transport = StringTransport(peerAddress=address)
        self.protocol.makeConnection(self.transport)
        self.parser = FrameParser(1 << 24, False, 1 << 24)
        self.version = protocol

    def send(self, data: bytes) -> None:
        self.protocol.dataReceived(data)
        cast(Any, reactor).runUntilCurrent()  # the output batcher's flush, this turn's end

    def received(self) -> list[object]:
        data = self.transport.value()
        self.transport.clear()
        frames = [f for f in self.parser.feed(data) if type(f) is Frame]
        return [registry.decode(f.message_type, f.payload, self.version) for f in frames]


def factory_of(daemon: QuicxDaemon) -> QuicxServerFactory:
    """The daemon's listener's factory (its protocol's connections)."""
    (factory,) = (
        s.factory
        for s in daemon
        if isinstance(s, ListenerService) and isinstance(s.factory, QuicxServerFactory)
    )
    return factory


def submits_of(protocol: int, mix: str = "plain") -> list[bytes]:
    """The SUBMIT frames of 100-byte tasks a producer sends, in turn."""
    payload = payload_of(100)
    if protocol == 1:
        return [wire.encode_submit(BENCH_TYPE.encode(), payload)]
    chosen = {"expiring": V2_EXPIRING, "delayed": V2_DELAYED}.get(mix, V2_OPTIONS)
    return [taskflow.encode_submit(BENCH_TYPE.encode(), payload, options_field(o)) for o in chosen]


def run(n: int, protocol: int = 1, mix: str = "plain") -> int:
    """N tasks end to end; the outcomes the producer heard."""
    daemon = build_daemon(configuration.parse(BENCH_CONFIG), reactor)
    factory = factory_of(daemon)
    producer = Peer(factory, 1, protocol)
    workers = [Peer(factory, 2 + i, protocol) for i in range(2)]
    submits = submits_of(protocol, mix)
    ready = wire.encode_ready(CHUNK) if protocol == 1 else taskflow.encode_ready(CHUNK, V2_QUEUES)
    for worker in workers:
        worker.send(ready)
    watcher = None
    if mix == "watched":
        watcher = Peer(factory, 9, protocol)
        watcher.send(monitor.encode_watch())
    result = taskflow.Result.of(b"r" * SMALL_RESULT_SIZE) if mix == "results" else None
    finished = sent = 0
    while finished < n:
        if sent < n:
            count = min(CHUNK, n - sent)
            producer.send(b"".join(submits[(sent + i) % len(submits)] for i in range(count)))
            sent += count
            if mix == "delayed":  # this read's tasks fall due
                time.sleep(0.002)
                cast(Any, reactor).runUntilCurrent()
        for worker in workers:
            tasks = [m for m in worker.received() if isinstance(m, wire.Task | taskflow.Task)]
            if tasks:
                worker.send(b"".join(_outcome(t, result) for t in tasks))
        finished += sum(isinstance(m, wire.Done | taskflow.Done) for m in producer.received())
        if watcher is not None:  # the bus's flush (each 0.1 s in a daemon)
            daemon.events.flush()
            watcher.transport.clear()
    for peer in (producer, *workers, *([watcher] if watcher else [])):
        peer.protocol.connectionLost()
    daemon.queue.pool.close()
    return finished


def _outcome(task: wire.Task | taskflow.Task, result: taskflow.Result | None) -> bytes:
    if isinstance(task, taskflow.Task):
        return outcomes.encode_ack(task.task_id, task.token or 0, result)
    return wire.encode_done(task.task_id)


if __name__ == "__main__":
    arguments = sys.argv[1:]
    count = run(
        int(arguments[0]),
        int(arguments[1]) if len(arguments) > 1 else 1,
        arguments[2] if len(arguments) > 2 else "plain",
    )
    print(f"{count} tasks end to end")
