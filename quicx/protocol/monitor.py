"""
Version 2's monitoring messages: live lifecycle events, STATUS and STATS.

A monitor connection sends WATCH with a filter (queues, task types, event
kinds; an empty list matches all) and the daemon sends it EVENTS frames:
batches of the lifecycle events it records, each an NDJSON line of the
events files' schema, with the count of events the connection missed by
reading too slowly.  STATUS asks for the daemon's status document (what
C{quicx status} shows; answered with INFO), so that a cluster's daemons can
be looked at over the wire; STATS (answered STATS_RESPONSE) is laid out as
in version 1 (L{quicx.protocol.wire}).  docs/protocol.md, "Version 2: live
events", has every layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence

from attrs import frozen

from quicx.protocol import wire
from quicx.protocol.codec import (
    HEADER,
    MAX_QUEUE_NAME,
    MAX_TYPE_LENGTH,
    VERSION,
    MessageType,
    bad,
    check_queue,
    counted,
    frame,
    split_name,
    text,
)

EVENT_KINDS = (
    "submitted",
    "rejected",
    "dispatched",
    "progress",
    "done",
    "failed",
    "retrying",
    "requeued",
    "cancelled",
    "dead",
    "replayed",
    "dropped",
    "recovered",
    "expired",
    "debounced",
    "moved",
)
"""Every kind of lifecycle event the daemon records, as its C{event} field names it."""
EVENTS_SCHEMA = 3
"""
The version of the events' JSON schema, each line's C{v} (files and EVENTS
alike; docs/pipeline.md has every field).  Lines without a C{v} are version
1, which had no C{v} and is otherwise the same.  Version 3 adds the
C{recovered} kind and a delayed task's C{due}.
"""
MAX_WATCH = 32
"""The most queues, task types or event kinds one WATCH lists (each)."""
WATCH_STOP = 0x01
"""WATCH flag: stop watching (the payload is this flag alone)."""
MAX_EVENTS_BYTES = 64 << 10
"""The most bytes of lines one EVENTS frame carries, unless a single line is longer."""
MAX_EVENTS_FRAME = 8 << 20
"""The longest EVENTS frame a client accepts: one line holding the longest
FAILED reason a daemon takes (1 MiB), every byte of it escaped."""

MAX_WATCH_SIZE = (
    1
    + 1
    + MAX_WATCH * (1 + MAX_QUEUE_NAME)
    + 1
    + MAX_WATCH * (1 + MAX_TYPE_LENGTH)
    + 1
    + sum(1 + len(kind) for kind in EVENT_KINDS)
)
"""The longest WATCH: its flags, 32 of the longest queue names and types, every kind."""

_KINDS = {kind.encode("ascii"): kind for kind in EVENT_KINDS}
_MISSED = struct.Struct(">Q")


# -- messages ---------------------------------------------------------------------


@frozen
class Watch:
    """
    Send me the lifecycle events of these C{queues}, task C{types} and
    event C{kinds} (each empty: any), replacing any filter I had; or, with
    C{stop}, no more events.
    """

    queues: tuple[str, ...] = ()
    types: tuple[bytes, ...] = ()
    kinds: tuple[str, ...] = ()
    stop: bool = False


@frozen
class Events:
    """
    (To a watcher.) Lifecycle events, one JSON object per line, oldest
    first; before them, C{missed} events were dropped because the
    connection read too slowly.
    """

    lines: tuple[str, ...]
    missed: int = 0


@frozen
class Status:
    """
    Send me your status document (answered with INFO): what C{quicx status}
    shows, as the control socket answers it.
    """


Message = Watch | Events | Status


# -- encoders ---------------------------------------------------------------------


def _names(noun: str, items: Sequence[object]) -> None:
    if len(items) > MAX_WATCH:
        raise ValueError(f"WATCH lists 0 to {MAX_WATCH} {noun}s, not {len(items)}")
    if len(set(items)) != len(items):
        raise ValueError(f"WATCH lists a {noun} twice")


def encode_watch(
    queues: Sequence[str] = (),
    types: Sequence[bytes] = (),
    kinds: Sequence[str] = (),
    stop: bool = False,
) -> bytes:
    """
    WATCH: the filter's three lists, or C{stop}.

    @raise ValueError: a list too long or with an item twice, a bad queue
        name, an empty or over-long type, an unknown kind, or lists with C{stop}.
    """
    if stop:
        if queues or types or kinds:
            raise ValueError("a WATCH that stops lists nothing")
        return frame(MessageType.WATCH, bytes((WATCH_STOP,)))
    _names("queue", queues)
    _names("type", types)
    _names("kind", kinds)
    body = bytearray((0, len(queues)))
    for queue in queues:
        raw = check_queue(queue)
        body += bytes((len(raw),)) + raw
    body.append(len(types))
    for task_type in types:
        if not 1 <= len(task_type) <= MAX_TYPE_LENGTH:
            raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes: {task_type!r}")
        body += bytes((len(task_type),)) + task_type
    body.append(len(kinds))
    for kind in kinds:
        if kind not in EVENT_KINDS:
            raise ValueError(f"no event kind {kind!r}: one of {', '.join(EVENT_KINDS)}")
        body += bytes((len(kind),)) + kind.encode("ascii")
    return frame(MessageType.WATCH, bytes(body))


def encode_events(lines: Sequence[str], missed: int = 0, whole: bool = False) -> bytes:
    """
    EVENTS frames carrying C{lines} in order: as many as it takes to hold
    each to L{MAX_EVENTS_BYTES} of lines (a longer line goes alone); the
    first says C{missed}, the others 0.  No lines: one frame, with C{missed}.
    C{whole}: each line is known to be one line of text, not empty (the
    daemon's own, from its events' JSON): not checked again.

    @raise ValueError: an empty line, or one with a newline in it.
    """
    if not 0 <= missed < 1 << 64:
        raise ValueError(f"a missed count is a u64, not {missed}")
    if not lines:
        return _events_frame(missed, b"")
    # One join and one encoding for the lot (the daemon sends thousands of
    # lines at a time), then cuts at the last newline that fits.
    text = ("\n".join(lines) + "\n").encode("utf-8")
    if not whole and (text.count(b"\n") != len(lines) or "" in lines):
        bad = next(line for line in lines if not line or "\n" in line)
        raise ValueError(f"an event line is one line of text, not {bad[:40]!r}")
    if len(text) <= MAX_EVENTS_BYTES:
        return _events_frame(missed, text)
    # Headers and views of the text, joined once: the text is copied once.
    pieces: list[bytes | memoryview] = []
    view = memoryview(text)
    start = 0
    while start < len(text):
        end = start + MAX_EVENTS_BYTES
        if end < len(text):
            cut = text.rfind(b"\n", start, end)
            # No newline within the limit: one longer line, alone.
            end = (cut if cut >= 0 else text.index(b"\n", end)) + 1
        else:
            end = len(text)
        pieces.append(HEADER.pack(VERSION, MessageType.EVENTS, 8 + end - start))
        pieces.append(_MISSED.pack(missed))
        pieces.append(view[start:end])
        missed, start = 0, end
    return b"".join(pieces)


def _events_frame(missed: int, text: bytes) -> bytes:
    return frame(MessageType.EVENTS, _MISSED.pack(missed) + text)


# -- decoders ---------------------------------------------------------------------


def _task_type(message_type: int, payload: bytes, offset: int) -> tuple[bytes, int]:
    """A C{[len u8][type]} at C{payload[offset:]}, and the offset after it."""
    if offset >= len(payload):
        raise bad(message_type, "has no task type length")
    end = offset + 1 + payload[offset]
    if end == offset + 1:
        raise bad(message_type, "has an empty task type")
    if end > len(payload):
        raise bad(message_type, f"task type of {payload[offset]} bytes runs past the payload")
    return payload[offset + 1 : end], end


def _kind(message_type: int, payload: bytes, offset: int) -> tuple[str, int]:
    """A C{[len u8][kind]} at C{payload[offset:]}, and the offset after it."""
    if offset >= len(payload):
        raise bad(message_type, "has no event kind length")
    end = offset + 1 + payload[offset]
    if end > len(payload):
        raise bad(message_type, f"event kind of {payload[offset]} bytes runs past the payload")
    kind = _KINDS.get(payload[offset + 1 : end])
    if kind is None:
        raise bad(message_type, f"has unknown event kind {payload[offset + 1 : end]!r}")
    return kind, end


def decode_watch(payload: bytes) -> Watch:
    if not payload:
        raise bad(MessageType.WATCH, "has no flags")
    flags = payload[0]
    if flags & ~WATCH_STOP:
        raise bad(MessageType.WATCH, f"has unknown flags 0x{flags:02x}")
    if flags & WATCH_STOP:
        if len(payload) != 1:
            raise bad(MessageType.WATCH, "stops watching but lists a filter")
        return Watch(stop=True)
    queues, offset = counted(MessageType.WATCH, payload, 1, 0, MAX_WATCH, "queue", split_name)
    types, offset = counted(MessageType.WATCH, payload, offset, 0, MAX_WATCH, "type", _task_type)
    kinds, offset = counted(MessageType.WATCH, payload, offset, 0, MAX_WATCH, "kind", _kind)
    if offset != len(payload):
        raise bad(MessageType.WATCH, f"has {len(payload) - offset} bytes after its kinds")
    return Watch(queues, types, kinds)


def decode_events(payload: bytes) -> Events:
    if len(payload) < _MISSED.size:
        raise bad(MessageType.EVENTS, f"needs at least {_MISSED.size} bytes")
    missed = _MISSED.unpack_from(payload)[0]
    lines_text = text(MessageType.EVENTS, payload[_MISSED.size :], "lines")
    if not lines_text:
        return Events((), missed)
    if not lines_text.endswith("\n"):
        raise bad(MessageType.EVENTS, "has a last line without its newline")
    lines = tuple(lines_text[:-1].split("\n"))
    if "" in lines:
        raise bad(MessageType.EVENTS, "has an empty line")
    return Events(lines, missed)


STATUS_FRAME = frame(MessageType.STATUS)


def encode_status() -> bytes:
    return STATUS_FRAME


def decode_status(payload: bytes) -> Status:
    if payload:
        raise bad(MessageType.STATUS, f"payload must be empty, got {len(payload)} bytes")
    return Status()


def encode_stats_response(stats: wire.StatsResponse) -> bytes:
    return frame(MessageType.STATS_RESPONSE, wire.encode_stats_response(stats)[HEADER.size :])


STATS_FRAME = frame(MessageType.STATS)


DECODERS: dict[int, Callable[[bytes], Message | wire.Message]] = {
    MessageType.WATCH: decode_watch,
    MessageType.EVENTS: decode_events,
    MessageType.STATUS: decode_status,
    # As in version 1.
    MessageType.STATS: wire.decode_stats,
    MessageType.STATS_RESPONSE: wire.decode_stats_response,
}
