"""
Version 2's admin messages: a task's cancel and inspection, queues, dead letters, schedules.

CANCEL (answered CANCELLED to its producer), INSPECT; a queue's PAUSE,
RESUME and PURGE, QUEUES and PEEK; the dead-letter set (DEAD, REPLAY,
DEAD_PURGE) and schedules (SCHEDULES, SCHEDULE, UNSCHEDULE).  Each is
answered with an INFO document (L{quicx.protocol.link}).  docs/protocol.md
has every layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum

from attrs import frozen

from quicx.protocol.codec import (
    HEADER_AND_ID,
    MAX_TASK_ID,
    MAX_TYPE_LENGTH,
    TASK_ID,
    U16,
    VERSION,
    MessageType,
    bad,
    check_queue,
    frame,
    name_field,
    option,
    optional_name,
    queue_name,
    split_name,
    split_optional_name,
    text,
    tlv,
)

MAX_PEEK = 1000
"""The most tasks one PEEK may ask for."""
MAX_DEAD_LIST = 1000
"""The most dead tasks one DEAD lists."""
MAX_INTERVAL = 0xFFFFFFFF
"""The longest schedule interval, in seconds."""

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


@frozen
class Cancel:
    task_id: int


@frozen
class Cancelled:
    task_id: int


@frozen
class QueueAction:
    """PAUSE, RESUME or PURGE of one queue."""

    action: MessageType
    queue: str


@frozen
class Queues:
    pass


@frozen
class Peek:
    queue: str
    count: int


@frozen
class Inspect:
    task_id: int


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
    Cancel
    | Cancelled
    | QueueAction
    | Queues
    | Peek
    | Inspect
    | Dead
    | Replay
    | DeadPurge
    | Schedules
    | Schedule
    | Unschedule
)


# -- encoders ---------------------------------------------------------------------


def encode_cancel(task_id: int) -> bytes:
    return HEADER_AND_ID.pack(VERSION, MessageType.CANCEL, 4, task_id)


def encode_cancelled(task_id: int) -> bytes:
    return HEADER_AND_ID.pack(VERSION, MessageType.CANCELLED, 4, task_id)


def encode_queue_action(action: MessageType, queue: str) -> bytes:
    if action not in (MessageType.PAUSE, MessageType.RESUME, MessageType.PURGE):
        raise ValueError(f"{action.name} is not a queue action")
    return frame(action, name_field(queue))


def encode_queues() -> bytes:
    return QUEUES_FRAME


def encode_peek(queue: str, count: int) -> bytes:
    if not 1 <= count <= MAX_PEEK:
        raise ValueError(f"PEEK asks for 1 to {MAX_PEEK} tasks, not {count}")
    return frame(MessageType.PEEK, U16.pack(count) + name_field(queue))


def encode_inspect(task_id: int) -> bytes:
    return HEADER_AND_ID.pack(VERSION, MessageType.INSPECT, 4, task_id)


QUEUES_FRAME = frame(MessageType.QUEUES)


def encode_dead(limit: int = 100, queue: str | None = None) -> bytes:
    if not 1 <= limit <= MAX_DEAD_LIST:
        raise ValueError(f"DEAD lists 1 to {MAX_DEAD_LIST} tasks, not {limit}")
    return frame(MessageType.DEAD, _DEAD.pack(limit) + optional_name(queue))


def encode_replay(task_id: int = 0, queue: str | None = None) -> bytes:
    if not 0 <= task_id <= MAX_TASK_ID:
        raise ValueError(f"a task id is 0 (all) to {MAX_TASK_ID}, not {task_id}")
    if task_id and queue is not None:
        raise ValueError("REPLAY names a task or a queue, not both")
    return frame(MessageType.REPLAY, TASK_ID.pack(task_id) + optional_name(queue))


def encode_dead_purge(queue: str | None = None) -> bytes:
    return frame(MessageType.DEAD_PURGE, optional_name(queue))


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
        fields += option(ScheduleField.CRON, schedule.cron.encode("utf-8"))
    if schedule.interval:
        if not 1 <= schedule.interval <= MAX_INTERVAL:
            raise ValueError(f"an interval is 1 to {MAX_INTERVAL} s, not {schedule.interval}")
        fields += bytes((ScheduleField.INTERVAL, 4)) + TASK_ID.pack(schedule.interval)
    fields += option(ScheduleField.TIMEZONE, schedule.timezone.encode("utf-8"))
    if not 0 < len(schedule.task_type) <= MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes")
    fields += option(ScheduleField.TYPE, schedule.task_type)
    if schedule.queue is not None:
        fields += option(ScheduleField.QUEUE, check_queue(schedule.queue))
    if schedule.priority is not None:
        if not 0 <= schedule.priority <= 255:
            raise ValueError(f"a priority is 0 to 255, not {schedule.priority}")
        fields += bytes((ScheduleField.PRIORITY, 1, schedule.priority))
    if not 0 <= schedule.catch_up <= 0xFFFF:
        raise ValueError(f"a catch-up cap is 0 to 65535, not {schedule.catch_up}")
    fields += bytes((ScheduleField.MISSED, 3)) + _MISSED.pack(schedule.missed, schedule.catch_up)
    name = check_queue(schedule.name)
    body = bytes((len(name),)) + name + U16.pack(len(fields)) + fields + schedule.payload
    return frame(MessageType.SCHEDULE, body)


def encode_unschedule(name: str) -> bytes:
    return frame(MessageType.UNSCHEDULE, optional_name(name))


# -- decoders ---------------------------------------------------------------------


def _task_id_only(message_type: MessageType, payload: bytes) -> int:
    if len(payload) != 4:
        raise bad(message_type, f"payload must be a 4-byte task id, got {len(payload)} bytes")
    task_id: int = TASK_ID.unpack(payload)[0]
    return task_id


def decode_cancel(payload: bytes) -> Cancel:
    return Cancel(_task_id_only(MessageType.CANCEL, payload))


def decode_cancelled(payload: bytes) -> Cancelled:
    return Cancelled(_task_id_only(MessageType.CANCELLED, payload))


def decode_inspect(payload: bytes) -> Inspect:
    return Inspect(_task_id_only(MessageType.INSPECT, payload))


def decode_queue_action(message_type: MessageType, payload: bytes) -> QueueAction:
    name, end = split_name(message_type, payload, 0)
    if end != len(payload):
        raise bad(message_type, f"has {len(payload) - end} bytes after its queue name")
    return QueueAction(message_type, name)


def decode_queues(payload: bytes) -> Queues:
    if payload:
        raise bad(MessageType.QUEUES, f"payload must be empty, got {len(payload)} bytes")
    return Queues()


def decode_peek(payload: bytes) -> Peek:
    if len(payload) < 2:
        raise bad(MessageType.PEEK, "has no count")
    count = U16.unpack_from(payload)[0]
    if not 1 <= count <= MAX_PEEK:
        raise bad(MessageType.PEEK, f"count must be 1 to {MAX_PEEK}, not {count}")
    name, end = split_name(MessageType.PEEK, payload, 2)
    if end != len(payload):
        raise bad(MessageType.PEEK, f"has {len(payload) - end} bytes after its queue name")
    return Peek(name, count)


def decode_dead(payload: bytes) -> Dead:
    if len(payload) < 2:
        raise bad(MessageType.DEAD, "has no count")
    limit = _DEAD.unpack_from(payload)[0]
    if not 1 <= limit <= MAX_DEAD_LIST:
        raise bad(MessageType.DEAD, f"count must be 1 to {MAX_DEAD_LIST}, not {limit}")
    return Dead(limit, split_optional_name(MessageType.DEAD, payload, 2))


def decode_replay(payload: bytes) -> Replay:
    if len(payload) < 4:
        raise bad(MessageType.REPLAY, "has no task id")
    task_id = TASK_ID.unpack_from(payload)[0]
    queue = split_optional_name(MessageType.REPLAY, payload, 4)
    if task_id and queue is not None:
        raise bad(MessageType.REPLAY, "names a task and a queue: name one, or the queue with id 0")
    return Replay(task_id, queue)


def decode_dead_purge(payload: bytes) -> DeadPurge:
    return DeadPurge(split_optional_name(MessageType.DEAD_PURGE, payload, 0))


def decode_schedules(payload: bytes) -> Schedules:
    if payload:
        raise bad(MessageType.SCHEDULES, f"payload must be empty, got {len(payload)} bytes")
    return Schedules()


_SCHEDULE_FIELDS = frozenset(ScheduleField)


def decode_schedule(payload: bytes) -> Schedule:
    kind = MessageType.SCHEDULE
    name, offset = split_name(kind, payload, 0)
    if len(payload) < offset + 2:
        raise bad(kind, "has no fields length")
    end = offset + 2 + U16.unpack_from(payload, offset)[0]
    if end > len(payload):
        raise bad(kind, "fields run past the payload")
    items = tlv(kind, payload, offset + 2, end)
    unknown = set(items) - _SCHEDULE_FIELDS
    if unknown:
        raise bad(kind, f"has unknown field 0x{min(unknown):02x}")
    if (ScheduleField.CRON in items) == (ScheduleField.INTERVAL in items):
        raise bad(kind, "needs a cron expression or an interval, not both or neither")
    cron, interval = "", 0
    if ScheduleField.CRON in items:
        cron = text(kind, items[ScheduleField.CRON], "cron expression")
        if not cron:
            raise bad(kind, "has an empty cron expression")
    else:
        raw = items[ScheduleField.INTERVAL]
        if len(raw) != 4 or not (interval := TASK_ID.unpack(raw)[0]):
            raise bad(kind, "interval must be 4 bytes of 1 or more seconds")
    task_type = items.get(ScheduleField.TYPE, b"")
    if not task_type:
        raise bad(kind, "has no task type")
    queue = None
    if ScheduleField.QUEUE in items:
        queue = queue_name(kind, items[ScheduleField.QUEUE])
    priority = None
    if ScheduleField.PRIORITY in items:
        raw = items[ScheduleField.PRIORITY]
        if len(raw) != 1:
            raise bad(kind, "priority must be 1 byte")
        priority = raw[0]
    missed, catch_up = Missed.ONCE, 100
    if ScheduleField.MISSED in items:
        raw = items[ScheduleField.MISSED]
        if len(raw) != 3 or raw[0] not in tuple(Missed):
            raise bad(kind, "missed-fire field must be [policy 0-2][cap u16]")
        policy, catch_up = _MISSED.unpack(raw)
        missed = Missed(policy)
    timezone = text(kind, items.get(ScheduleField.TIMEZONE, b"UTC"), "time zone") or "UTC"
    return Schedule(
        name, task_type, payload[end:], cron, interval, timezone, queue, priority, missed, catch_up
    )


def decode_unschedule(payload: bytes) -> Unschedule:
    name, end = split_name(MessageType.UNSCHEDULE, payload, 0)
    if end != len(payload):
        raise bad(MessageType.UNSCHEDULE, f"has {len(payload) - end} bytes after its name")
    return Unschedule(name)


def _queue_action_decoder(action: MessageType) -> Callable[[bytes], Message]:
    def decode_action(payload: bytes) -> Message:
        return decode_queue_action(action, payload)

    return decode_action


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.CANCEL: decode_cancel,
    MessageType.CANCELLED: decode_cancelled,
    MessageType.PAUSE: _queue_action_decoder(MessageType.PAUSE),
    MessageType.RESUME: _queue_action_decoder(MessageType.RESUME),
    MessageType.PURGE: _queue_action_decoder(MessageType.PURGE),
    MessageType.QUEUES: decode_queues,
    MessageType.PEEK: decode_peek,
    MessageType.INSPECT: decode_inspect,
    MessageType.DEAD: decode_dead,
    MessageType.REPLAY: decode_replay,
    MessageType.DEAD_PURGE: decode_dead_purge,
    MessageType.SCHEDULES: decode_schedules,
    MessageType.SCHEDULE: decode_schedule,
    MessageType.UNSCHEDULE: decode_unschedule,
}
