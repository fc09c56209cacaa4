"""
Protocol version 2, part 3: what comes back from a task.

Waiting for an outcome from any connection (AWAIT, OUTCOME), progress
reports (PROGRESS), shared data (PUBLISH, SHARED, FOLLOW) and groups
(GROUP, GROUP_STATE).  Results themselves ride on ACK (worker to daemon) and
DONE (daemon to producer) as a C{[kind u8][data]} tail: L{v2.Result}.  Same
header and version byte as the rest of version 2; docs/protocol.md,
"Version 2: results, progress, shared data and groups", has every layout.
L{decode} decodes any version-2 message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

from attrs import frozen

from quicx.protocol import lifecycle, v2, wire
from quicx.protocol.v2 import MessageType, Result, _bad, _split_name, frame
from quicx.protocol.wire import MalformedMessage

MAX_FRACTION = 10_000
"""PROGRESS carries its fraction in ten-thousandths: 10000 is all done."""
MAX_FOLLOW = 32
"""The most shared-data names one FOLLOW lists."""
PUBLISH_DELETE = 0x01
"""PUBLISH flag: delete the name instead of publishing a version."""

_AWAIT = struct.Struct(">II")
_OUTCOME = struct.Struct(">IBB")
_PROGRESS = struct.Struct(">IQH")
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
    EXPIRED = 5
    """Its outcome was kept, and is no longer: its TTL passed, or memory ran short."""
    UNKNOWN = 6
    """No such task, or its outcome was never kept."""


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
class Publish:
    """Publish C{data} as the next version of shared data C{name}, or delete C{name}."""

    name: str
    data: bytes = b""
    delete: bool = False


@frozen
class Shared:
    """(To a worker.) Version C{version} of C{name} is C{data}; version 0: deleted."""

    name: str
    version: int
    data: bytes = b""


@frozen
class Follow:
    """(A worker.) Send me the current version of each of C{names}, and every new one."""

    names: tuple[str, ...]


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


Message = Await | Outcome | Progress | Publish | Shared | Follow | Group | GroupState


# -- encoders ---------------------------------------------------------------------


def _check_id(task_id: int, what: str = "a task id") -> None:
    if not 1 <= task_id <= wire.MAX_TASK_ID:
        raise ValueError(f"{what} is 1 to {wire.MAX_TASK_ID}, not {task_id}")


def _check_timeout(timeout_ms: int) -> None:
    if not 0 <= timeout_ms <= 0xFFFFFFFF:
        raise ValueError(f"a wait is 0 to {0xFFFFFFFF} ms, not {timeout_ms}")


def _name(name: str) -> bytes:
    raw = v2.check_queue(name)
    return bytes((len(raw),)) + raw


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


def encode_publish(name: str, data: bytes = b"", delete: bool = False) -> bytes:
    if delete and data:
        raise ValueError("a PUBLISH that deletes a name carries no data")
    flags = bytes((PUBLISH_DELETE if delete else 0,))
    return frame(MessageType.PUBLISH, flags + _name(name) + data)


def encode_shared(name: str, version: int, data: bytes = b"") -> bytes:
    if not 0 <= version <= 0xFFFFFFFF:
        raise ValueError(f"a version is 0 to {0xFFFFFFFF}, not {version}")
    return frame(MessageType.SHARED, _name(name) + wire.TASK_ID.pack(version) + data)


def encode_follow(names: tuple[str, ...] | list[str]) -> bytes:
    if not 1 <= len(names) <= MAX_FOLLOW:
        raise ValueError(f"FOLLOW lists 1 to {MAX_FOLLOW} names, not {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError("FOLLOW lists a name twice")
    return frame(MessageType.FOLLOW, bytes((len(names),)) + b"".join(map(_name, names)))


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
        raise _bad(message_type, f"payload must be {layout.size} bytes, got {len(payload)}")
    return layout.unpack(payload)


def decode_await(payload: bytes) -> Await:
    task_id, timeout_ms = _fixed(MessageType.AWAIT, payload, _AWAIT)
    if not task_id:
        raise _bad(MessageType.AWAIT, "names task 0")
    return Await(task_id, timeout_ms)


def decode_outcome(payload: bytes) -> Outcome:
    if len(payload) < _OUTCOME.size:
        raise _bad(MessageType.OUTCOME, f"needs at least {_OUTCOME.size} bytes")
    task_id, state, kind = _OUTCOME.unpack_from(payload)
    if state not in _STATES:
        raise _bad(MessageType.OUTCOME, f"has unknown state {state}")
    if kind:
        if state != OutcomeState.DONE:
            raise _bad(MessageType.OUTCOME, "carries a result but is not DONE")
        result = v2.decode_result(MessageType.OUTCOME, payload, 5)
        return Outcome(task_id, OutcomeState(state), result)
    reason = lifecycle._text(MessageType.OUTCOME, payload[_OUTCOME.size :], "reason")
    return Outcome(task_id, OutcomeState(state), None, reason)


def decode_progress(payload: bytes) -> Progress:
    if len(payload) < _PROGRESS.size:
        raise _bad(MessageType.PROGRESS, f"needs at least {_PROGRESS.size} bytes")
    task_id, token, fraction = _PROGRESS.unpack_from(payload)
    if not task_id:
        raise _bad(MessageType.PROGRESS, "names task 0")
    if fraction > MAX_FRACTION:
        raise _bad(MessageType.PROGRESS, f"fraction {fraction} exceeds {MAX_FRACTION}")
    message = lifecycle._text(MessageType.PROGRESS, payload[_PROGRESS.size :], "message")
    return Progress(task_id, token, fraction, message)


def decode_publish(payload: bytes) -> Publish:
    if not payload:
        raise _bad(MessageType.PUBLISH, "has no flags")
    flags = payload[0]
    if flags & ~PUBLISH_DELETE:
        raise _bad(MessageType.PUBLISH, f"has unknown flags 0x{flags:02x}")
    name, end = _split_name(MessageType.PUBLISH, payload, 1)
    delete = bool(flags & PUBLISH_DELETE)
    if delete and end != len(payload):
        raise _bad(MessageType.PUBLISH, "deletes a name but carries data")
    return Publish(name, payload[end:], delete)


def decode_shared(payload: bytes) -> Shared:
    name, end = _split_name(MessageType.SHARED, payload, 0)
    if len(payload) < end + 4:
        raise _bad(MessageType.SHARED, "has no version")
    version = wire.TASK_ID.unpack_from(payload, end)[0]
    if not version and len(payload) > end + 4:
        raise _bad(MessageType.SHARED, "version 0 (deleted) carries data")
    return Shared(name, version, payload[end + 4 :])


def decode_follow(payload: bytes) -> Follow:
    return Follow(v2._name_list(MessageType.FOLLOW, payload, 0, MAX_FOLLOW, "name", "names"))


def decode_group(payload: bytes) -> Group:
    op, group, timeout_ms = _fixed(MessageType.GROUP, payload, _GROUP)
    if op not in _OPS:
        raise _bad(MessageType.GROUP, f"has unknown operation {op}")
    if (op == GroupOp.OPEN) != (group == 0):
        raise _bad(MessageType.GROUP, "OPEN names group 0, every other operation a group")
    if op != GroupOp.WAIT and timeout_ms:
        raise _bad(MessageType.GROUP, "only WAIT has a timeout")
    return Group(GroupOp(op), group, timeout_ms)


def decode_group_state(payload: bytes) -> GroupState:
    group, phase, *counts = _fixed(MessageType.GROUP_STATE, payload, _GROUP_STATE)
    if phase not in _PHASES:
        raise _bad(MessageType.GROUP_STATE, f"has unknown state {phase}")
    return GroupState(group, GroupPhase(phase), *counts)


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.AWAIT: decode_await,
    MessageType.OUTCOME: decode_outcome,
    MessageType.PROGRESS: decode_progress,
    MessageType.PUBLISH: decode_publish,
    MessageType.SHARED: decode_shared,
    MessageType.FOLLOW: decode_follow,
    MessageType.GROUP: decode_group,
    MessageType.GROUP_STATE: decode_group_state,
}


def decode(message_type: int, payload: bytes) -> v2.Message | lifecycle.Message | Message:
    """
    Decode the payload of any version-2 frame of C{message_type}.

    @raise MalformedMessage: the type is unknown or the payload has the
        wrong layout for it.
    """
    decoder = DECODERS.get(message_type)
    if decoder is None:
        return lifecycle.decode(message_type, payload)
    return decoder(payload)


__all__ = ["MalformedMessage", "Result"]
