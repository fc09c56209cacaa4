"""
CHECKPOINT and the TASK context item 0x24 (docs/protocol.md, "Version 2:
checkpoints"): both directions round-trip through the frame parser
(property-based), a state of any allowed size rides a delivery's context in
255-byte items beside every other item, a decoder that does not know the
tag passes its items over, the page's example is the encoders' bytes, and
every bad message is refused saying why.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import checkpoints, codec, taskflow
from quicx.protocol.checkpoints import Checkpoint, Checkpointed
from quicx.protocol.codec import MalformedMessage, MessageType
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.taskflow import Result
from tests.protocol.test_wire_v2 import CHECKPOINTS, example_bytes

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=10,
)
states = st.one_of(
    st.binary(max_size=checkpoints.MAX_CHECKPOINT).map(Result.of),
    st.text(max_size=300).map(Result.of),
    json_values.map(Result.of),
)
"""Any state a worker may save, of each kind."""
ids = st.integers(1, codec.MAX_TASK_ID)
tokens = st.integers(0, (1 << 64) - 1)


def through_parser(encoded: bytes) -> tuple[int, bytes]:
    parser = FrameParser(1 << 20, v2_max_length=1 << 20)
    (frame,) = parser.feed(encoded)
    assert isinstance(frame, Frame) and parser.version == 2
    return frame.message_type, frame.payload


@given(ids, tokens, states)
def test_a_checkpoint_round_trips(task_id: int, token: int, state: Result) -> None:
    encoded = checkpoints.encode_checkpoint(task_id, token, state)
    assert len(encoded) == codec.HEADER_SIZE + checkpoints.CHECKPOINT_FIXED + len(state.data)
    message_type, payload = through_parser(encoded)
    assert message_type == MessageType.CHECKPOINT
    assert checkpoints.decode_checkpoint(payload) == Checkpoint(task_id, token, state)


@given(ids, tokens, st.sampled_from([0, *codec.ErrorCode]), st.text(max_size=200))
def test_an_answer_round_trips(task_id: int, token: int, code: int, reason: str) -> None:
    encoded = checkpoints.encode_checkpointed(task_id, token, code, reason)
    _, payload = through_parser(encoded)
    answer = checkpoints.decode_checkpointed(payload)
    assert answer == Checkpointed(task_id, token, code, reason)
    assert answer.kept == (code == checkpoints.KEPT)


@given(
    states,
    st.none() | st.binary(min_size=1, max_size=255),
    st.none() | st.binary(min_size=1, max_size=255),
    st.integers(0, 0xFFFF),
    st.none() | st.binary(min_size=26, max_size=255),
)
def test_a_deliverys_checkpoint_rides_beside_every_other_item(
    state: Result, key: bytes | None, fairness: bytes | None, retries: int, trace: bytes | None
) -> None:
    fields = (7, b"job", b"body", b"\x01q", 3, 2, 1234, key, fairness, 99, 5000, 1, retries, trace)
    _, payload = through_parser(taskflow.encode_delivery(*fields, state))
    task = taskflow.decode_task(payload)
    assert (task.checkpoint, task.key, task.fairness, task.retries, task.trace, task.payload) == (
        state,
        key,
        fairness,
        retries,
        trace,
        b"body",
    )
    # Without one, the delivery is as before, byte for byte.
    _, plain = through_parser(taskflow.encode_delivery(*fields))
    assert taskflow.decode_task(plain) == task._replace(checkpoint=None)
    items = -(-(1 + len(state.data)) // codec.MAX_OPTION)
    assert len(payload) == len(plain) + 2 * items + 1 + len(state.data)


@given(states)
def test_a_decoder_that_does_not_know_the_tag_passes_its_items_over(state: Result) -> None:
    context = taskflow.task_context(b"k", None, 5, 100, checkpoint=state)
    known = frozenset({taskflow.Option.KEY, taskflow.Context.TOKEN, taskflow.Context.LEASE})
    items = codec.tlv(MessageType.TASK, context, 0, len(context), known)
    assert items == {
        taskflow.Option.KEY: b"k",
        taskflow.Context.TOKEN: (5).to_bytes(8, "big"),
        taskflow.Context.LEASE: (100).to_bytes(4, "big"),
    }


def test_the_largest_state_fits_a_context_beside_the_longest_other_items() -> None:
    longest = b"k" * 255
    state = Result.of(b"s" * checkpoints.MAX_CHECKPOINT)
    context = taskflow.task_context(longest, longest, 5, 100, 3, 9, longest, state)
    assert len(context) <= 0xFFFF


def test_the_pages_example_is_the_encoders_bytes() -> None:
    block = CHECKPOINTS.split("daemon answers that it is kept:")[1].split("```")[1]
    spelled = example_bytes(block)
    saved = checkpoints.encode_checkpoint(7, 0x1000, Result.of({"i": 42}))
    assert spelled == saved + checkpoints.encode_checkpointed(7, 0x1000)


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "needs at least 13 bytes, got 0"),
        (bytes(12), "needs at least 13 bytes, got 12"),
        (bytes(4) + bytes(8) + b"\x01", "names task 0"),
        (b"\x00\x00\x00\x01" + bytes(8) + b"\x09", "unknown result kind 0x09"),
        (b"\x00\x00\x00\x01" + bytes(8) + b"\x03{nope", "result is not JSON"),
        (b"\x00\x00\x00\x01" + bytes(8) + b"\x02\xff", "result is not TEXT"),
    ],
)
def test_a_bad_checkpoint_is_refused_saying_why(payload: bytes, fragment: str) -> None:
    with pytest.raises(MalformedMessage) as refused:
        checkpoints.decode_checkpoint(payload)
    assert fragment in str(refused.value)
    assert str(refused.value).startswith("CHECKPOINT ")


def test_a_bad_answer_is_refused_saying_why() -> None:
    with pytest.raises(MalformedMessage, match="reason is not UTF-8"):
        checkpoints.decode_checkpointed(b"\x00\x00\x00\x01" + bytes(8) + b"\x08\xff")


def test_a_task_with_an_empty_or_bad_checkpoint_is_refused() -> None:
    for value, fragment in [(b"", "unknown result kind 0x00"), (b"\x03[", "result is not JSON")]:
        context = taskflow.task_context(None, None, 5, 100) + b"\x24" + bytes((len(value),)) + value
        frame = taskflow.encode_task(1, b"t", b"p", b"\x01q", 0, 1, 0, context)
        with pytest.raises(MalformedMessage, match=fragment):
            taskflow.decode_task(frame[codec.HEADER_SIZE :])
