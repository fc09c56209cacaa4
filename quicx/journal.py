"""
The write-ahead journal: accepted tasks survive a crash of the daemon.

The journal is one append-only file.  It starts with an 8-byte magic line and
then holds records, each framed as::

    u32 body length | u32 CRC-32 of the body | body

and each body starts with a kind byte:

  - SUBMIT: C{u32 task id, u8 type length, type, payload} -- written before
    the task's OK is sent;
  - DONE / FAILED: C{u32 task id} -- written when the outcome arrives;
  - CHECKPOINT: C{u32 last task id} -- the id counter, at the head of a
    compacted file (written by older versions);
  - RESERVE: C{u32 task id} -- task ids up to this one may be handed out:
    written, and synced, before any of them is.  After a crash the id
    counter resumes past the last reservation, so an id told to a producer
    is never issued again, whatever the fsync policy.

Replaying is idempotent: a SUBMIT of an id already live replaces it, an
outcome for an id not live is ignored.  The live tasks are the SUBMITs without
an outcome, in the order they were first submitted.

A crash can leave a torn last record -- one cut short, or a tail of zeros --
and L{recover} cuts it.  A record that is whole in length but fails its
checksum is not torn but damaged: L{recover} refuses the file, naming it and
the offset, and L{repair} keeps the good records and moves the file aside.

A failed append is cut back off the file before its tasks are refused, so a
task whose producer heard ERROR never comes back after a restart.

Writes happen on one thread of the journal's own, never on the reactor.  With
C{fsync = always} a task's OK waits for its record to reach the disk; every
record appended during one reactor turn (and while the previous sync ran)
shares one C{fdatasync}: group commit.
"""

from __future__ import annotations

import os
import struct
import time
import zlib
from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any

from attrs import define, frozen
from twisted.application.service import Service
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool

from quicx.wire import MAX_TASK_ID

if TYPE_CHECKING:
    from quicx.queue import Task

MAGIC = b"QUICXJ1\n"
RECORD_HEADER = struct.Struct(">II")
_ID = struct.Struct(">I")
_SUBMIT_HEAD = struct.Struct(">BIB")

KIND_SUBMIT = 1
KIND_DONE = 2
KIND_FAILED = 3
KIND_CHECKPOINT = 4
KIND_RESERVE = 5
_KINDS = frozenset({KIND_SUBMIT, KIND_DONE, KIND_FAILED, KIND_CHECKPOINT, KIND_RESERVE})

ID_BLOCK = 1 << 16
"""Task ids reserved at a time; a restart skips at most this many."""

MAX_BODY = _SUBMIT_HEAD.size + 255 + (1 << 20)
"""The longest body a record can have: the longest type and a 1 MiB payload."""

DEFAULT_COMPACT_FACTOR = 4.0
DEFAULT_COMPACT_MIN_SIZE = 64 << 20


class FsyncPolicy(Enum):
    """
    When the journal makes its records durable (after Redis' C{appendfsync}).

    See docs/operations.md, "Durability", for what each promises.
    """

    ALWAYS = "always"
    EVERYSEC = "everysec"
    NO = "no"


class JournalInDoubt(OSError):
    """A failed append could not be cut back off the file."""


class JournalCorrupt(Exception):
    """
    The journal cannot be read: the daemon must not start on it.

    @ivar path: the file.
    @ivar offset: where the bad bytes start.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: offset {offset}: {reason}")
        self.path = path
        self.offset = offset


# -- records --------------------------------------------------------------------


def _frame(body: bytes) -> bytes:
    return RECORD_HEADER.pack(len(body), zlib.crc32(body)) + body


def encode_submit(task_id: int, task_type: bytes, payload: bytes) -> bytes:
    return _frame(_SUBMIT_HEAD.pack(KIND_SUBMIT, task_id, len(task_type)) + task_type + payload)


def encode_done(task_id: int) -> bytes:
    return _frame(bytes((KIND_DONE,)) + _ID.pack(task_id))


def encode_failed(task_id: int) -> bytes:
    return _frame(bytes((KIND_FAILED,)) + _ID.pack(task_id))


def encode_checkpoint(last_task_id: int) -> bytes:
    return _frame(bytes((KIND_CHECKPOINT,)) + _ID.pack(last_task_id))


def encode_reserve(task_id: int) -> bytes:
    return _frame(bytes((KIND_RESERVE,)) + _ID.pack(task_id))


def id_after(task_id: int, steps: int) -> int:
    """The id C{steps} after C{task_id}, as the counter counts (1 to 2**32 - 1)."""
    return (task_id - 1 + steps) % MAX_TASK_ID + 1


def id_steps(start: int, end: int) -> int:
    """How many steps of the id counter lead from C{start} to C{end}."""
    return (end - start) % MAX_TASK_ID


def submit_record_size(type_length: int, payload_length: int) -> int:
    """The bytes a SUBMIT record takes in the file."""
    return RECORD_HEADER.size + _SUBMIT_HEAD.size + type_length + payload_length


# -- recovery -------------------------------------------------------------------


@frozen
class RecoveredTask:
    task_id: int
    task_type: bytes
    payload: bytes


@frozen
class Recovery:
    """
    What a journal holds.

    @ivar tasks: the live tasks, oldest first.
    @ivar last_task_id: where the id counter resumes: the last reservation,
        or (in journals written before reservations) the last SUBMIT or
        checkpoint.
    @ivar valid_length: the bytes of whole, good records (with the magic).
    @ivar torn_bytes: the bytes of a torn tail after C{valid_length}.
    @ivar records: how many records were read.
    """

    tasks: tuple[RecoveredTask, ...]
    last_task_id: int
    valid_length: int
    torn_bytes: int
    records: int


def _record_at(data: bytes | memoryview, offset: int) -> tuple[int, str]:
    """
    Check the record at C{offset}: its end offset and C{""}, or what is wrong.
    """
    end_of_data = len(data)
    if offset + RECORD_HEADER.size > end_of_data:
        return end_of_data, "incomplete record header"
    length, checksum = RECORD_HEADER.unpack_from(data, offset)
    body_start = offset + RECORD_HEADER.size
    end = body_start + length
    if not 5 <= length <= MAX_BODY:
        return end, f"impossible record length {length}"
    if end > end_of_data:
        return end, f"record of {length} bytes runs past the end of the file"
    if zlib.crc32(data[body_start:end]) != checksum:
        return end, "checksum mismatch"
    kind = data[body_start]
    if kind not in _KINDS:
        return end, f"unknown record kind {kind}"
    if kind == KIND_SUBMIT and (
        length < _SUBMIT_HEAD.size or _SUBMIT_HEAD.size + data[body_start + 5] > length
    ):
        return end, "SUBMIT record shorter than its task type"
    if kind != KIND_SUBMIT and length != 5:
        return end, f"record of kind {kind} has {length} bytes, not 5"
    return end, ""


def _good_record_after(data: bytes, offset: int) -> int | None:
    """The offset of the first whole, good record after C{offset}, if any."""
    view = memoryview(data)
    for candidate in range(offset + 1, len(data) - RECORD_HEADER.size):
        if not _record_at(view, candidate)[1]:
            return candidate
    return None


def _is_torn(data: bytes, offset: int, end: int) -> bool:
    """
    Whether the bad record at C{offset} (ending at C{end}) is a torn tail: cut
    short by a crash (it runs past the end of the file), or a tail of zeros
    (the file grew but its last pages never reached the disk).  A record
    whole in length that fails its checksum is damage, not a torn write.
    """
    return (
        offset + RECORD_HEADER.size > len(data)
        or end > len(data)
        or data.count(0, offset) == len(data) - offset
    )


def _damage(path: str, offset: int, problem: str, following: int | None) -> JournalCorrupt:
    after = (
        f", with good records from offset {following} on"
        if following is not None
        else " (the last record)"
    )
    return JournalCorrupt(
        path,
        offset,
        f"{problem}{after}; the file is damaged, not torn. `quicx repair-journal {path}`"
        " keeps its good records and moves the file aside (see docs/operations.md)",
    )


def recover(path: str) -> Recovery:
    """
    Read the journal at C{path} (a missing file is an empty journal).

    @raise JournalCorrupt: the file is not a journal, or has a damaged record
        (whole in length, failing its checks).
    """
    data = _read_journal(path)
    if data is None:
        return Recovery((), 0, 0, 0, 0)
    if len(data) < len(MAGIC):
        return Recovery((), 0, 0, len(data), 0)
    live: dict[int, RecoveredTask] = {}
    last_task_id = 0
    reserved: int | None = None
    records = 0
    offset = len(MAGIC)
    view = memoryview(data)
    while offset < len(data):
        end, problem = _record_at(view, offset)
        if problem:
            following = _good_record_after(data, offset)
            if following is not None or not _is_torn(data, offset, end):
                raise _damage(path, offset, problem, following)
            break
        kind = data[offset + RECORD_HEADER.size]
        body = offset + RECORD_HEADER.size + 1
        task_id = _ID.unpack_from(data, body)[0]
        if kind == KIND_SUBMIT:
            type_end = body + 5 + data[body + 4]
            live.pop(task_id, None)
            live[task_id] = RecoveredTask(task_id, data[body + 5 : type_end], data[type_end:end])
            last_task_id = task_id
        elif kind == KIND_RESERVE:
            reserved = task_id
        elif kind == KIND_CHECKPOINT:
            last_task_id = task_id
        else:
            live.pop(task_id, None)
        records += 1
        offset = end
    resume = reserved if reserved is not None else last_task_id
    return Recovery(tuple(live.values()), resume, offset, len(data) - offset, records)


def _read_journal(path: str) -> bytes | None:
    """
    The file's bytes (C{None} if there is none), its magic checked.

    @raise JournalCorrupt: it is not a journal, or cannot be read.
    """
    if os.path.exists(path) and not os.path.isfile(path):
        raise JournalCorrupt(path, 0, "not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise JournalCorrupt(path, 0, f"cannot read: {e.strerror}") from None
    if not (MAGIC.startswith(data) if len(data) < len(MAGIC) else data.startswith(MAGIC)):
        raise JournalCorrupt(path, 0, "not a Quicx journal (bad magic)")
    return data


@frozen
class Repair:
    """
    What L{repair} did.

    @ivar damaged: the damaged stretches dropped, as (offset, length).
    @ivar kept: how many good records the repaired journal keeps.
    @ivar moved_to: where the original file now is (C{""}: it needed no repair).
    """

    damaged: tuple[tuple[int, int], ...]
    kept: int
    moved_to: str


def repair(path: str, now: float) -> Repair:
    """
    Keep every good record of a damaged journal: the original file is renamed
    to C{PATH.damaged-TIMESTAMP} (nothing is deleted) and a journal of its good
    records, in order, takes its place.  A torn tail is dropped too.

    A dropped SUBMIT loses that task; a dropped outcome runs its task again:
    at-least-once, as after any crash.

    @raise JournalCorrupt: the file is not a journal at all.
    @raise OSError: the files could not be written.
    """
    data = _read_journal(path)
    if data is None or len(data) < len(MAGIC):
        raise JournalCorrupt(path, 0, "no journal to repair")
    view = memoryview(data)
    kept: list[bytes] = [MAGIC]
    damaged: list[tuple[int, int]] = []
    offset = len(MAGIC)
    while offset < len(data):
        end, problem = _record_at(view, offset)
        if not problem:
            kept.append(data[offset:end])
            offset = end
            continue
        following = _good_record_after(data, offset)
        stop = len(data) if following is None else following
        damaged.append((offset, stop - offset))
        offset = stop
    if not damaged:
        return Repair((), len(kept) - 1, "")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    moved_to = f"{path}.damaged-{stamp}"
    temporary = path + ".repair"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        _write_all(fd, b"".join(kept))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.link(path, moved_to)
    os.replace(temporary, path)
    _sync_directory(path)
    return Repair(tuple(damaged), len(kept) - 1, moved_to)


# -- writing --------------------------------------------------------------------


@define
class JournalStats:
    """Figures for C{quicx status}."""

    file_bytes: int = 0
    live_bytes: int = 0
    syncs: int = 0
    compactions: int = 0


class Journal(Service):
    """
    Appends records to the journal file on a thread of its own.

    Bind it to its owner with L{bind} before it starts.  For each SUBMIT the
    owner calls L{record_submit}; when that returns C{False} the task may not
    be acknowledged yet (policy C{always}: its record is not synced; any
    policy: its id is past the last durable reservation), and the journal
    later calls the owner's C{accept} with the tasks once they may be, or
    C{refuse} with them, the reason, and whether a record of theirs may
    survive, when the write failed.

    @ivar broken: why the journal stopped writing (a failed write), or C{""}.
    """

    log = Logger(namespace="quicx.journal")

    def __init__(
        self,
        path: str,
        policy: FsyncPolicy,
        reactor: Any,
        compact_factor: float = DEFAULT_COMPACT_FACTOR,
        compact_min_size: int = DEFAULT_COMPACT_MIN_SIZE,
        id_block: int = ID_BLOCK,
    ) -> None:
        self.path = path
        self.policy = policy
        self.reactor = reactor
        self.compact_factor = compact_factor
        self.compact_min_size = compact_min_size
        self.id_block = id_block
        self.stats = JournalStats()
        self.broken = ""
        self._fd = -1
        self._buffer: list[bytes] = []
        self._unsynced: list[Task] = []
        self._flush_call: Any = None
        self._job: Deferred[None] | None = None
        self._syncing = False
        self._dirty = False
        self._closed = False
        self._threads = ThreadPool(1, 1, name="quicx-journal")
        self._sync_loop: LoopingCall | None = None
        # Task ids: the last one issued, the furthest one reserved, and how
        # many steps of the counter are reserved durably past the last one
        # issued (negative: tasks wait), or reserved in records not yet written.
        self._last_id = 0
        self._reserved_id = 0
        self._durable_steps = 0
        self._pending_steps = 0
        self._accept: Callable[[list[Task]], None] = _unbound
        self._refuse: Callable[[list[Task], str, bool], None] = _unbound
        self._snapshot: Callable[[], Iterable[tuple[int, bytes, bytes]]] = _unbound

    def bind(
        self,
        accept: Callable[[list[Task]], None],
        refuse: Callable[[list[Task], str, bool], None],
        snapshot: Callable[[], Iterable[tuple[int, bytes, bytes]]],
    ) -> None:
        """
        Attach the owner: C{snapshot()} returns the live tasks as (id, type,
        payload), oldest first, for compaction.
        """
        self._accept, self._refuse, self._snapshot = accept, refuse, snapshot

    def open(self, recovery: Recovery) -> None:
        """
        Open the file for appending, cutting any torn tail L{recover} found,
        and reserve the first block of task ids.
        """
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._last_id = recovery.last_task_id
        self._reserved_id = id_after(self._last_id, self.id_block)
        try:
            if recovery.valid_length < len(MAGIC):
                os.ftruncate(fd, 0)
                os.write(fd, MAGIC)
                length = len(MAGIC)
            else:
                os.ftruncate(fd, recovery.valid_length)
                length = recovery.valid_length
            os.lseek(fd, 0, os.SEEK_END)
            length += os.write(fd, encode_reserve(self._reserved_id))
            os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd
        self._durable_steps = self.id_block
        self.stats.file_bytes = length
        self.stats.live_bytes = sum(
            submit_record_size(len(t.task_type), len(t.payload)) for t in recovery.tasks
        )

    # -- the owner's calls -------------------------------------------------------

    def record_submit(self, task: Task, payload: bytes) -> bool:
        """
        Append C{task}'s SUBMIT record (its id is the next the owner issued).

        @return: whether the owner may acknowledge it now; if not, the journal
            calls C{accept} or C{refuse} later.
        """
        self._durable_steps -= id_steps(self._last_id, task.task_id)
        self._last_id = task.task_id
        if self._durable_steps + self._pending_steps < self.id_block // 2:
            self._reserve()
        record = encode_submit(task.task_id, task.task_type, payload)
        self.stats.live_bytes += len(record)
        self._append(record)
        if self.policy is FsyncPolicy.ALWAYS or self._durable_steps < 0:
            self._unsynced.append(task)
            return False
        return True

    def _reserve(self) -> None:
        """Append a reservation of the next block of ids (synced when written)."""
        target = id_after(self._last_id, self.id_block)
        self._pending_steps += id_steps(self._reserved_id, target)
        self._reserved_id = target
        self._append(encode_reserve(target))

    def record_outcome(self, task: Task, failed: bool) -> None:
        self.stats.live_bytes -= submit_record_size(len(task.task_type), task.size)
        self._append(encode_failed(task.task_id) if failed else encode_done(task.task_id))

    def _append(self, record: bytes) -> None:
        if self._closed:
            # After stop: the record is lost, and the task comes back after
            # a restart -- at-least-once, as documented.
            return
        self._buffer.append(record)
        if self._flush_call is None and self._job is None:
            self._flush_call = self.reactor.callLater(0, self._flush)

    # -- the writer --------------------------------------------------------------

    def _flush(self) -> None:
        """Hand everything buffered to the writer thread as one job."""
        self._flush_call = None
        if self._job is not None or not self._buffer:
            return
        records, self._buffer = self._buffer, []
        tasks, self._unsynced = self._unsynced, []
        reserved, self._pending_steps = self._pending_steps, 0
        if self._compaction_due():
            snapshot = [MAGIC, encode_reserve(self._reserved_id)]
            snapshot += [encode_submit(*task) for task in self._snapshot()]
            self.log.info(
                "compacting journal {path}: {size} bytes, {live} live tasks",
                path=self.path,
                size=self.stats.file_bytes,
                live=len(snapshot) - 2,
            )
            job = deferToThreadPool(self.reactor, self._threads, self._compact, snapshot)
            self.stats.compactions += 1
        else:
            # A reservation is synced whatever the policy: ids are never reused.
            sync = self.policy is FsyncPolicy.ALWAYS or self._closed or reserved > 0
            job = deferToThreadPool(self.reactor, self._threads, self._write, records, sync)
        self._job = job
        job.addCallbacks(self._written, self._write_failed, (tasks, reserved), None, (tasks,))

    def _compaction_due(self) -> bool:
        stats = self.stats
        return (
            stats.file_bytes >= self.compact_min_size
            and stats.file_bytes >= self.compact_factor * stats.live_bytes
        )

    def _write(self, records: list[bytes], sync: bool) -> int:
        """
        (Writer thread.) Append C{records}, sync them if C{sync}; the file's
        size.  If that fails, cut the file back to where it was, so that
        nothing of these records survives.

        @raise JournalInDoubt: the write failed, and so did the cut.
        """
        fd = self._fd
        start = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            _write_all(fd, b"".join(records))
            if sync:
                os.fdatasync(fd)
        except OSError as e:
            try:
                os.ftruncate(fd, start)
                os.lseek(fd, start, os.SEEK_SET)
                os.fsync(fd)
            except OSError as cut:
                raise JournalInDoubt(
                    e.errno, f"{e.strerror}; cutting it back failed too: {cut.strerror}"
                ) from e
            raise
        return os.lseek(fd, 0, os.SEEK_CUR)

    def _compact(self, snapshot: list[bytes]) -> int:
        """
        (Writer thread.) Write the live tasks to a new file and swap it in.

        The snapshot reflects every record appended so far, so none of them
        needs to follow it.
        """
        data = b"".join(snapshot)
        temporary = self.path + ".compact"
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            _write_all(fd, data)
            os.fsync(fd)
            os.replace(temporary, self.path)
            _sync_directory(self.path)
        except OSError:
            os.close(fd)
            raise
        os.close(self._fd)
        self._fd = fd
        return len(data)

    def _written(self, file_bytes: int, tasks: list[Task], reserved: int) -> None:
        self._job = None
        stats = self.stats
        stats.file_bytes = file_bytes
        self._durable_steps += reserved
        if self.policy is FsyncPolicy.ALWAYS or reserved:
            stats.syncs += 1
        if self.policy is not FsyncPolicy.ALWAYS:
            self._dirty = True
        if tasks:
            self._accept(tasks)
        if self._buffer:
            self._flush()

    def _write_failed(self, failure: Failure, tasks: list[Task]) -> None:
        self._job = None
        self._break(failure, tasks)

    def _break(self, failure: Failure, tasks: list[Task]) -> None:
        """Stop writing for good; refuse the tasks waiting for the journal."""
        self.broken = failure.getErrorMessage()
        self._closed = True
        in_doubt = failure.check(JournalInDoubt) is not None
        self.log.critical(
            "journal {path}: write failed: {reason}; refusing new tasks until restart",
            path=self.path,
            reason=self.broken,
        )
        tasks += self._unsynced
        self._buffer, self._unsynced = [], []
        if tasks:
            self._refuse(tasks, self.broken, in_doubt)

    def _sync_every_second(self) -> None:
        if not self._dirty or self._syncing or self._closed:
            return
        self._dirty = False
        self._syncing = True
        d = deferToThreadPool(self.reactor, self._threads, os.fdatasync, self._fd)
        d.addCallbacks(self._synced, self._sync_failed)

    def _synced(self, _: None) -> None:
        self._syncing = False
        self.stats.syncs += 1

    def _sync_failed(self, failure: Failure) -> None:
        self._syncing = False
        self._break(failure, [])

    # -- service -------------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._threads.start()
        if self.policy is FsyncPolicy.EVERYSEC:
            self._sync_loop = LoopingCall(self._sync_every_second)
            self._sync_loop.clock = self.reactor
            self._sync_loop.start(1.0, now=False)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        """Write and sync what is buffered, whatever the policy, and close."""
        if self._sync_loop is not None and self._sync_loop.running:
            self._sync_loop.stop()
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        self._closed = True
        try:
            while self._job is not None or (self._buffer and not self.broken):
                if self._job is None:
                    self._flush()
                await self._job
            await deferToThreadPool(self.reactor, self._threads, os.close, self._fd)
            self._fd = -1
        finally:
            self._threads.stop()


def _unbound(*args: object) -> Any:
    raise RuntimeError("Journal.bind() was not called")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_directory(path: str) -> None:
    """Make a rename in C{path}'s directory durable."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
