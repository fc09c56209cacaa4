"""
The standby's side of replication: follow the primary, keeping a copy of its journal.

L{ReplicationStandby.follow} connects to the leader's replication listener
(and reconnects, with backoff, whenever the connection ends), sends
REPLICATE, writes the SNAPSHOT it is sent as its own journal file (a
temporary file, synced, renamed over the journal, the directory synced: as
compaction does), then appends each BATCH after it and syncs it, and only
then acknowledges it.  The file is always a journal L{recover} reads: on
promotion the daemon recovers it as at a start.  A batch or snapshot of an
epoch older than the newest it knows is refused; a gap in the batches' seq
ends the connection, and the next one starts from a new snapshot.  The
writes run on a thread of their own, never on the reactor.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from typing import Any

from attrs import frozen
from twisted.application.internet import ClientService, backoffPolicy
from twisted.internet.defer import Deferred
from twisted.internet.endpoints import HostnameEndpoint
from twisted.internet.protocol import Factory, connectionDone
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from quicx.daemon.journal.recovery import sync_directory, write_all
from quicx.daemon.replication.interfaces import Leader
from quicx.daemon.replication.link import ReplicationLink
from quicx.protocol import replication
from quicx.protocol.codec import ErrorCode, MessageType

MAX_WRITES = 16
"""The most snapshot chunks and batches waiting for the writer thread: past it, reading pauses."""


@frozen
class StandbyHolding:
    """
    What a standby holds, for C{quicx status}: the newest epoch it knows,
    the last batch written and acknowledged, whether it is in sync (its
    snapshot written, its connection up), the primary it follows, the
    batches received and not yet written (and for how long), and why its
    last write failed.
    """

    epoch: int
    seq: int
    in_sync: bool
    primary: str
    lag_batches: int
    lag_seconds: float
    broken: str


class _File:
    """(Writer thread.) The standby's journal file, and the snapshot being written over it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.temporary = path + ".standby"
        self.fd = -1
        self.snapshot_fd = -1
        self.failed = False

    def begin(self) -> None:
        self.failed = False
        self._drop_snapshot()
        self.snapshot_fd = os.open(
            self.temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600
        )

    def chunk(self, data: bytes) -> None:
        self._guard(write_all, self.snapshot_fd, data)

    def finish(self) -> None:
        """Swap the snapshot in: synced, renamed over the journal, the directory synced."""

        def swap() -> None:
            os.fsync(self.snapshot_fd)
            os.replace(self.temporary, self.path)
            sync_directory(self.path)

        self._guard(swap)
        if self.fd >= 0:
            os.close(self.fd)
        self.fd, self.snapshot_fd = self.snapshot_fd, -1

    def append(self, records: bytes) -> None:
        """Append and sync C{records}; if that fails, cut them back off."""
        if self.failed or self.fd < 0:
            raise OSError("an earlier write failed")
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            write_all(self.fd, records)
            os.fdatasync(self.fd)
        except OSError:
            self.failed = True
            os.ftruncate(self.fd, start)
            raise

    def _guard(self, write: Callable[..., None], *args: Any) -> None:
        if self.failed or self.snapshot_fd < 0:
            raise OSError("an earlier write failed")
        try:
            write(*args)
        except OSError:
            self.failed = True
            self._drop_snapshot()
            raise

    def _drop_snapshot(self) -> None:
        if self.snapshot_fd >= 0:
            os.close(self.snapshot_fd)
            self.snapshot_fd = -1

    def close(self) -> None:
        self._drop_snapshot()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class PrimaryConnection(ReplicationLink):
    """The standby's connection to the primary."""

    takes = frozenset({MessageType.SNAPSHOT, MessageType.BATCH})

    def __init__(self, standby: ReplicationStandby) -> None:
        super().__init__(standby.max_batch)
        self.standby = standby
        self.epoch = -1  # this stream's, from its first SNAPSHOT
        self.base = -1  # the last batch its snapshot holds
        self.expected = -1  # the next batch's seq, once the snapshot is whole
        self.written = False  # the snapshot is the journal now
        self.received: deque[tuple[int, float]] = deque()
        self.writes = 0
        self.paused = False

    def connectionMade(self) -> None:
        super().connectionMade()
        self.standby._connection = self
        self.transport.write(replication.encode_replicate(self.standby.epoch, self.standby.name))

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        if self.standby._connection is self:
            self.standby._connection = None

    def messageReceived(self, message: replication.Message) -> None:
        standby = self.standby
        assert isinstance(message, replication.SnapshotChunk | replication.Batch)
        if message.epoch < standby.epoch:
            self.refuse(
                ErrorCode.STALE, f"epoch {message.epoch} is older than epoch {standby.epoch}"
            )
        elif isinstance(message, replication.SnapshotChunk):
            self._chunk(message)
        elif message.epoch != self.epoch or self.expected < 0:
            self.refuse(ErrorCode.INVALID_MESSAGE, "a BATCH before its epoch's snapshot")
        elif message.seq != self.expected:
            self.refuse(
                ErrorCode.INVALID_MESSAGE,
                f"batch {message.seq} where {self.expected} was due: starting over",
            )
        else:
            self.expected += 1
            self.received.append((message.seq, standby.clock.seconds()))
            self._write(standby._file.append, message.records, ack=message.seq)

    def _chunk(self, chunk: replication.SnapshotChunk) -> None:
        if self.expected >= 0:
            self.refuse(ErrorCode.INVALID_MESSAGE, "a second snapshot on one connection")
            return
        if self.epoch < 0:
            self.epoch = chunk.epoch
            self.standby.epoch = chunk.epoch
            self._write(self.standby._file.begin)
        elif (chunk.epoch, chunk.seq) != (self.epoch, self.base):
            self.refuse(ErrorCode.INVALID_MESSAGE, "a snapshot's chunks disagree on epoch or seq")
            return
        self.base = chunk.seq
        self._write(self.standby._file.chunk, chunk.data)
        if chunk.last:
            self.expected = chunk.seq + 1
            self._write(self.standby._file.finish, ack=chunk.seq)

    def _write(self, job: Callable[..., None], *args: Any, ack: int = -1) -> None:
        """Run C{job} on the writer thread, in turn; then acknowledge C{ack}, if given."""
        standby = self.standby
        self.writes += 1
        if self.writes > MAX_WRITES and not self.paused:
            self.paused = True
            self.transport.pauseProducing()
        done = deferToThreadPool(standby.reactor, standby._threads, job, *args)
        done.addCallbacks(self._written, self._failed, (ack,))

    def _written(self, _: None, ack: int) -> None:
        self._settle()
        if ack < 0:
            return
        standby = self.standby
        standby.seq = ack
        if self.expected == ack + 1 and not self.written:
            self.written = True
            standby.log.info(
                "standby {name}: snapshot of epoch {epoch} at batch {seq} written",
                log_id="replication.snapshot_written",
                name=standby.name,
                epoch=self.epoch,
                seq=ack,
            )
        while self.received and self.received[0][0] <= ack:
            self.received.popleft()
        if self.connected_now:
            self.transport.write(replication.encode_batch_ack(self.epoch, ack))

    def _failed(self, failure: Failure) -> None:
        self._settle()
        standby = self.standby
        if standby.broken != failure.getErrorMessage():
            standby.broken = failure.getErrorMessage()
            standby.log.critical(
                "standby {name}: journal write failed: {reason}; acknowledging nothing,"
                " starting over from a snapshot",
                log_id="replication.standby_broken",
                name=standby.name,
                reason=standby.broken,
            )
        if self.connected_now:
            self.transport.abortConnection()

    def _settle(self) -> None:
        self.writes -= 1
        if self.paused and self.writes <= MAX_WRITES // 2 and self.connected_now:
            self.paused = False
            self.transport.resumeProducing()


class ReplicationStandby:
    """
    This daemon as a standby: its journal file (C{[journal] path}) kept a
    copy of the primary's.  Call L{follow} with each leader the role
    manager names, and L{stop} before recovering the file (promotion).

    @ivar epoch: the newest epoch known (the leader's, or a later snapshot's).
    @ivar seq: the last batch written, synced and acknowledged.
    @ivar broken: why the last write failed, or C{""}.
    """

    log = Logger()

    def __init__(
        self,
        path: str,
        name: str,
        reactor: Any,
        max_batch: int = replication.DEFAULT_MAX_BATCH,
        max_delay: float = 5.0,
    ) -> None:
        self.path = path
        self.name = name
        self.reactor = reactor
        self.clock = reactor
        self.max_batch = max_batch
        self.max_delay = max_delay
        self.epoch = 0
        self.seq = 0
        self.broken = ""
        self.primary = ""
        self._file = _File(path)
        self._threads = ThreadPool(1, 1, name="quicx-standby")
        self._service: ClientService | None = None
        self._connection: PrimaryConnection | None = None

    def follow(self, leader: Leader) -> None:
        """Follow C{leader}: replicate from its listener, reconnecting whenever it ends."""
        self.epoch = max(self.epoch, leader.epoch)
        if self._service is not None and self.primary == leader.replication:
            return
        if self._service is not None:
            self._service.stopService()
        if not self._threads.started:
            self._threads.start()
        self.primary = leader.replication
        host, _, port = leader.replication.rpartition(":")
        endpoint = HostnameEndpoint(self.reactor, host.strip("[]"), int(port))
        factory = Factory.forProtocol(lambda: PrimaryConnection(self))
        factory.noisy = False
        self._service = ClientService(
            endpoint,
            factory,
            retryPolicy=backoffPolicy(0.05, self.max_delay, 2.0),
            clock=self.reactor,
        )
        self._service.startService()

    @property
    def in_sync(self) -> bool:
        """Whether its snapshot is written and its connection up (the primary decides the rest)."""
        connection = self._connection
        return connection is not None and connection.written and connection.connected_now

    def holding(self) -> StandbyHolding:
        connection = self._connection
        received = connection.received if connection is not None else deque()
        return StandbyHolding(
            self.epoch,
            self.seq,
            self.in_sync,
            self.primary,
            len(received),
            self.clock.seconds() - received[0][1] if received else 0.0,
            self.broken,
        )

    def stop(self) -> Deferred[None]:
        """Stop following: the connection closed, every write finished, the file closed."""
        return Deferred.fromCoroutine(self._stop())

    async def _stop(self) -> None:
        service, self._service = self._service, None
        if service is not None:
            await service.stopService()
        if self._threads.started:
            try:
                await deferToThreadPool(self.reactor, self._threads, self._file.close)
            finally:
                self._threads.stop()
