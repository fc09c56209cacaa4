"""The wire format: every message encodes and decodes, bad payloads are refused."""

import struct

import pytest

from quicx.protocol import codec, registry, wire
from quicx.protocol.codec import MalformedMessage
from quicx.protocol.wire import MessageType

ROUND_TRIPS = [
    (
        wire.encode_submit(b"send_email", b'{"to":"user@gmail.com"}'),
        wire.Submit(b"send_email", b'{"to":"user@gmail.com"}'),
    ),
    (wire.encode_ok(2626), wire.Ok(2626)),
    (wire.encode_error(wire.ErrorCode.QUEUE_FULL, "queue full"), wire.Error(1, "queue full")),
    (wire.encode_ready(), wire.Ready()),
    (wire.encode_task(7, b"resize", b"\x00\xff"), wire.Task(7, b"resize", b"\x00\xff")),
    (wire.encode_done(0xFFFFFFFF), wire.Done(0xFFFFFFFF)),
    (
        wire.encode_failed(9, "smtp: 550 mailbox ünavailable"),
        wire.Failed(9, "smtp: 550 mailbox ünavailable"),
    ),
    (wire.encode_wait(), wire.Wait()),
    (wire.encode_heartbeat(), wire.Heartbeat()),
    (wire.encode_pong(), wire.Pong()),
    (wire.encode_stats(), wire.StatsRequest()),
    (
        wire.encode_stats_response(wire.StatsResponse(1, 2, 3, 2**40, 2**41)),
        wire.StatsResponse(1, 2, 3, 2**40, 2**41),
    ),
]


@pytest.mark.parametrize(("encoded", "message"), ROUND_TRIPS)
def test_round_trip(encoded: bytes, message: wire.Message) -> None:
    version, message_type, length = codec.HEADER.unpack_from(encoded)
    assert version == 1
    assert length == len(encoded) - 6
    assert registry.decode(message_type, encoded[6:], wire.PROTOCOL_VERSION) == message


def test_all_twelve_types_covered() -> None:
    assert {codec.HEADER.unpack_from(e)[1] for e, _ in ROUND_TRIPS} == set(MessageType)


def test_submit_layout_matches_protocol_page() -> None:
    encoded = wire.encode_submit(b"send_email", b'{"to":"user@gmail.com"}')
    assert encoded == (
        b"\x01\x01"
        + struct.pack(">I", 1 + 10 + 23)
        + b"\x0a"
        + b"send_email"
        + b'{"to":"user@gmail.com"}'
    )


def test_ok_layout_matches_protocol_page() -> None:
    assert wire.encode_ok(0x00000A42) == b"\x01\x02\x00\x00\x00\x04\x00\x00\x0a\x42"


def test_stats_response_is_28_bytes_big_endian() -> None:
    encoded = wire.encode_stats_response(wire.StatsResponse(1, 2, 3, 4, 5))
    assert encoded[6:] == (
        b"\x00\x00\x00\x01"
        b"\x00\x00\x00\x02"
        b"\x00\x00\x00\x03"
        b"\x00\x00\x00\x00\x00\x00\x00\x04"
        b"\x00\x00\x00\x00\x00\x00\x00\x05"
    )
    assert len(encoded) == 6 + 28


@pytest.mark.parametrize(
    ("message_type", "payload", "fragment"),
    [
        (MessageType.SUBMIT, b"", "no task type length"),
        (MessageType.SUBMIT, b"\x0asend", "runs past"),
        (MessageType.SUBMIT, b"\x00payload", "empty task type"),
        (MessageType.TASK, b"\x00\x00\x01", "4-byte task id"),
        (MessageType.TASK, b"\x00\x00\x00\x01\x05ab", "runs past"),
        (MessageType.DONE, b"\x00\x00\x00", "must be 4 bytes"),
        (MessageType.DONE, b"\x00\x00\x00\x01\x00", "must be 4 bytes"),
        (MessageType.OK, b"\x00", "must be 4 bytes"),
        (MessageType.FAILED, b"\x00\x00", "4-byte task id"),
        (MessageType.FAILED, b"\x00\x00\x00\x01\xff\xfe", "not UTF-8"),
        (MessageType.READY, b"x", "empty or a 2-byte credit count, got 1 bytes"),
        (MessageType.READY, b"\x00\x00\x01", "empty or a 2-byte credit count, got 3 bytes"),
        (MessageType.READY, b"\x00\x00", "credits must be at least 1"),
        (MessageType.WAIT, b"x", "must be 0 bytes"),
        (MessageType.HEARTBEAT, b"x", "must be 0 bytes"),
        (MessageType.PONG, b"x", "must be 0 bytes"),
        (MessageType.STATS, b"x", "must be 0 bytes"),
        (MessageType.STATS_RESPONSE, bytes(27), "must be 28 bytes"),
        (MessageType.ERROR, b"", "no error code"),
        (0x0D, b"", "unknown message type 0x0d"),
        (0x00, b"", "unknown message type 0x00"),
    ],
)
def test_malformed_payloads_are_refused(message_type: int, payload: bytes, fragment: str) -> None:
    with pytest.raises(MalformedMessage, match=fragment) as raised:
        registry.decode(message_type, payload, wire.PROTOCOL_VERSION)
    assert raised.value.message_type == message_type


def test_ready_credits_extension() -> None:
    # One credit is the protocol page's empty READY, byte for byte.
    assert wire.encode_ready(1) == b"\x01\x04\x00\x00\x00\x00"
    assert wire.encode_ready(300) == b"\x01\x04\x00\x00\x00\x02\x01\x2c"
    assert wire.decode_ready(b"\x01\x2c") == wire.Ready(300)
    assert wire.decode_ready(b"\xff\xff") == wire.Ready(codec.MAX_CREDITS)
    for bad in (0, codec.MAX_CREDITS + 1):
        with pytest.raises(ValueError, match="READY credits are 1 to 65535"):
            wire.encode_ready(bad)


def test_failed_reason_is_verbatim_utf8() -> None:
    reason = "timeout: 30 s — ✉ not sent"
    assert wire.decode_failed(wire.encode_failed(3, reason)[6:]).reason == reason
    assert wire.decode_failed(wire.encode_failed(3, "")[6:]).reason == ""


def test_submit_allows_an_empty_payload_and_binary_bytes() -> None:
    assert wire.decode_submit(b"\x01a") == wire.Submit(b"a", b"")
    assert wire.decode_submit(b"\x01a\x00\x01\x02") == wire.Submit(b"a", b"\x00\x01\x02")


@pytest.mark.parametrize("task_type", [b"", b"x" * 256])
def test_encoding_refuses_task_types_that_do_not_fit(task_type: bytes) -> None:
    with pytest.raises(ValueError, match="1 to 255 bytes"):
        wire.encode_submit(task_type, b"")


def test_longest_task_type() -> None:
    task_type = b"t" * 255
    assert wire.decode_submit(wire.encode_submit(task_type, b"p")[6:]) == wire.Submit(
        task_type, b"p"
    )
