"""
REPLICATE, SNAPSHOT, BATCH and BATCH_ACK (docs/protocol.md, "Version 2:
replication"): each round-trips through the frame parser (property-based),
the page's example is the encoders' bytes, a frame past its type's limit
is refused from its header, and every bad message is refused saying why.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import codec, replication
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser, RejectedFrame
from quicx.protocol.replication import Batch, BatchAck, Replicate, SnapshotChunk
from tests.protocol.test_wire_v2 import REPLICATION, example_bytes

epochs = st.integers(0, (1 << 64) - 1)
seqs = st.integers(1, (1 << 64) - 1)
names = st.text(min_size=1, max_size=60).filter(lambda n: len(n.encode()) <= replication.MAX_NAME)


def parser(max_batch: int = replication.DEFAULT_MAX_BATCH) -> FrameParser:
    return FrameParser(0, v2_max_length=1, v2_type_limits=replication.type_limits(max_batch))


def through_parser(encoded: bytes) -> tuple[int, bytes]:
    (frame,) = parser().feed(encoded)
    assert isinstance(frame, Frame)
    return frame.message_type, frame.payload


def decoded(encoded: bytes) -> replication.Message:
    message_type, payload = through_parser(encoded)
    return replication.DECODERS[message_type](payload)


@given(epochs, names)
def test_replicate_round_trips(epoch: int, name: str) -> None:
    assert decoded(replication.encode_replicate(epoch, name)) == Replicate(epoch, name)


@given(
    epochs, st.integers(0, (1 << 64) - 1), st.binary(max_size=3 * replication.SNAPSHOT_CHUNK // 2)
)
def test_a_snapshot_round_trips_in_bounded_chunks(epoch: int, seq: int, data: bytes) -> None:
    chunks = [decoded(f) for f in replication.snapshot_frames(epoch, seq, data)]
    assert all(isinstance(c, SnapshotChunk) for c in chunks)
    assert b"".join(c.data for c in chunks) == data  # type: ignore[union-attr]
    assert [c.last for c in chunks] == [False] * (len(chunks) - 1) + [True]  # type: ignore[union-attr]
    assert {(c.epoch, c.seq) for c in chunks} == {(epoch, seq)}  # type: ignore[union-attr]
    assert all(len(c.data) <= replication.SNAPSHOT_CHUNK for c in chunks)  # type: ignore[union-attr]


@given(epochs, seqs, st.binary(min_size=1, max_size=4096))
def test_a_batch_and_its_ack_round_trip(epoch: int, seq: int, records: bytes) -> None:
    assert decoded(replication.encode_batch(epoch, seq, records)) == Batch(epoch, seq, records)
    assert decoded(replication.encode_batch_ack(epoch, seq)) == BatchAck(epoch, seq)


def test_the_pages_example_is_the_encoders_bytes() -> None:
    block = REPLICATION.split("Example: standby `s2`")[1].split("```")[1]
    spelled = example_bytes(block)
    assert spelled == (
        replication.encode_replicate(7, "s2")
        + replication.encode_snapshot(7, 41, True, b"QUICXJ6\n")
        + replication.encode_batch(7, 42, b"\x00\x00\x00\x01\xd2\x02\xef\x8d\x05")
        + replication.encode_batch_ack(7, 42)
    )


@pytest.mark.parametrize(
    ("message_type", "length"),
    [
        (MessageType.REPLICATE, replication.MAX_REPLICATE + 1),
        (MessageType.SNAPSHOT, replication.SNAPSHOT_FIXED + replication.SNAPSHOT_CHUNK + 1),
        (MessageType.BATCH, replication.BATCH_FIXED + 4096 + 1),
        (MessageType.BATCH_ACK, replication.BATCH_ACK_SIZE + 1),
    ],
)
def test_a_frame_past_its_types_limit_is_refused_from_its_header(
    message_type: int, length: int
) -> None:
    header = codec.HEADER.pack(codec.VERSION, message_type, length)
    (refused,) = parser(max_batch=4096).feed(header)
    assert isinstance(refused, RejectedFrame)
    assert refused.code == codec.ErrorCode.PAYLOAD_TOO_LARGE
    # One byte less is taken (and its payload awaited, not skipped).
    assert (
        parser(max_batch=4096).feed(codec.HEADER.pack(codec.VERSION, message_type, length - 1))
        == []
    )


@pytest.mark.parametrize(
    ("message_type", "payload", "fragment"),
    [
        (MessageType.REPLICATE, bytes(8), "needs at least 9 bytes, got 8"),
        (MessageType.REPLICATE, bytes(9), "has an empty name"),
        (MessageType.REPLICATE, bytes(8) + b"\x03ab", "name of 3 bytes is followed by 2"),
        (MessageType.REPLICATE, bytes(8) + b"\x01\xff", "name is not UTF-8"),
        (MessageType.SNAPSHOT, bytes(16), "needs at least 17 bytes, got 16"),
        (MessageType.SNAPSHOT, bytes(16) + b"\x02", "has unknown flags 0x02"),
        (MessageType.BATCH, bytes(16), "needs more than 16 bytes, got 16"),
        (MessageType.BATCH, bytes(16) + b"x", "has seq 0"),
        (MessageType.BATCH_ACK, bytes(15), "is 16 bytes, not 15"),
        (MessageType.BATCH_ACK, bytes(17), "is 16 bytes, not 17"),
    ],
)
def test_a_bad_message_is_refused_saying_why(
    message_type: int, payload: bytes, fragment: str
) -> None:
    with pytest.raises(MalformedMessage) as refused:
        replication.DECODERS[message_type](payload)
    assert fragment in str(refused.value)
    assert str(refused.value).startswith(MessageType(message_type).name + " ")


def test_the_encoders_refuse_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        replication.encode_replicate(1, "")
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        replication.encode_replicate(1, "x" * 256)
    with pytest.raises(ValueError, match="at least one byte"):
        replication.encode_batch(1, 1, b"")
    with pytest.raises(ValueError, match="at most"):
        replication.encode_snapshot(1, 1, True, bytes(replication.SNAPSHOT_CHUNK + 1))
