"""
The codec of protocol v2 part 4 (L{quicx.protocol.monitor}): WATCH and
EVENTS, checked against docs/protocol.md, "Version 2: live events".
"""

from __future__ import annotations

import json
import re
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.daemon.observe.events import _EXTRA_KEY, format_event
from quicx.protocol import codec, monitor, registry
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.monitor import EVENT_KINDS, MAX_EVENTS_BYTES, MAX_WATCH, Events, Status, Watch
from tests.protocol.test_wire_lifecycle import mutate, new_messages, spell
from tests.protocol.test_wire_results import part3_messages
from tests.protocol.test_wire_v2 import MONITOR, any_message, queue_names, table

task_types = st.binary(min_size=1, max_size=codec.MAX_TYPE_LENGTH)
kinds = st.sampled_from(EVENT_KINDS)
lines = st.text(min_size=1, max_size=80).filter(lambda line: "\n" not in line)


def _list(items: st.SearchStrategy[Any]) -> st.SearchStrategy[tuple[Any, ...]]:
    return st.lists(items, max_size=MAX_WATCH, unique=True).map(tuple)


MESSAGES: dict[str, st.SearchStrategy[Any]] = {
    "WATCH": st.builds(Watch, _list(queue_names), _list(task_types), _list(kinds))
    | st.just(Watch(stop=True)),
    "EVENTS": st.builds(
        Events, st.lists(lines, max_size=10).map(tuple), st.integers(0, (1 << 64) - 1)
    ),
    "STATUS": st.just(Status()),
}
"""Every message of part 4, by name."""

ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Watch: lambda m: monitor.encode_watch(m.queues, m.types, m.kinds, m.stop),
    Events: lambda m: monitor.encode_events(m.lines, m.missed),
    Status: lambda m: monitor.encode_status(),
}


def encode(message: object) -> bytes:
    return ENCODERS[type(message)](message)


def frames_of(encoded: bytes) -> list[object]:
    parser = FrameParser(1 << 20, v2_max_length=1 << 20)
    frames = parser.feed(encoded)
    assert all(isinstance(f, Frame) for f in frames) and parser.version == 2
    return [registry.decode(f.message_type, f.payload) for f in frames]  # type: ignore[union-attr]


part4_messages = st.one_of(*MESSAGES.values()).map(lambda m: (encode(m), m))


def test_every_new_message_type_is_drawn() -> None:
    part4 = {t.name for t in MessageType if MessageType.WATCH <= t <= MessageType.STATUS}
    assert set(MESSAGES) == part4


@given(st.tuples(*MESSAGES.values()))
def test_every_new_message_round_trips(messages: tuple[object, ...]) -> None:
    for name, message in zip(MESSAGES, messages, strict=True):
        encoded = encode(message)
        assert encoded[:2] == bytes((2, MessageType[name])), name
        assert frames_of(encoded) == [message], name


@given(
    st.lists(part4_messages | part3_messages | new_messages | any_message, min_size=1, max_size=12),
    st.lists(st.integers(0, 10_000)),
)
def test_a_stream_of_all_four_parts_decodes_whatever_the_reads(
    messages: list[tuple[bytes, object]], cuts: list[int]
) -> None:
    stream = b"".join(encoded for encoded, _ in messages)
    points = sorted({cut % (len(stream) + 1) for cut in cuts})
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    frames = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        frames += parser.feed(stream[start:end])
    decoded = [registry.decode(f.message_type, f.payload) for f in frames]  # type: ignore[union-attr]
    assert decoded == [expected for _, expected in messages]


@given(part4_messages, st.sampled_from(["cut", "insert", "replace"]), st.integers(0, 1 << 16))
def test_a_damaged_payload_is_refused_or_decodes_to_what_its_encoder_keeps(
    message: tuple[bytes, object], how: str, at: int
) -> None:
    encoded, _ = message
    for byte in (0, 1, 10, 0x21, 0xFF):
        payload = mutate(encoded[6:], how, at, byte)
        try:
            decoded = registry.decode(encoded[1], payload)
        except MalformedMessage:
            continue  # never another exception: the daemon answers this one ERROR 0x02
        again = encode(decoded)
        assert registry.decode(again[1], again[6:]) == decoded


def test_many_events_are_cut_into_frames_of_whole_lines() -> None:
    line = "x" * 1000
    encoded = monitor.encode_events([line] * 200, missed=7)
    assert monitor.encode_events([line] * 200, 7, whole=True) == encoded  # (the daemon's lines)
    decoded = frames_of(encoded)
    assert len(decoded) == 4  # 65 lines of 1001 bytes fit in 64 KiB
    assert [e.missed for e in decoded] == [7, 0, 0, 0]  # type: ignore[attr-defined]
    assert sum((e.lines for e in decoded), ()) == (line,) * 200  # type: ignore[attr-defined]
    assert all(len(f) <= 6 + 8 + MAX_EVENTS_BYTES for f in _raw_frames(encoded))
    long = "y" * (MAX_EVENTS_BYTES + 10)  # alone in its frame
    assert frames_of(monitor.encode_events(["a", long, "b"]))[1] == Events((long,))


def _raw_frames(encoded: bytes) -> list[bytes]:
    frames, offset = [], 0
    while offset < len(encoded):
        (length,) = struct.unpack_from(">I", encoded, offset + 2)
        frames.append(encoded[offset : offset + 6 + length])
        offset += 6 + length
    return frames


def test_events_carry_the_files_lines() -> None:
    line = format_event((1.5, "failed", 7, b"mail", 12, 3, 9, 2, "SMTP 550\nagain", "q", 5))
    (events,) = frames_of(monitor.encode_events([line]))
    assert isinstance(events, Events) and json.loads(events.lines[0])["reason"] == "SMTP 550\nagain"


# -- the page ----------------------------------------------------------------------------

SPELLED: dict[str, tuple[dict[str, Any], object]] = {
    "WATCH": (
        {
            "flags": 0,
            "queue_count": 1,
            "queues": b"\x04mail",
            "type_count": 2,
            "types": b"\x04send\x05print",
            "kind_count": 1,
            "kinds": b"\x06failed",
        },
        Watch(("mail",), (b"send", b"print"), ("failed",)),
    ),
    "EVENTS": ({"missed": 3, "lines": b'{"a":1}\n{"b":2}\n'}, Events(('{"a":1}', '{"b":2}'), 3)),
    "STATUS": ({}, Status()),
}
"""Values for each message's layout on the page, and the message they spell."""


def test_the_pages_layouts_are_the_codecs() -> None:
    rows = table(MONITOR, "## Messages")
    assert [name for _, name, *_ in rows] == list(SPELLED)
    for code, name, _, layout in rows:
        values, message = SPELLED[name]
        payload = spell(layout, values)
        assert registry.decode(int(code, 16), payload) == message, name
        assert encode(message) == codec.frame(int(code, 16), payload), name


def test_the_pages_event_kinds_are_the_codecs_and_the_files() -> None:
    rows = table(MONITOR, "| kind | its own fields |")
    assert tuple(kind.strip("`") for kind, _ in rows) == EVENT_KINDS
    extra = {
        kind.strip("`"): re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", fields))
        for kind, fields in rows
    }
    for kind, keys in _EXTRA_KEY.items():
        assert extra[kind] == ([keys] if isinstance(keys, str) else list(keys)), kind
    assert {kind for kind, fields in extra.items() if fields} == set(_EXTRA_KEY)


def test_every_kind_the_daemon_records_is_known() -> None:
    daemon = Path(__file__).resolve().parents[2] / "quicx" / "daemon"
    source = "\n".join(path.read_text() for path in sorted(daemon.rglob("*.py")))
    # record(self.events, "kind" ...) in the kernel, record(self.kernel.events, ...) or
    # record(events, ...) in its collaborators, events.record("kind" ...) elsewhere.
    spelling = r"(?:record\(\s*(?:self\.|self\.kernel\.|kernel\.)?events,|events\.record\()"
    recorded = set(re.findall(spelling + r'\s*"(\w+)"', source))
    assert recorded == set(EVENT_KINDS)


def test_the_stop_flag_and_the_sizes_are_the_pages() -> None:
    assert frames_of(codec.frame(MessageType.WATCH, b"\x01")) == [Watch(stop=True)]
    assert "10,411 bytes" in MONITOR and monitor.MAX_WATCH_SIZE == 10_411
    assert "at most 64 KiB of lines" in MONITOR and MAX_EVENTS_BYTES == 64 << 10


# -- every bad input says what is wrong --------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (b"", "WATCH has no flags"),
        (b"\x02\x00\x00\x00", "WATCH has unknown flags 0x02"),
        (b"\x01\x00\x00\x00", "WATCH stops watching but lists a filter"),
        (b"\x00", "WATCH has no queue count"),
        (b"\x00\x00", "WATCH has no type count"),
        (b"\x00\x00\x00", "WATCH has no kind count"),
        (b"\x00\x21", "WATCH lists 0 to 32 queues, not 33"),
        (b"\x00\x00\x21", "WATCH lists 0 to 32 types, not 33"),
        (b"\x00\x00\x00\x21", "WATCH lists 0 to 32 kinds, not 33"),
        (b"\x00\x01\x01 \x00\x00", "WATCH queue name b' ' is not 1 to 64"),
        (b"\x00\x02\x01a\x01a\x00\x00", "WATCH lists a queue twice"),
        (b"\x00\x00\x01\x00\x00", "WATCH has an empty task type"),
        (b"\x00\x00\x01\x05ab", "WATCH task type of 5 bytes runs past"),
        (b"\x00\x00\x02\x01t\x01t\x00", "WATCH lists a type twice"),
        (b"\x00\x00\x00\x01\x04gone", "WATCH has unknown event kind b'gone'"),
        (b"\x00\x00\x00\x01\x04don", "WATCH event kind of 4 bytes runs past the payload"),
        (b"\x00\x00\x00\x02\x04done\x04done", "WATCH lists a kind twice"),
        (b"\x00\x00\x00\x00x", "WATCH has 1 bytes after its kinds"),
    ],
)
def test_every_malformed_watch_names_the_fault(payload: bytes, message: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        registry.decode(MessageType.WATCH, payload)
    assert str(raised.value).startswith(message)
    assert raised.value.message_type == MessageType.WATCH


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (bytes(7), "EVENTS needs at least 8 bytes"),
        (bytes(8) + b"\xff\n", "EVENTS lines is not UTF-8"),
        (bytes(8) + b"{}", "EVENTS has a last line without its newline"),
        (bytes(8) + b"{}\n\n", "EVENTS has an empty line"),
    ],
)
def test_every_malformed_events_names_the_fault(payload: bytes, message: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        registry.decode(MessageType.EVENTS, payload)
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: monitor.encode_watch(["a"], stop=True), "a WATCH that stops lists nothing"),
        (lambda: monitor.encode_watch(["q"] * 2), "lists a queue twice"),
        (lambda: monitor.encode_watch([f"q{i}" for i in range(33)]), "0 to 32 queues, not 33"),
        (lambda: monitor.encode_watch(["bad name"]), "queue name"),
        (lambda: monitor.encode_watch(types=[b""]), "a task type is 1 to 255 bytes"),
        (lambda: monitor.encode_watch(types=[b"x" * 256]), "a task type is 1 to 255 bytes"),
        (lambda: monitor.encode_watch(kinds=["finished"]), "no event kind 'finished'"),
        (lambda: monitor.encode_events(["a\nb"]), "one line of text"),
        (lambda: monitor.encode_events([""]), "one line of text"),
        (lambda: monitor.encode_events([], -1), "a missed count is a u64"),
    ],
)
def test_encoders_refuse_what_the_page_does_not_allow(
    call: Callable[[], object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()
