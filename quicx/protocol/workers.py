"""
Version 2's worker messages: ANNOUNCE (what one runs), WORKERS, STEER and STOP (quiet, terminate).

A worker's ANNOUNCE, sent before its first READY, names the task types it
runs (none named: every type, as a worker that does not announce) and what
it is (a name, its host, its process id): the daemon then hands it only
tasks of those types.  An admin's WORKERS lists the connected workers
(answered INFO); its STEER tells one of them, or all, to go quiet (finish
what it holds, take no more) or to terminate (stop now: what it holds is
queued again); the daemon tells the worker with STOP.  docs/protocol.md has
every layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from enum import IntEnum

from attrs import frozen

from quicx.protocol.codec import (
    MAX_TYPE_LENGTH,
    TASK_ID,
    U16,
    MessageType,
    bad,
    frame,
    option,
    text,
    tlv,
)

MAX_ANNOUNCED_TYPES = 0xFFFF
"""The most task types an ANNOUNCE can carry (a daemon takes C{[limits] max_worker_types})."""
ANNOUNCE_FIELDS_SIZE = 3 * (2 + 255)
"""The most bytes an ANNOUNCE's name, host and process id take."""


class AnnounceField(IntEnum):
    """ANNOUNCE's TLV tags, after its types."""

    NAME = 0x01
    HOST = 0x02
    PID = 0x03


class Steer(IntEnum):
    """What STEER asks of a worker, and STOP tells it."""

    QUIET = 0x01
    TERMINATE = 0x02


_STEER = struct.Struct(">BI")
_AFTER = struct.Struct(">I")

WORKERS_PAGE_BYTES = 256 << 10
"""
The most JSON one WORKERS answer carries (one worker's record always goes,
at most about 66 KiB with every type announced): well under a client's frame
limit, however many workers announce however many types.
"""
"""STEER and STOP: the action, then a worker id (STEER) or a grace in ms (STOP)."""


# -- messages ---------------------------------------------------------------------


@frozen
class Announce:
    """
    A worker's task types (C{None}: every type) and what it is.

    @ivar pid: its process id (0: not said).
    """

    types: frozenset[bytes] | None
    name: str = ""
    host: str = ""
    pid: int = 0


@frozen
class Workers:
    """
    List the connected workers (answered INFO), a page at a time.

    @ivar after: the page starts after this worker id (C{None}: the request
        carried no cursor, and is answered with the first page as a bare
        array, as before pages).
    """

    after: int | None = None


@frozen
class SteerWorker:
    """Tell worker C{worker} (0: every version-2 worker) to go quiet or terminate."""

    action: Steer
    worker: int


@frozen
class Stop:
    """
    The daemon tells a worker to go quiet or to terminate; C{grace_ms}: a
    terminated worker's connection is closed by the daemon after that long.
    """

    action: Steer
    grace_ms: int


Message = Announce | Workers | SteerWorker | Stop


# -- encoders ---------------------------------------------------------------------


def encode_announce(
    types: Iterable[str | bytes] | None, name: str = "", host: str = "", pid: int = 0
) -> bytes:
    """
    C{types}: the task types the worker runs (C{None}: every type).

    @raise ValueError: a type is empty or too long, there are too many, one
        is given twice, or C{types} is empty (say C{None} for every type); a
        field is too long, or the pid out of range.
    """
    body = b""
    if types is None:
        body = U16.pack(0)
    else:
        encoded = [t.encode("utf-8") if isinstance(t, str) else bytes(t) for t in types]
        if not 0 < len(encoded) <= MAX_ANNOUNCED_TYPES:
            raise ValueError(
                f"a worker runs 1 to {MAX_ANNOUNCED_TYPES} types (None: every type),"
                f" not {len(encoded)}"
            )
        if len(set(encoded)) != len(encoded):
            raise ValueError("a task type is announced twice")
        body = U16.pack(len(encoded))
        for each in encoded:
            if not 0 < len(each) <= MAX_TYPE_LENGTH:
                raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes, not {each!r}")
            body += bytes((len(each),)) + each
    if not 0 <= pid <= 0xFFFFFFFF:
        raise ValueError(f"a process id is 0 to 2**32 - 1, not {pid}")
    for tag, value in ((AnnounceField.NAME, name), (AnnounceField.HOST, host)):
        if value:
            body += option(tag, value.encode("utf-8"))
    if pid:
        body += option(AnnounceField.PID, TASK_ID.pack(pid))
    return frame(MessageType.ANNOUNCE, body)


def encode_workers(after: int | None = None) -> bytes:
    """The page of workers after id C{after}; C{None}: the first page, the old way."""
    if after is None:
        return frame(MessageType.WORKERS)
    return frame(MessageType.WORKERS, _AFTER.pack(after))


def encode_steer(action: Steer, worker: int = 0) -> bytes:
    """C{worker}: a worker's id (as WORKERS lists it), or 0 for every version-2 worker."""
    if not 0 <= worker <= 0xFFFFFFFF:
        raise ValueError(f"a worker id is 0 to 2**32 - 1, not {worker}")
    return frame(MessageType.STEER, _STEER.pack(Steer(action), worker))


def encode_stop(action: Steer, grace_ms: int = 0) -> bytes:
    return frame(MessageType.STOP, _STEER.pack(Steer(action), grace_ms))


# -- decoders ---------------------------------------------------------------------

_ANNOUNCE_FIELDS = frozenset(AnnounceField)


def decode_announce(payload: bytes) -> Announce:
    message_type = MessageType.ANNOUNCE
    if len(payload) < 2:
        raise bad(message_type, "has no type count")
    count = U16.unpack_from(payload)[0]
    offset = 2
    types: list[bytes] = []
    for _ in range(count):
        if offset >= len(payload):
            raise bad(message_type, f"lists {count} task types but has {len(types)}")
        length = payload[offset]
        end = offset + 1 + length
        if not length:
            raise bad(message_type, "has an empty task type")
        if end > len(payload):
            raise bad(message_type, f"task type of {length} bytes runs past the payload")
        types.append(payload[offset + 1 : end])
        offset = end
    if len(set(types)) != len(types):
        raise bad(message_type, "lists a task type twice")
    fields = tlv(message_type, payload, offset, len(payload), _ANNOUNCE_FIELDS)
    pid = fields.get(AnnounceField.PID, b"")
    if pid and len(pid) != 4:
        raise bad(message_type, f"process id is 4 bytes, not {len(pid)}")
    return Announce(
        frozenset(types) if count else None,
        text(message_type, fields.get(AnnounceField.NAME, b""), "its name"),
        text(message_type, fields.get(AnnounceField.HOST, b""), "its host"),
        TASK_ID.unpack(pid)[0] if pid else 0,
    )


def decode_workers(payload: bytes) -> Workers:
    if not payload:
        return Workers()
    if len(payload) != _AFTER.size:
        raise bad(MessageType.WORKERS, f"payload must be empty or 4 bytes, got {len(payload)}")
    return Workers(_AFTER.unpack(payload)[0])


def _action(message_type: MessageType, payload: bytes) -> tuple[Steer, int]:
    if len(payload) != _STEER.size:
        raise bad(message_type, f"payload must be 5 bytes, got {len(payload)}")
    action, number = _STEER.unpack(payload)
    if action not in Steer._value2member_map_:
        raise bad(message_type, f"action 0x{action:02x} is neither quiet (1) nor terminate (2)")
    return Steer(action), number


def decode_steer(payload: bytes) -> SteerWorker:
    return SteerWorker(*_action(MessageType.STEER, payload))


def decode_stop(payload: bytes) -> Stop:
    return Stop(*_action(MessageType.STOP, payload))


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.ANNOUNCE: decode_announce,
    MessageType.WORKERS: decode_workers,
    MessageType.STEER: decode_steer,
    MessageType.STOP: decode_stop,
}
