"""
Protocol version 2, part 2: what happens to a task after its SUBMIT.

Fenced outcomes (ACK, NACK), lease extensions (TOUCH), retry notices
(RETRYING), the dead-letter set (DEAD, REPLAY, DEAD_PURGE) and schedules
(SCHEDULES, SCHEDULE, UNSCHEDULE).  Same header and version byte as the rest
of version 2 (L{quicx.protocol.v2}, whose opcode table lists these too);
docs/protocol.md, "Version 2: retries, dead letters, leases and schedules",
has every layout.  L{decode} decodes any version-2 message.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import NamedTuple

from attrs import frozen

from quicx.protocol import v2, wire
from quicx.protocol.v2 import MessageType, _bad, _split_name, _tlv, frame
from quicx.protocol.wire import MalformedMessage

NACK_PERMANENT = 0x01
"""NACK flag: the failure is permanent; the task is not retried."""
MAX_DEAD_LIST = 1000
"""The most dead tasks one DEAD lists."""
MAX_INTERVAL = 0xFFFFFFFF
"""The longest schedule interval, in seconds."""

ID_TOKEN = struct.Struct(">IQ")
"""ACK's payload: the task id and the delivery's token."""
_ACK_HEAD = struct.Struct(">BBIIQB")  # header, task id, token, result kind
_TOUCH = struct.Struct(">IQI")
_RETRYING = struct.Struct(">IHQ")
_DEAD = struct.Struct(">H")
_MISSED = struct.Struct(">BH")


class Missed(IntEnum):
    """What a schedule does about the firings it missed while the daemon was down."""

    SKIP = 0
    ONCE = 1
    ALL = 2


class ScheduleField(IntEnum):
    """SCHEDULE's TLV tags."""

    CRON = 0x01
    INTERVAL = 0x02
    TIMEZONE = 0x03
    TYPE = 0x04
    QUEUE = 0x05
    PRIORITY = 0x06
    MISSED = 0x07


# -- messages ---------------------------------------------------------------------


class Ack(NamedTuple):
    """The worker finished the delivery C{token} of C{task_id}, with C{result} if any."""

    task_id: int
    token: int
    result: v2.Result | None = None


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
class Dead:
    """List up to C{limit} dead tasks of C{queue} (C{None}: of every queue)."""

    limit: int
    queue: str | None = None


@frozen
class Replay:
    """Requeue dead task C{task_id}, or (0) every dead task of C{queue} (C{None}: of all)."""

    task_id: int
    queue: str | None = None


@frozen
class DeadPurge:
    """Drop the dead tasks of C{queue} (C{None}: of every queue)."""

    queue: str | None = None


@frozen
class Schedules:
    pass


@frozen
class Schedule:
    """
    Add (or replace) schedule C{name}: a task of C{task_type} with
    C{payload} into C{queue}, on C{cron} (a 5-field expression in
    C{timezone}) or every C{interval} seconds.

    @ivar missed: what to do about firings missed while the daemon was down;
        with L{Missed.ALL}, at most C{catch_up} of them.
    """

    name: str
    task_type: bytes
    payload: bytes = b""
    cron: str = ""
    interval: int = 0
    timezone: str = "UTC"
    queue: str | None = None
    priority: int | None = None
    missed: Missed = Missed.ONCE
    catch_up: int = 100


@frozen
class Unschedule:
    name: str


Message = (
    Ack | Nack | Touch | Retrying | Dead | Replay | DeadPurge | Schedules | Schedule | Unschedule
)


# -- encoders ---------------------------------------------------------------------


def encode_ack(task_id: int, token: int, result: v2.Result | None = None) -> bytes:
    if result is None:
        return frame(MessageType.ACK, ID_TOKEN.pack(task_id, token))
    kind, data = result
    # One copy of the result: it may be the largest part of the frame.
    return _ACK_HEAD.pack(v2.VERSION, MessageType.ACK, 13 + len(data), task_id, token, kind) + data


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


def _optional_name(queue: str | None) -> bytes:
    if queue is None:
        return b"\x00"
    name = v2.check_queue(queue)
    return bytes((len(name),)) + name


def encode_dead(limit: int = 100, queue: str | None = None) -> bytes:
    if not 1 <= limit <= MAX_DEAD_LIST:
        raise ValueError(f"DEAD lists 1 to {MAX_DEAD_LIST} tasks, not {limit}")
    return frame(MessageType.DEAD, _DEAD.pack(limit) + _optional_name(queue))


def encode_replay(task_id: int = 0, queue: str | None = None) -> bytes:
    if not 0 <= task_id <= wire.MAX_TASK_ID:
        raise ValueError(f"a task id is 0 (all) to {wire.MAX_TASK_ID}, not {task_id}")
    if task_id and queue is not None:
        raise ValueError("REPLAY names a task or a queue, not both")
    return frame(MessageType.REPLAY, wire.TASK_ID.pack(task_id) + _optional_name(queue))


def encode_dead_purge(queue: str | None = None) -> bytes:
    return frame(MessageType.DEAD_PURGE, _optional_name(queue))


SCHEDULES_FRAME = frame(MessageType.SCHEDULES)


def encode_schedule(schedule: Schedule) -> bytes:
    """
    C{[name_len u8][name][opts_len u16][TLV fields][payload]}.

    @raise ValueError: a field is out of range.
    """
    if bool(schedule.cron) == bool(schedule.interval):
        raise ValueError("a schedule has a cron expression or an interval, not both or neither")
    fields = b""
    if schedule.cron:
        fields += v2._option(ScheduleField.CRON, schedule.cron.encode("utf-8"))
    if schedule.interval:
        if not 1 <= schedule.interval <= MAX_INTERVAL:
            raise ValueError(f"an interval is 1 to {MAX_INTERVAL} s, not {schedule.interval}")
        fields += bytes((ScheduleField.INTERVAL, 4)) + wire.TASK_ID.pack(schedule.interval)
    fields += v2._option(ScheduleField.TIMEZONE, schedule.timezone.encode("utf-8"))
    if not 0 < len(schedule.task_type) <= wire.MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {wire.MAX_TYPE_LENGTH} bytes")
    fields += v2._option(ScheduleField.TYPE, schedule.task_type)
    if schedule.queue is not None:
        fields += v2._option(ScheduleField.QUEUE, v2.check_queue(schedule.queue))
    if schedule.priority is not None:
        if not 0 <= schedule.priority <= 255:
            raise ValueError(f"a priority is 0 to 255, not {schedule.priority}")
        fields += bytes((ScheduleField.PRIORITY, 1, schedule.priority))
    if not 0 <= schedule.catch_up <= 0xFFFF:
        raise ValueError(f"a catch-up cap is 0 to 65535, not {schedule.catch_up}")
    fields += bytes((ScheduleField.MISSED, 3)) + _MISSED.pack(schedule.missed, schedule.catch_up)
    name = v2.check_queue(schedule.name)
    body = bytes((len(name),)) + name + v2.U16.pack(len(fields)) + fields + schedule.payload
    return frame(MessageType.SCHEDULE, body)


def encode_unschedule(name: str) -> bytes:
    return frame(MessageType.UNSCHEDULE, _optional_name(name))


# -- decoders ---------------------------------------------------------------------


def _id_token(message_type: MessageType, payload: bytes, size: int) -> tuple[int, int]:
    if len(payload) < size:
        raise _bad(message_type, f"needs at least {size} bytes, got {len(payload)}")
    task_id, token = ID_TOKEN.unpack_from(payload)
    if not task_id:
        raise _bad(message_type, "names task 0")
    return task_id, token


def _text(message_type: MessageType, raw: bytes, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(message_type, f"{what} is not UTF-8") from None


def decode_ack(payload: bytes) -> Ack:
    task_id, token = _id_token(MessageType.ACK, payload, ID_TOKEN.size)
    return Ack(task_id, token, v2.decode_result(MessageType.ACK, payload, ID_TOKEN.size))


def decode_nack(payload: bytes) -> Nack:
    task_id, token = _id_token(MessageType.NACK, payload, ID_TOKEN.size + 1)
    flags = payload[12]
    if flags & ~NACK_PERMANENT:
        raise _bad(MessageType.NACK, f"has unknown flags 0x{flags:02x}")
    reason = _text(MessageType.NACK, payload[13:], "reason")
    return Nack(task_id, token, reason, bool(flags & NACK_PERMANENT))


def decode_touch(payload: bytes) -> Touch:
    if len(payload) != _TOUCH.size:
        raise _bad(MessageType.TOUCH, f"payload must be {_TOUCH.size} bytes, got {len(payload)}")
    task_id, token, seconds = _TOUCH.unpack(payload)
    if not task_id or not seconds:
        raise _bad(MessageType.TOUCH, "names task 0 or extends by 0 seconds")
    return Touch(task_id, token, seconds)


def decode_retrying(payload: bytes) -> Retrying:
    if len(payload) < _RETRYING.size:
        raise _bad(MessageType.RETRYING, f"needs at least {_RETRYING.size} bytes")
    task_id, attempt, due_ms = _RETRYING.unpack_from(payload)
    reason = _text(MessageType.RETRYING, payload[_RETRYING.size :], "reason")
    return Retrying(task_id, attempt, due_ms, reason)


def _split_optional_name(message_type: MessageType, payload: bytes, start: int) -> str | None:
    """An optional C{[len u8][name]} that ends the payload (length 0: none)."""
    if len(payload) <= start:
        raise _bad(message_type, "has no queue name length")
    if payload[start] == 0:
        name, end = None, start + 1
    else:
        name, end = _split_name(message_type, payload, start)
    if end != len(payload):
        raise _bad(message_type, f"has {len(payload) - end} bytes after its name")
    return name


def decode_dead(payload: bytes) -> Dead:
    if len(payload) < 2:
        raise _bad(MessageType.DEAD, "has no count")
    limit = _DEAD.unpack_from(payload)[0]
    if not 1 <= limit <= MAX_DEAD_LIST:
        raise _bad(MessageType.DEAD, f"count must be 1 to {MAX_DEAD_LIST}, not {limit}")
    return Dead(limit, _split_optional_name(MessageType.DEAD, payload, 2))


def decode_replay(payload: bytes) -> Replay:
    if len(payload) < 4:
        raise _bad(MessageType.REPLAY, "has no task id")
    task_id = wire.TASK_ID.unpack_from(payload)[0]
    queue = _split_optional_name(MessageType.REPLAY, payload, 4)
    if task_id and queue is not None:
        raise _bad(MessageType.REPLAY, "names a task and a queue: name one, or the queue with id 0")
    return Replay(task_id, queue)


def decode_dead_purge(payload: bytes) -> DeadPurge:
    return DeadPurge(_split_optional_name(MessageType.DEAD_PURGE, payload, 0))


def decode_schedules(payload: bytes) -> Schedules:
    if payload:
        raise _bad(MessageType.SCHEDULES, f"payload must be empty, got {len(payload)} bytes")
    return Schedules()


_SCHEDULE_FIELDS = frozenset(ScheduleField)


def decode_schedule(payload: bytes) -> Schedule:
    kind = MessageType.SCHEDULE
    name, offset = _split_name(kind, payload, 0)
    if len(payload) < offset + 2:
        raise _bad(kind, "has no fields length")
    end = offset + 2 + v2.U16.unpack_from(payload, offset)[0]
    if end > len(payload):
        raise _bad(kind, "fields run past the payload")
    items = _tlv(kind, payload, offset + 2, end)
    unknown = set(items) - _SCHEDULE_FIELDS
    if unknown:
        raise _bad(kind, f"has unknown field 0x{min(unknown):02x}")
    if (ScheduleField.CRON in items) == (ScheduleField.INTERVAL in items):
        raise _bad(kind, "needs a cron expression or an interval, not both or neither")
    cron, interval = "", 0
    if ScheduleField.CRON in items:
        cron = _text(kind, items[ScheduleField.CRON], "cron expression")
        if not cron:
            raise _bad(kind, "has an empty cron expression")
    else:
        raw = items[ScheduleField.INTERVAL]
        if len(raw) != 4 or not (interval := wire.TASK_ID.unpack(raw)[0]):
            raise _bad(kind, "interval must be 4 bytes of 1 or more seconds")
    task_type = items.get(ScheduleField.TYPE, b"")
    if not task_type:
        raise _bad(kind, "has no task type")
    queue = None
    if ScheduleField.QUEUE in items:
        queue = v2._queue_name(kind, items[ScheduleField.QUEUE])
    priority = None
    if ScheduleField.PRIORITY in items:
        raw = items[ScheduleField.PRIORITY]
        if len(raw) != 1:
            raise _bad(kind, "priority must be 1 byte")
        priority = raw[0]
    missed, catch_up = Missed.ONCE, 100
    if ScheduleField.MISSED in items:
        raw = items[ScheduleField.MISSED]
        if len(raw) != 3 or raw[0] not in tuple(Missed):
            raise _bad(kind, "missed-fire field must be [policy 0-2][cap u16]")
        policy, catch_up = _MISSED.unpack(raw)
        missed = Missed(policy)
    timezone = _text(kind, items.get(ScheduleField.TIMEZONE, b"UTC"), "time zone") or "UTC"
    return Schedule(
        name, task_type, payload[end:], cron, interval, timezone, queue, priority, missed, catch_up
    )


def decode_unschedule(payload: bytes) -> Unschedule:
    name, end = _split_name(MessageType.UNSCHEDULE, payload, 0)
    if end != len(payload):
        raise _bad(MessageType.UNSCHEDULE, f"has {len(payload) - end} bytes after its name")
    return Unschedule(name)


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.ACK: decode_ack,
    MessageType.NACK: decode_nack,
    MessageType.TOUCH: decode_touch,
    MessageType.RETRYING: decode_retrying,
    MessageType.DEAD: decode_dead,
    MessageType.REPLAY: decode_replay,
    MessageType.DEAD_PURGE: decode_dead_purge,
    MessageType.SCHEDULES: decode_schedules,
    MessageType.SCHEDULE: decode_schedule,
    MessageType.UNSCHEDULE: decode_unschedule,
}


def decode(message_type: int, payload: bytes) -> v2.Message | Message:
    """
    Decode the payload of any version-2 frame of C{message_type}.

    @raise MalformedMessage: the type is unknown or the payload has the
        wrong layout for it.
    """
    decoder = DECODERS.get(message_type)
    if decoder is None:
        return v2.decode(message_type, payload)
    return decoder(payload)


__all__ = ["MalformedMessage"]
