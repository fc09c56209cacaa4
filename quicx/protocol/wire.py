"""
Protocol version 1, the protocol page's: its messages, encoders and decoders.

Every frame is a 6-byte header (L{codec.HEADER}) with version byte C{0x01}.
Version 1 is a frozen spec: this module is its one implementation, and
version 2 repeats the layouts of some of its messages (ERROR, FAILED, WAIT,
HEARTBEAT, PONG, STATS, STATS_RESPONSE).  It knows nothing of sockets or
reactors; the daemon, every client and the tests share it.

Encoders return a whole frame (header included) as C{bytes}.  Decoders take a
payload (header already stripped by the framer) and return a message object,
or raise L{MalformedMessage}.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

from attrs import frozen

from quicx.protocol.codec import (
    HEADER,
    HEADER_AND_ID,
    MAX_CREDITS,
    MAX_TYPE_LENGTH,
    TASK_ID,
    MalformedMessage,
    split_type,
)

PROTOCOL_VERSION = 1

STATS_BODY = struct.Struct(">IIIQQ")
CREDITS = struct.Struct(">H")
SUBMIT_TYPE_OVERHEAD = 1 + MAX_TYPE_LENGTH
"""The most bytes a SUBMIT spends on its task type (length byte + type)."""


class MessageType(IntEnum):
    """The message opcodes of protocol version 1."""

    SUBMIT = 0x01
    OK = 0x02
    ERROR = 0x03
    READY = 0x04
    TASK = 0x05
    DONE = 0x06
    FAILED = 0x07
    WAIT = 0x08
    HEARTBEAT = 0x09
    PONG = 0x0A
    STATS = 0x0B
    STATS_RESPONSE = 0x0C


KNOWN_TYPES = frozenset(MessageType)
_SUBMIT, _OK, _TASK, _DONE = (
    int(t) for t in (MessageType.SUBMIT, MessageType.OK, MessageType.TASK, MessageType.DONE)
)


class ErrorCode(IntEnum):
    """The codes an ERROR frame carries."""

    QUEUE_FULL = 0x01
    INVALID_MESSAGE = 0x02
    PAYLOAD_TOO_LARGE = 0x03
    UNKNOWN_TASK_TYPE = 0x04


# -- message objects -------------------------------------------------------


@frozen
class Submit:
    task_type: bytes
    payload: bytes


@frozen
class Ok:
    task_id: int


@frozen
class Error:
    code: int
    message: str


@frozen
class Ready:
    """
    A worker asks for work.  C{credits} is how many tasks it may hold at once:
    1 for the empty READY of the protocol page, more with Quicx's credit
    extension (a 2-byte count; see docs/protocol.md).
    """

    credits: int = 1


@frozen
class Task:
    task_id: int
    task_type: bytes
    payload: bytes


@frozen
class Done:
    task_id: int


@frozen
class Failed:
    task_id: int
    reason: str


@frozen
class Wait:
    pass


@frozen
class Heartbeat:
    pass


@frozen
class Pong:
    pass


@frozen
class StatsRequest:
    pass


@frozen
class StatsResponse:
    queue_depth: int
    workers_total: int
    workers_idle: int
    pmad_bytes_used: int
    pmad_bytes_total: int


Message = (
    Submit
    | Ok
    | Error
    | Ready
    | Task
    | Done
    | Failed
    | Wait
    | Heartbeat
    | Pong
    | StatsRequest
    | StatsResponse
)


# -- encoders ---------------------------------------------------------------


def frame(message_type: int, payload: bytes = b"") -> bytes:
    """Prefix C{payload} with the version-1 header for C{message_type}."""
    return HEADER.pack(PROTOCOL_VERSION, message_type, len(payload)) + payload


def _type_header(task_type: bytes) -> bytes:
    if not 0 < len(task_type) <= MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes, not {len(task_type)}")
    return bytes((len(task_type),)) + task_type


# The hot encoders pack header and task id in one call (HEADER_AND_ID), with
# the type codes as plain ints: an IntEnum member costs an attribute lookup
# and __index__.


def encode_submit(task_type: bytes, payload: bytes) -> bytes:
    type_header = _type_header(task_type)
    return HEADER.pack(PROTOCOL_VERSION, _SUBMIT, len(type_header) + len(payload)) + (
        type_header + payload
    )


def encode_ok(task_id: int) -> bytes:
    return HEADER_AND_ID.pack(PROTOCOL_VERSION, _OK, 4, task_id)


def encode_error(code: int, message: str) -> bytes:
    return frame(MessageType.ERROR, bytes((code,)) + message.encode("utf-8"))


def encode_ready(credits: int = 1) -> bytes:
    """
    A READY; with C{credits} above 1, one carrying the credit extension (a
    daemon that predates it answers ERROR 0x02).
    """
    if credits == 1:
        return READY_FRAME
    if not 1 <= credits <= MAX_CREDITS:
        raise ValueError(f"READY credits are 1 to {MAX_CREDITS}, not {credits}")
    return frame(MessageType.READY, CREDITS.pack(credits))


_TYPE_HEADERS: dict[bytes, bytes] = {}
"""Task types and their headers, made once each (the daemon sends one per task)."""


def encode_task(task_id: int, task_type: bytes, payload: bytes) -> bytes:
    type_header = _TYPE_HEADERS.get(task_type)
    if type_header is None:
        type_header = _type_header(task_type)
        if len(_TYPE_HEADERS) < 4096:
            _TYPE_HEADERS[task_type] = type_header
    length = 4 + len(type_header) + len(payload)
    return HEADER_AND_ID.pack(PROTOCOL_VERSION, _TASK, length, task_id) + type_header + payload


def encode_done(task_id: int) -> bytes:
    return HEADER_AND_ID.pack(PROTOCOL_VERSION, _DONE, 4, task_id)


def encode_failed(task_id: int, reason: str | bytes) -> bytes:
    if isinstance(reason, str):
        reason = reason.encode("utf-8", "replace")
    return frame(MessageType.FAILED, TASK_ID.pack(task_id) + reason)


def encode_wait() -> bytes:
    return WAIT_FRAME


def encode_heartbeat() -> bytes:
    return HEARTBEAT_FRAME


def encode_pong() -> bytes:
    return PONG_FRAME


def encode_stats() -> bytes:
    return STATS_FRAME


def encode_stats_response(stats: StatsResponse) -> bytes:
    return frame(
        MessageType.STATS_RESPONSE,
        STATS_BODY.pack(
            stats.queue_depth,
            stats.workers_total,
            stats.workers_idle,
            stats.pmad_bytes_used,
            stats.pmad_bytes_total,
        ),
    )


READY_FRAME = frame(MessageType.READY)
WAIT_FRAME = frame(MessageType.WAIT)
HEARTBEAT_FRAME = frame(MessageType.HEARTBEAT)
PONG_FRAME = frame(MessageType.PONG)
STATS_FRAME = frame(MessageType.STATS)


# -- decoders ---------------------------------------------------------------


def _task_id(message_type: int, payload: bytes) -> int:
    if len(payload) < TASK_ID.size:
        raise MalformedMessage(
            message_type,
            f"{MessageType(message_type).name} needs a 4-byte task id, got {len(payload)} bytes",
        )
    task_id: int = TASK_ID.unpack_from(payload)[0]
    return task_id


def _exact(message_type: int, payload: bytes, size: int) -> None:
    if len(payload) != size:
        raise MalformedMessage(
            message_type,
            f"{MessageType(message_type).name} payload must be {size} bytes, got {len(payload)}",
        )


def submit_fields(payload: bytes) -> tuple[bytes, bytes]:
    """A SUBMIT's task type and payload, without building a L{Submit}."""
    return split_type(MessageType.SUBMIT, payload, 0)


def decode_submit(payload: bytes) -> Submit:
    return Submit(*submit_fields(payload))


def decode_ok(payload: bytes) -> Ok:
    _exact(MessageType.OK, payload, TASK_ID.size)
    return Ok(TASK_ID.unpack(payload)[0])


def decode_error(payload: bytes) -> Error:
    if not payload:
        raise MalformedMessage(MessageType.ERROR, "ERROR has no error code")
    return Error(payload[0], payload[1:].decode("utf-8", errors="replace"))


def decode_task(payload: bytes) -> Task:
    task_id = _task_id(MessageType.TASK, payload)
    task_type, body = split_type(MessageType.TASK, payload, TASK_ID.size)
    return Task(task_id, task_type, body)


def done_task_id(payload: bytes) -> int:
    """A DONE's task id, without building a L{Done}."""
    if len(payload) != TASK_ID.size:
        _exact(MessageType.DONE, payload, TASK_ID.size)
    task_id: int = TASK_ID.unpack(payload)[0]
    return task_id


def decode_done(payload: bytes) -> Done:
    return Done(done_task_id(payload))


def decode_failed(payload: bytes) -> Failed:
    task_id = _task_id(MessageType.FAILED, payload)
    try:
        reason = payload[TASK_ID.size :].decode("utf-8")
    except UnicodeDecodeError as e:
        raise MalformedMessage(
            MessageType.FAILED, f"FAILED reason is not UTF-8 ({e.reason} at byte {e.start})"
        ) from None
    return Failed(task_id, reason)


def decode_ready(payload: bytes) -> Ready:
    if not payload:
        return _READY_ONE
    if len(payload) != CREDITS.size:
        raise MalformedMessage(
            MessageType.READY,
            f"READY payload must be empty or a 2-byte credit count, got {len(payload)} bytes",
        )
    credits = CREDITS.unpack(payload)[0]
    if not credits:
        raise MalformedMessage(MessageType.READY, "READY credits must be at least 1")
    return Ready(credits)


_READY_ONE = Ready()


def decode_stats_response(payload: bytes) -> StatsResponse:
    _exact(MessageType.STATS_RESPONSE, payload, STATS_BODY.size)
    return StatsResponse(*STATS_BODY.unpack(payload))


def _empty(message_type: MessageType, message: Message) -> Callable[[bytes], Message]:
    def decode_empty(payload: bytes) -> Message:
        _exact(message_type, payload, 0)
        return message

    decode_empty.__name__ = f"decode_{message_type.name.lower()}"
    return decode_empty


decode_wait = _empty(MessageType.WAIT, Wait())
decode_heartbeat = _empty(MessageType.HEARTBEAT, Heartbeat())
decode_pong = _empty(MessageType.PONG, Pong())
decode_stats = _empty(MessageType.STATS, StatsRequest())

DECODERS: dict[int, Callable[[bytes], Message]] = {
    # Version 1's decoders, by type (L{quicx.protocol.registry.decode} decodes a frame).
    MessageType.SUBMIT: decode_submit,
    MessageType.OK: decode_ok,
    MessageType.ERROR: decode_error,
    MessageType.READY: decode_ready,
    MessageType.TASK: decode_task,
    MessageType.DONE: decode_done,
    MessageType.FAILED: decode_failed,
    MessageType.WAIT: decode_wait,
    MessageType.HEARTBEAT: decode_heartbeat,
    MessageType.PONG: decode_pong,
    MessageType.STATS: decode_stats,
    MessageType.STATS_RESPONSE: decode_stats_response,
}
