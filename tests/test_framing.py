"""The framer: any split of the stream, many frames per read, oversize skipping."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.testing import StringTransport

from quicx.net.framer import FrameReceiver
from quicx.protocol import wire
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame
from quicx.protocol.wire import ErrorCode

STREAM = b"".join(
    [
        wire.encode_submit(b"send_email", b'{"to":"user@gmail.com"}'),
        wire.encode_ready(),
        wire.encode_done(42),
        wire.encode_failed(43, "boom"),
        wire.encode_stats(),
        wire.encode_submit(b"t", b"x" * 300),
    ]
)
EXPECTED = [
    (1, b'\x0asend_email{"to":"user@gmail.com"}'),
    (4, b""),
    (6, b"\x00\x00\x00\x2a"),
    (7, b"\x00\x00\x00\x2bboom"),
    (11, b""),
    (1, b"\x01t" + b"x" * 300),
]


def frames(events: list) -> list[tuple[int, bytes]]:
    return [(e.message_type, e.payload) for e in events if isinstance(e, Frame)]


def test_byte_at_a_time() -> None:
    parser = FrameParser(1024)
    events = []
    for i in range(len(STREAM)):
        events += parser.feed(STREAM[i : i + 1])
    assert frames(events) == EXPECTED
    assert parser.buffered == 0


def test_many_frames_in_one_read() -> None:
    parser = FrameParser(1024)
    assert frames(parser.feed(STREAM * 50)) == EXPECTED * 50


def test_every_split_point() -> None:
    for cut in range(len(STREAM) + 1):
        parser = FrameParser(1024)
        assert frames(parser.feed(STREAM[:cut]) + parser.feed(STREAM[cut:])) == EXPECTED


def test_large_frame_in_many_reads_holds_only_that_frame() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    data = wire.encode_submit(b"big", payload)
    parser = FrameParser(len(payload) + 256)
    events = []
    for start in range(0, len(data), 1000):
        events += parser.feed(data[start : start + 1000])
        assert parser.buffered <= len(data)
    assert frames(events) == [(1, b"\x03big" + payload)]
    assert parser.buffered == 0


def test_oversized_frame_is_rejected_and_skipped_without_buffering() -> None:
    parser = FrameParser(100)
    header = struct.pack(">BBI", 1, 1, 10_000_000)
    events = parser.feed(header)
    assert events == [
        RejectedFrame(
            ErrorCode.PAYLOAD_TOO_LARGE, "payload of 10000000 bytes exceeds the limit of 100"
        )
    ]
    chunk = b"\xaa" * 65536
    sent = 0
    while sent + len(chunk) <= 10_000_000:
        assert parser.feed(chunk) == []
        assert parser.buffered == 0
        sent += len(chunk)
    rest = 10_000_000 - sent
    # The tail of the skipped payload and a good frame arrive in one read.
    assert frames(parser.feed(b"\xaa" * rest + wire.encode_done(5))) == [(6, b"\x00\x00\x00\x05")]


def test_oversized_frame_wholly_in_one_read_is_skipped() -> None:
    parser = FrameParser(4)
    data = wire.encode_submit(b"t", b"12345") + wire.encode_done(1)
    events = parser.feed(data)
    assert isinstance(events[0], RejectedFrame)
    assert events[0].code is ErrorCode.PAYLOAD_TOO_LARGE
    assert frames(events) == [(6, b"\x00\x00\x00\x01")]


def test_bad_version_and_unknown_type_are_invalid_messages() -> None:
    parser = FrameParser(100)
    events = parser.feed(
        struct.pack(">BBI", 2, 1, 3)
        + b"abc"
        + struct.pack(">BBI", 1, 0x42, 2)
        + b"zz"
        + wire.encode_stats()
    )
    assert [(e.code, e.reason) for e in events[:2]] == [
        (ErrorCode.INVALID_MESSAGE, "unsupported protocol version 2"),
        (ErrorCode.INVALID_MESSAGE, "unknown message type 0x42"),
    ]
    assert frames(events) == [(11, b"")]


def test_clients_may_pass_unknown_types_through() -> None:
    parser = FrameParser(100, check_types=False)
    assert frames(parser.feed(struct.pack(">BBI", 1, 0x42, 0))) == [(0x42, b"")]


def test_length_exactly_at_the_limit_is_accepted() -> None:
    parser = FrameParser(10)
    assert frames(parser.feed(wire.frame(1, b"\x01t" + b"x" * 8))) == [(1, b"\x01t" + b"x" * 8)]
    assert isinstance(parser.feed(wire.frame(1, b"\x01t" + b"x" * 9))[0], RejectedFrame)


class Recorder(FrameReceiver):
    maxLength = 50

    def __init__(self) -> None:
        self.events: list[tuple] = []

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        self.events.append(("frame", message_type, payload))
        if payload == b"\x00\x00\x00\x63":
            self.transport.loseConnection()

    def frameRejected(self, code: ErrorCode, reason: str) -> None:
        self.events.append(("rejected", code))


def test_receiver_routes_frames_and_rejections() -> None:
    receiver = Recorder()
    receiver.makeConnection(StringTransport())
    receiver.dataReceived(wire.encode_done(1) + wire.frame(1, b"x" * 51) + wire.encode_ready())
    assert receiver.events == [
        ("frame", 6, b"\x00\x00\x00\x01"),
        ("rejected", ErrorCode.PAYLOAD_TOO_LARGE),
        ("frame", 4, b""),
    ]


def test_receiver_stops_delivering_after_losing_the_connection() -> None:
    receiver = Recorder()
    receiver.makeConnection(StringTransport())
    receiver.dataReceived(wire.encode_done(0x63) + wire.encode_ready())
    assert receiver.events == [("frame", 6, b"\x00\x00\x00\x63")]


frames_strategy = st.lists(
    st.tuples(st.integers(1, 12), st.binary(max_size=300)), min_size=1, max_size=20
)


@given(frames_strategy, st.lists(st.integers(0, 10_000), max_size=30))
def test_any_split_of_any_stream_yields_the_same_frames(frame_list, cuts) -> None:
    stream = b"".join(wire.frame(t, p) for t, p in frame_list)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    parser = FrameParser(200)
    events = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        events += parser.feed(stream[start:end])
        assert parser.buffered <= 6 + 200 + len(stream[start:end])
    expected = [(t, p) for t, p in frame_list if len(p) <= 200]
    assert frames(events) == expected
    assert len(events) == len(frame_list)
    assert parser.buffered == 0


@given(st.binary(max_size=2000), st.integers(1, 64))
def test_garbage_never_grows_the_buffer_past_one_frame(garbage, chunk) -> None:
    parser = FrameParser(100)
    for start in range(0, len(garbage), chunk):
        parser.feed(garbage[start : start + chunk])
        assert parser.buffered < 6 + 100 + chunk
