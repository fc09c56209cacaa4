"""
The debounce and expiry options (docs/protocol.md, "Version 2: debounce and
expiry"): each round-trips through the frame parser (property-based), the
page's example is the codec's bytes, and every bad one is refused saying
why, by the encoder (C{ValueError}) and the decoder (L{MalformedMessage}).
"""

from __future__ import annotations

import re
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from quicx.protocol import taskflow
from quicx.protocol.codec import MalformedMessage
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import SubmitOptions
from tests.protocol.test_wire_v2 import START_OPTIONS, encode_submit, through_parser

keys = st.binary(min_size=1, max_size=255)
debounces = st.builds(Debounce, st.sampled_from(DebounceMode), st.integers(1, 0xFFFFFFFF))
expiries = st.builds(Expires, st.integers(1, 0xFFFFFFFF)) | st.builds(
    lambda ms: Expires(ms, at=True), st.integers(1, 2**64 - 1)
)


@given(keys, st.none() | debounces, st.none() | expiries, st.binary(max_size=64))
def test_a_submits_debounce_and_expiry_round_trip(
    key: bytes, debounce: Debounce | None, expires: Expires | None, payload: bytes
) -> None:
    options = SubmitOptions(key=key, debounce=debounce, expires=expires)
    submit = taskflow.Submit(b"job", payload, options)
    decoded = through_parser(encode_submit(submit))
    assert decoded == submit
    assert decoded.options.routing_only is False or (debounce is None and expires is None)


@given(expiries, st.none() | st.integers(0, 0xFFFFFFFF))
def test_an_expiry_goes_with_a_delay(expires: Expires, delay_ms: int | None) -> None:
    submit = taskflow.Submit(b"job", b"", SubmitOptions(delay_ms=delay_ms, expires=expires))
    assert through_parser(encode_submit(submit)) == submit


def test_the_pages_example_is_the_codecs() -> None:
    block = START_OPTIONS[START_OPTIONS.index("Example: `digest`") :].split("```")[1]
    fields = (re.split(r"\s{3,}", line)[0] for line in block.strip().splitlines())
    quoted = (re.sub(r'"(\w+)"', lambda m: m.group(1).encode().hex(), f) for f in fields)
    options = SubmitOptions(
        key=b"k", debounce=Debounce(DebounceMode.REPLACE, 2000), expires=Expires(60_000)
    )
    expected = taskflow.encode_submit(b"digest", b"x", options.encode())
    assert bytes.fromhex("".join(quoted).replace(" ", "")) == expected


def _options(*items: bytes) -> bytes:
    """A SUBMIT of type C{job} with these raw options and the payload C{x}."""
    raw = b"".join(items)
    return b"\x03job" + struct.pack(">H", len(raw)) + raw + b"x"


KEY = b"\x03\x01k"


@pytest.mark.parametrize(
    ("options", "fault"),
    [
        (KEY + b"\x10\x04\x02\x00\x00\x07", "debounce must be 5 bytes, not 4"),
        (KEY + b"\x10\x06\x02\x00\x00\x07\xd0\x00", "debounce must be 5 bytes, not 6"),
        (KEY + b"\x10\x05\x00\x00\x00\x07\xd0", "debounce mode must be 1 (drop)"),
        (KEY + b"\x10\x05\x04\x00\x00\x07\xd0", "not 4"),
        (KEY + b"\x10\x05\x01\x00\x00\x00\x00", "has a debounce window of 0 ms"),
        (b"\x10\x05\x01\x00\x00\x07\xd0", "has a debounce without a key"),
        (
            KEY + b"\x10\x05\x02\x00\x00\x07\xd0\x05\x04\x00\x00\x00\x01",
            "has both a debounce and a delay",
        ),
        (
            KEY + b"\x10\x05\x02\x00\x00\x07\xd0\x06\x08" + bytes(7) + b"\x01",
            "has both a debounce and a delay",
        ),
        (b"\x11\x00", "expiry must be 4 bytes (ms from now) or 8 bytes"),
        (b"\x11\x05" + bytes(5), "expiry must be 4 bytes (ms from now) or 8 bytes"),
        (b"\x11\x04" + bytes(4), "has an expiry of 0"),
        (b"\x11\x08" + bytes(8), "has an expiry of 0"),
        (b"\x11\x04\x00\x00\x00\x01\x11\x04\x00\x00\x00\x01", "repeats option 0x11"),
    ],
)
def test_every_bad_option_is_refused_saying_why(options: bytes, fault: str) -> None:
    with pytest.raises(MalformedMessage, match=re.escape(fault)):
        taskflow.decode_submit(_options(options))


@pytest.mark.parametrize(
    ("options", "fault"),
    [
        (SubmitOptions(debounce=Debounce(DebounceMode.DROP, 1)), "a debounce needs a key"),
        (
            SubmitOptions(key=b"k", delay_ms=1, debounce=Debounce(DebounceMode.DROP, 1)),
            "not with a delay",
        ),
        (SubmitOptions(key=b"k", debounce=Debounce(4, 1)), "not 4"),  # type: ignore[arg-type]
        (SubmitOptions(key=b"k", debounce=Debounce(DebounceMode.DROP, 0)), "not 0"),
        (SubmitOptions(key=b"k", debounce=Debounce(DebounceMode.DROP, 2**32)), "ms, not"),
        (SubmitOptions(expires=Expires(0)), "not 0"),
        (SubmitOptions(expires=Expires(2**32)), "ms from now, not"),
        (SubmitOptions(expires=Expires(0, at=True)), "u64 of milliseconds, not 0"),
        (SubmitOptions(expires=Expires(2**64, at=True)), "u64 of milliseconds"),
    ],
)
def test_the_encoder_refuses_what_the_decoder_would(options: SubmitOptions, fault: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fault)):
        options.encode()
