"""
ROLE (docs/protocol.md, "Version 2: roles"): every action round-trips
through the frame parser (property-based), any other byte or length is
refused saying why, and the page's table is the codec's.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import role
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.registry import decode
from quicx.protocol.role import Role, RoleAction
from tests.protocol.test_wire_v2 import ROLES as ROLES_PAGE
from tests.protocol.test_wire_v2 import table


@given(st.sampled_from(RoleAction), st.lists(st.integers(0, 8)))
def test_any_action_round_trips_whatever_the_reads(action: RoleAction, cuts: list[int]) -> None:
    encoded = role.encode_role(action)
    assert encoded == bytes((2, MessageType.ROLE, 0, 0, 0, 1, action))
    parser = FrameParser(1 << 16, v2_max_length=1 << 16)
    frames = []
    points = sorted({cut % (len(encoded) + 1) for cut in cuts})
    for start, end in zip([0, *points], [*points, len(encoded)], strict=True):
        frames += parser.feed(encoded[start:end])
    (frame,) = frames
    assert isinstance(frame, Frame)
    assert decode(frame.message_type, frame.payload) == Role(action)


@given(st.binary(max_size=4).filter(lambda b: len(b) != 1 or b[0] not in (1, 2)))
def test_any_other_payload_is_refused(payload: bytes) -> None:
    with pytest.raises(MalformedMessage, match=r"^ROLE "):
        decode(MessageType.ROLE, payload)


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"", "ROLE is 1 byte (its action), not 0"),
        (b"\x01\x02", "ROLE is 1 byte (its action), not 2"),
        (b"\x03", "ROLE has unknown action 3 (1: step down, 2: promote)"),
    ],
)
def test_a_bad_role_says_why(payload: bytes, error: str) -> None:
    with pytest.raises(MalformedMessage) as raised:
        decode(MessageType.ROLE, payload)
    assert str(raised.value) == error


def test_the_encoder_refuses_an_unknown_action() -> None:
    with pytest.raises(ValueError):
        role.encode_role(3)


def test_the_pages_table_is_the_codecs() -> None:
    assert table(ROLES_PAGE, "## Messages") == [["0x36", "ROLE", "admin → daemon", "`[action u8]`"]]
    assert [a.value for a in RoleAction] == [1, 2]
