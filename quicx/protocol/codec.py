"""
The codec every message is built from: header, opcodes, TLV, names, counted lists.

A frame is a 6-byte header -- version (u8), message type (u8), payload
length (big-endian u32) -- then exactly C{length} payload bytes.  This
module holds that header, the opcode and ERROR code tables of version 2
(version 1's are its first twelve and four: L{quicx.protocol.wire}), and
the field layouts several messages share: task ids, TLV options
(C{[tag u8][len u8][value]}), queue names (C{[len u8][name]}), counted
lists (C{[count u8]} then the items) and UTF-8 text.  It is the one place
they are defined; the message modules (L{taskflow}, L{outcomes}, L{admin},
L{shared_data}, L{monitor}, L{link}) build on it, and L{registry} decodes
any frame.  Sans I/O.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from enum import IntEnum
from typing import TypeVar

VERSION = 2
"""The version byte of a version-2 frame (version 1's: L{wire.PROTOCOL_VERSION})."""

HEADER = struct.Struct(">BBI")
HEADER_SIZE = HEADER.size
TASK_ID = struct.Struct(">I")
"""A task id, and every other u32 field."""
U16 = struct.Struct(">H")
U64 = struct.Struct(">Q")
HEADER_AND_ID = struct.Struct(">BBII")
"""A header and a task id, packed at once by the encoders of each task's frames."""
HEADER_ID_BYTE = struct.Struct(">BBIIB")
"""A header, a task id and a byte (OK's flags, or a result's kind)."""

MAX_TASK_ID = 0xFFFFFFFF
MAX_TYPE_LENGTH = 255
MAX_PAYLOAD = 1 << 20
"""The largest task payload the protocol allows (1 MiB)."""
MAX_CREDITS = 0xFFFF
"""The most tasks a READY's credit count can ask to hold at once."""
MAX_QUEUE_NAME = 64
"""The longest queue name, in bytes."""
QUEUE_NAME = re.compile(rb"[A-Za-z0-9_.:\-]{1,64}\Z")
"""What a queue name may be made of: letters, digits and C{_ . : -}."""
DEFAULT_QUEUE = "default"
MAX_OPTION = 255
"""The longest value one option may carry."""
CACHE_SIZE = 4096
"""The most entries each of the codec's caches of repeated fields holds."""


class MessageType(IntEnum):
    """Version 2's opcodes: version 1's, and those it adds."""

    SUBMIT = 0x01
    OK = 0x02
    ERROR = 0x03
    READY = 0x04
    TASK = 0x05
    DONE = 0x06
    FAILED = 0x07
    WAIT = 0x08
    HEARTBEAT = 0x09
    PONG = 0x0A
    STATS = 0x0B
    STATS_RESPONSE = 0x0C
    HELLO = 0x0D
    CANCEL = 0x0E
    CANCELLED = 0x0F
    PAUSE = 0x10
    RESUME = 0x11
    PURGE = 0x12
    QUEUES = 0x13
    PEEK = 0x14
    INSPECT = 0x15
    INFO = 0x16
    # Fenced outcomes and leases (quicx.protocol.outcomes); dead letters and
    # schedules (quicx.protocol.admin).
    ACK = 0x17
    NACK = 0x18
    TOUCH = 0x19
    RETRYING = 0x1A
    DEAD = 0x1B
    REPLAY = 0x1C
    DEAD_PURGE = 0x1D
    SCHEDULES = 0x1E
    SCHEDULE = 0x1F
    UNSCHEDULE = 0x20
    # Results, progress and groups (quicx.protocol.outcomes); shared data
    # (quicx.protocol.shared_data).
    AWAIT = 0x21
    OUTCOME = 0x22
    PROGRESS = 0x23
    PUBLISH = 0x24
    SHARED = 0x25
    FOLLOW = 0x26
    GROUP = 0x27
    GROUP_STATE = 0x28
    # Live lifecycle events (quicx.protocol.monitor).
    WATCH = 0x29
    EVENTS = 0x2A
    STATUS = 0x2B
    # Workers: what they run, quiet and terminate (quicx.protocol.workers).
    ANNOUNCE = 0x2C
    WORKERS = 0x2D
    STEER = 0x2E
    STOP = 0x2F
    # Checkpoints (quicx.protocol.checkpoints).
    CHECKPOINT = 0x30
    # Bulk actions (quicx.protocol.bulk).
    BULK = 0x31
    # Replication, on the replication listener only (quicx.protocol.replication).
    REPLICATE = 0x32
    SNAPSHOT = 0x33
    BATCH = 0x34
    BATCH_ACK = 0x35
    # A shard's roles: promote, step down (quicx.protocol.role).
    ROLE = 0x36


KNOWN_TYPES = frozenset(MessageType)


class ErrorCode(IntEnum):
    """Version 2's ERROR codes: version 1's, and four more."""

    QUEUE_FULL = 0x01
    INVALID_MESSAGE = 0x02
    PAYLOAD_TOO_LARGE = 0x03
    UNKNOWN_TASK_TYPE = 0x04
    NOT_FOUND = 0x05
    FORBIDDEN = 0x06
    CONFLICT = 0x07
    STALE = 0x08
    UNKNOWN_PARENT = 0x09
    """A SUBMIT's parent (or group) is unknown: never seen, or finished with no outcome kept."""
    UNSTEERABLE = 0x0A
    BUSY = 0x0B
    NOT_PRIMARY = 0x0C
    """Not the shard's primary: the message is the primary's C{host:port}, or empty."""


class MalformedMessage(ValueError):
    """
    A payload does not have the layout its message type requires.

    The daemon answers it with ERROR 0x02 (invalid message).

    @ivar message_type: the type of the offending frame.
    """

    def __init__(self, message_type: int, text: str) -> None:
        super().__init__(text)
        self.message_type = message_type


# -- encoding ---------------------------------------------------------------------


def frame(message_type: int, payload: bytes = b"") -> bytes:
    """Prefix C{payload} with the version-2 header for C{message_type}."""
    return HEADER.pack(VERSION, message_type, len(payload)) + payload


def check_queue(name: str) -> bytes:
    """
    C{name} as the wire carries it.

    @raise ValueError: it is not a queue name.
    """
    encoded = name.encode("utf-8")
    if not QUEUE_NAME.match(encoded):
        raise ValueError(
            f"a queue name is 1 to {MAX_QUEUE_NAME} letters, digits or '_.:-', not {name!r}"
        )
    return encoded


def name_field(name: str) -> bytes:
    """C{[len u8][name]}: a queue (or shared-data, or schedule) name."""
    encoded = check_queue(name)
    return bytes((len(encoded),)) + encoded


def optional_name(name: str | None) -> bytes:
    """A L{name_field}, or C{[0]} for none."""
    if name is None:
        return b"\x00"
    return name_field(name)


def option(tag: int, value: bytes) -> bytes:
    """
    One TLV item, C{[tag u8][len u8][value]}.

    @raise ValueError: C{value} is empty or longer than L{MAX_OPTION}.
    """
    if not 0 < len(value) <= MAX_OPTION:
        raise ValueError(f"option 0x{tag:02x} is 1 to {MAX_OPTION} bytes, not {len(value)}")
    return bytes((tag, len(value))) + value


# -- decoding ---------------------------------------------------------------------


def bad(message_type: int, text: str) -> MalformedMessage:
    """A L{MalformedMessage} that names the message: C{"PEEK has no count"}."""
    return MalformedMessage(message_type, f"{MessageType(message_type).name} {text}")


def text(message_type: int, raw: bytes, what: str) -> str:
    """C{raw} as UTF-8 text (C{what} names it in the error)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise bad(message_type, f"{what} is not UTF-8") from None


def split_type(message_type: int, payload: bytes, start: int) -> tuple[bytes, bytes]:
    """Split C{[type_len][type][rest]} found at C{payload[start:]}."""
    if len(payload) > start:
        type_length = payload[start]
        type_end = start + 1 + type_length
        if type_length and type_end <= len(payload):
            return payload[start + 1 : type_end], payload[type_end:]
    # Only a malformed message pays for the enum lookup.
    name = MessageType(message_type).name
    if len(payload) <= start:
        raise MalformedMessage(message_type, f"{name} has no task type length")
    if payload[start] == 0:
        raise MalformedMessage(message_type, f"{name} has an empty task type")
    raise MalformedMessage(
        message_type,
        f"{name} task type of {payload[start]} bytes runs past the {len(payload)}-byte payload",
    )


def tlv(
    message_type: int, data: bytes, start: int, end: int, known: frozenset[int] | None = None
) -> dict[int, bytes]:
    """
    The C{[tag][len][value]} items of C{data[start:end]}, by tag.  With
    C{known}, an item of another tag (a later release's) is passed over,
    even repeated; a known tag given twice is refused either way.
    """
    items: dict[int, bytes] = {}
    offset = start
    while offset < end:
        if end - offset < 2:
            raise bad(message_type, f"option at byte {offset} has no length")
        tag, length = data[offset], data[offset + 1]
        value_end = offset + 2 + length
        if value_end > end:
            raise bad(message_type, f"option 0x{tag:02x} of {length} bytes runs past its field")
        if known is None or tag in known:
            if tag in items:
                raise bad(message_type, f"repeats option 0x{tag:02x}")
            items[tag] = data[offset + 2 : value_end]
        offset = value_end
    return items


def chunked(tag: int, value: bytes) -> bytes:
    """
    C{value}, not empty and of any length, as TLV items of C{tag}, each 1
    to L{MAX_OPTION} bytes, in order: what L{joined} reads back.
    """
    return b"".join(
        bytes((tag, len(part))) + part
        for part in (value[i : i + MAX_OPTION] for i in range(0, len(value), MAX_OPTION))
    )


def joined(data: bytes, start: int, end: int, tag: int) -> bytes | None:
    """
    The values of the (checked) TLV items of C{tag} in C{data[start:end]},
    joined in order (see L{chunked}); C{None} if there is none.
    """
    parts = []
    offset = start
    while offset < end:
        value_end = offset + 2 + data[offset + 1]
        if data[offset] == tag:
            parts.append(data[offset + 2 : value_end])
        offset = value_end
    return b"".join(parts) if parts else None


_NAMES: dict[bytes, str] = {}
"""Queue names already checked: a name is checked once, not per message."""


def queue_name(message_type: int, raw: bytes) -> str:
    """C{raw}, a name's bytes, checked."""
    name = _NAMES.get(raw)
    if name is not None:
        return name
    if not QUEUE_NAME.match(raw):
        raise bad(
            message_type,
            f"queue name {raw[:MAX_QUEUE_NAME]!r} is not 1 to {MAX_QUEUE_NAME}"
            " letters, digits or '_.:-'",
        )
    name = raw.decode("ascii")
    if len(_NAMES) < CACHE_SIZE:
        _NAMES[raw] = name
    return name


def split_name(message_type: int, payload: bytes, start: int) -> tuple[str, int]:
    """A C{[len u8][name]} queue name at C{payload[start:]}, and the offset after it."""
    if len(payload) <= start:
        raise bad(message_type, "has no queue name length")
    end = start + 1 + payload[start]
    if end > len(payload):
        raise bad(message_type, f"queue name of {payload[start]} bytes runs past the payload")
    return queue_name(message_type, payload[start + 1 : end]), end


def split_optional_name(message_type: int, payload: bytes, start: int) -> str | None:
    """An optional C{[len u8][name]} that ends the payload (length 0: none)."""
    if len(payload) <= start:
        raise bad(message_type, "has no queue name length")
    if payload[start] == 0:
        name, end = None, start + 1
    else:
        name, end = split_name(message_type, payload, start)
    if end != len(payload):
        raise bad(message_type, f"has {len(payload) - end} bytes after its name")
    return name


Item = TypeVar("Item")


def counted(
    message_type: int,
    payload: bytes,
    offset: int,
    least: int,
    most: int,
    noun: str,
    read: Callable[[int, bytes, int], tuple[Item, int]],
) -> tuple[tuple[Item, ...], int]:
    """
    The C{[count u8]} then C{count} items at C{payload[offset:]}, each read
    by C{read} (which returns it and the offset after it: L{split_name}
    reads a C{[len u8][name]} queue name): C{least} to C{most} of them, none
    twice.

    @return: the items, and the offset after the last.
    """
    if offset >= len(payload):
        raise bad(message_type, f"has no {noun} count")
    count = payload[offset]
    if not least <= count <= most:
        raise bad(message_type, f"lists {least} to {most} {noun}s, not {count}")
    items: list[Item] = []
    offset += 1
    for _ in range(count):
        item, offset = read(message_type, payload, offset)
        items.append(item)
    if len(set(items)) != len(items):
        raise bad(message_type, f"lists a {noun} twice")
    return tuple(items), offset


def name_list(
    message_type: int, payload: bytes, offset: int, most: int, noun: str, trailer: str
) -> tuple[str, ...]:
    """
    The C{[count u8]} then C{count} C{[len u8][name]} at C{payload[offset:]},
    to its end: 1 to C{most} of them, none twice (C{noun} and C{trailer}
    name them in errors).
    """
    names, offset = counted(message_type, payload, offset, 1, most, noun, split_name)
    if offset != len(payload):
        raise bad(message_type, f"has {len(payload) - offset} bytes after its {trailer}")
    return names
