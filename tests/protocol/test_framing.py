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


def test_frames_are_frames_of_bytes_however_they_were_read() -> None:
    """Whole in one read, across reads (from the buffer), or read as a bytearray."""
    for cut in (len(STREAM), 1, 40):
        for kind in (bytes, bytearray):
            parser = FrameParser(1024)
            events = parser.feed(kind(STREAM[:cut])) + parser.feed(kind(STREAM[cut:]))
            assert frames(events) == EXPECTED
            assert {(type(e), type(e.payload)) for e in events} == {(Frame, bytes)}


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


@given(frames_strategy, st.lists(st.integers(0, 10_000), max_size=30))
def test_large_frames_gathered_apart_come_out_the_same_at_any_split(frame_list, cuts) -> None:
    """With frames past 20 bytes gathered in a mapping of their own."""
    stream = b"".join(wire.frame(t, p) for t, p in frame_list)
    points = sorted({c % (len(stream) + 1) for c in cuts})
    parser = FrameParser(200, large_frame=20)
    events = []
    for start, end in zip([0, *points], [*points, len(stream)], strict=True):
        events += parser.feed(stream[start:end])
        assert parser.buffered <= 6 + 200 + len(stream[start:end])
    assert frames(events) == [(t, p) for t, p in frame_list if len(p) <= 200]
    assert {type(e.payload) for e in events if isinstance(e, Frame)} <= {bytes}
    assert parser.buffered == 0


def test_release_drops_a_half_received_frame() -> None:
    for large_frame in (1 << 20, 1000):  # in the buffer, or in a mapping of its own
        parser = FrameParser(1 << 20, large_frame=large_frame)
        parser.feed(wire.encode_submit(b"t", bytes(100_000))[:-1])
        assert parser.buffered == 6 + 100_001
        parser.release()
        assert parser.buffered == 0


@given(st.binary(max_size=2000), st.integers(1, 64))
def test_garbage_never_grows_the_buffer_past_one_frame(garbage, chunk) -> None:
    parser = FrameParser(100)
    for start in range(0, len(garbage), chunk):
        parser.feed(garbage[start : start + chunk])
        assert parser.buffered < 6 + 100 + chunk


# -- versions on one connection (docs/protocol.md, "Versions on one connection") -----------


def expected_events(
    stream: list[tuple[int, int, bytes]], limits: dict[int, int]
) -> list[tuple[int, bytes] | ErrorCode]:
    """
    What the page says a connection makes of C{stream}: its first frame of
    an accepted version (a key of C{limits}) sets its version; a frame of
    any other version is INVALID_MESSAGE, one over its version's limit
    PAYLOAD_TOO_LARGE, and every other frame is delivered.
    """
    version = None
    found: list[tuple[int, bytes] | ErrorCode] = []
    for frame_version, message_type, payload in stream:
        if version is None and frame_version in limits:
            version = frame_version
        if frame_version != version:
            found.append(ErrorCode.INVALID_MESSAGE)
        elif len(payload) > limits[version]:
            found.append(ErrorCode.PAYLOAD_TOO_LARGE)
        else:
            found.append((message_type, payload))
    return found


@given(
    st.lists(
        st.tuples(st.sampled_from([1, 2, 3]), st.integers(1, 12), st.binary(max_size=300)),
        min_size=1,
        max_size=15,
    ),
    st.booleans(),
    st.lists(st.integers(0, 10_000), max_size=30),
)
def test_the_first_frame_sets_the_version_at_any_split(
    stream: list[tuple[int, int, bytes]], v2_on: bool, cuts: list[int]
) -> None:
    data = b"".join(struct.pack(">BBI", v, t, len(p)) + p for v, t, p in stream)
    points = sorted({c % (len(data) + 1) for c in cuts})
    parser = FrameParser(100, v2_max_length=200 if v2_on else None)
    events: list[Frame | RejectedFrame] = []
    for start, end in zip([0, *points], [*points, len(data)], strict=True):
        events += parser.feed(data[start:end])
    limits = {1: 100, 2: 200} if v2_on else {1: 100}
    assert [
        e.code if isinstance(e, RejectedFrame) else (e.message_type, e.payload) for e in events
    ] == expected_events(stream, limits)
    assert parser.buffered == 0
    assert parser.version == next((v for v, _, _ in stream if v in limits), None)


def test_a_header_of_the_other_version_split_byte_by_byte_is_refused_and_skipped() -> None:
    parser = FrameParser(100, v2_max_length=200)
    assert frames(parser.feed(wire.encode_done(7))) == [(6, b"\x00\x00\x00\x07")]
    stray = struct.pack(">BBI", 2, 0x0E, 4) + b"\x00\x00\x00\x07"  # a version-2 CANCEL
    events = []
    for i in range(len(stray)):
        events += parser.feed(stray[i : i + 1])
    assert events == [
        RejectedFrame(
            ErrorCode.INVALID_MESSAGE,
            "a version-2 frame on a version-1 connection:"
            " a connection keeps the version of its first frame",
        )
    ]
    assert frames(parser.feed(wire.encode_done(8))) == [(6, b"\x00\x00\x00\x08")]
    assert parser.version == 1


def test_a_first_frame_refused_for_its_type_or_size_still_sets_the_version() -> None:
    # "The first whose version the daemon accepts": the version, not the frame.
    parser = FrameParser(100, v2_max_length=200)
    (refused,) = parser.feed(struct.pack(">BBI", 2, 0x7F, 0))
    assert refused == RejectedFrame(ErrorCode.INVALID_MESSAGE, "unknown message type 0x7f")
    assert parser.version == 2
    parser = FrameParser(100, v2_max_length=200)
    (refused,) = parser.feed(struct.pack(">BBI", 1, 1, 150) + b"x" * 150)
    assert isinstance(refused, RejectedFrame) and refused.code is ErrorCode.PAYLOAD_TOO_LARGE
    assert parser.version == 1
    (refused,) = parser.feed(struct.pack(">BBI", 2, 0x0B, 0))
    assert "version-2 frame on a version-1 connection" in refused.reason  # type: ignore[union-attr]


def test_a_frame_of_an_unknown_version_sets_nothing() -> None:
    parser = FrameParser(100, v2_max_length=200)
    events = parser.feed(struct.pack(">BBI", 3, 1, 2) + b"zz" + struct.pack(">BBI", 2, 0x13, 0))
    assert events == [
        RejectedFrame(ErrorCode.INVALID_MESSAGE, "unsupported protocol version 3"),
        Frame(0x13, b""),
    ]
    assert parser.version == 2


def test_version_2_length_exactly_at_its_limit() -> None:
    parser = FrameParser(100, v2_max_length=200)
    assert frames(parser.feed(struct.pack(">BBI", 2, 0x13, 200) + b"x" * 200)) == [
        (0x13, b"x" * 200)
    ]
    (refused,) = parser.feed(struct.pack(">BBI", 2, 0x13, 201) + b"x" * 201)
    assert refused == RejectedFrame(
        ErrorCode.PAYLOAD_TOO_LARGE, "payload of 201 bytes exceeds the limit of 200"
    )


def test_a_version_2_type_may_have_a_longer_limit_of_its_own() -> None:
    publish = 0x24  # a PUBLISH carries shared data: longer than other frames
    parser = FrameParser(100, v2_max_length=200, v2_type_limits={publish: 500})
    header = struct.pack(">BBI", 2, publish, 500)
    events = []
    for start in range(0, 506, 50):  # arriving in pieces, the header checked each time
        events += parser.feed((header + b"p" * 500)[start : start + 50])
    assert frames(events) == [(publish, b"p" * 500)]
    (refused,) = parser.feed(struct.pack(">BBI", 2, publish, 501))
    assert refused == RejectedFrame(
        ErrorCode.PAYLOAD_TOO_LARGE, "payload of 501 bytes exceeds the limit of 500"
    )
    parser.feed(b"p" * 501)
    # Any other type keeps the version's limit, refused at its header.
    (refused,) = parser.feed(struct.pack(">BBI", 2, 0x01, 201))
    assert refused.reason == "payload of 201 bytes exceeds the limit of 200"  # type: ignore[union-attr]
    parser.feed(b"s" * 201)
    assert parser.buffered == 0


def test_a_version_2_type_limit_may_be_shorter_than_the_versions() -> None:
    """A PUBLISH may carry no more than [shared] max_size: refused at its header."""
    publish = 0x24
    parser = FrameParser(100, v2_max_length=200, v2_type_limits={publish: 50})
    assert frames(parser.feed(struct.pack(">BBI", 2, publish, 50) + b"p" * 50)) == [
        (publish, b"p" * 50)
    ]
    (refused,) = parser.feed(struct.pack(">BBI", 2, publish, 51))
    assert refused == RejectedFrame(
        ErrorCode.PAYLOAD_TOO_LARGE, "payload of 51 bytes exceeds the limit of 50"
    )
    assert parser.feed(b"p" * 51 + struct.pack(">BBI", 2, 0x01, 200) + b"s" * 200) == [
        Frame(0x01, b"s" * 200)
    ]
    assert parser.buffered == 0
