"""
The version-2 codec: every message round-trips through the frame parser
(property-based), the layouts are the page's, and every malformed payload is
refused with a message that says why.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import v2, wire
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame
from quicx.protocol.v2 import MessageType
from quicx.protocol.wire import MalformedMessage

queue_names = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.:-",
    min_size=1,
    max_size=64,
)
keys = st.binary(min_size=1, max_size=255)
types = st.binary(min_size=1, max_size=255)
payloads = st.binary(max_size=2000)
task_ids = st.integers(0, wire.MAX_TASK_ID)


def through_parser(encoded: bytes) -> object:
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    (frame,) = parser.feed(encoded)
    assert isinstance(frame, Frame) and parser.version == 2
    return v2.decode(frame.message_type, frame.payload)


@given(
    types,
    payloads,
    st.none() | queue_names,
    st.none() | st.integers(0, 255),
    st.none() | keys,
    st.none() | keys,
)
def test_submit_round_trips(
    task_type: bytes,
    payload: bytes,
    queue: str | None,
    priority: int | None,
    key: bytes | None,
    fairness: bytes | None,
) -> None:
    options = v2.submit_options(queue, priority, key, fairness)
    encoded = v2.encode_submit(task_type, payload, options)
    assert through_parser(encoded) == v2.Submit(task_type, payload, queue, priority, key, fairness)


@given(task_ids, st.booleans())
def test_ok_round_trips(task_id: int, duplicate: bool) -> None:
    assert through_parser(v2.encode_ok(task_id, duplicate)) == v2.Ok(task_id, duplicate)


@given(st.integers(1, 0xFFFF), st.lists(queue_names, max_size=32, unique=True))
def test_ready_round_trips(credits: int, queues: list[str]) -> None:
    assert through_parser(v2.encode_ready(credits, queues)) == v2.Ready(credits, tuple(queues))


@given(
    task_ids,
    types,
    payloads,
    queue_names,
    st.integers(0, 255),
    st.integers(1, 0xFFFF),
    st.integers(0, 2**63),
    st.none() | keys,
    st.none() | keys,
)
def test_task_round_trips(
    task_id: int,
    task_type: bytes,
    payload: bytes,
    queue: str,
    priority: int,
    attempt: int,
    enqueued_ms: int,
    key: bytes | None,
    fairness: bytes | None,
) -> None:
    header = bytes((len(queue),)) + queue.encode()
    encoded = v2.encode_task(
        task_id,
        task_type,
        payload,
        header,
        priority,
        attempt,
        enqueued_ms,
        v2.task_context(key, fairness),
    )
    assert through_parser(encoded) == v2.Task(
        task_id, task_type, payload, queue, priority, attempt, enqueued_ms, key, fairness
    )


@given(
    st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255),
    st.text(max_size=40).filter(lambda t: len(t.encode()) <= 255),
    st.lists(st.text("abcdefgh-", min_size=1, max_size=10), max_size=5),
)
def test_hello_round_trips(name: str, version: str, capabilities: list[str]) -> None:
    decoded = through_parser(v2.encode_hello(name, version, capabilities))
    assert decoded == v2.Hello(name, version, tuple(capabilities))


@given(task_ids)
def test_task_id_messages_round_trip(task_id: int) -> None:
    assert through_parser(v2.encode_cancel(task_id)) == v2.Cancel(task_id)
    assert through_parser(v2.encode_cancelled(task_id)) == v2.Cancelled(task_id)
    assert through_parser(v2.encode_inspect(task_id)) == v2.Inspect(task_id)
    assert through_parser(v2.encode_done(task_id)) == wire.Done(task_id)
    assert through_parser(v2.encode_failed(task_id, "why ✗")) == wire.Failed(task_id, "why ✗")


@given(st.sampled_from([MessageType.PAUSE, MessageType.RESUME, MessageType.PURGE]), queue_names)
def test_queue_actions_round_trip(action: MessageType, queue: str) -> None:
    assert through_parser(v2.encode_queue_action(action, queue)) == v2.QueueAction(action, queue)


@given(queue_names, st.integers(1, 1000))
def test_peek_round_trips(queue: str, count: int) -> None:
    assert through_parser(v2.encode_peek(queue, count)) == v2.Peek(queue, count)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_info_round_trips(document: object) -> None:
    assert through_parser(v2.encode_info(document)) == v2.Info(document)


def test_hello_ignores_fields_of_later_releases() -> None:
    assert v2.decode(MessageType.HELLO, b"\x01\x01a\x09\x01x") == v2.Hello("a")


def test_the_empty_messages_and_stats() -> None:
    assert through_parser(v2.QUEUES_FRAME) == v2.Queues()
    assert through_parser(v2.WAIT_FRAME) == wire.Wait()
    assert through_parser(v2.PONG_FRAME) == wire.Pong()
    stats = wire.StatsResponse(1, 2, 3, 4, 5)
    assert through_parser(v2.encode_stats_response(stats)) == stats


def test_the_pages_submit_example() -> None:
    encoded = v2.encode_submit(b"send_email", b'{"to":1}', v2.submit_options("mail", 9))
    assert encoded == (
        b'\x02\x01\x00\x00\x00\x1e\x0asend_email\x00\x09\x01\x04mail\x02\x01\x09{"to":1}'
    )


def test_a_submit_without_options_is_two_bytes_longer_than_version_1() -> None:
    assert len(v2.encode_submit(b"t", b"x")) == len(wire.encode_submit(b"t", b"x")) + 2


def opts(*items: bytes) -> bytes:
    body = b"".join(items)
    return struct.pack(">H", len(body)) + body


@pytest.mark.parametrize(
    ("message_type", "payload", "fragment"),
    [
        (MessageType.SUBMIT, b"\x01t", "no options length"),
        (MessageType.SUBMIT, b"\x01t\x00\x05\x01\x01a", "run past the payload"),
        (MessageType.SUBMIT, b"\x01t" + struct.pack(">H", 4097), "exceed 4096"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x09\x01x"), "unknown option 0x09"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x02\x01\x01\x02\x01\x02"), "repeats option"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x02\x02\x01\x02"), "priority must be 1 byte"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x03\x00"), "empty idempotency key"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x04\x00"), "empty fairness key"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x01\x03a b"), "queue name"),
        (MessageType.SUBMIT, b"\x01t" + opts(b"\x01"), "has no length"),
        (MessageType.OK, b"\x00\x00\x00\x01", "5 bytes"),
        (MessageType.READY, b"\x01", "2-byte credit count"),
        (MessageType.READY, b"\x00\x00", "at least 1"),
        (MessageType.READY, b"\x00\x01\x00", "1 to 32 queues"),
        (MessageType.READY, b"\x00\x01\x01\x05abc", "runs past the payload"),
        (MessageType.READY, b"\x00\x01\x01\x01aX", "after its queue list"),
        (MessageType.READY, b"\x00\x01\x02\x01a\x01a", "a queue twice"),
        (MessageType.TASK, b"\x00" * 14, "at least 15 bytes"),
        (MessageType.HELLO, b"\x01\x01\xff", "not UTF-8"),
        (MessageType.CANCEL, b"\x00\x00\x01", "4-byte task id"),
        (MessageType.INSPECT, b"\x00\x00\x00\x00\x01", "4-byte task id"),
        (MessageType.PAUSE, b"", "no queue name length"),
        (MessageType.PURGE, b"\x01ab", "after its queue name"),
        (MessageType.QUEUES, b"\x00", "must be empty"),
        (MessageType.PEEK, b"\x00", "no count"),
        (MessageType.PEEK, b"\x00\x00\x01a", "1 to 1000"),
        (MessageType.PEEK, b"\x03\xe9\x01a", "1 to 1000"),
        (MessageType.INFO, b"{", "JSON"),
        (0x7F, b"", "unknown message type"),
    ],
)
def test_malformed_payloads_say_why(message_type: int, payload: bytes, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment):
        v2.decode(message_type, payload)


@pytest.mark.parametrize(
    ("call", "fragment"),
    [
        (lambda: v2.submit_options(queue="a b"), "queue name"),
        (lambda: v2.submit_options(priority=256), "0 to 255"),
        (lambda: v2.submit_options(key=b""), "1 to 255"),
        (lambda: v2.submit_options(fairness=b"x" * 256), "1 to 255"),
        (lambda: v2.encode_ready(0), "credits"),
        (lambda: v2.encode_ready(1, ["q"] * 33), "at most 32"),
        (lambda: v2.encode_peek("q", 0), "1 to 1000"),
        (lambda: v2.encode_queue_action(MessageType.QUEUES, "q"), "not a queue action"),
        (lambda: v2.encode_submit(b"", b""), "task type"),
    ],
)
def test_encoders_refuse_what_the_page_forbids(call, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        call()


# -- versions on one connection ----------------------------------------------------------


def test_the_first_frame_sets_the_version_and_the_other_is_refused() -> None:
    parser = FrameParser(100, v2_max_length=200)
    events = parser.feed(v2.PONG_FRAME + wire.PONG_FRAME + v2.PONG_FRAME)
    assert parser.version == 2
    assert [type(e) for e in events] == [Frame, RejectedFrame, Frame]
    assert "version-1 frame on a version-2 connection" in events[1].reason  # type: ignore[union-attr]


def test_a_refused_frames_payload_is_skipped_across_reads() -> None:
    parser = FrameParser(100, v2_max_length=200)
    parser.feed(wire.PONG_FRAME)
    stray = wire.frame(wire.MessageType.STATS, b"x" * 50).replace(b"\x01", b"\x02", 1)
    events = parser.feed(stray[:20]) + parser.feed(stray[20:] + wire.PONG_FRAME)
    assert [type(e) for e in events] == [RejectedFrame, Frame]


def test_version_2_is_refused_when_off() -> None:
    parser = FrameParser(100)
    events = parser.feed(v2.PONG_FRAME + wire.PONG_FRAME)
    assert isinstance(events[0], RejectedFrame)
    assert events[0].reason == "unsupported protocol version 2"
    assert events[1] == Frame(wire.MessageType.PONG, b"") and parser.version == 1


def test_each_version_has_its_own_length_limit() -> None:
    v1_parser = FrameParser(100, v2_max_length=200)
    (event,) = v1_parser.feed(wire.frame(wire.MessageType.STATS, b"x" * 150))
    assert isinstance(event, RejectedFrame) and "limit of 100" in event.reason
    v2_parser = FrameParser(100, v2_max_length=200)
    (event,) = v2_parser.feed(v2.frame(MessageType.QUEUES, b"x" * 150))
    assert isinstance(event, Frame)
    (event,) = v2_parser.feed(v2.frame(MessageType.QUEUES, b"x" * 201))
    assert isinstance(event, RejectedFrame) and "limit of 200" in event.reason


def test_version_2_types_are_unknown_to_a_version_1_connection() -> None:
    parser = FrameParser(100, v2_max_length=200)
    parser.feed(wire.PONG_FRAME)
    (event,) = parser.feed(wire.frame(MessageType.QUEUES))
    assert isinstance(event, RejectedFrame) and "unknown message type 0x13" in event.reason
