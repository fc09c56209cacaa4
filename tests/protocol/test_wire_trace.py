"""
The trace option (docs/protocol.md, "Version 2: trace context"): a SUBMIT's
trace round-trips through the frame parser (property-based), reaches the
TASK's context byte for byte, and every bad one is refused saying why, by
the encoder (C{ValueError}) and the decoder (L{MalformedMessage}).
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.clients import tracing
from quicx.protocol import taskflow, tracecontext
from quicx.protocol.codec import MalformedMessage
from tests.protocol.test_wire_v2 import TRACING, encode_submit, table, through_parser

ids = st.binary(min_size=16, max_size=16).filter(any)
parents = st.binary(min_size=8, max_size=8).filter(any)
states = st.binary(max_size=tracecontext.MAX_TRACE_STATE).map(
    lambda raw: bytes(0x20 + b % 0x5F for b in raw)
)
"""Any tracestate the page allows: printable ASCII, at most 229 bytes."""
traces = st.builds(
    lambda trace_id, parent, flags, state: b"\x00" + trace_id + parent + bytes((flags,)) + state,
    ids,
    parents,
    st.integers(0, 255),
    states,
)
"""Any trace the page allows."""


@given(traces, st.none() | st.text("abc", min_size=1, max_size=8), st.binary(max_size=100))
def test_a_submits_trace_round_trips(trace: bytes, queue: str | None, payload: bytes) -> None:
    submit = taskflow.Submit(b"job", payload, taskflow.SubmitOptions(queue=queue, trace=trace))
    assert through_parser(encode_submit(submit)) == submit


@given(traces, st.none() | st.binary(min_size=1, max_size=255), st.integers(0, 0xFFFF))
def test_a_deliverys_trace_round_trips(trace: bytes, key: bytes | None, retries: int) -> None:
    fields = (7, b"job", b"body", b"\x01q", 3, 2, 1234, key, None, 99, 5000, 1, retries)
    task = through_parser(taskflow.encode_delivery(*fields, trace))
    assert isinstance(task, taskflow.Task)
    assert (task.trace, task.key, task.retries, task.token) == (trace, key, retries, 99)
    # Without a trace, the delivery is as before: its context has no item 0x0C.
    untraced = taskflow.encode_delivery(*fields)
    traced = taskflow.encode_delivery(*fields, trace)
    assert len(traced) == len(untraced) + 2 + len(trace)
    assert through_parser(untraced) == task._replace(trace=None)


@given(traces)
def test_the_headers_are_the_w3c_text_of_the_trace(trace: bytes) -> None:
    parent = tracing.traceparent(trace)
    assert parent == f"00-{trace[1:17].hex()}-{trace[17:25].hex()}-{trace[25]:02x}"
    assert len(parent) == 55
    assert tracing.tracestate(trace) == (trace[26:].decode() or None)


HEAD = b"\x00" + bytes(range(1, 17)) + bytes(range(1, 9)) + b"\x01"
BAD = [
    (HEAD[:25], "is 26 to 255 bytes, not 25"),
    (b"", "is 26 to 255 bytes, not 0"),
    (b"\x01" + HEAD[1:], "has version 1, not 0"),
    (b"\x00" + bytes(16) + HEAD[17:], "trace id or parent id of zeros"),
    (HEAD[:17] + bytes(8) + b"\x01", "trace id or parent id of zeros"),
    (HEAD + b"a=\x00", "not printable ASCII"),
    (HEAD + b"a=\x80", "not printable ASCII"),
    (HEAD + b"x" * 230, "is 26 to 255 bytes, not 256"),
]


@pytest.mark.parametrize(("trace", "why"), BAD)
def test_a_bad_trace_is_refused_by_the_encoder(trace: bytes, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        taskflow.SubmitOptions(trace=trace).encode()


@pytest.mark.parametrize(("trace", "why"), [bad for bad in BAD if len(bad[0]) <= 255])
def test_a_bad_trace_is_refused_by_the_decoder(trace: bytes, why: str) -> None:
    options = bytes((taskflow.Option.TRACE, len(trace))) + trace
    payload = b"\x01t" + struct.pack(">H", len(options)) + options + b"x"
    with pytest.raises(MalformedMessage, match=f"^SUBMIT trace .*{why}$"):
        taskflow.decode_submit(payload)


def test_a_trace_is_not_cached_among_the_repeating_options() -> None:
    first, second = HEAD, HEAD[:-1] + b"\x00"
    for trace in (first, second, first):
        submit = taskflow.Submit(b"t", b"", taskflow.SubmitOptions(queue="q", trace=trace))
        assert through_parser(encode_submit(submit)) == submit


def test_the_pages_layout_is_the_codecs() -> None:
    ((tag, name, value, _),) = table(TRACING, "## More SUBMIT options")
    assert (int(tag, 16), name) == (taskflow.Option.TRACE, "trace")
    assert f"{tracecontext.TRACE_HEAD} to {tracecontext.MAX_TRACE} bytes" in value
    ((tag, name, _),) = table(TRACING, "## TASK context items")
    assert (int(tag, 16), name) == (taskflow.Option.TRACE, "trace")
    example = bytes.fromhex("020100000026")
    frame = taskflow.encode_submit(b"resize", b"x", taskflow.SubmitOptions(trace=HEAD).encode())
    assert frame[:6] == example and len(frame) == 6 + 38
