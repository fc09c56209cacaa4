"""
The codec of version 2, part 2 (L{quicx.protocol.admin} and L{quicx.protocol.outcomes}): every new
message round-trips through the frame parser and back through its encoder
(property-based), the page's layouts and numbers are the codec's, and every
malformed payload is refused with a message that names the message and the
fault.

The new SUBMIT options and TASK context items round-trip in
tests/protocol/test_wire_v2.py, whose strategies draw them; the page's spelling of
them, and their malformed values, are checked here.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import admin, codec, outcomes, registry, taskflow
from quicx.protocol.admin import (
    Dead,
    DeadPurge,
    Missed,
    Replay,
    Schedule,
    ScheduleField,
    Schedules,
    Unschedule,
)
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.outcomes import Ack, Nack, Retrying, Touch
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.protocol.test_wire_v2 import (
    FIXED,
    LIFECYCLE,
    NAME_IS_BAD,
    any_message,
    encode_submit,
    opts,
    payloads,
    queue_names,
    results_drawn,
    submits,
    table,
    task_ids,
    types,
    u16s,
    u64s,
)


def through_parser(encoded: bytes) -> object:
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    (frame,) = parser.feed(encoded)
    assert isinstance(frame, Frame) and parser.version == 2
    return registry.decode(frame.message_type, frame.payload)


ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Ack: lambda m: outcomes.encode_ack(m.task_id, m.token, m.result),
    Nack: lambda m: outcomes.encode_nack(m.task_id, m.token, m.reason, m.permanent),
    Touch: lambda m: outcomes.encode_touch(m.task_id, m.token, m.seconds),
    Retrying: lambda m: outcomes.encode_retrying(m.task_id, m.attempt, m.due_ms, m.reason),
    Dead: lambda m: admin.encode_dead(m.limit, m.queue),
    Replay: lambda m: admin.encode_replay(m.task_id, m.queue),
    DeadPurge: lambda m: admin.encode_dead_purge(m.queue),
    Schedules: lambda m: admin.SCHEDULES_FRAME,
    Schedule: admin.encode_schedule,
    Unschedule: lambda m: admin.encode_unschedule(m.name),
    taskflow.Submit: encode_submit,
}
"""The encoder of each new message, and of SUBMIT, given the message as decoded."""


def encode(message: object) -> bytes:
    return ENCODERS[type(message)](message)


def _schedule(
    name: str,
    task_type: bytes,
    payload: bytes,
    when: str | int,
    timezone: str,
    queue: str | None,
    priority: int | None,
    missed: Missed,
    catch_up: int,
) -> Schedule:
    cron, interval = (when, 0) if isinstance(when, str) else ("", when)
    fields = (cron, interval, timezone, queue, priority, missed, catch_up)
    return Schedule(name, task_type, payload, *fields)


live_ids = st.integers(1, codec.MAX_TASK_ID)
reasons = st.text(max_size=100)
optional_queues = st.none() | queue_names
item_texts = st.text(min_size=1, max_size=60).filter(lambda t: len(t.encode()) <= 255)
"""The text of a TLV item: 1 to 255 bytes of UTF-8."""
schedules = st.builds(
    _schedule,
    queue_names,
    types,
    payloads,
    item_texts | st.integers(1, admin.MAX_INTERVAL),
    item_texts,
    optional_queues,
    st.none() | st.integers(0, 255),
    st.sampled_from(Missed),
    u16s,
)
"""A SCHEDULE: a cron expression or an interval, never both."""

MESSAGES: dict[str, st.SearchStrategy[Any]] = {
    "ACK": st.builds(Ack, live_ids, u64s, st.none() | results_drawn),
    "NACK": st.builds(Nack, live_ids, u64s, reasons, st.booleans()),
    "TOUCH": st.builds(Touch, live_ids, u64s, st.integers(1, 0xFFFFFFFF)),
    "RETRYING": st.builds(Retrying, task_ids, u16s, u64s, reasons),
    "DEAD": st.builds(Dead, st.integers(1, admin.MAX_DEAD_LIST), optional_queues),
    "REPLAY": st.builds(Replay, st.just(0), optional_queues) | st.builds(Replay, live_ids),
    "DEAD_PURGE": st.builds(DeadPurge, optional_queues),
    "SCHEDULES": st.just(Schedules()),
    "SCHEDULE": schedules,
    "UNSCHEDULE": st.builds(Unschedule, queue_names),
}
"""Every message of part 2, by name."""
new_messages = st.one_of(*MESSAGES.values()).map(lambda m: (encode(m), m))
"""Any message of part 2: its frame, and what decoding that frame gives."""


def test_every_new_message_type_is_drawn() -> None:
    part2 = {t.name for t in MessageType if MessageType.ACK <= t <= MessageType.UNSCHEDULE}
    assert set(MESSAGES) == part2


@given(st.tuples(*MESSAGES.values()))
def test_every_new_message_round_trips(messages: tuple[object, ...]) -> None:
    for name, message in zip(MESSAGES, messages, strict=True):
        encoded = encode(message)
        assert encoded[:2] == bytes((2, MessageType[name])), name
        decoded = through_parser(encoded)
        assert decoded == message, name
        assert encode(decoded) == encoded, name  # re-encoding what was decoded changes nothing


@given(st.lists(new_messages | any_message, min_size=1, max_size=12), st.lists(u16s))
def test_a_stream_of_both_parts_decodes_whatever_the_reads(
    messages: list[tuple[bytes, object]], cuts: list[int]
) -> None:
    stream = b"".join(encoded for encoded, _ in messages)
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    frames = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        frames += parser.feed(stream[start:end])
    assert all(isinstance(f, Frame) for f in frames)
    decoded = [registry.decode(f.message_type, f.payload) for f in frames]  # type: ignore[union-attr]
    assert decoded == [expected for _, expected in messages]


def mutate(payload: bytes, how: str, at: int, byte: int) -> bytes:
    """C{payload} cut short, with a byte inserted, or with one byte replaced, at C{at}."""
    at %= len(payload) + 1
    if how == "cut":
        return payload[:at]
    if how == "insert" or at == len(payload):
        return payload[:at] + bytes((byte,)) + payload[at:]
    return payload[:at] + bytes((byte,)) + payload[at + 1 :]


@given(
    new_messages | submits,
    st.sampled_from(["cut", "insert", "replace"]),
    u16s,
    st.integers(0, 255),
)
def test_a_damaged_payload_is_refused_or_decodes_to_what_its_encoder_keeps(
    message: tuple[bytes, object], how: str, at: int, byte: int
) -> None:
    encoded, _ = message
    payload = mutate(encoded[6:], how, at, byte)
    try:
        decoded = registry.decode(encoded[1], payload)
    except MalformedMessage:
        return  # never another exception: the daemon answers this one ERROR 0x02
    again = encode(decoded)
    assert registry.decode(again[1], again[6:]) == decoded


# -- the page: its layouts, tags and numbers ------------------------------------------------

FIELD = re.compile(r"\[(\w+)(?: ([\w-]+))?\]")
INTEGERS = {"u8": "B", "u16": "H", "u32": "I", "u64": "Q"}


def spell(layout: str, values: dict[str, Any]) -> bytes:
    """
    The bytes of a layout as the page writes it (C{`[task_id u32][reason
    UTF-8]`}, or C{empty}), with C{values} by field name: an integer for a
    field of an integer type, bytes for the others; C{X_len} is the length
    of C{X} unless given.
    """
    layout = layout.strip("`")
    assert layout == "empty" or not FIELD.sub("", layout), f"not a layout: {layout}"
    fields = FIELD.findall(layout)
    data = b""
    for field, kind in fields:
        if kind not in INTEGERS:
            data += values[field]
        else:
            value = values.get(field)
            if value is None:
                value = len(values[field.removesuffix("_len")])
            data += struct.pack(">" + INTEGERS[kind], value)
    return data


def item(tag: int, value: bytes) -> bytes:
    return bytes((tag, len(value))) + value


TOKEN = 0x0123_4567_89AB_CDEF
DUE = 1_795_000_000_000
NIGHTLY = (
    item(0x02, struct.pack(">I", 3600))
    + item(0x03, b"UTC")
    + item(0x04, b"build")
    + item(0x07, b"\x01\x00\x64")
)
"""A SCHEDULE's fields, hand-made from the page, in the encoder's order."""
SPELLED: dict[str, tuple[dict[str, Any], object]] = {
    "ACK": ({"task_id": 7, "token": TOKEN}, Ack(7, TOKEN)),
    "NACK": (
        {"task_id": 7, "token": TOKEN, "flags": 1, "reason": "gone ✗".encode()},
        Nack(7, TOKEN, "gone ✗", permanent=True),
    ),
    "TOUCH": ({"task_id": 7, "token": TOKEN, "seconds": 30}, Touch(7, TOKEN, 30)),
    "RETRYING": (
        {"task_id": 7, "attempt": 2, "due_ms": DUE, "reason": b"busy"},
        Retrying(7, 2, DUE, "busy"),
    ),
    "DEAD": ({"limit": 10, "name": b"mail"}, Dead(10, "mail")),
    "REPLAY": ({"task_id": 0, "name": b"mail"}, Replay(0, "mail")),
    "DEAD_PURGE": ({"name": b""}, DeadPurge()),  # name_len 0: every queue
    "SCHEDULES": ({}, Schedules()),
    "SCHEDULE": (
        {"name": b"nightly", "fields": NIGHTLY, "payload": b"{}"},
        Schedule("nightly", b"build", b"{}", interval=3600),
    ),
    "UNSCHEDULE": ({"name": b"nightly"}, Unschedule("nightly")),
}
"""Values for each message's layout on the page, and the message they spell."""


def test_the_pages_layouts_are_the_codecs() -> None:
    rows = table(LIFECYCLE, "## Messages")
    assert [name for _, name, *_ in rows] == list(SPELLED)
    for code, name, _, layout in rows:
        values, message = SPELLED[name]
        payload = spell(layout, values)
        assert registry.decode(int(code, 16), payload) == message, name
        assert encode(message) == codec.frame(int(code, 16), payload), name


def test_the_pages_submit_options_are_the_codecs() -> None:
    given_values: dict[str, tuple[dict[str, int], dict[str, Any]]] = {
        "delay": ({"value": 1500}, {"delay_ms": 1500}),
        "run at": ({"value": DUE}, {"run_at_ms": DUE}),
        "retries": ({"value": 3}, {"retries": 3}),
        "backoff": (
            {"kind": 1, "base_ms": 100, "cap_ms": 5000, "jitter": 20},
            {"backoff": Backoff(BackoffKind.EXPONENTIAL, 100, 5000, 20)},
        ),
    }
    rows = table(LIFECYCLE, "## More SUBMIT options")
    assert [option for _, option, *_ in rows] == list(given_values)
    for tag, option, value, _ in rows:
        layout = value.split(":")[0].strip("` ")
        layout = f"[value {layout}]" if layout in INTEGERS else layout
        values, fields = given_values[option]
        spelled = item(int(tag, 16), spell(layout, values))
        decoded = registry.decode(MessageType.SUBMIT, b"\x01t" + opts(spelled) + b"p")
        assert decoded == taskflow.Submit(b"t", b"p", taskflow.SubmitOptions(**fields)), option
        assert encode(decoded) == codec.frame(MessageType.SUBMIT, b"\x01t" + opts(spelled) + b"p")


def test_the_pages_context_items_are_the_codecs() -> None:
    given_values = {
        "token": {"value": TOKEN},
        "lease": {"value": 30_000},
        "retries": {"failures": 1, "retries": 3},
    }
    rows = table(LIFECYCLE, "## TASK context items")
    assert [name for _, name, _ in rows] == list(given_values)
    context = b""
    for tag, name, value in rows:
        layout = value.split(":")[0].strip("` ")
        layout = f"[value {layout}]" if layout in INTEGERS else layout
        context += item(int(tag, 16), spell(layout, given_values[name]))
    task = registry.decode(MessageType.TASK, FIXED + b"\x01q\x01t" + opts(context) + b"p")
    assert task == taskflow.Task(
        1, b"t", b"p", "q", 0, 1, 0, token=TOKEN, lease_ms=30_000, failures=1, retries=3
    )


def words(text: str) -> str:
    """C{text} with each run of white space one space: a paragraph on one line."""
    return " ".join(text.split())


def test_the_pages_schedule_fields_are_the_codecs() -> None:
    page = words(LIFECYCLE)
    paragraph = page[page.index("**SCHEDULE** (admin)") : page.index("The rest of the payload")]
    named = re.findall(r"`0x([0-9a-f]{2})` ([a-z][a-z -]*[a-z])", paragraph)
    names = {"cron expression": "CRON", "time zone": "TIMEZONE", "task type": "TYPE"}
    names |= {"missed-fire": "MISSED"}
    assert [(int(tag, 16), names.get(field, field.upper())) for tag, field in named] == [
        (f.value, f.name) for f in ScheduleField
    ]
    policies = re.findall(r"(\d) (skip|once|all)", paragraph)
    assert [(int(n), p.upper()) for n, p in policies] == [(m.value, m.name) for m in Missed]
    # Fields left out: the page's defaults.
    assert "default `UTC`" in paragraph and "(default once, catch-up 100)" in paragraph
    decoded = registry.decode(MessageType.SCHEDULE, schedule_body(INTERVAL + TYPE))
    assert decoded == Schedule(
        "s", b"t", interval=60, timezone="UTC", missed=Missed.ONCE, catch_up=100
    )


def test_the_pages_flag_and_backoff_numbers_are_the_codecs() -> None:
    page = words(LIFECYCLE)
    assert f"NACK flag `0x{outcomes.NACK_PERMANENT:02x}` (*permanent*)" in page
    kinds = re.search(r"a backoff kind other than (\d) \((\w+)\) or (\d) \((\w+)\)", page)
    assert kinds is not None
    numbers = kinds.groups()
    assert [(int(n), k.upper()) for n, k in zip(numbers[::2], numbers[1::2], strict=True)] == [
        (k.value, k.name) for k in BackoffKind
    ]


# -- malformed payloads ------------------------------------------------------------------


def ack(task_id: int, token: int = 5) -> bytes:
    return struct.pack(">IQ", task_id, token)


def schedule_body(fields: bytes, name: bytes = b"s", payload: bytes = b"") -> bytes:
    return bytes((len(name),)) + name + opts(fields) + payload


INTERVAL = item(0x02, b"\x00\x00\x00\x3c")
TYPE = item(0x04, b"t")
BACKOFF = "SUBMIT backoff"


@pytest.mark.parametrize(
    ("message_type", "payload", "message"),
    [
        # ACK: exactly a task id and a token.
        (MessageType.ACK, b"", "ACK needs at least 12 bytes, got 0"),
        (MessageType.ACK, ack(1)[:11], "ACK needs at least 12 bytes, got 11"),
        (MessageType.ACK, ack(1) + b"\x00", "ACK has unknown result kind 0x00"),
        (MessageType.ACK, ack(0), "ACK names task 0"),
        # NACK: a task id, a token, flags, a UTF-8 reason.
        (MessageType.NACK, ack(1), "NACK needs at least 13 bytes, got 12"),
        (MessageType.NACK, ack(0) + b"\x00", "NACK names task 0"),
        (MessageType.NACK, ack(1) + b"\x02", "NACK has unknown flags 0x02"),
        (MessageType.NACK, ack(1) + b"\x81why", "NACK has unknown flags 0x81"),
        (MessageType.NACK, ack(1) + b"\x00\xff", "NACK reason is not UTF-8"),
        (MessageType.NACK, ack(1) + b"\x01\xc3(", "NACK reason is not UTF-8"),
        # TOUCH: a task id, a token and seconds.
        (MessageType.TOUCH, ack(1) + b"\x00\x00\x01", "TOUCH payload must be 16 bytes, got 15"),
        (MessageType.TOUCH, ack(1) + bytes(5), "TOUCH payload must be 16 bytes, got 17"),
        (
            MessageType.TOUCH,
            ack(0) + b"\x00\x00\x00\x1e",
            "TOUCH names task 0 or extends by 0 seconds",
        ),
        (MessageType.TOUCH, ack(1) + bytes(4), "TOUCH names task 0 or extends by 0 seconds"),
        # RETRYING: a task id, an attempt, a due time, a UTF-8 reason.
        (MessageType.RETRYING, bytes(13), "RETRYING needs at least 14 bytes"),
        (MessageType.RETRYING, bytes(14) + b"\xff", "RETRYING reason is not UTF-8"),
        # DEAD: a count of 1 to 1000 and an optional queue.
        (MessageType.DEAD, b"\x00", "DEAD has no count"),
        (MessageType.DEAD, b"\x00\x00\x00", "DEAD count must be 1 to 1000, not 0"),
        (MessageType.DEAD, b"\x03\xe9\x00", "DEAD count must be 1 to 1000, not 1001"),
        (MessageType.DEAD, b"\x00\x01", "DEAD has no queue name length"),
        (MessageType.DEAD, b"\x00\x01\x05mail", "DEAD queue name of 5 bytes runs past the payload"),
        (MessageType.DEAD, b"\x00\x01\x03a b", f"DEAD queue name b'a b' {NAME_IS_BAD}"),
        (MessageType.DEAD, b"\x00\x01\x00X", "DEAD has 1 bytes after its name"),
        (MessageType.DEAD, b"\x00\x01\x01qXY", "DEAD has 2 bytes after its name"),
        # REPLAY: a task id, or 0 and an optional queue.
        (MessageType.REPLAY, b"\x00\x00\x01", "REPLAY has no task id"),
        (MessageType.REPLAY, b"\x00\x00\x00\x01", "REPLAY has no queue name length"),
        (
            MessageType.REPLAY,
            b"\x00\x00\x00\x01\x01q",
            "REPLAY names a task and a queue: name one, or the queue with id 0",
        ),
        (MessageType.REPLAY, bytes(4) + b"\x01/", f"REPLAY queue name b'/' {NAME_IS_BAD}"),
        (MessageType.REPLAY, bytes(5) + b"X", "REPLAY has 1 bytes after its name"),
        # DEAD_PURGE: an optional queue.
        (MessageType.DEAD_PURGE, b"", "DEAD_PURGE has no queue name length"),
        (MessageType.DEAD_PURGE, b"\x00X", "DEAD_PURGE has 1 bytes after its name"),
        (MessageType.DEAD_PURGE, b"\x01qX", "DEAD_PURGE has 1 bytes after its name"),
        (
            MessageType.DEAD_PURGE,
            b"\x02q",
            "DEAD_PURGE queue name of 2 bytes runs past the payload",
        ),
        (
            MessageType.DEAD_PURGE,
            b"\x05" + "café".encode(),
            f"DEAD_PURGE queue name b'caf\\xc3\\xa9' {NAME_IS_BAD}",
        ),
        # SCHEDULES: empty.
        (MessageType.SCHEDULES, b"\x00", "SCHEDULES payload must be empty, got 1 bytes"),
        # SCHEDULE: a name, TLV fields, the task payload.
        (MessageType.SCHEDULE, b"", "SCHEDULE has no queue name length"),
        (
            MessageType.SCHEDULE,
            b"\x00" + opts(INTERVAL + TYPE),
            f"SCHEDULE queue name b'' {NAME_IS_BAD}",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE, b"a b"),
            f"SCHEDULE queue name b'a b' {NAME_IS_BAD}",
        ),
        (MessageType.SCHEDULE, b"\x01s\x00", "SCHEDULE has no fields length"),
        (MessageType.SCHEDULE, b"\x01s\x00\x09" + INTERVAL, "SCHEDULE fields run past the payload"),
        (MessageType.SCHEDULE, schedule_body(b"\x04"), "SCHEDULE option at byte 4 has no length"),
        (
            MessageType.SCHEDULE,
            schedule_body(b"\x04\x05t"),
            "SCHEDULE option 0x04 of 5 bytes runs past its field",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x08, b"x")),
            "SCHEDULE has unknown field 0x08",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + TYPE),
            "SCHEDULE repeats option 0x04",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x01, b"* * * * *") + INTERVAL + TYPE),
            "SCHEDULE needs a cron expression or an interval, not both or neither",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(TYPE),
            "SCHEDULE needs a cron expression or an interval, not both or neither",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x01, b"") + INTERVAL + TYPE),
            "SCHEDULE needs a cron expression or an interval, not both or neither",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x01, b"") + TYPE),
            "SCHEDULE has an empty cron expression",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x01, b"*\xff") + TYPE),
            "SCHEDULE cron expression is not UTF-8",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x02, bytes(4)) + TYPE),
            "SCHEDULE interval must be 4 bytes of 1 or more seconds",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(item(0x02, b"\x00\x3c") + TYPE),
            "SCHEDULE interval must be 4 bytes of 1 or more seconds",
        ),
        (MessageType.SCHEDULE, schedule_body(INTERVAL), "SCHEDULE has no task type"),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + item(0x04, b"")),
            "SCHEDULE has no task type",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x03, b"\xffUTC")),
            "SCHEDULE time zone is not UTF-8",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x05, b"no way")),
            f"SCHEDULE queue name b'no way' {NAME_IS_BAD}",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x06, b"")),
            "SCHEDULE priority must be 1 byte",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x06, b"\x00\x01")),
            "SCHEDULE priority must be 1 byte",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x07, b"\x03\x00\x01")),
            "SCHEDULE missed-fire field must be [policy 0-2][cap u16]",
        ),
        (
            MessageType.SCHEDULE,
            schedule_body(INTERVAL + TYPE + item(0x07, b"\x01\x00")),
            "SCHEDULE missed-fire field must be [policy 0-2][cap u16]",
        ),
        # UNSCHEDULE: a name, and nothing after it.
        (MessageType.UNSCHEDULE, b"", "UNSCHEDULE has no queue name length"),
        (MessageType.UNSCHEDULE, b"\x00", f"UNSCHEDULE queue name b'' {NAME_IS_BAD}"),
        (
            MessageType.UNSCHEDULE,
            b"\x02s",
            "UNSCHEDULE queue name of 2 bytes runs past the payload",
        ),
        (MessageType.UNSCHEDULE, b"\x01s\x00", "UNSCHEDULE has 1 bytes after its name"),
        (MessageType.UNSCHEDULE, b"\x03s/t", f"UNSCHEDULE queue name b's/t' {NAME_IS_BAD}"),
        # SUBMIT's options of part 2.
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x05, bytes(3))),
            "SUBMIT delay must be 4 bytes (ms), not 3",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x05, bytes(8))),
            "SUBMIT delay must be 4 bytes (ms), not 8",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x06, bytes(4))),
            "SUBMIT run-at must be 8 bytes (ms), not 4",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x07, b"\x03")),
            "SUBMIT retries must be 2 bytes, not 1",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x07, bytes(4))),
            "SUBMIT retries must be 2 bytes, not 4",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x05, bytes(4)) + item(0x06, bytes(8))),
            "SUBMIT has both a delay and a time to run at",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x05, bytes(4)) * 2),
            "SUBMIT repeats option 0x05",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x08, bytes(9))),
            f"{BACKOFF} must be 10 bytes, not 9",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x08, struct.pack(">BIIB", 2, 1, 2, 0))),
            f"{BACKOFF} kind must be 0 (fixed) or 1 (exponential), not 2",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x08, struct.pack(">BIIB", 1, 1001, 1000, 0))),
            f"{BACKOFF} base 1001 ms exceeds its cap 1000 ms",
        ),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x08, struct.pack(">BIIB", 0, 1, 2, 101))),
            f"{BACKOFF} jitter must be 0 to 100 percent, not 101",
        ),
        (MessageType.SUBMIT, b"\x01t" + opts(item(0x7E, b"x")), "SUBMIT has unknown option 0x7e"),
        # TASK's context items of part 2.
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t" + opts(item(0x20, bytes(4))),
            "TASK context item 0x20 is not 8 bytes",
        ),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t" + opts(item(0x21, bytes(8))),
            "TASK context item 0x21 is not 4 bytes",
        ),
        (
            MessageType.TASK,
            FIXED + b"\x01q\x01t" + opts(item(0x22, bytes(2))),
            "TASK context item 0x22 is not 4 bytes",
        ),
    ],
)
def test_every_malformed_payload_names_the_message_and_the_fault(
    message_type: MessageType, payload: bytes, message: str
) -> None:
    with pytest.raises(MalformedMessage) as raised:
        registry.decode(message_type, payload)
    assert (str(raised.value), raised.value.message_type) == (message, message_type)


def test_a_stale_code_and_the_nack_flag() -> None:
    assert codec.ErrorCode.STALE == 0x08
    nack = outcomes.encode_nack(1, 2, "x", permanent=True)
    assert nack[6 + 12] == outcomes.NACK_PERMANENT == 0x01
    assert outcomes.encode_nack(1, 2, "x")[6 + 12] == 0


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: taskflow.submit_options(delay_ms=1, run_at_ms=2), "not both"),
        (lambda: taskflow.submit_options(delay_ms=-1), "0 to 4294967295 ms"),
        (lambda: taskflow.submit_options(delay_ms=1 << 32), "0 to 4294967295 ms"),
        (lambda: taskflow.submit_options(run_at_ms=1 << 64), "u64 of milliseconds"),
        (lambda: taskflow.submit_options(retries=0x10000), "0 to 65535"),
        (lambda: taskflow.encode_backoff(Backoff(2, 1, 2, 0)), r"fixed \(0\) or exponential \(1\)"),  # type: ignore[arg-type]
        (lambda: taskflow.encode_backoff(Backoff(BackoffKind.FIXED, 3, 2, 0)), "base <= cap"),
        (
            lambda: taskflow.encode_backoff(Backoff(BackoffKind.FIXED, 1, 2, 101)),
            "0 to 100 percent",
        ),
        (lambda: outcomes.encode_touch(1, 2, 0), "1 to 4294967295 seconds"),
        (lambda: admin.encode_dead(0), "1 to 1000"),
        (lambda: admin.encode_dead(1001), "1 to 1000"),
        (lambda: admin.encode_dead(1, "a b"), "queue name"),
        (lambda: admin.encode_replay(-1), "0 \\(all\\)"),
        (lambda: admin.encode_replay(1, "q"), "a task or a queue, not both"),
        (lambda: admin.encode_unschedule(""), "queue name"),
        (lambda: admin.encode_schedule(Schedule("s", b"t")), "not both or neither"),
        (
            lambda: admin.encode_schedule(Schedule("s", b"t", cron="* * * * *", interval=5)),
            "not both or neither",
        ),
        (lambda: admin.encode_schedule(Schedule("s", b"t", interval=1 << 32)), "interval"),
        (lambda: admin.encode_schedule(Schedule("s", b"", interval=5)), "task type"),
        (lambda: admin.encode_schedule(Schedule("a b", b"t", interval=5)), "queue name"),
        (
            lambda: admin.encode_schedule(Schedule("s", b"t", interval=5, priority=256)),
            "0 to 255",
        ),
        (
            lambda: admin.encode_schedule(Schedule("s", b"t", interval=5, catch_up=-1)),
            "catch-up",
        ),
        (
            lambda: admin.encode_schedule(Schedule("s", b"t", interval=5, timezone="")),
            "1 to 255",
        ),
    ],
)
def test_encoders_refuse_what_the_page_forbids(call: Callable[[], object], fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()
