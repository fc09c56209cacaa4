"""
Version 2's connection messages: HELLO and INFO, ERROR, HEARTBEAT and PONG.

A client's HELLO (answered with INFO: the daemon's name, versions, limits
and capabilities), the JSON INFO document that answers it and the admin
requests (L{quicx.protocol.admin}), the ERROR that refuses a request, and
the HEARTBEAT/PONG of a live connection.  ERROR, HEARTBEAT and PONG are laid
out as in version 1 (L{quicx.protocol.wire}).  docs/protocol.md has every
layout.  Sans I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from enum import IntEnum
from typing import Any

from attrs import frozen

from quicx.protocol import wire
from quicx.protocol.codec import MessageType, bad, frame, option, tlv


class HelloField(IntEnum):
    """HELLO's TLV tags."""

    NAME = 0x01
    VERSION = 0x02
    CAPABILITIES = 0x03


# -- messages ---------------------------------------------------------------------


@frozen
class Hello:
    name: str = ""
    version: str = ""
    capabilities: tuple[str, ...] = ()


@frozen
class Info:
    """A JSON answer: to HELLO, CANCEL, PAUSE, RESUME, PURGE, QUEUES, PEEK, INSPECT."""

    document: Any


Message = Hello | Info


# -- encoders ---------------------------------------------------------------------


def encode_error(code: int, message: str) -> bytes:
    return frame(MessageType.ERROR, bytes((code,)) + message.encode("utf-8"))


def encode_hello(name: str = "", version: str = "", capabilities: Iterable[str] = ()) -> bytes:
    wanted = tuple(capabilities)
    if any("," in c for c in wanted):
        raise ValueError(f"a capability has no comma: {wanted!r}")
    body = b""
    for tag, text in (
        (HelloField.NAME, name),
        (HelloField.VERSION, version),
        (HelloField.CAPABILITIES, ",".join(wanted)),
    ):
        if text:
            body += option(tag, text.encode("utf-8"))
    return frame(MessageType.HELLO, body)


def encode_info(document: Any) -> bytes:
    text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
    return frame(MessageType.INFO, text.encode("utf-8"))


HEARTBEAT_FRAME = frame(MessageType.HEARTBEAT)
PONG_FRAME = frame(MessageType.PONG)


# -- decoders ---------------------------------------------------------------------


_HELLO_FIELDS = frozenset(HelloField)


def decode_hello(payload: bytes) -> Hello:
    # A later release's fields are passed over: HELLO stays open to new ones.
    items = tlv(MessageType.HELLO, payload, 0, len(payload), _HELLO_FIELDS)
    texts: dict[int, str] = {}
    for tag, value in items.items():
        try:
            texts[tag] = value.decode("utf-8")
        except UnicodeDecodeError:
            raise bad(MessageType.HELLO, f"field 0x{tag:02x} is not UTF-8") from None
    capabilities = texts.get(HelloField.CAPABILITIES, "")
    return Hello(
        texts.get(HelloField.NAME, ""),
        texts.get(HelloField.VERSION, ""),
        tuple(c for c in capabilities.split(",") if c),
    )


def decode_info(payload: bytes) -> Info:
    try:
        return Info(json.loads(payload.decode("utf-8")))
    except (ValueError, RecursionError) as e:
        raise bad(MessageType.INFO, f"is not a UTF-8 JSON document: {e}") from None


DECODERS: dict[int, Callable[[bytes], Message | wire.Message]] = {
    MessageType.HELLO: decode_hello,
    MessageType.INFO: decode_info,
    # As in version 1.
    MessageType.ERROR: wire.decode_error,
    MessageType.HEARTBEAT: wire.decode_heartbeat,
    MessageType.PONG: wire.decode_pong,
}
