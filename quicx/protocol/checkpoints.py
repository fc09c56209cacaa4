"""
Checkpoints: CHECKPOINT, a running task's saved state, and the daemon's answer to it.

A worker that holds a task sends CHECKPOINT C{[task_id u32][token u64][kind
u8][state]}: its delivery's fencing token and the state, read as a result
is (C{kind}: bytes, UTF-8 text or JSON; L{quicx.protocol.taskflow.Result}).
The daemon keeps the latest of each task and answers with a CHECKPOINT of
its own, C{[task_id u32][token u64][code u8][reason UTF-8]}: code 0 once
the state is as durable as an accepted task, else the ERROR code that
refuses it.  The answer names the task and the token, so a worker matches
it without counting answers (a stale ACK's ERROR may come before it).  A
later delivery's TASK carries the state back as context items of tag 0x24
(L{quicx.protocol.taskflow.Context.CHECKPOINT}).  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

from quicx.protocol.codec import MAX_OPTION, MessageType, bad, frame, text
from quicx.protocol.taskflow import Result, decode_result

_HEAD = struct.Struct(">IQB")
CHECKPOINT_FIXED = _HEAD.size
"""What a CHECKPOINT carries before its state (or its reason): task id, token, kind (or code)."""
MAX_CHECKPOINT = 32768
"""The largest state the protocol allows (C{[checkpoints] max_size}'s bound): a TASK's
context (u16 long) has room for it, in items of 255 bytes, beside every other item."""


def context_size(size: int) -> int:
    """The bytes a state of C{size} bytes adds to a TASK's context: its kind and state, in items."""
    return size + 1 + 2 * -(-(size + 1) // MAX_OPTION)


MAX_CONTEXT = context_size(MAX_CHECKPOINT)
"""The most bytes a checkpoint adds to a TASK's context."""
KEPT = 0
"""The code of the answer to a CHECKPOINT that was kept."""


class Checkpoint(NamedTuple):
    """(From a worker.) The C{state} of delivery C{token} of task C{task_id}."""

    task_id: int
    token: int
    state: Result


class Checkpointed(NamedTuple):
    """
    (To a worker.) The daemon's answer to the CHECKPOINT of delivery
    C{token} of task C{task_id}: C{code} L{KEPT} (durable), or the ERROR
    code that refuses it, and why.
    """

    task_id: int
    token: int
    code: int
    reason: str = ""

    @property
    def kept(self) -> bool:
        return self.code == KEPT


Message = Checkpoint | Checkpointed


def encode_checkpoint(task_id: int, token: int, state: Result) -> bytes:
    return frame(MessageType.CHECKPOINT, _HEAD.pack(task_id, token, state.kind) + state.data)


def encode_checkpointed(task_id: int, token: int, code: int = KEPT, reason: str = "") -> bytes:
    return frame(MessageType.CHECKPOINT, _HEAD.pack(task_id, token, code) + reason.encode("utf-8"))


def _head(payload: bytes) -> tuple[int, int, int]:
    if len(payload) < _HEAD.size:
        raise bad(MessageType.CHECKPOINT, f"needs at least {_HEAD.size} bytes, got {len(payload)}")
    task_id, token, byte = _HEAD.unpack_from(payload)
    if not task_id:
        raise bad(MessageType.CHECKPOINT, "names task 0")
    return task_id, token, byte


def decode_checkpoint(payload: bytes) -> Checkpoint:
    """A worker's CHECKPOINT (the daemon reads it)."""
    task_id, token, _ = _head(payload)
    state = decode_result(MessageType.CHECKPOINT, payload, _HEAD.size - 1)
    assert state is not None  # _head saw its kind byte
    return Checkpoint(task_id, token, state)


def decode_checkpointed(payload: bytes) -> Checkpointed:
    """The daemon's answer (a worker reads it)."""
    task_id, token, code = _head(payload)
    return Checkpointed(
        task_id, token, code, text(MessageType.CHECKPOINT, payload[_HEAD.size :], "reason")
    )


DECODERS: dict[int, Callable[[bytes], Message]] = {
    # What the daemon sends: the registry decodes what a client receives.
    MessageType.CHECKPOINT: decode_checkpointed,
}
