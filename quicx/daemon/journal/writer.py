"""The journal writer: appends on a thread of its own, group commit, compaction."""

from __future__ import annotations

import errno
import os
from time import perf_counter
from typing import Any

from attrs import define
from twisted.application.internet import TimerService
from twisted.internet.defer import Deferred, fail, maybeDeferred, succeed
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from quicx.daemon.journal.interface import (
    GroupEntry,
    IJournal,
    IJournalOwner,
    KeptEntry,
    ParentEntry,
    Record,
    SavedState,
    Snapshot,
)
from quicx.daemon.journal.records import (
    DEFAULT_COMPACT_FACTOR,
    DEFAULT_COMPACT_MIN_SIZE,
    FORMAT,
    ID_BLOCK,
    MAGIC,
    FsyncPolicy,
    JournalInDoubt,
    Recovery,
    encode_attempts,
    encode_dead,
    encode_deadline,
    encode_fired,
    encode_forgotten,
    encode_group,
    encode_key,
    encode_moved,
    encode_outcome,
    encode_parent,
    encode_pause,
    encode_replace,
    encode_replay,
    encode_reserve,
    encode_result,
    encode_retry,
    encode_saved,
    encode_schedule,
    encode_shared,
    encode_submit2,
    encode_submit3,
    encode_unschedule,
    id_after,
    id_steps,
    result_record_size,
    submit2_record_size,
)
from quicx.daemon.journal.recovery import sync_directory, write_all
from quicx.daemon.observe.telemetry import JOURNAL_BUCKETS, Histogram
from quicx.daemon.periodic import every
from quicx.daemon.replication.interfaces import IReplica
from quicx.net.twisted_types import Service

INLINE_WRITE = 8 * 1024
"""
An unsynced batch up to this many bytes is written on the reactor's thread:
a reactor turn's few records at low load, for which the hop to the writer
thread and back cost more than the write.  Under a load the disk cannot
keep up with (when the kernel may hold a write back), batches grow past it
and go to the thread.
"""


@define
class JournalStats:
    """
    Figures for C{quicx status}.

    @ivar live_bytes: about what a compaction would write now: the live
        tasks' SUBMIT records, the kept outcomes, and the keys, pauses and
        shared data the last compaction kept.  Compaction is due when the file is
        C{compact_factor} times it.
    """

    file_bytes: int = 0
    live_bytes: int = 0
    syncs: int = 0
    compactions: int = 0


@implementer(IJournal)
class Journal(Service):
    """
    Appends records to the journal file on a thread of its own.

    Bind it to its owner with L{bind} before it starts.  For each SUBMIT the
    owner calls L{record_submit}; when that returns C{False} the task may not
    be acknowledged yet (policy C{always}: its record is not synced; any
    policy: its id is past the last durable reservation), and the journal
    later calls the owner's C{accepted} with the tasks once they may be, or
    C{refused} with them, the reason, and whether a record of theirs may
    survive, when the write failed.

    @ivar broken: why the journal stopped writing (a failed write), or C{""}.
    @ivar append_latency: how long each batch of records took to write (a
        group commit's C{write}, its sync left out).
    @ivar fsync_latency: how long each sync of appended records took (a
        group commit's, or the once-a-second one).  Both are observed by the
        writer thread alone and read from the reactor's: a reading may miss
        the observation under way, never see a count go down.
    @ivar replica: the primary's side of replication, or C{None} (no
        replication, and no cost): each batch's bytes are shipped to it, and
        the batch's job is done once written here and shipped (L{_replicate}).
    """

    log = Logger()

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
        self.append_latency = Histogram(JOURNAL_BUCKETS)
        self.fsync_latency = Histogram(JOURNAL_BUCKETS)
        self._fd = -1
        self._buffer: list[bytes] = []
        self._unsynced: list[Record] = []
        # Callers of durable(): for the buffered records, and for the job in flight.
        self._waiters: list[Deferred[None]] = []
        self._job_waiters: list[Deferred[None]] = []
        self._flush_call: Any = None
        # The write or compaction in flight (its result goes to its callbacks).
        self._job: Deferred[Any] | None = None
        self._syncing = False
        self._dirty = False
        self._closed = False
        self._threads = ThreadPool(1, 1, name="quicx-journal")
        self._sync_timer: TimerService | None = None
        # Record ids: the last one issued, the furthest one reserved, and how
        # many steps of the counter are reserved durably past the last one
        # issued (negative: tasks wait), or reserved in records not yet written.
        self._last_id = 0
        self._reserved_id = 0
        self._durable_steps = 0
        self._pending_steps = 0
        self._owner: IJournalOwner = _Unbound()
        # Whether an OK and durable() wait for the job (fsync = always, or sync replication).
        self._holds = policy is FsyncPolicy.ALWAYS
        self._replica: IReplica | None = None
        # The buffer's records shipped already (its first _shipped_to), and their ships.
        self._shipped_to = 0
        self._ships: list[Deferred[None]] = []

    @property
    def replica(self) -> IReplica | None:
        return self._replica

    @replica.setter
    def replica(self, replica: IReplica | None) -> None:
        self._replica = replica
        self._holds = self.policy is FsyncPolicy.ALWAYS or bool(replica and replica.sync)

    def bind(self, owner: IJournalOwner) -> None:
        """Attach the queue, before the journal starts."""
        self._owner = owner

    def open(self, recovery: Recovery) -> None:
        """
        Open the file for appending, cutting any torn tail L{recover} found,
        and reserve the first block of task ids.  A file of the previous
        release's format is first copied into this one's (a new file swapped
        in, as compaction does: a crash at any moment leaves one or the other).
        """
        if recovery.format != FORMAT and recovery.valid_length >= len(MAGIC):
            self._upgrade(recovery.valid_length)
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
            submit2_record_size(t.queue or "", len(t.task_type), t.key, t.fairness, len(t.payload))
            for t in recovery.tasks
        )
        self.stats.live_bytes += sum(
            len(encode_shared(name, version, data))
            for name, (version, data) in recovery.shared.items()
        )
        self.stats.live_bytes += sum(result_record_size(len(e.data)) for e in recovery.kept)

    def _upgrade(self, valid_length: int) -> None:
        """Rewrite an older format's good records under this format's magic."""
        with open(self.path, "rb") as old:
            data = old.read(valid_length)
        temporary = self.path + ".upgrade"
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        try:
            write_all(fd, MAGIC + data[len(MAGIC) :])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, self.path)
        sync_directory(self.path)
        self.log.info(
            "journal {path} upgraded to format {number} (a previous release can no longer read it)",
            log_id="journal.upgraded",
            path=self.path,
            number=FORMAT,
        )

    # -- the owner's calls -------------------------------------------------------

    def record_submit(self, task: Record, payload: bytes) -> bool:
        """
        Append C{task}'s SUBMIT record (its id is the next the owner issued).

        @return: whether the owner may acknowledge it now; if not, the journal
            calls C{accepted} or C{refused} later.
        """
        self._durable_steps -= id_steps(self._last_id, task.task_id)
        self._last_id = task.task_id
        if self._durable_steps + self._pending_steps < self.id_block // 2:
            self._reserve()
        record = _submit_record(task, payload)
        self.stats.live_bytes += len(record)
        self._append(record)
        if task.deadline:
            self._append(encode_deadline(task.task_id, task.deadline))
        if self._holds or self._durable_steps < 0:
            self._unsynced.append(task)
            return False
        return True

    def _reserve(self) -> None:
        """Append a reservation of the next block of ids (synced when written)."""
        target = id_after(self._last_id, self.id_block)
        self._pending_steps += id_steps(self._reserved_id, target)
        self._reserved_id = target
        self._append(encode_reserve(target))

    def record_outcome(self, task: Record, outcome: str) -> None:
        self.stats.live_bytes -= submit2_record_size(
            task.queue, len(task.task_type), task.key, task.fairness, task.size
        )
        self._append(encode_outcome(task.task_id, outcome))

    def record_pause(self, queue: str, paused: bool) -> None:
        """Append a PAUSE record (written with the next group commit)."""
        self._append(encode_pause(queue, paused))

    def record_retry(self, task: Record) -> None:
        self._append(encode_retry(task.task_id, task.failures, task.due))
        if task.ended_attempts != task.failures:
            self.record_attempts(task)

    def record_dead(self, task: Record) -> None:
        dead = task.dead
        assert dead is not None
        self._append(
            encode_dead(task.task_id, dead.died_at, task.failures, dead.reason, dead.worker)
        )
        if task.ended_attempts != task.failures:
            self.record_attempts(task)

    def record_move(self, task: Record, old_queue: str) -> None:
        # Its live SUBMIT record, once rewritten at compaction, names the new queue.
        self.stats.live_bytes += len(task.queue) - len(old_queue)
        self._append(encode_moved(task.task_id, task.queue))

    def record_attempts(self, task: Record) -> None:
        self._append(encode_attempts(task.task_id, task.ended_attempts))

    def record_replay(self, task: Record) -> None:
        self._append(encode_replay(task.task_id))

    def record_replace(self, task: Record, payload: bytes) -> None:
        self._append(encode_replace(task.task_id, task.due, payload))

    def record_fired(self, schedule: str, fire_time: float) -> None:
        self._append(encode_fired(schedule, fire_time))

    def record_schedule(self, schedule: str, definition: bytes | None) -> None:
        if definition is None:
            self._append(encode_unschedule(schedule))
        else:
            self._append(encode_schedule(schedule, definition))

    def record_shared(self, name: str, version: int, data: bytes) -> None:
        self._append(encode_shared(name, version, data))

    def record_result(self, entry: KeptEntry) -> None:
        record = encode_result(entry)
        self.stats.live_bytes += len(record)
        self._append(record)

    def record_forgotten(self, task_id: int, size: int, evicted: bool) -> None:
        self.stats.live_bytes -= result_record_size(size)
        self._append(encode_forgotten(task_id, evicted))

    def record_parent(self, entry: ParentEntry) -> None:
        record = encode_parent(entry)
        self.stats.live_bytes += len(record)
        self._append(record)

    def record_group(self, entry: GroupEntry) -> None:
        self._append(encode_group(entry))

    def record_checkpoint(self, task_id: int, saved: SavedState) -> None:
        self._append(encode_saved(task_id, saved))

    def durable(self) -> Deferred[None] | None:
        """
        With C{fsync = always} (or sync replication): a Deferred that fires
        once every record appended so far is synced (and shipped; fails if
        the journal breaks first).  C{None} when there is nothing to wait
        for: every record is synced, or the policy does not wait for syncs.
        """
        if not self._holds or self.broken:
            return None
        waiter: Deferred[None] = Deferred()
        if self._buffer:
            self._waiters.append(waiter)
        elif self._job is not None:
            self._job_waiters.append(waiter)
        else:
            return None
        return waiter

    def snapshot_for_standby(self) -> Deferred[list[bytes]]:
        """
        The records of a journal file holding every record appended so far
        (L{snapshot_records}), for a standby that joins.  The records still
        buffered are shipped first, as a batch of their own: a flush
        boundary, so every batch shipped from now on follows the snapshot,
        and none that it holds is streamed to the standby again.
        """
        if self.broken:
            return fail(OSError(f"journal write failed: {self.broken}"))
        self._ship(self._buffer[self._shipped_to :])
        self._shipped_to = len(self._buffer)
        return succeed(snapshot_records(self._owner.snapshot(), self._reserved_id)[0])

    def _ship(self, records: list[bytes]) -> None:
        """Hand C{records} (not yet shipped) to the replica, if any, as one batch."""
        if records and self._replica is not None:
            shipped = self._replica.ship(b"".join(records))
            if shipped is not None:
                self._ships.append(shipped)

    def _replicate(self, job: Deferred[int], unshipped: list[bytes]) -> Deferred[int]:
        """Ship what the job writes (what is not yet): the job ends when both have."""
        self._ship(unshipped)
        ships, self._ships = self._ships, []
        if not ships:
            return job
        return Deferred.fromCoroutine(_written_and_shipped(job, ships))

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
        shipped_to, self._shipped_to = self._shipped_to, 0
        tasks, self._unsynced = self._unsynced, []
        self._job_waiters, self._waiters = self._waiters, []
        reserved, self._pending_steps = self._pending_steps, 0
        if self._compaction_due():
            state = self._owner.snapshot()
            snapshot, live = snapshot_records(state, self._reserved_id)
            # What a compaction keeps is live: the remembered keys too, or a
            # file of keys alone would be compacted again at every flush.
            self.stats.live_bytes = sum(map(len, snapshot))
            self.log.info(
                "compacting journal {path}: {size} bytes, {live} live tasks",
                log_id="journal.compacting",
                path=self.path,
                size=self.stats.file_bytes,
                live=live,
            )
            job = deferToThreadPool(self.reactor, self._threads, self._compact, snapshot)
            self.stats.compactions += 1
        else:
            # A reservation is synced whatever the policy: ids are never reused.
            sync = self.policy is FsyncPolicy.ALWAYS or self._closed or reserved > 0
            if sync or sum(map(len, records)) > INLINE_WRITE:
                job = deferToThreadPool(self.reactor, self._threads, self._write, records, sync)
            else:
                # Into the page cache in microseconds: cheaper here than the
                # thread hop (a wake-up each way) for a reactor turn's batch.
                job = maybeDeferred(self._write, records, sync)
        if self._replica is not None:
            job = self._replicate(job, records[shipped_to:])
        self._job = job
        job.addCallbacks(
            self._written,
            self._write_failed,
            callbackArgs=(tasks, reserved),
            errbackArgs=(tasks,),
        )

    def _compaction_due(self) -> bool:
        stats = self.stats
        return (
            stats.file_bytes >= self.compact_min_size
            and stats.file_bytes >= self.compact_factor * stats.live_bytes
        )

    def _write(self, records: list[bytes], sync: bool) -> int:
        """
        (Writer thread; the reactor's for a small unsynced batch.) Append
        C{records}, sync them if C{sync}; the file's size.  If that fails,
        cut the file back to where it was, so that nothing of these records
        survives.

        @raise JournalInDoubt: the write failed, and so did the cut.
        """
        fd = self._fd
        start = os.lseek(fd, 0, os.SEEK_CUR)
        try:
            started = perf_counter()
            write_all(fd, b"".join(records))
            self.append_latency.observe(perf_counter() - started)
            if sync:
                self._sync(fd)
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
            write_all(fd, data)
            os.fsync(fd)
            os.replace(temporary, self.path)
            sync_directory(self.path)
        except OSError:
            os.close(fd)
            raise
        os.close(self._fd)
        self._fd = fd
        return len(data)

    def _written(self, file_bytes: int, tasks: list[Record], reserved: int) -> None:
        self._job = None
        waiters, self._job_waiters = self._job_waiters, []
        for waiter in waiters:
            waiter.callback(None)
        stats = self.stats
        stats.file_bytes = file_bytes
        self._durable_steps += reserved
        if self.policy is FsyncPolicy.ALWAYS or reserved:
            stats.syncs += 1
        if self.policy is not FsyncPolicy.ALWAYS:
            self._dirty = True
        if tasks:
            self._owner.accepted(tasks)
        if self._buffer:
            self._flush()

    def _write_failed(self, failure: Failure, tasks: list[Record]) -> None:
        self._job = None
        self._break(failure, tasks)

    def _break(self, failure: Failure, tasks: list[Record]) -> None:
        """Stop writing for good; refuse the tasks waiting for the journal."""
        self.broken = failure.getErrorMessage()
        self._closed = True
        in_doubt = failure.check(JournalInDoubt) is not None
        self.log.critical(
            "journal {path}: write failed: {reason}; refusing new tasks until restart",
            log_id="journal.broken",
            path=self.path,
            reason=self.broken,
        )
        tasks += self._unsynced
        self._buffer, self._unsynced = [], []
        self._shipped_to = 0
        waiters = self._job_waiters + self._waiters
        self._job_waiters, self._waiters = [], []
        for waiter in waiters:
            waiter.errback(Failure(OSError(f"journal write failed: {self.broken}")))
        if tasks:
            self._owner.refused(tasks, self.broken, in_doubt)

    def _sync_every_second(self) -> None:
        if not self._dirty or self._syncing or self._closed:
            return
        self._dirty = False
        self._syncing = True
        d = deferToThreadPool(self.reactor, self._threads, self._sync, self._fd)
        d.addCallbacks(self._synced, self._sync_failed)

    def _sync(self, fd: int) -> None:
        """(Writer thread.) C{fdatasync}, timed."""
        started = perf_counter()
        os.fdatasync(fd)
        self.fsync_latency.observe(perf_counter() - started)

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
            self._sync_timer = every(1.0, self._sync_every_second, self.reactor)
            self._sync_timer.startService()

    def stopService(self) -> Deferred[None]:
        super().stopService()
        return Deferred.fromCoroutine(self._close())

    async def _close(self) -> None:
        """Write and sync what is buffered, whatever the policy, and close."""
        if self._sync_timer is not None and self._sync_timer.running:
            await self._sync_timer.stopService()
        if self._flush_call is not None:
            self._flush_call.cancel()
            self._flush_call = None
        self._closed = True
        try:
            while self._job is not None or (self._buffer and not self.broken):
                if self._job is None:
                    self._flush()
                assert self._job is not None  # the buffer was not empty: _flush started one
                await self._job
            await deferToThreadPool(self.reactor, self._threads, os.close, self._fd)
            self._fd = -1
        finally:
            self._threads.stop()


def _submit_record(task: Record, payload: bytes) -> bytes:
    """
    A task's SUBMIT: format 2's; format 3's for a task with a lifecycle;
    format 4's for one whose outcome is kept, or in a group; format 5's
    for one with its producer's trace context.
    """
    extras = task.extras  # (its rare fields, read once: a plain task has none)
    if task.retries or (
        extras is not None
        and (
            extras.due
            or extras.failures
            or extras.backoff is not None
            or extras.keep_for
            or extras.group
            or extras.trace is not None
            or extras.after is not None
        )
    ):
        return encode_submit3(task, payload)
    return encode_submit2(
        task.task_id,
        task.task_type,
        payload,
        task.queue,
        task.priority,
        task.enqueued_at,
        task.key,
        task.fairness,
    )


async def _written_and_shipped(job: Deferred[int], ships: list[Deferred[None]]) -> int:
    """
    The job's file size, once its records are written here and every ship
    of them is done.  Either failing, the batch may survive elsewhere: in doubt.
    """
    try:
        size = await job
        for shipped in ships:
            await shipped
    except Exception as e:
        for shipped in ships:
            shipped.addErrback(lambda _: None)  # its failure is told once, here
        raise JournalInDoubt(errno.EIO, f"{e}; the batch was shipped to the standbys") from e
    return size


def snapshot_records(state: Snapshot, reserved_id: int) -> tuple[list[bytes], int]:
    """
    The records of a journal file that holds C{state} and nothing else,
    magic first: what a compaction writes, and what a standby starts from;
    and how many live tasks they hold.
    """
    snapshot = [MAGIC, encode_reserve(reserved_id)]
    dead: list[Record] = []
    attempted: list[Record] = []
    deadlines: list[Record] = []
    for task, payload in state.tasks:
        snapshot.append(_submit_record(task, payload))
        if task.deadline:
            deadlines.append(task)
        if task.dead is not None:
            dead.append(task)
        if task.ended_attempts != task.failures:
            attempted.append(task)
    live = len(snapshot) - 2
    snapshot += [
        encode_dead(t.task_id, t.dead.died_at, t.failures, t.dead.reason, t.dead.worker)
        for t in dead
        if t.dead is not None
    ]
    snapshot += [encode_deadline(t.task_id, t.deadline) for t in deadlines]
    # After the SUBMITs and DEADs, whose failures they correct.
    snapshot += [encode_attempts(t.task_id, t.ended_attempts) for t in attempted]
    snapshot += [encode_saved(*checkpoint) for checkpoint in state.checkpoints]
    # After the tasks: their SUBMITs join no group the file knows
    # yet, so the groups' counts stand as written.
    snapshot += [encode_group(entry) for entry in state.groups]
    snapshot += [encode_parent(entry) for entry in state.parents]
    snapshot += [encode_result(entry) for entry in state.kept]
    evicted = state.evicted
    snapshot += [encode_forgotten(i, i in evicted) for i in state.forgotten]
    snapshot += [encode_schedule(name, body) for name, body in state.schedules]
    snapshot += [encode_fired(name, when) for name, when in state.fired]
    snapshot += [encode_pause(name, True) for name in state.paused]
    snapshot += [encode_shared(*version) for version in state.shared]
    snapshot += [
        encode_key(k.queue, k.key, k.task_id, k.submitted_at, k.outcome) for k in state.keys
    ]
    return snapshot, live


@implementer(IJournalOwner)
class _Unbound:
    """The owner of a journal not yet bound: any call is a bug."""

    def accepted(self, tasks: list[Record]) -> None:
        raise RuntimeError("Journal.bind() was not called")

    def refused(self, tasks: list[Record], reason: str, in_doubt: bool) -> None:
        raise RuntimeError("Journal.bind() was not called")

    def snapshot(self) -> Snapshot:
        raise RuntimeError("Journal.bind() was not called")
