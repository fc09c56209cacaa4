"""The journal's file format: the magic, the record framing, each kind's body."""

from __future__ import annotations

import struct
import zlib
from enum import Enum

from attrs import frozen

from quicx.protocol.wire import MAX_TASK_ID

MAGIC = b"QUICXJ1\n"
RECORD_HEADER = struct.Struct(">II")
ID = struct.Struct(">I")
SUBMIT_HEAD = struct.Struct(">BIB")

KIND_SUBMIT = 1
KIND_DONE = 2
KIND_FAILED = 3
KIND_CHECKPOINT = 4
KIND_RESERVE = 5
KINDS = frozenset({KIND_SUBMIT, KIND_DONE, KIND_FAILED, KIND_CHECKPOINT, KIND_RESERVE})

ID_BLOCK = 1 << 16
"""Task ids reserved at a time; a restart skips at most this many."""

MAX_BODY = SUBMIT_HEAD.size + 255 + (1 << 20)
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
    return _frame(SUBMIT_HEAD.pack(KIND_SUBMIT, task_id, len(task_type)) + task_type + payload)


def encode_done(task_id: int) -> bytes:
    return _frame(bytes((KIND_DONE,)) + ID.pack(task_id))


def encode_failed(task_id: int) -> bytes:
    return _frame(bytes((KIND_FAILED,)) + ID.pack(task_id))


def encode_checkpoint(last_task_id: int) -> bytes:
    return _frame(bytes((KIND_CHECKPOINT,)) + ID.pack(last_task_id))


def encode_reserve(task_id: int) -> bytes:
    return _frame(bytes((KIND_RESERVE,)) + ID.pack(task_id))


def id_after(task_id: int, steps: int) -> int:
    """The id C{steps} after C{task_id}, as the counter counts (1 to 2**32 - 1)."""
    return (task_id - 1 + steps) % MAX_TASK_ID + 1


def id_steps(start: int, end: int) -> int:
    """How many steps of the id counter lead from C{start} to C{end}."""
    return (end - start) % MAX_TASK_ID


def submit_record_size(type_length: int, payload_length: int) -> int:
    """The bytes a SUBMIT record takes in the file."""
    return RECORD_HEADER.size + SUBMIT_HEAD.size + type_length + payload_length


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
