"""
Version 2's shared-data messages: PUBLISH, SHARED, FOLLOW.

A producer or admin PUBLISHes the next version of a named piece of data (or
deletes it); a worker FOLLOWs names and is sent SHARED with each one's
current version and every new one.  docs/protocol.md has every layout.
Sans I/O.
"""

from __future__ import annotations

from collections.abc import Callable

from attrs import frozen

from quicx.protocol.codec import (
    MAX_QUEUE_NAME,
    TASK_ID,
    MessageType,
    bad,
    frame,
    name_field,
    name_list,
    split_name,
)

MAX_FOLLOW = 32
"""The most shared-data names one FOLLOW lists."""
PUBLISH_DELETE = 0x01
"""PUBLISH flag: delete the name instead of publishing a version."""
PUBLISH_FIXED = 2 + MAX_QUEUE_NAME
"""The most a PUBLISH carries before its data: its flags and the longest name."""


# -- messages ---------------------------------------------------------------------


@frozen
class Publish:
    """Publish C{data} as the next version of shared data C{name}, or delete C{name}."""

    name: str
    data: bytes = b""
    delete: bool = False


@frozen
class Shared:
    """(To a worker.) Version C{version} of C{name} is C{data}; version 0: deleted."""

    name: str
    version: int
    data: bytes = b""


@frozen
class Follow:
    """(A worker.) Send me the current version of each of C{names}, and every new one."""

    names: tuple[str, ...]


Message = Publish | Shared | Follow


# -- encoders ---------------------------------------------------------------------


def encode_publish(name: str, data: bytes = b"", delete: bool = False) -> bytes:
    if delete and data:
        raise ValueError("a PUBLISH that deletes a name carries no data")
    flags = bytes((PUBLISH_DELETE if delete else 0,))
    return frame(MessageType.PUBLISH, flags + name_field(name) + data)


def encode_shared(name: str, version: int, data: bytes = b"") -> bytes:
    if not 0 <= version <= 0xFFFFFFFF:
        raise ValueError(f"a version is 0 to {0xFFFFFFFF}, not {version}")
    return frame(MessageType.SHARED, name_field(name) + TASK_ID.pack(version) + data)


def encode_follow(names: tuple[str, ...] | list[str]) -> bytes:
    if not 1 <= len(names) <= MAX_FOLLOW:
        raise ValueError(f"FOLLOW lists 1 to {MAX_FOLLOW} names, not {len(names)}")
    if len(set(names)) != len(names):
        raise ValueError("FOLLOW lists a name twice")
    return frame(MessageType.FOLLOW, bytes((len(names),)) + b"".join(map(name_field, names)))


# -- decoders ---------------------------------------------------------------------


def decode_publish(payload: bytes) -> Publish:
    if not payload:
        raise bad(MessageType.PUBLISH, "has no flags")
    flags = payload[0]
    if flags & ~PUBLISH_DELETE:
        raise bad(MessageType.PUBLISH, f"has unknown flags 0x{flags:02x}")
    name, end = split_name(MessageType.PUBLISH, payload, 1)
    delete = bool(flags & PUBLISH_DELETE)
    if delete and end != len(payload):
        raise bad(MessageType.PUBLISH, "deletes a name but carries data")
    return Publish(name, payload[end:], delete)


def decode_shared(payload: bytes) -> Shared:
    name, end = split_name(MessageType.SHARED, payload, 0)
    if len(payload) < end + 4:
        raise bad(MessageType.SHARED, "has no version")
    version = TASK_ID.unpack_from(payload, end)[0]
    if not version and len(payload) > end + 4:
        raise bad(MessageType.SHARED, "version 0 (deleted) carries data")
    return Shared(name, version, payload[end + 4 :])


def decode_follow(payload: bytes) -> Follow:
    return Follow(name_list(MessageType.FOLLOW, payload, 0, MAX_FOLLOW, "name", "names"))


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.PUBLISH: decode_publish,
    MessageType.SHARED: decode_shared,
    MessageType.FOLLOW: decode_follow,
}
