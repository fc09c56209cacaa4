"""
The replication stream in one process, over real loopback sockets: a
primary's journal (a real queue's), its L{ReplicationPrimary}, and a real
L{ReplicationStandby} (or a standby played by hand, to hold its
acknowledgements): the standby's file recovers to what the primary's does;
in sync mode an OK waits for the standby; an older epoch is refused; a
snapshot at a flush boundary doubles nothing; a slow standby is dropped
and starts over; a lost standby is handled per C{standby_lost}; a standby
whose disk is full stops acknowledging.
"""

from __future__ import annotations

import os
import struct
import subprocess
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.protocol import ClientFactory, Factory, Protocol
from twisted.internet.task import Clock, deferLater
from zope.interface import implementer

from quicx.daemon.journal.records import (
    KIND_SUBMIT,
    KIND_SUBMIT2,
    KIND_SUBMIT3,
    KIND_SUBMIT4,
    KIND_SUBMIT5,
    KIND_SUBMIT6,
    MAGIC,
    FsyncPolicy,
)
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import Journal
from quicx.daemon.replication.interfaces import IReplica, Leader
from quicx.daemon.replication.primary import Fenced, ReplicationPrimary
from quicx.daemon.replication.standby import ReplicationStandby
from quicx.protocol import codec, replication, taskflow
from quicx.protocol.frames import Frame, FrameParser
from tests.fakes import FakeJournal, make_queue, submit_to, v2_producer_of, v2_worker_of

EPOCH = 7
reactor: Any = _reactor


async def until(condition: Callable[[], object], what: str, seconds: float = 30.0) -> None:
    """Wait for C{condition}, turning the reactor, up to a generous deadline."""
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await deferLater(reactor, 0.01, lambda: None)
    raise AssertionError(f"not within {seconds} s: {what}")


class InSync:
    """A fake of the role manager's C{in_sync}: each set asked for, answered at once or held."""

    def __init__(self) -> None:
        self.sets: list[frozenset[str]] = []
        self.hold = False
        self.held: list[Deferred[bool]] = []

    def __call__(self, names: frozenset[str]) -> Deferred[bool]:
        self.sets.append(names)
        if self.hold:
            self.held.append(Deferred())
            return self.held[-1]
        return succeed(True)


class Primary:
    """A queue, its journal and the replication primary on a loopback port."""

    def __init__(
        self,
        directory: Path,
        mode: str = "sync",
        lost: str = "wait",
        timeout: float = 60.0,
        backlog: int = 64 << 20,
        clock: Any = reactor,
        policy: FsyncPolicy = FsyncPolicy.EVERYSEC,
    ) -> None:
        self.path = str(directory / "primary.journal")
        self.journal = Journal(self.path, policy, reactor)
        self.queue = make_queue(journal=cast(FakeJournal, self.journal))
        self.journal.open(recover(self.path))
        self.in_sync = InSync()
        self.clock = clock
        self.replica = ReplicationPrimary(
            EPOCH, self.journal, self.in_sync, mode, lost, timeout, backlog, clock, max_batch=4096
        )
        self.journal.replica = self.replica
        self.journal.startService()
        self.port = reactor.listenTCP(0, self.replica, interface="127.0.0.1")
        self.address = f"127.0.0.1:{self.port.getHost().port}"
        self.leader = Leader("primary", "127.0.0.1:1", self.address, EPOCH)
        self.producer = v2_producer_of(self.queue)

    def submit(self, count: int, size: int = 10, first: int = 0) -> None:
        for n in range(first, first + count):
            key = b"key-%d" % n if n % 3 == 0 else None
            submit_to(self.queue, self.producer.session, b"t", bytes(size), "work", key=key)

    def oks(self) -> list[int]:
        return [m.task_id for m in self.producer.received if isinstance(m, taskflow.Ok)]

    async def close(self) -> None:
        if self.replica.fenced:
            return
        self.journal.replica = None
        self.replica.fence("the test is over")
        await self.port.stopListening()
        await self.journal.stopService()


@pytest.fixture
def primaries(tmp_path: Path) -> Iterator[Callable[..., Primary]]:
    made: list[Primary] = []

    def make(**kwargs: Any) -> Primary:
        made.append(Primary(tmp_path, **kwargs))
        return made[-1]

    yield make
    for primary in made:
        pytest_twisted.blockon(Deferred.fromCoroutine(primary.close()))


def same_state(one: str, other: str) -> None:
    a, b = recover(one), recover(other)
    assert [(t.task_id, t.payload, t.queue, t.key) for t in a.tasks] == [
        (t.task_id, t.payload, t.queue, t.key) for t in b.tasks
    ]
    assert (a.keys, a.kept, a.paused, a.last_task_id) == (b.keys, b.kept, b.paused, b.last_task_id)


# -- a real standby -----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_a_standby_recovers_what_the_primary_recovers(
    tmp_path: Path, primaries: Callable[..., Primary]
) -> None:
    primary = primaries()
    primary.submit(30)  # before any standby: in sync mode under wait, no OK yet
    await deferLater(reactor, 0.05, lambda: None)
    assert primary.oks() == []
    standby = ReplicationStandby(str(tmp_path / "standby.journal"), "s1", reactor)
    standby.follow(primary.leader)
    try:
        await until(lambda: len(primary.oks()) == 30, "the OKs, once a standby is in sync")
        assert primary.in_sync.sets == [frozenset({"s1"})]
        worker = v2_worker_of(primary.queue, credits=20, queues=("work",))
        tasks = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        for task in tasks[:15]:
            primary.queue.ack(worker.session, task.task_id, task.token)
        primary.queue.set_paused("elsewhere", True)
        primary.submit(20, size=1000, first=30)  # batches cut in pieces of max_batch
        await until(lambda: len(primary.oks()) == 50, "the later OKs")
        await until(lambda: standby.seq == primary.replica.seq, "the standby's last ack")
        (figures,) = primary.replica.figures()
        assert (figures.name, figures.in_sync, figures.lag_batches) == ("s1", True, 0)
        assert standby.holding().in_sync and standby.holding().epoch == EPOCH
    finally:
        await standby.stop()
        await primary.close()
    same_state(primary.path, standby.path)
    assert len(recover(standby.path).tasks) == 35


@pytest_twisted.ensureDeferred
async def test_a_standby_that_joins_under_load_holds_each_record_once(
    tmp_path: Path, primaries: Callable[..., Primary]
) -> None:
    primary = primaries(mode="async")
    standby = ReplicationStandby(str(tmp_path / "standby.journal"), "s1", reactor)
    for round_ in range(40):
        primary.submit(5, first=5 * round_)
        if round_ == 10:
            standby.follow(primary.leader)
        await deferLater(reactor, 0, lambda: None)
    try:
        await until(lambda: standby.in_sync and standby.seq == primary.replica.seq, "catch up")
    finally:
        await standby.stop()
        await primary.close()
    same_state(primary.path, standby.path)
    data = Path(standby.path).read_bytes()
    assert len(recover(standby.path).tasks) == 200
    # Each SUBMIT once in the file: nothing the snapshot held was streamed again.
    submitted = [struct.unpack_from(">I", r, 1)[0] for r in _bodies(data) if r[0] in SUBMITS]
    assert sorted(submitted) == list(range(1, 201))


SUBMITS = {KIND_SUBMIT, KIND_SUBMIT2, KIND_SUBMIT3, KIND_SUBMIT4, KIND_SUBMIT5, KIND_SUBMIT6}


def _bodies(data: bytes) -> Iterator[bytes]:
    """The records' bodies in a journal file (each framed C{[length u32][crc u32][body]})."""
    offset = len(MAGIC)
    while offset < len(data):
        (length,) = struct.unpack_from(">I", data, offset)
        yield data[offset + 8 : offset + 8 + length]
        offset += 8 + length


# -- a standby played by hand -----------------------------------------------------------


class HandStandby(Protocol):
    """A standby whose every acknowledgement the test sends."""

    transport: Any

    def __init__(self, name: str = "hand", epoch: int = EPOCH) -> None:
        self.name, self.epoch = name, epoch
        self.parser = FrameParser(0, check_types=False, v2_max_length=1 << 24)
        self.messages: list[Any] = []
        self.closed = False

    def connectionMade(self) -> None:
        self.transport.write(replication.encode_replicate(self.epoch, self.name))

    def dataReceived(self, data: bytes) -> None:
        for frame in self.parser.feed(data):
            assert isinstance(frame, Frame)
            decode = replication.DECODERS.get(frame.message_type)
            self.messages.append(decode(frame.payload) if decode else frame)

    def connectionLost(self, reason: Any = None) -> None:
        self.closed = True

    def snapshot(self) -> bytes | None:
        chunks = [m for m in self.messages if isinstance(m, replication.SnapshotChunk)]
        if not chunks or not chunks[-1].last:
            return None
        return b"".join(c.data for c in chunks)

    def batches(self) -> list[replication.Batch]:
        return [m for m in self.messages if isinstance(m, replication.Batch)]

    def ack(self, seq: int) -> None:
        self.transport.write(replication.encode_batch_ack(EPOCH, seq))

    def ack_snapshot(self) -> None:
        (last,) = [m for m in self.messages if isinstance(m, replication.SnapshotChunk) and m.last]
        self.ack(last.seq)


async def hand_standby(primary: Primary, **kwargs: Any) -> HandStandby:
    standby = HandStandby(**kwargs)
    factory = ClientFactory.forProtocol(lambda: standby)
    reactor.connectTCP("127.0.0.1", primary.port.getHost().port, factory)
    await until(lambda: standby.snapshot() is not None, "the snapshot")
    return standby


async def in_sync_hand(primary: Primary) -> HandStandby:
    standby = await hand_standby(primary)
    standby.ack_snapshot()
    await until(lambda: primary.in_sync.sets[-1:] == [frozenset({"hand"})], "in sync")
    return standby


@pytest_twisted.ensureDeferred
async def test_in_sync_mode_an_ok_waits_for_the_standbys_ack(
    primaries: Callable[..., Primary],
) -> None:
    primary = primaries()
    standby = await in_sync_hand(primary)
    empty = os.path.getsize(primary.path)
    primary.submit(1)
    await until(lambda: standby.batches(), "the batch")
    # Written here (and fsync policy everysec would answer now): still no OK.
    await until(lambda: os.path.getsize(primary.path) > empty, "the local write")
    await deferLater(reactor, 0.05, lambda: None)
    assert primary.oks() == []
    durable = primary.journal.durable()
    assert durable is not None  # whatever the fsync policy
    (batch,) = standby.batches()
    standby.ack(batch.seq)
    await until(lambda: primary.oks() == [1], "the OK once acked")
    assert durable.called


@pytest_twisted.ensureDeferred
async def test_async_mode_answers_without_the_standby(primaries: Callable[..., Primary]) -> None:
    primary = primaries(mode="async")
    standby = await in_sync_hand(primary)
    primary.submit(3)
    assert primary.oks() == [1, 2, 3]  # everysec: at once, as without replication
    await until(lambda: standby.batches(), "the batch, all the same")


@pytest_twisted.ensureDeferred
async def test_a_standby_past_max_backlog_is_dropped_and_starts_over(
    primaries: Callable[..., Primary],
) -> None:
    primary = primaries(mode="async", backlog=20_000)
    standby = await in_sync_hand(primary)
    for n in range(40):
        primary.submit(1, size=1000, first=n)
        await deferLater(reactor, 0, lambda: None)
    await until(lambda: standby.closed, "the slow standby dropped")
    assert sum(len(b.records) for b in standby.batches()) <= 20_000
    again = await hand_standby(primary)
    snapshot = again.snapshot()
    assert snapshot is not None
    path = Path(primary.path + ".copy")
    path.write_bytes(snapshot)
    assert len(recover(str(path)).tasks) == 40


@pytest.mark.parametrize("policy", ["wait", "async"])
@pytest_twisted.ensureDeferred
async def test_a_lost_standby_is_waited_for_or_recorded_out(
    primaries: Callable[..., Primary], policy: str
) -> None:
    clock = Clock()
    primary = primaries(lost=policy, timeout=2.0, clock=clock)
    standby = await in_sync_hand(primary)
    primary.in_sync.hold = True
    primary.submit(1)
    await until(lambda: standby.batches(), "the batch")
    clock.advance(1.5)
    assert [f.lost for f in primary.replica.figures()] == [False]
    clock.advance(1.0)
    assert [f.lost for f in primary.replica.figures()] == [True]
    await deferLater(reactor, 0.05, lambda: None)
    assert primary.oks() == []
    if policy == "wait":
        assert primary.in_sync.held == []  # nothing recorded: it stays in sync
        standby.ack(standby.batches()[0].seq)
        await until(lambda: primary.oks() == [1], "the OK once acked, however late")
    else:
        # Recorded out first, and only then the OK.
        assert primary.in_sync.sets[-1] == frozenset()
        primary.in_sync.held[-1].callback(True)
        await until(lambda: primary.oks() == [1], "the OK without the lost standby")
        primary.submit(1, first=1)
        await until(lambda: primary.oks() == [1, 2], "later OKs without it")


@pytest_twisted.ensureDeferred
async def test_a_fenced_primary_fails_what_waits_and_ships_nothing(
    primaries: Callable[..., Primary],
) -> None:
    primary = primaries()
    standby = await in_sync_hand(primary)
    primary.submit(1)
    await until(lambda: standby.batches(), "the batch")
    waiting = primary.replica.ship(b"more")
    assert waiting is not None
    primary.replica.fence("lease lost")
    failed = primary.replica.ship(b"more")
    assert failed is not None
    reasons: list[Any] = []
    for shipped in (waiting, failed):
        shipped.addErrback(lambda failure: reasons.append(failure.value))
    assert [type(r) for r in reasons] == [Fenced, Fenced]
    await until(lambda: primary.journal.broken, "the journal refusing")
    await until(lambda: standby.closed, "the standby's connection closed")


# -- a primary played by hand --------------------------------------------------------------


class HandPrimary(Protocol):
    """A primary listener that sends what the test says once REPLICATE arrives."""

    transport: Any

    def __init__(self, send: list[bytes], seen: list[Any]) -> None:
        self.send, self.seen = send, seen
        self.parser = FrameParser(0, check_types=False, v2_max_length=1 << 16)

    def dataReceived(self, data: bytes) -> None:
        for frame in self.parser.feed(data):
            assert isinstance(frame, Frame)
            if frame.message_type == codec.MessageType.REPLICATE:
                self.seen.append(replication.decode_replicate(frame.payload))
                self.transport.write(b"".join(self.send))
            else:
                self.seen.append(frame)


def snapshot_of(epoch: int, seq: int) -> bytes:
    return b"".join(replication.snapshot_frames(epoch, seq, MAGIC))


@pytest.mark.parametrize(
    ("sent", "code"),
    [
        ([snapshot_of(EPOCH - 1, 0)], codec.ErrorCode.STALE),
        (
            [snapshot_of(EPOCH, 0), replication.encode_batch(EPOCH - 1, 1, b"x")],
            codec.ErrorCode.STALE,
        ),
        (
            [snapshot_of(EPOCH, 0), replication.encode_batch(EPOCH, 2, b"x")],
            codec.ErrorCode.INVALID_MESSAGE,
        ),
    ],
    ids=["older-snapshot", "older-batch", "gap"],
)
@pytest_twisted.ensureDeferred
async def test_a_standby_refuses_an_older_epoch_and_starts_over_on_a_gap(
    tmp_path: Path, sent: list[bytes], code: int
) -> None:
    seen: list[Any] = []
    port = reactor.listenTCP(
        0, Factory.forProtocol(lambda: HandPrimary(sent, seen)), interface="127.0.0.1"
    )
    standby = ReplicationStandby(str(tmp_path / "standby.journal"), "s1", reactor, max_delay=0.1)
    standby.follow(Leader("p", "", f"127.0.0.1:{port.getHost().port}", EPOCH))
    try:
        await until(
            lambda: len([m for m in seen if isinstance(m, replication.Replicate)]) >= 2,
            "a second REPLICATE: the standby reconnected",
        )
    finally:
        await standby.stop()
        await port.stopListening()
    assert seen[0] == replication.Replicate(EPOCH, "s1")
    errors = [m for m in seen if isinstance(m, Frame) and m.message_type == codec.MessageType.ERROR]
    assert errors and errors[0].payload[0] == code
    acks = [
        m for m in seen if isinstance(m, Frame) and m.message_type == codec.MessageType.BATCH_ACK
    ]
    assert all(
        replication.decode_batch_ack(a.payload).seq == 0 for a in acks
    )  # the snapshot's only


# -- the snapshot at a flush boundary ---------------------------------------------------


@implementer(IReplica)
class Shipped:
    """A replica that keeps each batch."""

    sync = False

    def __init__(self) -> None:
        self.batches: list[bytes] = []

    def ship(self, batch: bytes) -> None:
        self.batches.append(batch)


@pytest_twisted.ensureDeferred
async def test_a_snapshot_with_records_buffered_doubles_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "j")
    journal = Journal(path, FsyncPolicy.EVERYSEC, reactor)
    queue = make_queue(journal=cast(FakeJournal, journal))
    journal.open(recover(path))
    journal.replica = shipped = Shipped()
    journal.startService()
    producer = v2_producer_of(queue)
    try:
        for _ in range(5):
            submit_to(queue, producer.session, b"t", b"early", "work")
        assert journal._buffer  # buffered, not yet flushed
        snapshot: list[list[bytes]] = []
        journal.snapshot_for_standby().addCallback(snapshot.append)
        (records,) = snapshot
        assert len(shipped.batches) == 1  # the buffered ones, shipped at the boundary
        for _ in range(3):
            submit_to(queue, producer.session, b"t", b"late", "work")
        await until(lambda: len(shipped.batches) == 2 and not journal._buffer, "the flush")
    finally:
        await journal.stopService()
    after = tmp_path / "after"
    after.write_bytes(MAGIC + shipped.batches[1])
    assert [t.payload for t in recover(str(after)).tasks] == [b"late"] * 3
    standby = tmp_path / "standby"
    standby.write_bytes(b"".join(records) + shipped.batches[1])
    same_state(path, str(standby))


# -- a standby's full disk ---------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 32 KiB tmpfs (root only: skipped elsewhere)."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=32k", "tmpfs", str(mount)], capture_output=True
    )
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs: {made.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def answered_or_broken(primary: Primary, standby: ReplicationStandby, count: int) -> bool:
    return len(primary.oks()) == count or bool(standby.broken)


@pytest.mark.parametrize("policy", ["wait", "async"])
@pytest_twisted.ensureDeferred
async def test_a_standby_whose_disk_is_full_stops_acknowledging(
    primaries: Callable[..., Primary], tiny_disk: Path, policy: str
) -> None:
    primary = primaries(lost=policy, timeout=0.5)
    standby = ReplicationStandby(str(tiny_disk / "standby.journal"), "s1", reactor, max_delay=0.2)
    standby.follow(primary.leader)
    try:
        await until(lambda: primary.in_sync.sets == [frozenset({"s1"})], "in sync")
        sent = 0
        while not standby.broken:
            primary.submit(1, size=100 + sent * 16 % 900, first=sent)  # the pool's classes
            sent += 1
            await until(partial(answered_or_broken, primary, standby, sent), "an OK")
        assert "No space left on device" in standby.broken
        primary.submit(1, first=sent)
        if policy == "async":
            await until(lambda: primary.in_sync.sets[-1] == frozenset(), "recorded out")
            await until(lambda: len(primary.oks()) == sent + 1, "the OKs without it")
        else:
            await until(lambda: any(f.lost for f in primary.replica.figures()), "lost")
            assert len(primary.oks()) < sent + 1
            assert primary.in_sync.sets == [frozenset({"s1"})]
    finally:
        await standby.stop()
    # What it holds is a journal read whole: the failed append was cut back off.
    assert recover(standby.path).torn_bytes == 0
