"""
The journal's file format and recovery, on real files: torn tails are cut,
damage in the middle is refused with the offset, replay is idempotent.
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock, deferLater
from zope.interface import implementer

from quicx.daemon import config as configuration
from quicx.daemon.journal import records as journal
from quicx.daemon.journal import recovery as journal_recovery
from quicx.daemon.journal.interface import IJournalOwner, KeyEntry, Record, Snapshot
from quicx.daemon.journal.records import MAGIC, FsyncPolicy, JournalCorrupt, RecoveredTask
from quicx.daemon.journal.recovery import recover
from quicx.daemon.journal.writer import INLINE_WRITE, Journal
from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.policy import QueuePolicy
from quicx.daemon.queue.queues import NamedQueue
from quicx.protocol import codec


def write(path: Path, *records: bytes) -> list[int]:
    """Write a journal; return each record's start offset."""
    offsets, offset = [], len(MAGIC)
    for record in records:
        offsets.append(offset)
        offset += len(record)
    path.write_bytes(MAGIC + b"".join(records))
    return offsets


def test_live_tasks_are_submits_without_outcome_in_submit_order(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        journal.encode_submit(1, b"a", b"one"),
        journal.encode_submit(2, b"b", b""),
        journal.encode_submit(3, b"c", bytes(range(256))),
        journal.encode_outcome(1, "done"),
        journal.encode_submit(4, b"d", b"four"),
        journal.encode_outcome(3, "failed"),
        journal.encode_outcome(99, "done"),  # an outcome for an id not live: ignored
    )
    recovery = recover(str(path))
    assert recovery.tasks == (RecoveredTask(2, b"b", b""), RecoveredTask(4, b"d", b"four"))
    assert recovery.last_task_id == 4
    assert recovery.records == 7
    assert recovery.torn_bytes == 0
    assert recovery.valid_length == path.stat().st_size


def test_checkpoint_carries_the_id_counter_and_replay_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(
        path,
        journal.encode_checkpoint(700),
        journal.encode_submit(5, b"t", b"x"),
        journal.encode_submit(6, b"t", b"y"),
        # What a compaction racing new records may leave: the same SUBMIT twice.
        journal.encode_submit(5, b"t", b"x"),
    )
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == [6, 5]
    assert recovery.last_task_id == 5
    write(path, journal.encode_checkpoint(700))
    assert recover(str(path)).last_task_id == 700


def test_missing_file_is_an_empty_journal(tmp_path: Path) -> None:
    recovery = recover(str(tmp_path / "absent"))
    assert recovery.tasks == () and recovery.last_task_id == 0


def test_every_torn_tail_is_cut_at_the_last_whole_record(tmp_path: Path) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"t", b"payload %d" % n) for n in (1, 2, 3)]
    offsets = write(path, *records)
    whole = path.read_bytes()
    last = offsets[-1]
    for cut in range(last + 1, len(whole)):
        path.write_bytes(whole[:cut])
        recovery = recover(str(path))
        assert [t.task_id for t in recovery.tasks] == [1, 2], cut
        assert recovery.valid_length == last
        assert recovery.torn_bytes == cut - last


def test_a_zero_filled_tail_is_torn_not_corrupt(tmp_path: Path) -> None:
    # What a power cut can leave: the file grew, its last pages never came.
    path = tmp_path / "j"
    offsets = write(path, journal.encode_submit(1, b"t", b"kept"))
    path.write_bytes(path.read_bytes() + bytes(4096))
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == [1]
    assert recovery.valid_length == offsets[0] + len(journal.encode_submit(1, b"t", b"kept"))


def test_a_torn_magic_is_an_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.write_bytes(MAGIC[:3])
    assert recover(str(path)).torn_bytes == 3


@pytest.mark.parametrize("flip", [0, 4, 8, 10, 20])
def test_damage_before_good_records_is_refused_with_its_offset(tmp_path: Path, flip: int) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"type", b"payload %d" % n) for n in range(1, 6)]
    offsets = write(path, *records)
    data = bytearray(path.read_bytes())
    data[offsets[2] + flip] ^= 0x40
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as raised:
        recover(str(path))
    assert raised.value.offset == offsets[2]
    assert raised.value.path == str(path)
    assert f"{path}: offset {offsets[2]}:" in str(raised.value)
    assert f"good records from offset {offsets[3]}" in str(raised.value)


def test_damage_in_the_last_record_is_corruption_not_a_torn_tail(tmp_path: Path) -> None:
    # Whole in length, failing its checksum: a flipped bit, not a cut write.
    path = tmp_path / "j"
    offsets = write(path, *(journal.encode_submit(n, b"t", b"x" * 50) for n in (1, 2)))
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt) as raised:
        recover(str(path))
    assert raised.value.offset == offsets[1]
    assert "checksum mismatch (the last record)" in str(raised.value)
    assert f"quicx repair-journal {path}" in str(raised.value)


@pytest.mark.parametrize("where", ["last", "middle"])
def test_repair_keeps_every_good_record_and_moves_the_file_aside(
    tmp_path: Path, where: str
) -> None:
    path = tmp_path / "j"
    records = [journal.encode_submit(n, b"t", b"payload %d" % n) for n in range(1, 6)]
    offsets = write(path, *records, journal.encode_outcome(2, "done"))
    damaged = offsets[4] if where == "last" else offsets[2]
    data = bytearray(path.read_bytes())
    data[damaged + 9] ^= 0x10
    path.write_bytes(bytes(data))
    result = journal_recovery.repair(str(path), now=0.0)
    assert result.damaged == ((damaged, len(records[0])),)
    assert result.moved_to == f"{path}.damaged-19700101T000000Z"
    assert Path(result.moved_to).read_bytes() == bytes(data), "the original is kept whole"
    recovery = recover(str(path))
    lost = 5 if where == "last" else 3
    assert [t.task_id for t in recovery.tasks] == [n for n in (1, 3, 4, 5) if n != lost]
    assert result.kept == 5
    # A journal with nothing wrong is left alone.
    assert journal_recovery.repair(str(path), now=0.0) == journal_recovery.Repair((), 5, "")


def test_a_torn_tail_of_zeros_or_a_cut_header_is_still_torn(tmp_path: Path) -> None:
    path = tmp_path / "j"
    offsets = write(path, journal.encode_submit(1, b"t", b"kept"))
    whole = path.read_bytes()
    for tail in (b"\x00\x00\x00", bytes(9), journal.encode_submit(2, b"t", b"cut")[:5]):
        path.write_bytes(whole + tail)
        recovery = recover(str(path))
        assert [t.task_id for t in recovery.tasks] == [1]
        assert recovery.valid_length == len(whole) and recovery.torn_bytes == len(tail)
    assert offsets


def test_not_a_journal(tmp_path: Path) -> None:
    path = tmp_path / "j"
    path.write_bytes(b"[server]\nport = 1\n")
    with pytest.raises(JournalCorrupt, match="offset 0: not a Quicx journal"):
        recover(str(path))
    with pytest.raises(JournalCorrupt, match="not a regular file"):
        recover(str(tmp_path))


def test_record_size_matches_the_encoding() -> None:
    record = journal.encode_submit2(7, b"abc", b"x" * 100, "mail", 5, 1.5, b"key", None)
    assert len(record) == journal.submit2_record_size("mail", 3, b"key", None, 100)


def test_journal_section_of_the_configuration() -> None:
    config = configuration.parse(
        "[journal]\npath = /var/lib/quicx/journal\nfsync = always\n"
        "compact_factor = 3\ncompact_min_size = 1M\n"
    )
    assert config.journal == configuration.sections.JournalSettings(
        "/var/lib/quicx/journal", FsyncPolicy.ALWAYS, 3, 1 << 20
    )
    assert configuration.parse(configuration.render(config)).journal == config.journal
    assert configuration.Config().journal.fsync is FsyncPolicy.EVERYSEC
    assert configuration.Config().journal.path == ""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[journal]\nfsync = sometimes\n", "<string>:2: fsync: 'sometimes' is not one of"),
        ("[journal]\n\ncompact_factor = 1\n", "<string>:3: compact_factor: 1 is out of range"),
        ("[journal]\ncompact_min_size = lots\n", "<string>:2: compact_min_size: 'lots'"),
    ],
)
def test_bad_journal_settings_name_the_line(text: str, message: str) -> None:
    with pytest.raises(configuration.ConfigError, match=message):
        configuration.parse(text)


# -- task ids are reserved ahead -------------------------------------------------------


_QUEUE: NamedQueue[Task, Session] = NamedQueue("default", QueuePolicy(), False)


def fake_task(task_id: int) -> Task:
    tally = Tally("default", "t")
    return Task(task_id, b"t", 0, 1, None, _QUEUE, 0, 0.0, tally=tally, ready_at=0.0)


@implementer(IJournalOwner)
class RecordingOwner:
    """A journal's owner that keeps what the journal accepts and allows no refusal."""

    def __init__(self) -> None:
        self.accepted_tasks: list[Record] = []

    def accepted(self, tasks: list[Record]) -> None:
        self.accepted_tasks.extend(tasks)

    def refused(self, tasks: list[Record], reason: str, in_doubt: bool) -> None:
        pytest.fail(f"refused: {reason}")

    def snapshot(self) -> Snapshot:
        return Snapshot((), (), ())


def opened_journal(path: Path, policy: FsyncPolicy, reactor, **kwargs) -> tuple[Journal, list]:
    owner = RecordingOwner()
    accepted = owner.accepted_tasks
    result = Journal(str(path), policy, reactor, **kwargs)
    result.bind(owner)
    result.open(recover(str(path)))
    return result, accepted


def test_a_crash_never_lets_an_acknowledged_id_be_issued_again(tmp_path: Path) -> None:
    # The clock never runs: these records never leave the buffer, as when
    # the daemon is killed right after sending their OKs (fsync everysec).
    path = tmp_path / "j"
    written, _ = opened_journal(path, FsyncPolicy.EVERYSEC, Clock())
    assert all(written.record_submit(fake_task(n), b"p") for n in range(1, 101))
    recovery = recover(str(path))
    assert recovery.tasks == ()
    assert recovery.last_task_id == journal.ID_BLOCK  # ids resume past the reservation
    # And the next start reserves the block after that one.
    opened_journal(path, FsyncPolicy.EVERYSEC, Clock())
    assert recover(str(path)).last_task_id == 2 * journal.ID_BLOCK


def test_reserved_ids_wrap_with_the_id_counter(tmp_path: Path) -> None:
    path = tmp_path / "j"
    write(path, journal.encode_reserve(codec.MAX_TASK_ID - 3))
    opened_journal(path, FsyncPolicy.NO, Clock(), id_block=8)
    # MAX - 2, MAX - 1, MAX, 1, 2, 3, 4, 5: eight steps past the last reservation.
    assert recover(str(path)).last_task_id == 5
    assert journal.id_steps(codec.MAX_TASK_ID - 1, 2) == 3
    assert journal.id_after(codec.MAX_TASK_ID, 1) == 1


@pytest_twisted.ensureDeferred
async def test_ids_past_the_reservation_wait_until_the_next_is_durable(tmp_path: Path) -> None:
    path = tmp_path / "j"
    written, accepted = opened_journal(path, FsyncPolicy.NO, reactor, id_block=8)
    written.startService()
    try:
        answers = [written.record_submit(fake_task(n), b"p") for n in range(1, 21)]
        # The first block is durable from the start; the rest wait for theirs.
        assert answers == [True] * 8 + [False] * 12
        for _ in range(200):
            if len(accepted) == 12:
                break
            await deferLater(reactor, 0.01)
        assert [t.task_id for t in accepted] == list(range(9, 21))
    finally:
        await written.stopService()
    recovery = recover(str(path))
    assert [t.task_id for t in recovery.tasks] == list(range(1, 21))
    assert recovery.last_task_id >= 20


def test_a_small_unsynced_batch_is_written_on_the_reactor_thread(tmp_path: Path) -> None:
    # The clock's reactor has no threads, and the journal's pool is never
    # started: what reaches the file is written on the reactor's turn alone.
    path = tmp_path / "j"
    clock = Clock()
    written, _ = opened_journal(path, FsyncPolicy.NO, clock)
    assert written.record_submit(fake_task(1), b"p")
    clock.advance(0)
    assert [t.task_id for t in recover(str(path)).tasks] == [1]
    assert written._job is None
    # A batch past INLINE_WRITE goes to the writer thread (here: waits for it).
    assert written.record_submit(fake_task(2), b"p" * (INLINE_WRITE + 1))
    clock.advance(0)
    assert written._job is not None
    assert [t.task_id for t in recover(str(path)).tasks] == [1]


def test_a_synced_batch_is_never_written_on_the_reactor_thread(tmp_path: Path) -> None:
    path = tmp_path / "j"
    clock = Clock()
    written, accepted = opened_journal(path, FsyncPolicy.ALWAYS, clock)
    assert not written.record_submit(fake_task(1), b"p")
    clock.advance(0)
    assert written._job is not None and accepted == []
    assert recover(str(path)).tasks == ()


# -- a failed append -------------------------------------------------------------------


def test_a_failed_append_that_cannot_be_cut_back_is_in_doubt(tmp_path: Path) -> None:
    # A real failing descriptor: the write fails (EBADF), and so does the cut.
    path = tmp_path / "j"
    written, _ = opened_journal(path, FsyncPolicy.ALWAYS, Clock())
    os.close(written._fd)
    written._fd = os.open(path, os.O_RDONLY)
    with pytest.raises(journal.JournalInDoubt, match="cutting it back failed too"):
        written._write([journal.encode_submit(1, b"t", b"x")], sync=True)
    os.close(written._fd)


def test_a_failed_append_is_cut_back_to_where_it_began(tmp_path: Path) -> None:
    # Past RLIMIT_FSIZE a write stops short, then fails (EFBIG): a real full
    # disk, in a child process so that the limit is its alone.
    path = tmp_path / "j"
    script = f"""
import resource, signal
from twisted.internet.task import Clock
from quicx.daemon.journal import records as journal
from quicx.daemon.journal.interface import IJournalOwner, Record
from quicx.daemon.journal import recovery as journal_recovery
from quicx.daemon.journal.records import FsyncPolicy
from quicx.daemon.journal.writer import Journal
from quicx.daemon.journal.recovery import recover
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
j = Journal({str(path)!r}, FsyncPolicy.ALWAYS, Clock())
j.open(recover({str(path)!r}))
before = j._write([journal.encode_submit(1, b"t", b"kept")], sync=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (before + 100, before + 100))
records = [journal.encode_submit(n, b"t", b"x" * 40) for n in range(2, 10)]
try:
    j._write(records, sync=True)
except OSError as e:
    print(e.errno)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip() == str(errno.EFBIG), result.stderr
    # Two of the batch's records fitted whole before the limit: both are gone.
    assert [t.task_id for t in recover(str(path)).tasks] == [1]


# -- compaction ------------------------------------------------------------------------


@implementer(IJournalOwner)
class OwnerWithKeys(RecordingOwner):
    """An owner with no live task and many remembered keys."""

    def snapshot(self) -> Snapshot:
        keys = [KeyEntry("default", b"k%04d" % n + bytes(200), n, 1.0, "done") for n in range(200)]
        return Snapshot((), (), keys)


def durable(written: Journal) -> Deferred[None]:
    """What C{fsync = always} waits on: never C{None} while a record is unsynced."""
    waiting = written.durable()
    assert waiting is not None
    return waiting


@pytest_twisted.ensureDeferred
async def test_what_compaction_keeps_counts_as_live(tmp_path: Path) -> None:
    # 200 remembered keys make a compacted file of ~47 KiB with no live task:
    # compacting it again would keep all of it, so later flushes must not.
    path = tmp_path / "j"
    written = Journal(str(path), FsyncPolicy.ALWAYS, reactor, compact_min_size=4096)
    written.bind(OwnerWithKeys())
    written.open(recover(str(path)))
    written.startService()
    try:
        for n in range(1, 121):  # ~6 KiB of finished tasks: past compact_min_size
            written.record_submit(fake_task(n), b"p")
            written.record_outcome(fake_task(n), "done")
        await durable(written)
        for _ in range(10):  # group commits: the first compacts
            written.record_pause("q", False)
            await durable(written)
        assert written.stats.compactions == 1
        assert written.stats.live_bytes > 40_000
    finally:
        await written.stopService()
    recovery = recover(str(path))
    assert (recovery.tasks, recovery.paused, len(recovery.keys)) == ((), frozenset(), 200)
