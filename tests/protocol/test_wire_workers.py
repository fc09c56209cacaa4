"""
The workers' messages (L{quicx.protocol.workers}): every encoder's frame
decodes back to what it was given, through the registry; what an encoder
refuses to make.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import registry, workers
from quicx.protocol.codec import HEADER, VERSION, MalformedMessage, MessageType

task_types = st.binary(min_size=1, max_size=255)
texts = st.text(max_size=60).filter(lambda t: len(t.encode("utf-8")) <= 255)
actions = st.sampled_from(list(workers.Steer))
u32 = st.integers(0, 0xFFFFFFFF)


def decoded(frame: bytes) -> object:
    version, message_type, length = HEADER.unpack_from(frame)
    assert (version, length) == (VERSION, len(frame) - HEADER.size)
    return registry.decode(message_type, frame[HEADER.size :])


@given(st.none() | st.frozensets(task_types, min_size=1, max_size=40), texts, texts, u32)
def test_announce_round_trips(
    types: frozenset[bytes] | None, name: str, host: str, pid: int
) -> None:
    frame = workers.encode_announce(types, name, host, pid)
    assert frame[1] == MessageType.ANNOUNCE
    assert decoded(frame) == workers.Announce(types, name, host, pid)


def test_announce_takes_text_types_and_refuses_what_it_cannot_carry() -> None:
    assert decoded(workers.encode_announce(["mail", "pdf"])) == workers.Announce(
        frozenset({b"mail", b"pdf"})
    )
    for bad in ([], ["a", "a"], [""], ["x" * 256]):
        with pytest.raises(ValueError):
            workers.encode_announce(bad)
    with pytest.raises(ValueError, match="process id"):
        workers.encode_announce(None, pid=-1)
    with pytest.raises(ValueError):
        workers.encode_announce(None, name="n" * 256)


def test_a_later_release_s_announce_fields_are_passed_over() -> None:
    payload = workers.encode_announce(["a"], "n")[HEADER.size :] + b"\x09\x02hi"
    assert workers.decode_announce(payload) == workers.Announce(frozenset({b"a"}), "n")


@given(actions, u32)
def test_steer_and_stop_round_trip(action: workers.Steer, number: int) -> None:
    assert decoded(workers.encode_steer(action, number)) == workers.SteerWorker(action, number)
    assert decoded(workers.encode_stop(action, number)) == workers.Stop(action, number)


@given(u32)
def test_workers_round_trips_with_or_without_a_cursor(after: int) -> None:
    assert decoded(workers.encode_workers()) == workers.Workers()
    assert decoded(workers.encode_workers(after)) == workers.Workers(after)
    with pytest.raises(MalformedMessage, match="WORKERS payload must be empty or 4 bytes"):
        workers.decode_workers(b"\x00")


@given(st.binary(max_size=64))
def test_any_bytes_decode_or_are_refused_as_malformed(payload: bytes) -> None:
    for message_type in (MessageType.ANNOUNCE, MessageType.STEER, MessageType.STOP):
        try:
            registry.decode(message_type, payload)
        except MalformedMessage as e:
            assert e.message_type == message_type
