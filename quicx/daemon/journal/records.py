"""The journal's file format: the magic, the record framing, each kind's body."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Mapping
from enum import Enum

from attrs import field, frozen

from quicx.daemon.journal.interface import (
    DeadInfo,
    GroupEntry,
    KeptEntry,
    KeyEntry,
    ParentEntry,
    Record,
    SavedState,
)
from quicx.protocol.codec import MAX_TASK_ID

MAGIC_V1 = b"QUICXJ1\n"
"""The previous release's journals: kinds 1 to 5 only."""
MAGIC_V2 = b"QUICXJ2\n"
"""The release of protocol v2 part 1: kinds 1 to 9."""
MAGIC_V3 = b"QUICXJ3\n"
"""The release of protocol v2 part 2: kinds 1 to 16."""
MAGIC_V4 = b"QUICXJ4\n"
"""The release of protocol v2 part 3: kinds 1 to 21."""
MAGIC_V5 = b"QUICXJ5\n"
"""Format 5: format 4, and a task's trace context (SUBMIT5, kind 22)."""
MAGIC = b"QUICXJ6\n"
"""
This release's: kinds 1 to 28, the workflows' (dependencies, debounce,
expiry, checkpoints, bulk moves) from 23 (a previous release refuses the file).
"""
MAGICS = {MAGIC_V1: 1, MAGIC_V2: 2, MAGIC_V3: 3, MAGIC_V4: 4, MAGIC_V5: 5, MAGIC: 6}
FORMAT = 6
RECORD_HEADER = struct.Struct(">II")
ID = struct.Struct(">I")
SUBMIT_HEAD = struct.Struct(">BIB")
SUBMIT2_HEAD = struct.Struct(">BIBQBBBB")
"""Kind, id, priority, enqueued ms, then the lengths of queue, type, key, fairness key."""
KEY_HEAD = struct.Struct(">BIQBBB")
"""Kind, id, submitted ms, outcome code, then the lengths of queue and key."""
SUBMIT3_HEAD = struct.Struct(">BIBQQHHBBBBB")
"""
Kind, id, priority, enqueued ms, due ms (0: not delayed), retries, failures,
then the lengths of queue, type, key, fairness key and backoff (0 or 10).
"""
SUBMIT4_HEAD = struct.Struct(">BIBQQHHQIBBBBB")
"""
SUBMIT3's fields and, before the lengths, how long its outcome is kept
(ms; 0: as the queue says) and its group (0: none).
"""
SUBMIT5_HEAD = struct.Struct(">BIBQQHHQIBBBBBB")
"""
SUBMIT4's fields and, after the lengths, the length of its trace context
(the producer's, 26 to 255 bytes: L{quicx.protocol.tracecontext.trace_problem}),
which comes after the backoff.
"""
SUBMIT6_HEAD = struct.Struct(">BIBQQHHQIBBBBBBBIB")
"""
SUBMIT5's fields (its trace context's length 0: none) and, after them, what
the task waits for: its policy on a parent's failure, the group it is the
callback of (0: none) and how many parents it names, whose 4-byte ids come
after the trace context, before the payload.
"""
PARENT_HEAD = struct.Struct(">BIIBB")
"""Kind, task id, group (0: a parent's outcome), outcome state, result kind; then the data."""
RESULT_HEAD = struct.Struct(">BIBBQ")
"""
Kind, id, outcome state, result kind (with L{AUTOMATIC}), expires ms; then
the data.  Forgotten (state L{FORGOTTEN}): its result kind is 1 when it
was evicted, 0 when it expired.
"""
AUTOMATIC = 0x80
"""A RESULT's result-kind flag: the outcome was kept though nobody asked."""
GROUP_HEAD = struct.Struct(">BIBQQIIII")
"""Kind, group id, phase, opened ms, finished ms, members, done, failed, cancelled."""
RETRY_HEAD = struct.Struct(">BIHQ")
"""Kind, id, failures, due ms."""
ATTEMPTS_HEAD = struct.Struct(">BII")
"""Kind, id, deliveries that ended (when not its failures)."""
DEAD_HEAD = struct.Struct(">BIQHHB")
"""Kind, id, died ms, failures, then the lengths of reason and worker."""
FIRED_HEAD = struct.Struct(">BQB")
"""Kind, fire time ms, then the length of the schedule's name."""
SHARED_HEAD = struct.Struct(">BIB")
"""Kind, version (0: deleted), then the length of the name."""
BACKOFF = struct.Struct(">BIIB")
SAVED_HEAD = struct.Struct(">BIQB")
"""Kind, id, saved ms, the state's kind (a result's); then the state."""
DEADLINE_HEAD = struct.Struct(">BIQ")
"""Kind, id, the task's deadline to start in ms (0: it expired: its outcome)."""
REPLACE_HEAD = struct.Struct(">BIQ")
"""Kind, id, due ms (0: not delayed); then the payload that replaces the task's."""

KIND_SUBMIT = 1
KIND_DONE = 2
KIND_FAILED = 3
KIND_CHECKPOINT = 4
KIND_RESERVE = 5
KIND_SUBMIT2 = 6
KIND_CANCELLED = 7
KIND_PAUSE = 8
KIND_KEY = 9
KIND_SUBMIT3 = 10
KIND_RETRY = 11
KIND_DEAD = 12
KIND_REPLAY = 13
KIND_FIRED = 14
KIND_SCHEDULE = 15
KIND_UNSCHEDULE = 16
KIND_SHARED = 18
KIND_RESULT = 17
KIND_GROUP = 19
KIND_SUBMIT4 = 20
KIND_ATTEMPTS = 21
KIND_SUBMIT5 = 22
KIND_SUBMIT6 = 23
KIND_PARENT = 24
# A task's deadline to start (and its expiry), a debounce's new payload.
KIND_DEADLINE = 25
KIND_REPLACE = 26
KIND_TASK_CHECKPOINT = 27
KIND_MOVED = 28
KINDS_V1 = frozenset({KIND_SUBMIT, KIND_DONE, KIND_FAILED, KIND_CHECKPOINT, KIND_RESERVE})
KINDS = KINDS_V1 | {
    KIND_SUBMIT2,
    KIND_CANCELLED,
    KIND_PAUSE,
    KIND_KEY,
    KIND_SUBMIT3,
    KIND_RETRY,
    KIND_DEAD,
    KIND_REPLAY,
    KIND_FIRED,
    KIND_SCHEDULE,
    KIND_UNSCHEDULE,
    KIND_SHARED,
    KIND_RESULT,
    KIND_GROUP,
    KIND_SUBMIT4,
    KIND_ATTEMPTS,
    KIND_SUBMIT5,
    KIND_SUBMIT6,
    KIND_PARENT,
    KIND_DEADLINE,
    KIND_REPLACE,
    KIND_TASK_CHECKPOINT,
    KIND_MOVED,
}
OUTCOME_KINDS = {"done": KIND_DONE, "failed": KIND_FAILED, "cancelled": KIND_CANCELLED}
OUTCOME_CODES = {"done": 1, "failed": 2, "cancelled": 3, "expired": 7}
OUTCOME_NAMES = {code: name for name, code in OUTCOME_CODES.items()}
FORGOTTEN = 5
"""A RESULT record's state when the outcome is forgotten (OUTCOME's I{expired})."""

ID_BLOCK = 1 << 16
"""Task ids reserved at a time; a restart skips at most this many."""

MAX_BODY = SUBMIT6_HEAD.size + 5 * 255 + BACKOFF.size + 63 * 4 + (1 << 20)
"""The longest body a record can have: the longest queue, type and keys and a 1 MiB payload."""
MAX_SHARED_DATA = 1 << 20
"""The most data a SHARED record carries (C{[shared] max_size}'s bound): it fits C{MAX_BODY}."""

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
    """A format-1 SUBMIT (read, no longer written: tests build older journals with it)."""
    return _frame(SUBMIT_HEAD.pack(KIND_SUBMIT, task_id, len(task_type)) + task_type + payload)


def encode_submit2(
    task_id: int,
    task_type: bytes,
    payload: bytes,
    queue: str,
    priority: int,
    enqueued_at: float,
    key: bytes | None,
    fairness: bytes | None,
) -> bytes:
    """
    A version-2 SUBMIT: the task with its queue, priority, enqueue time and
    keys (an empty key is none).  Every fixed-size field comes first, so
    that the hot path packs one struct and concatenates.
    """
    name = queue.encode("ascii")
    key = key or b""
    fairness = fairness or b""
    return _frame(
        SUBMIT2_HEAD.pack(
            KIND_SUBMIT2,
            task_id,
            priority,
            int(enqueued_at * 1000),
            len(name),
            len(task_type),
            len(key),
            len(fairness),
        )
        + name
        + task_type
        + key
        + fairness
        + payload
    )


def encode_submit3(task: Record, payload: bytes) -> bytes:
    """
    A SUBMIT of C{task}, a task with a lifecycle: delayed until its C{due}
    (0: not), its retries and backoff, the failures it has had (a task
    without any is written as L{encode_submit2}, as short as before).  A
    task whose outcome is kept C{keep_for} seconds, or that is a member of a
    C{group}, takes format 4's record (SUBMIT4), which adds them; one with
    its producer's C{trace} context, format 5's (SUBMIT5), which adds it;
    one that waits for others (C{after}), SUBMIT6, which adds what it waits for.
    """
    name = task.queue.encode("ascii")
    task_type, key, fairness = task.task_type, task.key or b"", task.fairness or b""
    backoff, keep_for, group, trace = task.backoff, task.keep_for, task.group, task.trace
    packed = b"" if backoff is None else BACKOFF.pack(*backoff)
    lengths = (len(name), len(task_type), len(key), len(fairness), len(packed))
    head = (
        task.task_id,
        task.priority,
        int(task.enqueued_at * 1000),
        round(task.due * 1000),
        task.retries,
        task.failures,
    )
    after = task.after
    if after is not None:
        packed_head = SUBMIT6_HEAD.pack(
            KIND_SUBMIT6,
            *head,
            round(keep_for * 1000),
            group,
            *lengths,
            len(trace or b""),
            after.policy,
            after.group,
            len(after.parents),
        )
        packed += (trace or b"") + struct.pack(f">{len(after.parents)}I", *after.parents)
    elif trace is not None:
        packed_head = SUBMIT5_HEAD.pack(
            KIND_SUBMIT5, *head, round(keep_for * 1000), group, *lengths, len(trace)
        )
        packed += trace
    elif keep_for or group:
        packed_head = SUBMIT4_HEAD.pack(
            KIND_SUBMIT4, *head, round(keep_for * 1000), group, *lengths
        )
    else:
        packed_head = SUBMIT3_HEAD.pack(KIND_SUBMIT3, *head, *lengths)
    return _frame(packed_head + name + task_type + key + fairness + packed + payload)


def encode_result(entry: KeptEntry) -> bytes:
    """A kept outcome (written after its task's outcome record)."""
    kind = entry.kind | AUTOMATIC if entry.automatic else entry.kind
    return _frame(
        RESULT_HEAD.pack(
            KIND_RESULT, entry.task_id, entry.state, kind, round(entry.expires_at * 1000)
        )
        + entry.data
    )


def encode_forgotten(task_id: int, evicted: bool = False) -> bytes:
    """
    A kept outcome forgotten (a RESULT of state expired: its id is
    remembered as such), C{evicted} before its time or not.
    """
    return _frame(RESULT_HEAD.pack(KIND_RESULT, task_id, FORGOTTEN, int(evicted), 0))


def result_record_size(size: int) -> int:
    """The bytes a RESULT record of C{size} bytes of data takes in the file."""
    return RECORD_HEADER.size + RESULT_HEAD.size + size


def encode_parent(entry: ParentEntry) -> bytes:
    """An outcome a waiting task needs (see L{ParentEntry})."""
    return _frame(
        PARENT_HEAD.pack(KIND_PARENT, entry.task_id, entry.group, entry.state, entry.kind)
        + entry.data
    )


def encode_group(entry: GroupEntry) -> bytes:
    """A group's state: its phase (3: forgotten) and its counts."""
    return _frame(
        GROUP_HEAD.pack(
            KIND_GROUP,
            entry.group_id,
            entry.phase,
            int(entry.opened_at * 1000),
            int(entry.finished_at * 1000),
            entry.members,
            entry.done,
            entry.failed,
            entry.cancelled,
        )
    )


def encode_retry(task_id: int, failures: int, due: float) -> bytes:
    """A failed attempt of a live task: it waits until C{due} for its next."""
    return _frame(RETRY_HEAD.pack(KIND_RETRY, task_id, failures, round(due * 1000)))


def encode_attempts(task_id: int, attempts: int) -> bytes:
    """
    A live task's deliveries that ended, written when they are not its
    failures (a worker lost, a timeout, a replay): without one, a task's
    SUBMIT, RETRY or DEAD record's failures are its attempts.
    """
    return _frame(ATTEMPTS_HEAD.pack(KIND_ATTEMPTS, task_id, min(attempts, 0xFFFFFFFF)))


def encode_dead(task_id: int, died_at: float, failures: int, reason: str, worker: str) -> bytes:
    """A task moved to its queue's dead-letter set."""
    text = reason.encode("utf-8")[:0xFFFF]
    who = worker.encode("utf-8")[:255]
    return _frame(
        DEAD_HEAD.pack(KIND_DEAD, task_id, int(died_at * 1000), failures, len(text), len(who))
        + text
        + who
    )


def encode_saved(task_id: int, saved: SavedState) -> bytes:
    """A live task's last checkpoint (replacing any before it)."""
    kind, data = saved.state
    return _frame(
        SAVED_HEAD.pack(KIND_TASK_CHECKPOINT, task_id, round(saved.saved_at * 1000), kind) + data
    )


def encode_replay(task_id: int) -> bytes:
    """A dead task put back in its queue, its failures reset."""
    return _frame(bytes((KIND_REPLAY,)) + ID.pack(task_id))


def encode_moved(task_id: int, queue: str) -> bytes:
    """A live task moved to queue C{queue} (a bulk action's move), keeping its id."""
    name = queue.encode("ascii")
    return _frame(bytes((KIND_MOVED,)) + ID.pack(task_id) + bytes((len(name),)) + name)


def encode_fired(schedule: str, fire_time: float) -> bytes:
    """Schedule C{schedule} fired for C{fire_time} (its task's SUBMIT precedes this)."""
    name = schedule.encode("ascii")
    return _frame(FIRED_HEAD.pack(KIND_FIRED, int(fire_time * 1000), len(name)) + name)


def encode_schedule(schedule: str, definition: bytes) -> bytes:
    """A schedule added at run time: C{definition} is its SCHEDULE message's payload."""
    name = schedule.encode("ascii")
    return _frame(bytes((KIND_SCHEDULE, len(name))) + name + definition)


def encode_unschedule(schedule: str) -> bytes:
    name = schedule.encode("ascii")
    return _frame(bytes((KIND_UNSCHEDULE, len(name))) + name)


def encode_shared(name: str, version: int, data: bytes) -> bytes:
    """Version C{version} of shared data C{name} is C{data}; version 0: C{name} was deleted."""
    encoded = name.encode("ascii")
    return _frame(SHARED_HEAD.pack(KIND_SHARED, version, len(encoded)) + encoded + data)


def encode_outcome(task_id: int, outcome: str) -> bytes:
    """DONE, FAILED or CANCELLED; or expired (a DEADLINE of 0)."""
    if outcome == "expired":
        return encode_deadline(task_id, 0.0)
    return _frame(bytes((OUTCOME_KINDS[outcome],)) + ID.pack(task_id))


def encode_deadline(task_id: int, deadline: float) -> bytes:
    """A task's deadline to start (written after its SUBMIT); 0: it expired."""
    return _frame(DEADLINE_HEAD.pack(KIND_DEADLINE, task_id, round(deadline * 1000)))


def encode_replace(task_id: int, due: float, payload: bytes) -> bytes:
    """A debounced SUBMIT's payload replaced a live task's, which is due at C{due} (0: now)."""
    return _frame(REPLACE_HEAD.pack(KIND_REPLACE, task_id, round(due * 1000)) + payload)


def encode_pause(queue: str, paused: bool) -> bytes:
    name = queue.encode("ascii")
    return _frame(bytes((KIND_PAUSE, int(paused), len(name))) + name)


def encode_key(queue: str, key: bytes, task_id: int, submitted_at: float, outcome: str) -> bytes:
    """A remembered idempotency key of a finished task (written at compaction)."""
    name = queue.encode("ascii")
    return _frame(
        KEY_HEAD.pack(
            KIND_KEY, task_id, int(submitted_at * 1000), OUTCOME_CODES[outcome], len(name), len(key)
        )
        + name
        + key
    )


def encode_checkpoint(last_task_id: int) -> bytes:
    """A CHECKPOINT (read, no longer written: tests build older journals with it)."""
    return _frame(bytes((KIND_CHECKPOINT,)) + ID.pack(last_task_id))


def encode_reserve(task_id: int) -> bytes:
    return _frame(bytes((KIND_RESERVE,)) + ID.pack(task_id))


def id_after(task_id: int, steps: int) -> int:
    """The id C{steps} after C{task_id}, as the counter counts (1 to 2**32 - 1)."""
    return (task_id - 1 + steps) % MAX_TASK_ID + 1


def id_steps(start: int, end: int) -> int:
    """How many steps of the id counter lead from C{start} to C{end}."""
    return (end - start) % MAX_TASK_ID


def submit2_record_size(
    queue: str, type_length: int, key: bytes | None, fairness: bytes | None, payload_length: int
) -> int:
    """The bytes a version-2 SUBMIT record takes in the file."""
    return (
        RECORD_HEADER.size
        + SUBMIT2_HEAD.size
        + len(queue)
        + type_length
        + len(key or b"")
        + len(fairness or b"")
        + payload_length
    )


@frozen
class RecoveredTask:
    """
    A live task as the journal kept it.  A record of the previous format
    has no queue, priority or enqueue time (C{None}: the daemon's default
    queue, that queue's priority, the time of recovery).  C{attempts}: its
    deliveries that ended (one cut short by the daemon's own stop is not).
    """

    task_id: int
    task_type: bytes
    payload: bytes
    queue: str | None = None
    priority: int | None = None
    enqueued_at: float | None = None
    key: bytes | None = None
    fairness: bytes | None = None
    due: float = 0.0
    retries: int = 0
    failures: int = 0
    backoff: tuple[int, int, int, int] | None = None
    dead: DeadInfo | None = None
    keep_for: float = 0.0
    group: int = 0
    attempts: int = 0
    trace: bytes | None = None
    checkpoint: SavedState | None = None
    after: tuple[int, int, tuple[int, ...]] | None = None
    """What it waits for: its policy, its group (0: none) and its parents."""
    deadline: float = 0.0


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
    @ivar paused: the queues paused when the journal was written.
    @ivar keys: the remembered idempotency keys of finished tasks.
    @ivar format: 1 to 3 for a previous release's file, 4 for this one's.
    @ivar fired: each schedule's last fire time.
    @ivar schedules: the schedules added at run time and not removed: their
        SCHEDULE payloads by name.
    @ivar shared: each shared-data name's last version and its data.
    @ivar kept: the kept outcomes, in the order they were kept.
    @ivar forgotten: the ids of kept outcomes since forgotten, oldest first.
    @ivar evicted: those of C{forgotten} evicted before their time.
    @ivar groups: the groups not forgotten.
    @ivar last_group_id: the highest group id the journal names.
    @ivar parents: the outcomes the waiting tasks need (PARENT records, and
        the outcomes of parents whose PARENT record a crash cut off).
    """

    tasks: tuple[RecoveredTask, ...]
    last_task_id: int
    valid_length: int
    torn_bytes: int
    records: int
    paused: frozenset[str] = frozenset()
    keys: tuple[KeyEntry, ...] = ()
    format: int = FORMAT
    fired: Mapping[str, float] = field(factory=dict)
    schedules: Mapping[str, bytes] = field(factory=dict)
    shared: Mapping[str, tuple[int, bytes]] = field(factory=dict)
    kept: tuple[KeptEntry, ...] = ()
    forgotten: tuple[int, ...] = ()
    groups: tuple[GroupEntry, ...] = ()
    last_group_id: int = 0
    evicted: frozenset[int] = frozenset()
    parents: tuple[ParentEntry, ...] = ()
