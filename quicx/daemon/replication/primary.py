"""
The primary's side of replication: the listener standbys follow, and the journal's L{IReplica}.

One L{ReplicationPrimary} per epoch.  A standby connects and sends
REPLICATE; it is sent the journal's snapshot (taken at a flush boundary)
in SNAPSHOT chunks, then every batch after it, and acknowledges each (and
the snapshot itself) with BATCH_ACK once written and synced.  A standby
that has acknowledged its snapshot is **in sync** once the lease store's
History says so (C{record_in_sync}, written before it counts).

In C{sync} mode each batch's L{ship} waits until every in-sync standby
has acknowledged it; with none in sync, C{standby_lost = wait} waits for
one, C{async} acknowledges alone.  An in-sync standby that has not
acknowledged for C{standby_timeout} is I{lost}: under C{async} it is taken
out of History, and once that is written the batches that waited only on
it are released; under C{wait} they keep waiting.  A standby whose
unacknowledged batches pass C{max_backlog} bytes is dropped (it comes
back through a snapshot).  L{fence} fails every waiting ship for good.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from attrs import define, frozen
from twisted.internet.defer import Deferred, fail
from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.internet.protocol import ServerFactory, connectionDone
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import implementer

from quicx.daemon.journal.writer import Journal
from quicx.daemon.replication.interfaces import IReplica
from quicx.daemon.replication.link import ReplicationLink
from quicx.protocol import replication
from quicx.protocol.codec import ErrorCode, MessageType

MAX_STANDBYS = 32
"""The most replication connections a primary keeps (standbys, and those yet to say REPLICATE)."""

RecordInSync = Callable[[frozenset[str]], "Deferred[bool]"]


class Fenced(Exception):
    """This primary was fenced: the batch may not be acknowledged."""


@frozen
class StandbyFigures:
    """
    One standby, for C{quicx status}: what it acknowledged, how far behind,
    whether History counts it in sync, and whether it is lost (silent past
    C{standby_timeout}).
    """

    name: str
    connected: bool
    in_sync: bool
    acked: int
    lag_batches: int
    lag_seconds: float
    lost: bool


@define
class _Member:
    """An in-sync standby (History names it): the last batch it acked, since when it is behind."""

    acked: int
    behind_since: float | None


@define
class _Shipped:
    seq: int
    size: int
    at: float


class StandbyConnection(ReplicationLink):
    """One standby's connection to the primary."""

    takes = frozenset({MessageType.REPLICATE, MessageType.BATCH_ACK})

    def __init__(self, primary: ReplicationPrimary) -> None:
        super().__init__(primary.max_batch)
        self.primary = primary
        self.name = ""
        self.base = -1  # the seq its snapshot holds, once sent
        self.acked = -1
        self.pending: deque[_Shipped] = deque()
        self.unacked = 0
        self.opened = primary.clock.seconds()

    @property
    def streaming(self) -> bool:
        return self.base >= 0

    @property
    def synced(self) -> bool:
        return self.acked >= self.base >= 0

    def behind_since(self) -> float | None:
        return self.pending[0].at if self.pending else None

    def connectionMade(self) -> None:
        super().connectionMade()
        self.primary._opened(self)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        self.primary._closed(self)

    def messageReceived(self, message: replication.Message) -> None:
        if isinstance(message, replication.Replicate):
            self.primary._replicate(self, message)
        elif isinstance(message, replication.BatchAck):
            self.primary._acked(self, message)

    def send(self, seq: int, piece: bytes, now: float) -> None:
        """Batch C{seq}; past C{max_backlog} unacknowledged bytes, drop the standby."""
        data = replication.encode_batch(self.primary.epoch, seq, piece)
        self.pending.append(_Shipped(seq, len(data), now))
        self.unacked += len(data)
        if self.unacked > self.primary.max_backlog:
            self.log.warn(
                "standby {name}: {bytes} bytes unacknowledged, past max_backlog: dropped;"
                " it starts over from a snapshot",
                log_id="replication.backlog",
                name=self.name,
                bytes=self.unacked,
            )
            self.primary._closed(self)
            self.transport.abortConnection()
            return
        self.transport.write(data)


@implementer(IReplica)
class ReplicationPrimary(ServerFactory):
    """
    The primary's side of replication at C{epoch}: listen with it
    (C{endpoint.listen(primary)}) and make it the journal's replica
    (C{journal.replica = primary}).

    @ivar seq: the last batch shipped (0: none yet).
    @ivar fenced: why it was fenced, or C{""}.
    """

    log = Logger()
    noisy = False

    def __init__(
        self,
        epoch: int,
        journal: Journal,
        record_in_sync: RecordInSync,
        mode: str,
        standby_lost: str,
        standby_timeout: float,
        max_backlog: int,
        clock: IReactorTime,
        max_batch: int = replication.DEFAULT_MAX_BATCH,
    ) -> None:
        if mode not in ("sync", "async") or standby_lost not in ("wait", "async"):
            raise ValueError(f"mode {mode!r}, standby_lost {standby_lost!r}")
        self.epoch = epoch
        self.journal = journal
        self.record_in_sync = record_in_sync
        self.sync = mode == "sync"
        self.mode = mode
        self.standby_lost = standby_lost
        self.standby_timeout = standby_timeout
        self.max_backlog = max_backlog
        self.max_batch = max_batch
        self.clock = clock
        self.seq = 0
        self.fenced = ""
        self._connections: set[StandbyConnection] = set()
        self._named: dict[str, StandbyConnection] = {}
        self._members: dict[str, _Member] = {}
        self._waiting: deque[tuple[int, Deferred[None]]] = deque()
        self._recording = False
        self._retry: Any = None
        self._lost: set[str] = set()
        self._watch = LoopingCall(self._check)
        self._watch.clock = clock

    # -- the listener ---------------------------------------------------------------

    def buildProtocol(self, addr: IAddress | None) -> StandbyConnection | None:
        if self.fenced or len(self._connections) >= MAX_STANDBYS:
            return None
        connection = StandbyConnection(self)
        connection.factory = self
        return connection

    def startFactory(self) -> None:
        if not self._watch.running and not self.fenced:
            self._watch.start(max(self.standby_timeout / 4, 0.01), now=False)

    def stopFactory(self) -> None:
        if self._watch.running:
            self._watch.stop()

    def _opened(self, connection: StandbyConnection) -> None:
        self._connections.add(connection)

    def _closed(self, connection: StandbyConnection) -> None:
        self._connections.discard(connection)
        if self._named.get(connection.name) is connection:
            del self._named[connection.name]
        connection.base = -1

    def _replicate(self, connection: StandbyConnection, asked: replication.Replicate) -> None:
        if connection.name:
            connection.refuse(ErrorCode.INVALID_MESSAGE, "REPLICATE was sent twice")
            return
        if asked.epoch > self.epoch or self.fenced:
            self.log.warn(
                "standby {name} knows epoch {known}, past this primary's {epoch}",
                log_id="replication.newer_epoch",
                name=asked.name,
                known=asked.epoch,
                epoch=self.epoch,
            )
            connection.refuse(ErrorCode.NOT_PRIMARY, "")
            return
        former = self._named.get(asked.name)
        if former is not None:
            self._closed(former)
            former.transport.abortConnection()
        connection.name = asked.name
        self._named[asked.name] = connection
        snapshot = self.journal.snapshot_for_standby()
        snapshot.addCallbacks(
            self._send_snapshot,
            self._no_snapshot,
            callbackArgs=(connection,),
            errbackArgs=(connection,),
        )

    def _no_snapshot(self, failure: Failure, connection: StandbyConnection) -> None:
        connection.refuse(ErrorCode.BUSY, f"no snapshot: {failure.getErrorMessage()}")

    def _send_snapshot(self, records: list[bytes], connection: StandbyConnection) -> None:
        """(At a flush boundary: every batch shipped so far is in C{records}.)"""
        if not connection.connected_now or self._named.get(connection.name) is not connection:
            return
        connection.base = self.seq
        data = b"".join(records)
        for chunk in replication.snapshot_frames(self.epoch, self.seq, data):
            connection.transport.write(chunk)
        self.log.info(
            "standby {name}: sent a snapshot of {size} bytes at batch {seq}",
            log_id="replication.snapshot",
            name=connection.name,
            size=len(data),
            seq=self.seq,
        )

    def _acked(self, connection: StandbyConnection, ack: replication.BatchAck) -> None:
        if ack.epoch != self.epoch:
            connection.refuse(ErrorCode.STALE, f"acknowledges epoch {ack.epoch}, not {self.epoch}")
            return
        if not connection.streaming or not max(connection.acked, connection.base) <= ack.seq:
            connection.refuse(ErrorCode.INVALID_MESSAGE, f"acknowledges {ack.seq} out of turn")
            return
        if ack.seq > self.seq:
            connection.refuse(ErrorCode.INVALID_MESSAGE, f"acknowledges batch {ack.seq}, not sent")
            return
        connection.acked = ack.seq
        pending = connection.pending
        while pending and pending[0].seq <= ack.seq:
            connection.unacked -= pending.popleft().size
        member = self._members.get(connection.name)
        if member is not None:
            member.acked, member.behind_since = ack.seq, connection.behind_since()
        self._release()
        self._reconcile()

    # -- IReplica ---------------------------------------------------------------------

    def ship(self, batch: bytes) -> Deferred[None] | None:
        """
        Send C{batch} to every standby past its snapshot, cut in pieces of
        at most C{max_batch} bytes, each its own seq.
        """
        if self.fenced:
            return fail(Fenced(self.fenced))
        now = self.clock.seconds()
        streaming = [c for c in self._named.values() if c.streaming]
        for start in range(0, len(batch), self.max_batch):
            self.seq += 1
            piece = batch[start : start + self.max_batch]
            for connection in streaming:
                connection.send(self.seq, piece, now)
        for member in self._members.values():
            if member.behind_since is None:
                member.behind_since = now
        if not self.sync or self._floor() >= self.seq:
            return None
        waiter: Deferred[None] = Deferred()
        self._waiting.append((self.seq, waiter))
        return waiter

    def fence(self, reason: str = "fenced") -> None:
        """Fail every waiting ship, ship nothing more, close every standby's connection."""
        self.fenced = reason or "fenced"
        self.stopFactory()
        if self._retry is not None and self._retry.active():
            self._retry.cancel()
        waiting, self._waiting = self._waiting, deque()
        for _, waiter in waiting:
            waiter.errback(Fenced(self.fenced))
        for connection in list(self._connections):
            connection.transport.loseConnection()

    def _floor(self) -> int:
        """The last batch every in-sync standby holds (all shipped, if none need be waited for)."""
        if self._members:
            return min(m.acked for m in self._members.values())
        return -1 if self.standby_lost == "wait" else self.seq

    def _release(self) -> None:
        floor = self._floor()
        waiting = self._waiting
        while waiting and waiting[0][0] <= floor:
            waiting.popleft()[1].callback(None)

    # -- the in-sync set ----------------------------------------------------------------

    def _check(self) -> None:
        """Every quarter of C{standby_timeout}: note the standbys lost, and record what changed."""
        now = self.clock.seconds()
        for connection in list(self._connections):
            if not connection.name and now - connection.opened >= self.standby_timeout:
                connection.refuse(ErrorCode.INVALID_MESSAGE, "no REPLICATE in time")
        lost = {name for name, since in self._behind().items() if self._late(since, now)}
        for name in lost - self._lost:
            self.log.warn(
                "standby {name}: no acknowledgement for {timeout} s; standby_lost = {policy}",
                log_id="replication.standby_lost",
                name=name,
                timeout=self.standby_timeout,
                policy=self.standby_lost,
            )
        self._lost = lost
        self._reconcile()

    def _behind(self) -> dict[str, float | None]:
        """Since when each standby (in sync, or past its snapshot) has a batch unacknowledged."""
        behind: dict[str, float | None] = {n: m.behind_since for n, m in self._members.items()}
        for name, connection in self._named.items():
            if connection.synced:
                behind[name] = connection.behind_since()
        return behind

    def _late(self, since: float | None, now: float) -> bool:
        return since is not None and now - since >= self.standby_timeout

    def _desired(self) -> frozenset[str]:
        """The in-sync set as it should be now."""
        keep_lost = self.standby_lost == "wait"
        names = {n for n in self._members if keep_lost or n not in self._lost}
        names.update(n for n, c in self._named.items() if c.synced and n not in self._lost)
        return frozenset(names)

    def _reconcile(self) -> None:
        """Record the in-sync set in History when it changed (one record at a time)."""
        if self._recording or self.fenced:
            return
        desired = self._desired()
        if desired == self._members.keys():
            return
        self._recording = True
        self.record_in_sync(desired).addBoth(self._recorded, desired)

    def _recorded(self, result: bool | Failure, desired: frozenset[str]) -> None:
        if self.fenced:
            return
        if result is not True:
            reason = result.getErrorMessage() if isinstance(result, Failure) else "not the leader"
            self.log.warn(
                "could not record the in-sync set {names}: {reason}; retrying",
                log_id="replication.record_failed",
                names=sorted(desired),
                reason=reason,
            )
            self._retry = self.clock.callLater(self.standby_timeout, self._retried)
            return
        self.log.info(
            "in sync at epoch {epoch}: {names}",
            log_id="replication.in_sync",
            epoch=self.epoch,
            names=sorted(desired),
        )
        members = {n: self._members[n] for n in desired if n in self._members}
        for name in desired - members.keys():
            connection = self._named.get(name)
            if connection is not None and connection.synced:
                members[name] = _Member(connection.acked, connection.behind_since())
            else:
                # It left before the record was written: it holds what it acked.
                members[name] = _Member(-1, self.clock.seconds())
        self._members = members
        self._recording = False
        self._release()
        self._reconcile()

    def _retried(self) -> None:
        self._recording = False
        self._reconcile()

    # -- figures -------------------------------------------------------------------------

    def figures(self) -> list[StandbyFigures]:
        """Each standby known: connected, or in sync."""
        return list(self._figures(self.clock.seconds()))

    def _figures(self, now: float) -> Iterator[StandbyFigures]:
        behind = self._behind()
        for name in sorted(self._named.keys() | self._members.keys()):
            connection = self._named.get(name)
            member = self._members.get(name)
            acked = max(connection.acked if connection else -1, member.acked if member else -1)
            since = behind.get(name)
            yield StandbyFigures(
                name,
                connection is not None,
                member is not None,
                max(acked, 0),
                self.seq - max(acked, 0),
                0.0 if since is None else now - since,
                name in self._lost,
            )

    def document(self) -> dict[str, Any]:
        """The figures as C{quicx status} shows them."""
        return {
            "epoch": self.epoch,
            "seq": self.seq,
            "mode": self.mode,
            "standby_lost": self.standby_lost,
            "fenced": self.fenced,
            "waiting": len(self._waiting),
            "standbys": [
                {
                    "name": f.name,
                    "connected": f.connected,
                    "in_sync": f.in_sync,
                    "acked": f.acked,
                    "lag_batches": f.lag_batches,
                    "lag_seconds": round(f.lag_seconds, 3),
                    "lost": f.lost,
                }
                for f in self.figures()
            ],
        }
