"""
Version 2's outcome messages: what becomes of a task after its delivery.

A worker's fenced reports on a delivery, quoting its token: ACK (done, with
a L{Result} if any), NACK (failed), TOUCH (extend the lease), and PROGRESS;
the producer's RETRYING notice; waiting for a task's outcome from any
connection (AWAIT, OUTCOME) and groups of tasks (GROUP, GROUP_STATE).
docs/protocol.md has every layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

from attrs import frozen

from quicx.protocol.codec import (
    MAX_TASK_ID,
    VERSION,
    MessageType,
    bad,
    frame,
    text,
)
from quicx.protocol.taskflow import Result, decode_result

NACK_PERMANENT = 0x01
"""NACK flag: the failure is permanent; the task is not retried."""
ID_TOKEN = struct.Struct(">IQ")
"""ACK's payload: the task id and the delivery's token."""
ACK_SIZE = ID_TOKEN.size
"""An ACK without a result: its task id and token."""
NACK_FIXED = ID_TOKEN.size + 1
"""What a NACK carries before its reason: task id, token and flags."""
MAX_FRACTION = 10_000
"""PROGRESS carries its fraction in ten-thousandths: 10000 is all done."""

_AWAIT = struct.Struct(">II")
_OUTCOME = struct.Struct(">IBB")
_PROGRESS = struct.Struct(">IQH")
PROGRESS_FIXED = _PROGRESS.size
"""What a PROGRESS carries before its message: task id, token and fraction."""
_ACK_HEAD = struct.Struct(">BBIIQB")  # header, task id, token, result kind
_ACK_PLAIN = struct.Struct(">BBIIQ")  # header, task id, token
_ACK = int(MessageType.ACK)
_TOUCH = struct.Struct(">IQI")
_RETRYING = struct.Struct(">IHQ")
_GROUP = struct.Struct(">BII")
_GROUP_STATE = struct.Struct(">IBIIIII")


class OutcomeState(IntEnum):
    """What OUTCOME says of a task."""

    PENDING = 0
    """Not finished yet (queued, delayed or running) when the wait ended."""
    DONE = 1
    FAILED = 2
    CANCELLED = 3
    DEAD = 4
    """Failed for good, and kept in the dead-letter set."""
    FORGOTTEN = 5
    """Its outcome was kept, and is no longer: its TTL passed, or memory ran short."""
    UNKNOWN = 6
    """No such task, or its outcome was never kept."""
    EXPIRED = 7
    """It was not started before its deadline (its SUBMIT's expiry, or its queue's)."""


class GroupOp(IntEnum):
    """What a GROUP request does."""

    OPEN = 1
    CLOSE = 2
    STATE = 3
    WAIT = 4


class GroupPhase(IntEnum):
    """GROUP_STATE's state byte."""

    OPEN = 0
    """Members may still join (and some may run)."""
    CLOSED = 1
    """No more members; some have not finished."""
    FINISHED = 2
    """Closed, and every member has finished."""
    UNKNOWN = 3
    """No such group, or it finished longer ago than its TTL."""


_STATES = frozenset(OutcomeState)
_OPS = frozenset(GroupOp)
_PHASES = frozenset(GroupPhase)


# -- messages ---------------------------------------------------------------------


class Ack(NamedTuple):
    """The worker finished the delivery C{token} of C{task_id}, with C{result} if any."""

    task_id: int
    token: int
    result: Result | None = None


class Nack(NamedTuple):
    """The delivery C{token} of C{task_id} failed; C{permanent}: do not retry."""

    task_id: int
    token: int
    reason: str
    permanent: bool = False


@frozen
class Touch:
    """Extend the lease of delivery C{token} to C{seconds} from now."""

    task_id: int
    token: int
    seconds: int


@frozen
class Retrying:
    """(To a producer.) Attempt C{attempt} failed with C{reason}; the next runs at C{due_ms}."""

    task_id: int
    attempt: int
    due_ms: int
    reason: str


@frozen
class Await:
    """Answer with task C{task_id}'s OUTCOME, waiting up to C{timeout_ms} (0: answer now)."""

    task_id: int
    timeout_ms: int = 0


@frozen
class Outcome:
    """
    What became of task C{task_id}: its C{result} (C{DONE}, if one was
    given) or C{reason} (C{FAILED}, C{DEAD}: the worker's; otherwise a
    short explanation, possibly empty).
    """

    task_id: int
    state: OutcomeState
    result: Result | None = None
    reason: str = ""


@frozen
class Progress:
    """
    How far delivery C{token} of C{task_id} has got: C{fraction} ten-
    thousandths, and a short C{message}.  A worker sends it; the daemon
    forwards it unchanged to a producer that asked for progress.
    """

    task_id: int
    token: int
    fraction: int
    message: str = ""


@frozen
class Group:
    """
    Open a group (C{group} 0), close one, ask its state, or wait up to
    C{timeout_ms} for it to finish.
    """

    op: GroupOp
    group: int = 0
    timeout_ms: int = 0


@frozen
class GroupState:
    """
    A group's counts: members submitted, and of those done, failed (dead
    included), cancelled; the rest are still to finish.
    """

    group: int
    phase: GroupPhase
    members: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    pending: int = 0


Message = Ack | Nack | Touch | Retrying | Await | Outcome | Progress | Group | GroupState


# -- encoders ---------------------------------------------------------------------


def _check_id(task_id: int, what: str = "a task id") -> None:
    if not 1 <= task_id <= MAX_TASK_ID:
        raise ValueError(f"{what} is 1 to {MAX_TASK_ID}, not {task_id}")


def _check_timeout(timeout_ms: int) -> None:
    if not 0 <= timeout_ms <= 0xFFFFFFFF:
        raise ValueError(f"a wait is 0 to {0xFFFFFFFF} ms, not {timeout_ms}")


def encode_ack(task_id: int, token: int, result: Result | None = None) -> bytes:
    if result is None:  # a worker's every task: one pack, no enum
        return _ACK_PLAIN.pack(VERSION, _ACK, ACK_SIZE, task_id, token)
    kind, data = result
    # One copy of the result: it may be the largest part of the frame.
    return (
        _ACK_HEAD.pack(VERSION, MessageType.ACK, ACK_SIZE + 1 + len(data), task_id, token, kind)
        + data
    )


def encode_nack(task_id: int, token: int, reason: str | bytes, permanent: bool = False) -> bytes:
    if isinstance(reason, str):
        reason = reason.encode("utf-8", "replace")
    flags = bytes((NACK_PERMANENT if permanent else 0,))
    return frame(MessageType.NACK, ID_TOKEN.pack(task_id, token) + flags + reason)


def encode_touch(task_id: int, token: int, seconds: int) -> bytes:
    if not 1 <= seconds <= 0xFFFFFFFF:
        raise ValueError(f"a lease is extended by 1 to {0xFFFFFFFF} seconds, not {seconds}")
    return frame(MessageType.TOUCH, _TOUCH.pack(task_id, token, seconds))


def encode_retrying(task_id: int, attempt: int, due_ms: int, reason: str | bytes) -> bytes:
    if isinstance(reason, str):
        reason = reason.encode("utf-8", "replace")
    return frame(
        MessageType.RETRYING, _RETRYING.pack(task_id, min(attempt, 0xFFFF), due_ms) + reason
    )


def encode_await(task_id: int, timeout_ms: int = 0) -> bytes:
    _check_id(task_id)
    _check_timeout(timeout_ms)
    return frame(MessageType.AWAIT, _AWAIT.pack(task_id, timeout_ms))


def encode_outcome(
    task_id: int, state: OutcomeState, result: Result | None = None, reason: str | bytes = b""
) -> bytes:
    if result is not None:
        if state != OutcomeState.DONE:
            raise ValueError("only a DONE outcome carries a result")
        return frame(MessageType.OUTCOME, _OUTCOME.pack(task_id, state, result.kind) + result.data)
    if isinstance(reason, str):
        reason = reason.encode("utf-8", "replace")
    return frame(MessageType.OUTCOME, _OUTCOME.pack(task_id, state, 0) + reason)


def encode_progress(task_id: int, token: int, fraction: int, message: str | bytes = b"") -> bytes:
    if not 0 <= fraction <= MAX_FRACTION:
        raise ValueError(f"a progress fraction is 0 to {MAX_FRACTION}, not {fraction}")
    if isinstance(message, str):
        message = message.encode("utf-8", "replace")
    return frame(MessageType.PROGRESS, _PROGRESS.pack(task_id, token, fraction) + message)


def encode_group(op: GroupOp, group: int = 0, timeout_ms: int = 0) -> bytes:
    if op == GroupOp.OPEN:
        if group:
            raise ValueError("OPEN names no group: the daemon numbers it")
    else:
        _check_id(group, "a group id")
    if op != GroupOp.WAIT and timeout_ms:
        raise ValueError("only WAIT has a timeout")
    _check_timeout(timeout_ms)
    return frame(MessageType.GROUP, _GROUP.pack(op, group, timeout_ms))


def encode_group_state(state: GroupState) -> bytes:
    return frame(
        MessageType.GROUP_STATE,
        _GROUP_STATE.pack(
            state.group,
            state.phase,
            state.members,
            state.done,
            state.failed,
            state.cancelled,
            state.pending,
        ),
    )


# -- decoders ---------------------------------------------------------------------


def _fixed(message_type: MessageType, payload: bytes, layout: struct.Struct) -> tuple[int, ...]:
    if len(payload) != layout.size:
        raise bad(message_type, f"payload must be {layout.size} bytes, got {len(payload)}")
    return layout.unpack(payload)


def _id_token(message_type: MessageType, payload: bytes, size: int) -> tuple[int, int]:
    if len(payload) < size:
        raise bad(message_type, f"needs at least {size} bytes, got {len(payload)}")
    task_id, token = ID_TOKEN.unpack_from(payload)
    if not task_id:
        raise bad(message_type, "names task 0")
    return task_id, token


def decode_ack(payload: bytes) -> Ack:
    task_id, token = _id_token(MessageType.ACK, payload, ID_TOKEN.size)
    return Ack(task_id, token, decode_result(MessageType.ACK, payload, ID_TOKEN.size))


def decode_nack(payload: bytes) -> Nack:
    task_id, token = _id_token(MessageType.NACK, payload, NACK_FIXED)
    flags = payload[ACK_SIZE]
    if flags & ~NACK_PERMANENT:
        raise bad(MessageType.NACK, f"has unknown flags 0x{flags:02x}")
    reason = text(MessageType.NACK, payload[NACK_FIXED:], "reason")
    return Nack(task_id, token, reason, bool(flags & NACK_PERMANENT))


def decode_touch(payload: bytes) -> Touch:
    if len(payload) != _TOUCH.size:
        raise bad(MessageType.TOUCH, f"payload must be {_TOUCH.size} bytes, got {len(payload)}")
    task_id, token, seconds = _TOUCH.unpack(payload)
    if not task_id or not seconds:
        raise bad(MessageType.TOUCH, "names task 0 or extends by 0 seconds")
    return Touch(task_id, token, seconds)


def decode_retrying(payload: bytes) -> Retrying:
    if len(payload) < _RETRYING.size:
        raise bad(MessageType.RETRYING, f"needs at least {_RETRYING.size} bytes")
    task_id, attempt, due_ms = _RETRYING.unpack_from(payload)
    reason = text(MessageType.RETRYING, payload[_RETRYING.size :], "reason")
    return Retrying(task_id, attempt, due_ms, reason)


def decode_await(payload: bytes) -> Await:
    task_id, timeout_ms = _fixed(MessageType.AWAIT, payload, _AWAIT)
    if not task_id:
        raise bad(MessageType.AWAIT, "names task 0")
    return Await(task_id, timeout_ms)


def decode_outcome(payload: bytes) -> Outcome:
    if len(payload) < _OUTCOME.size:
        raise bad(MessageType.OUTCOME, f"needs at least {_OUTCOME.size} bytes")
    task_id, state, kind = _OUTCOME.unpack_from(payload)
    if state not in _STATES:
        raise bad(MessageType.OUTCOME, f"has unknown state {state}")
    if kind:
        if state != OutcomeState.DONE:
            raise bad(MessageType.OUTCOME, "carries a result but is not DONE")
        result = decode_result(MessageType.OUTCOME, payload, 5)
        return Outcome(task_id, OutcomeState(state), result)
    reason = text(MessageType.OUTCOME, payload[_OUTCOME.size :], "reason")
    return Outcome(task_id, OutcomeState(state), None, reason)


def decode_progress(payload: bytes) -> Progress:
    if len(payload) < _PROGRESS.size:
        raise bad(MessageType.PROGRESS, f"needs at least {_PROGRESS.size} bytes")
    task_id, token, fraction = _PROGRESS.unpack_from(payload)
    if not task_id:
        raise bad(MessageType.PROGRESS, "names task 0")
    if fraction > MAX_FRACTION:
        raise bad(MessageType.PROGRESS, f"fraction {fraction} exceeds {MAX_FRACTION}")
    message = text(MessageType.PROGRESS, payload[_PROGRESS.size :], "message")
    return Progress(task_id, token, fraction, message)


def decode_group(payload: bytes) -> Group:
    op, group, timeout_ms = _fixed(MessageType.GROUP, payload, _GROUP)
    if op not in _OPS:
        raise bad(MessageType.GROUP, f"has unknown operation {op}")
    if (op == GroupOp.OPEN) != (group == 0):
        raise bad(MessageType.GROUP, "OPEN names group 0, every other operation a group")
    if op != GroupOp.WAIT and timeout_ms:
        raise bad(MessageType.GROUP, "only WAIT has a timeout")
    return Group(GroupOp(op), group, timeout_ms)


def decode_group_state(payload: bytes) -> GroupState:
    group, phase, *counts = _fixed(MessageType.GROUP_STATE, payload, _GROUP_STATE)
    if phase not in _PHASES:
        raise bad(MessageType.GROUP_STATE, f"has unknown state {phase}")
    return GroupState(group, GroupPhase(phase), *counts)


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.ACK: decode_ack,
    MessageType.NACK: decode_nack,
    MessageType.TOUCH: decode_touch,
    MessageType.RETRYING: decode_retrying,
    MessageType.AWAIT: decode_await,
    MessageType.OUTCOME: decode_outcome,
    MessageType.PROGRESS: decode_progress,
    MessageType.GROUP: decode_group,
    MessageType.GROUP_STATE: decode_group_state,
}
