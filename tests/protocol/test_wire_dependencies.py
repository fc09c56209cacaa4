"""
The dependency options (after 0x0D, on-parent-failure 0x0E, after-group
0x0F) and the parents' outcomes a TASK carries (0x23): the page's example,
round trips of any value (hypothesis), and every malformed value refused
with a reason.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import registry, taskflow
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.parents import (
    MAX_PARENTS,
    GroupCounts,
    ParentOutcome,
    Parents,
    encode_parents,
)
from tests.protocol.test_wire_v2 import DEPENDENCIES, example_bytes

U32 = st.integers(1, 0xFFFFFFFF)


def opts(items: bytes) -> bytes:
    return len(items).to_bytes(2, "big") + items


def test_the_pages_example() -> None:
    block = DEPENDENCIES.split("Example: task 9 waits for tasks 4 and 5")[1]
    spelled = example_bytes(block.split("```")[1])
    options = taskflow.SubmitOptions(after=(4, 5), on_parent_failure=2)
    assert spelled == taskflow.encode_submit(b"t", b"x", options.encode())
    assert registry.decode(MessageType.SUBMIT, spelled[6:]) == taskflow.Submit(b"t", b"x", options)


@given(
    after=st.none() | st.lists(U32, min_size=1, max_size=MAX_PARENTS, unique=True).map(tuple),
    policy=st.none() | st.integers(0, 2),
    group=st.none() | U32,
)
def test_any_dependency_options_round_trip(
    after: tuple[int, ...] | None, policy: int | None, group: int | None
) -> None:
    if policy is not None and after is None and group is None:
        policy = None
    options = taskflow.SubmitOptions(
        queue="q", after=after, on_parent_failure=policy, after_group=group
    )
    payload = taskflow.encode_submit(b"t", b"p", options.encode())[6:]
    assert taskflow.decode_submit(payload).options == options
    assert options.routing_only is (after is None and group is None)


outcome = st.builds(
    ParentOutcome,
    U32,
    st.sampled_from([1, 2, 3, 4, 6, 7]),
    st.integers(0, 3),
    st.binary(max_size=700),
)
counts = st.builds(GroupCounts, U32, U32, U32, U32, U32)


@given(
    outcomes=st.lists(outcome, max_size=20).map(tuple),
    group=st.none() | counts,
    left_out=st.integers(0, 0xFFFFFFFF),
)
def test_any_parents_context_round_trips_through_a_task(
    outcomes: tuple[ParentOutcome, ...], group: GroupCounts | None, left_out: int
) -> None:
    parents = Parents(outcomes, group, left_out)
    frame = taskflow.encode_delivery(
        7, b"t", b"pay", b"\x01q", 3, 1, 99, b"k", None, 5, 1000, 0, 0, None,
        parents=encode_parents(parents),
    )  # fmt: skip
    task = taskflow.decode_task(frame[6:])
    assert (task.parents, task.payload, task.key, task.token) == (parents, b"pay", b"k", 5)


@pytest.mark.parametrize(
    ("items", "reason"),
    [
        (b"\x0d\x00", "after must be a count"),
        (b"\x0d\x01\x00", "after must be a count"),
        (b"\x0d\x04\x01\x00\x00\x00", "after must be a count"),
        (b"\x0d\x05\x01\x00\x00\x00\x00", "after names task 0"),
        (b"\x0d\x09\x02" + b"\x00\x00\x00\x07" * 2, "after names a parent twice"),
        (b"\x0d\x05\x01\x00\x00\x00\x01\x0e\x01\x03", "on-parent-failure must be 1 byte"),
        (b"\x0d\x05\x01\x00\x00\x00\x01\x0e\x02\x00\x00", "on-parent-failure must be 1 byte"),
        (b"\x0e\x01\x01", "on-parent-failure without after or after-group"),
        (b"\x0f\x04\x00\x00\x00\x00", "after-group names group 0"),
        (b"\x0f\x03\x00\x00\x01", "after-group must be 4 bytes"),
    ],
)
def test_malformed_dependency_options_say_why(items: bytes, reason: str) -> None:
    with pytest.raises(MalformedMessage, match=reason):
        registry.decode(MessageType.SUBMIT, b"\x01t" + opts(items))


@pytest.mark.parametrize(
    "block",
    [
        b"",  # no head
        b"\x00\x00\x00\x00\x00\x00\x01",  # one outcome promised, none there
        b"\x02\x00\x00\x00\x00\x00\x00",  # an unknown flag
        b"\x00\x00\x00\x00\x00\x00\x01" + b"\x00\x00\x00\x01\x09\x00\x00\x00\x00\x00",  # state 9
        b"\x00\x00\x00\x00\x00\x00\x00" + b"x",  # trailing bytes
    ],
)
def test_a_malformed_parents_context_is_refused(block: bytes) -> None:
    chunks = b"".join(
        b"\x23" + bytes((len(block[i : i + 255]),)) + block[i : i + 255]
        for i in range(0, max(len(block), 1), 255)
    )
    fixed = b"\x00\x00\x00\x01\x00\x01\x00" + b"\x00" * 8
    with pytest.raises(MalformedMessage, match="parents context is malformed"):
        registry.decode(MessageType.TASK, fixed + b"\x01q\x01t" + opts(chunks) + b"p")


def test_encoding_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(ValueError, match="1 to 63 parents"):
        taskflow.SubmitOptions(after=tuple(range(1, 65))).encode()
    with pytest.raises(ValueError, match="named twice"):
        taskflow.SubmitOptions(after=(3, 3)).encode()
    with pytest.raises(ValueError, match="needs after or after_group"):
        taskflow.SubmitOptions(on_parent_failure=0).encode()
