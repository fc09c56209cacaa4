"""
The codec of protocol v2 part 3 (L{quicx.protocol.outcomes}): results,
AWAIT and OUTCOME, PROGRESS, shared data and groups, checked against
docs/protocol.md, "Version 2: results, progress, shared data and groups".
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import codec, outcomes, registry, shared_data, taskflow
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.outcomes import (
    Await,
    Group,
    GroupOp,
    GroupPhase,
    GroupState,
    Outcome,
    OutcomeState,
    Progress,
)
from quicx.protocol.shared_data import Follow, Publish, Shared
from quicx.protocol.taskflow import Result, ResultKind
from tests.protocol.test_wire_lifecycle import SPELLED as PART_2_SPELLED
from tests.protocol.test_wire_lifecycle import item, mutate, new_messages, spell
from tests.protocol.test_wire_v2 import (
    RESULTS,
    any_message,
    json_values,
    opts,
    payloads,
    queue_names,
    results_drawn,
    submits,
    table,
    u64s,
)

live_ids = st.integers(1, codec.MAX_TASK_ID)
u32s = st.integers(0, 0xFFFFFFFF)
texts = st.text(max_size=60)


def _outcome(task_id: int, state: OutcomeState, result: Result | None, reason: str) -> Outcome:
    if state == OutcomeState.DONE and result is not None:
        return Outcome(task_id, state, result)
    return Outcome(task_id, state, None, reason)


def _group(op: GroupOp, group: int, timeout_ms: int) -> Group:
    if op == GroupOp.OPEN:
        return Group(op)
    return Group(op, group, timeout_ms if op == GroupOp.WAIT else 0)


def _shared(name: str, version: int, data: bytes) -> Shared:
    return Shared(name, version, data if version else b"")


def _publish(name: str, data: bytes, delete: bool) -> Publish:
    return Publish(name, b"" if delete else data, delete)


MESSAGES: dict[str, st.SearchStrategy[Any]] = {
    "AWAIT": st.builds(Await, live_ids, u32s),
    "OUTCOME": st.builds(
        _outcome, live_ids, st.sampled_from(OutcomeState), st.none() | results_drawn, texts
    ),
    "PROGRESS": st.builds(Progress, live_ids, u64s, st.integers(0, outcomes.MAX_FRACTION), texts),
    "PUBLISH": st.builds(_publish, queue_names, payloads, st.booleans()),
    "SHARED": st.builds(_shared, queue_names, u32s, payloads),
    "FOLLOW": st.lists(queue_names, min_size=1, max_size=shared_data.MAX_FOLLOW, unique=True).map(
        lambda names: Follow(tuple(names))
    ),
    "GROUP": st.builds(_group, st.sampled_from(GroupOp), live_ids, u32s),
    "GROUP_STATE": st.builds(
        GroupState, live_ids, st.sampled_from(GroupPhase), u32s, u32s, u32s, u32s, u32s
    ),
}
"""Every message of part 3, by name."""

ENCODERS: dict[type, Callable[[Any], bytes]] = {
    Await: lambda m: outcomes.encode_await(m.task_id, m.timeout_ms),
    Outcome: lambda m: outcomes.encode_outcome(m.task_id, m.state, m.result, m.reason),
    Progress: lambda m: outcomes.encode_progress(m.task_id, m.token, m.fraction, m.message),
    Publish: lambda m: shared_data.encode_publish(m.name, m.data, m.delete),
    Shared: lambda m: shared_data.encode_shared(m.name, m.version, m.data),
    Follow: lambda m: shared_data.encode_follow(m.names),
    Group: lambda m: outcomes.encode_group(m.op, m.group, m.timeout_ms),
    GroupState: outcomes.encode_group_state,
}


def encode(message: object) -> bytes:
    return ENCODERS[type(message)](message)


def through_parser(encoded: bytes) -> object:
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    (frame,) = parser.feed(encoded)
    assert isinstance(frame, Frame) and parser.version == 2
    return registry.decode(frame.message_type, frame.payload)


part3_messages = st.one_of(*MESSAGES.values()).map(lambda m: (encode(m), m))


def test_every_new_message_type_is_drawn() -> None:
    part3 = {t.name for t in MessageType if MessageType.AWAIT <= t <= MessageType.GROUP_STATE}
    assert set(MESSAGES) == part3


@given(st.tuples(*MESSAGES.values()))
def test_every_new_message_round_trips(messages: tuple[object, ...]) -> None:
    for name, message in zip(MESSAGES, messages, strict=True):
        encoded = encode(message)
        assert encoded[:2] == bytes((2, MessageType[name])), name
        decoded = through_parser(encoded)
        assert decoded == message, name
        assert encode(decoded) == encoded, name


@given(results_drawn, live_ids, u64s)
def test_a_result_rides_on_ack_and_done_and_keeps_its_value(
    result: Result, task_id: int, token: int
) -> None:
    ack = through_parser(outcomes.encode_ack(task_id, token, result))
    assert ack == outcomes.Ack(task_id, token, result)
    done = through_parser(taskflow.encode_done(task_id, result))
    assert done == taskflow.Done(task_id, result)
    assert Result.of(result.value()) == result


@given(live_ids, u64s)
def test_an_ack_without_a_result_is_the_page_s_frame_byte_for_byte(
    task_id: int, token: int
) -> None:
    # The worker's every task takes the one-pack path: the reference is the
    # page's [header][task id u32][token u64], built the long way.
    page = struct.pack(">II", task_id, token >> 32) + struct.pack(">I", token & 0xFFFFFFFF)
    assert outcomes.encode_ack(task_id, token) == codec.frame(MessageType.ACK, page)


@given(json_values | st.binary(max_size=30))
def test_a_value_comes_back_as_it_was_given(value: object) -> None:
    result = Result.of(value)
    assert result.value() == value
    assert type(result.value()) is type(value)


def test_what_is_neither_bytes_text_nor_json_is_no_result() -> None:
    with pytest.raises(TypeError, match="not object"):
        Result.of(object())
    with pytest.raises(TypeError, match="JSON-serialisable, not float"):
        Result.of(float("nan"))


@given(
    st.lists(part3_messages | new_messages | any_message, min_size=1, max_size=12),
    st.lists(st.integers(0, 10_000)),
)
def test_a_stream_of_all_three_parts_decodes_whatever_the_reads(
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


@given(part3_messages, st.sampled_from(["cut", "insert", "replace"]), u32s, st.integers(0, 255))
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


# -- the page ----------------------------------------------------------------------------

RESULT = Result.of({"rows": 3})
SPELLED: dict[str, tuple[dict[str, Any], object]] = {
    "AWAIT": ({"task_id": 7, "timeout_ms": 30_000}, Await(7, 30_000)),
    "OUTCOME": (
        {"task_id": 7, "state": 1, "kind": 3, "tail": b'{"rows":3}'},
        Outcome(7, OutcomeState.DONE, RESULT),
    ),
    "PROGRESS": (
        {"task_id": 7, "token": 9, "fraction": 4000, "message": b"40 of 100"},
        Progress(7, 9, 4000, "40 of 100"),
    ),
    "PUBLISH": ({"flags": 0, "name": b"prices", "data": b"\x01\x02"}, Publish("prices", b"\1\2")),
    "SHARED": ({"name": b"prices", "version": 3, "data": b"x"}, Shared("prices", 3, b"x")),
    "FOLLOW": ({"count": 2, "names": b"\x01a\x01b"}, Follow(("a", "b"))),
    "GROUP": ({"op": 4, "group": 12, "timeout_ms": 500}, Group(GroupOp.WAIT, 12, 500)),
    "GROUP_STATE": (
        {
            "group": 12,
            "state": 2,
            "members": 10,
            "done": 7,
            "failed": 2,
            "cancelled": 1,
            "pending": 0,
        },
        GroupState(12, GroupPhase.FINISHED, 10, 7, 2, 1, 0),
    ),
}
"""Values for each message's layout on the page, and the message they spell."""


def test_the_pages_layouts_are_the_codecs() -> None:
    rows = table(RESULTS, "## Messages")
    assert [name for _, name, *_ in rows] == list(SPELLED)
    for code, name, _, layout in rows:
        values, message = SPELLED[name]
        payload = spell(layout, values)
        assert registry.decode(int(code, 16), payload) == message, name
        assert encode(message) == codec.frame(int(code, 16), payload), name


def test_the_pages_result_kinds_are_the_codecs() -> None:
    rows = table(RESULTS, "## Results")
    names = {"bytes": "BYTES", "UTF-8": "TEXT", "a": "JSON"}
    assert [(int(kind, 16), names[data.split()[0].rstrip(",")]) for kind, data in rows] == [
        (k.value, k.name) for k in ResultKind
    ]


def test_the_pages_outcome_states_are_the_codecs() -> None:
    rows = table(RESULTS, "### AWAIT and OUTCOME\n")
    states = [(int(state), meaning.split(":")[0].split()[0].upper()) for state, meaning, _ in rows]
    assert states == [(s.value, s.name) for s in OutcomeState]


def test_the_pages_submit_options_are_the_codecs() -> None:
    given_values: dict[str, tuple[bytes, dict[str, Any]]] = {
        "result": (struct.pack(">I", 3600), {"result_ttl": 3600}),
        "progress": (b"\x01", {"progress": True}),
        "group": (struct.pack(">I", 12), {"group": 12}),
    }
    rows = table(RESULTS, "## More SUBMIT options")
    assert [option for _, option, *_ in rows] == list(given_values)
    for tag, option, *_ in rows:
        value, fields = given_values[option]
        options = item(int(tag, 16), value)
        decoded = registry.decode(MessageType.SUBMIT, b"\x01t" + opts(options) + b"p")
        assert decoded == taskflow.Submit(b"t", b"p", taskflow.SubmitOptions(**fields)), option
        encoded = taskflow.encode_submit(b"t", b"p", taskflow.submit_options(**fields))
        assert encoded == codec.frame(MessageType.SUBMIT, b"\x01t" + opts(options) + b"p")


def test_part_2_layouts_still_spell_without_a_result() -> None:
    values, ack = PART_2_SPELLED["ACK"]
    assert registry.decode(MessageType.ACK, spell("[task_id u32][token u64]", values)) == ack


@given(submits, st.none() | st.integers(0, 0xFFFFFFFF), st.booleans(), st.none() | live_ids)
def test_the_new_submit_options_round_trip_with_the_others(
    submit: tuple[bytes, taskflow.Submit], ttl: int | None, progress: bool, group: int | None
) -> None:
    _, message = submit
    extra = taskflow.submit_options(result_ttl=ttl, progress=progress, group=group)
    encoded = bytearray(taskflow.encode_submit(message.task_type, message.payload, extra))
    decoded = through_parser(bytes(encoded))
    assert isinstance(decoded, taskflow.Submit)
    assert (decoded.options.result_ttl, decoded.options.progress, decoded.options.group) == (
        ttl,
        progress,
        group,
    )


# -- every bad input says what is wrong --------------------------------------------------


@pytest.mark.parametrize(
    ("message_type", "payload", "message"),
    [
        (MessageType.AWAIT, b"\x00\x00\x00\x01", "AWAIT payload must be 8 bytes, got 4"),
        (MessageType.AWAIT, bytes(8), "AWAIT names task 0"),
        (MessageType.OUTCOME, b"\x00\x00\x00\x01\x01", "OUTCOME needs at least 6 bytes"),
        (MessageType.OUTCOME, b"\x00\x00\x00\x01\x08\x00", "OUTCOME has unknown state 8"),
        (
            MessageType.OUTCOME,
            b"\x00\x00\x00\x01\x02\x01x",
            "OUTCOME carries a result but is not DONE",
        ),
        (MessageType.OUTCOME, b"\x00\x00\x00\x01\x01\x04x", "OUTCOME has unknown result kind 0x04"),
        (MessageType.OUTCOME, b"\x00\x00\x00\x01\x01\x03{", "OUTCOME result is not JSON"),
        (MessageType.DONE, b"\x00\x00\x00\x01\x03" + b"[" * 5000, "DONE result is not JSON"),
        (MessageType.OUTCOME, b"\x00\x00\x00\x01\x02\x00\xff", "OUTCOME reason is not UTF-8"),
        (MessageType.ACK, b"\x00\x00\x00\x01" + bytes(8) + b"\x02\xff", "ACK result is not TEXT"),
        (MessageType.DONE, b"\x00\x00\x00\x01\x00", "DONE has unknown result kind 0x00"),
        (MessageType.PROGRESS, bytes(13), "PROGRESS needs at least 14 bytes"),
        (MessageType.PROGRESS, bytes(14), "PROGRESS names task 0"),
        (
            MessageType.PROGRESS,
            b"\x00\x00\x00\x01" + bytes(8) + b"\x27\x11",
            "PROGRESS fraction 10001 exceeds 10000",
        ),
        (
            MessageType.PROGRESS,
            b"\x00\x00\x00\x01" + bytes(8) + b"\x00\x01\xff",
            "PROGRESS message is not UTF-8",
        ),
        (MessageType.PUBLISH, b"", "PUBLISH has no flags"),
        (MessageType.PUBLISH, b"\x02\x01a", "PUBLISH has unknown flags 0x02"),
        (MessageType.PUBLISH, b"\x00", "PUBLISH has no queue name length"),
        (MessageType.PUBLISH, b"\x00\x01 ", "PUBLISH queue name b' ' is not 1 to 64"),
        (MessageType.PUBLISH, b"\x01\x01ax", "PUBLISH deletes a name but carries data"),
        (MessageType.SHARED, b"\x01a\x00\x00", "SHARED has no version"),
        (MessageType.SHARED, b"\x01a\x00\x00\x00\x00x", "SHARED version 0 (deleted) carries data"),
        (MessageType.FOLLOW, b"", "FOLLOW has no name count"),
        (MessageType.FOLLOW, b"\x00", "FOLLOW lists 1 to 32 names, not 0"),
        (MessageType.FOLLOW, b"\x21", "FOLLOW lists 1 to 32 names, not 33"),
        (MessageType.FOLLOW, b"\x01\x01ab", "FOLLOW has 1 bytes after its names"),
        (MessageType.FOLLOW, b"\x02\x01a\x01a", "FOLLOW lists a name twice"),
        (MessageType.FOLLOW, b"\x02\x01a", "FOLLOW has no queue name length"),
        (MessageType.GROUP, bytes(8), "GROUP payload must be 9 bytes, got 8"),
        (MessageType.GROUP, b"\x05" + bytes(8), "GROUP has unknown operation 5"),
        (MessageType.GROUP, b"\x00" + bytes(8), "GROUP has unknown operation 0"),
        (
            MessageType.GROUP,
            b"\x01\x00\x00\x00\x01" + bytes(4),
            "GROUP OPEN names group 0, every other operation a group",
        ),
        (
            MessageType.GROUP,
            b"\x03" + bytes(8),
            "GROUP OPEN names group 0, every other operation a group",
        ),
        (
            MessageType.GROUP,
            b"\x03\x00\x00\x00\x01\x00\x00\x00\x01",
            "GROUP only WAIT has a timeout",
        ),
        (MessageType.GROUP_STATE, bytes(24), "GROUP_STATE payload must be 25 bytes, got 24"),
        (
            MessageType.GROUP_STATE,
            bytes(4) + b"\x04" + bytes(20),
            "GROUP_STATE has unknown state 4",
        ),
        (MessageType.SUBMIT, b"\x01t" + opts(item(0x09, b"xx")), "SUBMIT result TTL must be 4"),
        (
            MessageType.SUBMIT,
            b"\x01t" + opts(item(0x0A, b"\x02")),
            "SUBMIT progress option must be the 1-byte value 1",
        ),
        (MessageType.SUBMIT, b"\x01t" + opts(item(0x0B, bytes(4))), "SUBMIT names group 0"),
        (MessageType.SUBMIT, b"\x01t" + opts(item(0x0B, bytes(3))), "SUBMIT group must be 4"),
    ],
)
def test_every_malformed_payload_names_the_message_and_the_fault(
    message_type: MessageType, payload: bytes, message: str
) -> None:
    with pytest.raises(MalformedMessage) as raised:
        registry.decode(message_type, payload)
    assert str(raised.value).startswith(message)
    assert raised.value.message_type == message_type


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: outcomes.encode_await(0), "a task id is 1 to"),
        (lambda: outcomes.encode_await(1, -1), "a wait is 0 to"),
        (lambda: outcomes.encode_outcome(1, OutcomeState.FAILED, RESULT), "only a DONE outcome"),
        (lambda: outcomes.encode_progress(1, 2, 10_001), "fraction is 0 to 10000"),
        (lambda: shared_data.encode_publish("n", b"x", delete=True), "carries no data"),
        (lambda: shared_data.encode_publish("bad name"), "queue name"),
        (lambda: shared_data.encode_shared("n", -1), "a version is 0 to"),
        (lambda: shared_data.encode_follow([]), "lists 1 to 32 names, not 0"),
        (lambda: shared_data.encode_follow(["a", "a"]), "a name twice"),
        (lambda: outcomes.encode_group(GroupOp.OPEN, 3), "OPEN names no group"),
        (lambda: outcomes.encode_group(GroupOp.STATE, 0), "a group id is 1 to"),
        (lambda: outcomes.encode_group(GroupOp.CLOSE, 3, 10), "only WAIT has a timeout"),
        (lambda: taskflow.submit_options(group=0), "a group id is 1 to"),
        (lambda: taskflow.submit_options(result_ttl=-1), "a result TTL is 0 to"),
    ],
)
def test_encoders_refuse_what_the_page_does_not_allow(
    call: Callable[[], object], fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()


def test_json_results_are_compact() -> None:
    compact = json.dumps({"a": [1, 2]}, separators=(",", ":")).encode()
    assert Result.of({"a": [1, 2]}).data == compact
