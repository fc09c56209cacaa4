"""The journal's file format: the magic, the record framing, each kind's body."""

from __future__ import annotations

import struct
import zlib
from enum import Enum

from attrs import frozen

from quicx.daemon.journal.interface import KeyEntry
from quicx.protocol.wire import MAX_TASK_ID

MAGIC_V1 = b"QUICXJ1\n"
"""The previous release's journals: kinds 1 to 5 only."""
MAGIC = b"QUICXJ2\n"
"""This release's: kinds 1 to 9 (a previous release refuses the file)."""
MAGICS = {MAGIC_V1: 1, MAGIC: 2}
RECORD_HEADER = struct.Struct(">II")
ID = struct.Struct(">I")
SUBMIT_HEAD = struct.Struct(">BIB")
SUBMIT2_HEAD = struct.Struct(">BIBQBBBB")
"""Kind, id, priority, enqueued ms, then the lengths of queue, type, key, fairness key."""
KEY_HEAD = struct.Struct(">BIQBBB")
"""Kind, id, submitted ms, outcome code, then the lengths of queue and key."""

KIND_SUBMIT = 1
KIND_DONE = 2
KIND_FAILED = 3
KIND_CHECKPOINT = 4
KIND_RESERVE = 5
KIND_SUBMIT2 = 6
KIND_CANCELLED = 7
KIND_PAUSE = 8
KIND_KEY = 9
KINDS_V1 = frozenset({KIND_SUBMIT, KIND_DONE, KIND_FAILED, KIND_CHECKPOINT, KIND_RESERVE})
KINDS = KINDS_V1 | {KIND_SUBMIT2, KIND_CANCELLED, KIND_PAUSE, KIND_KEY}
OUTCOME_KINDS = {"done": KIND_DONE, "failed": KIND_FAILED, "cancelled": KIND_CANCELLED}
OUTCOME_CODES = {"done": 1, "failed": 2, "cancelled": 3}
OUTCOME_NAMES = {code: name for name, code in OUTCOME_CODES.items()}

ID_BLOCK = 1 << 16
"""Task ids reserved at a time; a restart skips at most this many."""

MAX_BODY = SUBMIT2_HEAD.size + 4 * 255 + (1 << 20)
"""The longest body a record can have: the longest queue, type and keys and a 1 MiB payload."""

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


def encode_outcome(task_id: int, outcome: str) -> bytes:
    """DONE, FAILED or CANCELLED."""
    return _frame(bytes((OUTCOME_KINDS[outcome],)) + ID.pack(task_id))


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
    queue, that queue's priority, the time of recovery).
    """

    task_id: int
    task_type: bytes
    payload: bytes
    queue: str | None = None
    priority: int | None = None
    enqueued_at: float | None = None
    key: bytes | None = None
    fairness: bytes | None = None


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
    @ivar format: 1 for the previous release's file, 2 for this one's.
    """

    tasks: tuple[RecoveredTask, ...]
    last_task_id: int
    valid_length: int
    torn_bytes: int
    records: int
    paused: frozenset[str] = frozenset()
    keys: tuple[KeyEntry, ...] = ()
    format: int = 2
