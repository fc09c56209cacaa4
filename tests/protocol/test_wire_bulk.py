"""
BULK (docs/protocol.md, "Version 2: bulk actions"): any request the page
allows round-trips through the frame parser (property-based); every bad
one is refused saying why, by the encoder (C{ValueError}) and the decoder
(L{MalformedMessage}); the page's tables are the codec's.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import bulk
from quicx.protocol.bulk import ACTS_ON, Bulk, BulkAction, BulkField, BulkFilter, BulkState
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.registry import decode
from tests.protocol.test_wire_v2 import BULK as BULK_PAGE
from tests.protocol.test_wire_v2 import table

names = st.from_regex(r"[A-Za-z0-9_.:\-]{1,64}", fullmatch=True)
ages = st.sampled_from([0.0, 0.001, 1.0, 600.0, 86_400.0 * 365])


@st.composite
def requests(draw: st.DrawFn) -> Bulk:
    action = draw(st.sampled_from(BulkAction))
    states = BulkState(draw(st.integers(0, 7))) & ACTS_ON[action]
    older, newer = draw(ages), draw(ages)
    if older and newer and newer <= older:
        newer = 0.0
    queue = draw(st.none() | names)
    target = None
    if action is BulkAction.MOVE:
        target = draw(names.filter(lambda n: n != queue))
    return Bulk(
        action,
        BulkFilter(
            queue,
            draw(st.none() | st.binary(min_size=1, max_size=255)),
            draw(st.none() | st.binary(min_size=1, max_size=255)),
            states,
            older,
            newer,
            draw(st.none() | st.text(min_size=1, max_size=60)),
        ),
        draw(st.booleans()),
        target,
    )


@given(requests(), st.lists(st.integers(0, 600)))
def test_any_request_round_trips_whatever_the_reads(request: Bulk, cuts: list[int]) -> None:
    encoded = bulk.encode_bulk(request)
    assert encoded[:2] == bytes((2, MessageType.BULK))
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    frames = []
    points = sorted({cut % (len(encoded) + 1) for cut in cuts})
    for start, end in zip([0, *points], [*points, len(encoded)], strict=True):
        frames += parser.feed(encoded[start:end])
    (frame,) = frames
    assert isinstance(frame, Frame)
    assert decode(frame.message_type, frame.payload) == request


def test_the_request_builder_reads_names_and_durations() -> None:
    made = bulk.request(
        "move", True, queue="a", task_type="t", key_prefix="k-", states=["queued", "dead"],
        older_than="10m", newer_than=86_400, reason="timeout", to="b",
    )  # fmt: skip
    assert made == Bulk(
        BulkAction.MOVE,
        BulkFilter("a", b"t", b"k-", BulkState.QUEUED | BulkState.DEAD, 600.0, 86_400.0, "timeout"),
        True,
        "b",
    )
    with pytest.raises(ValueError, match="unknown bulk action 'erase'"):
        bulk.request("erase")
    with pytest.raises(ValueError, match="unknown state 'running'"):
        bulk.request("cancel", states=["running"])
    with pytest.raises(ValueError, match="not a duration"):
        bulk.request("cancel", older_than="soon")


def head(action: int = 1, flags: int = 0, fields: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack(">BBH", action, flags, len(fields) if length is None else length) + fields


def field(tag: int, value: bytes) -> bytes:
    return bytes((tag, len(value))) + value


BAD = [
    (b"\x01\x00\x00", "shorter than its 4-byte head"),
    (head(0), "unknown action 0"),
    (head(6), "unknown action 6"),
    (head(flags=0x02), "unknown flags 0x02"),
    (head(length=3), "do not end the"),
    (head(fields=b"\x01"), "has no length"),
    (head(fields=b"\x01\x05ab"), "runs past its field"),
    (head(fields=field(0x09, b"x")), "unknown field 0x09"),
    (head(fields=field(1, b"a") + field(1, b"b")), "repeats option 0x01"),
    (head(fields=field(BulkField.QUEUE, b"no spaces")), "queue name"),
    (head(fields=field(BulkField.STATES, b"\x00")), "states must be"),
    (head(fields=field(BulkField.STATES, b"\x10")), "states must be"),
    (head(fields=field(BulkField.STATES, b"\x01\x02")), "states must be"),
    (head(fields=field(BulkField.STATES, b"\x04")), "cancel does not act on dead"),
    (head(fields=field(BulkField.OLDER_THAN, b"\x00" * 4)), "older_than must be 8 bytes"),
    (head(fields=field(BulkField.NEWER_THAN, b"\xff" * 8)), "newer_than is past"),
    (head(fields=field(BulkField.REASON, b"\xff")), "reason is not UTF-8"),
    (head(5), "names its target queue"),
    (head(1, fields=field(BulkField.TARGET, b"b")), "names its target queue"),
    (head(5, fields=field(BulkField.QUEUE, b"b") + field(BulkField.TARGET, b"b")), "already"),
    (
        head(fields=field(5, struct.pack(">Q", 60_000)) + field(6, struct.pack(">Q", 1000))),
        "no task is older",
    ),
]


@pytest.mark.parametrize(("payload", "why"), BAD, ids=[why for _, why in BAD])
def test_every_bad_bulk_is_refused_saying_why(payload: bytes, why: str) -> None:
    with pytest.raises(MalformedMessage, match=why) as caught:
        decode(MessageType.BULK, payload)
    assert str(caught.value).startswith("BULK ")


@pytest.mark.parametrize(
    "made",
    [
        Bulk(BulkAction.CANCEL, BulkFilter(queue="no spaces")),
        Bulk(BulkAction.CANCEL, BulkFilter(task_type=b"")),
        Bulk(BulkAction.CANCEL, BulkFilter(key_prefix=b"k" * 256)),
        Bulk(BulkAction.CANCEL, BulkFilter(older_than=-1.0)),
        Bulk(BulkAction.CANCEL, BulkFilter(reason="")),
        Bulk(BulkAction.PURGE, BulkFilter(states=BulkState(16))),
    ],
)
def test_the_encoder_refuses_what_the_page_does_not_allow(made: Bulk) -> None:
    with pytest.raises(ValueError):
        bulk.encode_bulk(made)


def test_the_pages_tables_are_the_codecs() -> None:
    assert [(int(code, 16), name) for code, name, *_ in table(BULK_PAGE, "## Messages")] == [
        (MessageType.BULK.value, "BULK")
    ]
    assert [int(code) for code, *_ in table(BULK_PAGE, "### Actions")] == [
        a.value for a in BulkAction
    ]
    assert [int(tag, 16) for tag, *_ in table(BULK_PAGE, "### Filter fields")] == [
        f.value for f in BulkField
    ]
