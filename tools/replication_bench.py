"""
What replication costs the reactor, printed (no targets here: compare trees side by side).

C{python -m tools.replication_bench journal [none|ship] N}: N SUBMITs through
L{Journal.record_submit}, a group commit every 8 (the writer thread's job
stubbed out), with no replica or a sync one: run it under C{valgrind
--tool=callgrind} at two N, in this tree and an older one, for the
instructions per SUBMIT.  C{python -m tools.replication_bench ship N}: N
batches shipped by a L{ReplicationPrimary} in sync mode to one in-sync
standby, each acknowledged: the time per batch.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

import quicx.daemon.journal.writer as writer
from quicx.daemon.journal.records import FsyncPolicy
from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue.model import Task
from quicx.daemon.queue.policy import QueuePolicy
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.replication.primary import ReplicationPrimary
from quicx.protocol import replication


class _Owner:
    def accepted(self, tasks: Any) -> None:
        pass


class _SyncReplica:
    sync = True

    def ship(self, batch: bytes) -> Deferred[None]:
        return Deferred()


def journal(mode: str, count: int) -> None:
    writer.deferToThreadPool = lambda reactor, pool, f, *a: Deferred()  # type: ignore[assignment]
    written = writer.Journal("/dev/null", FsyncPolicy.EVERYSEC, Clock())
    written.bind(_Owner())  # type: ignore[arg-type]
    if mode == "ship":
        written.replica = _SyncReplica()  # type: ignore[assignment]
    written._durable_steps = 1 << 40
    home: NamedQueue[Task, Any] = NamedQueue("default", QueuePolicy(), False)
    tally = Tally("default", "t")
    for n in range(1, count + 1):
        task = Task(n, b"t", 0, 1, None, home, 0, 0.0, tally=tally, ready_at=0.0)
        written.record_submit(task, b"payload")
        if n % 8 == 0:
            written._job = None
            written._flush()


def ship(count: int) -> None:
    class Source:
        def snapshot_for_standby(self) -> Deferred[list[bytes]]:
            return succeed([b"QUICXJ6\n"])

    primary = ReplicationPrimary(
        1,
        Source(),
        lambda names: succeed(True),
        "sync",
        "wait",
        2.0,
        64 << 20,
        Clock(),  # type: ignore[arg-type]
    )
    standby = primary.buildProtocol(None)
    assert standby is not None
    standby.makeConnection(StringTransport())
    standby.dataReceived(replication.encode_replicate(1, "s"))
    standby.dataReceived(replication.encode_batch_ack(1, 0))
    batch = bytes(400)  # about 8 small records
    started = time.perf_counter()
    for _ in range(count):
        primary.ship(batch)
        standby.dataReceived(replication.encode_batch_ack(1, primary.seq))
        standby.transport.clear()  # type: ignore[attr-defined]
    took = time.perf_counter() - started
    print(f"sync ship and its ack, one standby: {took / count * 1e6:.2f} us per batch")


if __name__ == "__main__":
    if sys.argv[1] == "journal":
        journal(sys.argv[2], int(sys.argv[3]))
    else:
        ship(int(sys.argv[2]))
