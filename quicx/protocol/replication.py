"""
Replication: REPLICATE, SNAPSHOT, BATCH and BATCH_ACK, between a primary and its standbys.

They travel on the replication listener only (never a client's port), in
version-2 frames.  A standby sends REPLICATE C{[epoch u64][name_len
u8][name]}: the newest epoch it knows and its C{[replication] name}.  The
primary answers with the SNAPSHOT of its journal, in chunks C{[epoch
u64][seq u64][flags u8][chunk]} (flag C{0x01}: the last chunk; C{seq}: the
last batch the snapshot holds), then sends each group-commit batch after
it, C{[epoch u64][seq u64][records]} (the records as the journal file
frames them; C{seq} grows by one each), and the standby answers each with
BATCH_ACK C{[epoch u64][seq u64]} once it is written and synced.
docs/protocol.md ("Version 2: replication") has every layout.  Sans I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import NamedTuple

from quicx.protocol.codec import MessageType, bad, frame

_EPOCH = struct.Struct(">Q")
_EPOCH_SEQ = struct.Struct(">QQ")
_SNAPSHOT = struct.Struct(">QQB")

MAX_NAME = 255
"""The longest name a standby gives, in bytes of UTF-8."""
MAX_REPLICATE = _EPOCH.size + 1 + MAX_NAME
"""The longest REPLICATE."""
BATCH_ACK_SIZE = _EPOCH_SEQ.size
"""A BATCH_ACK's payload, exactly."""
BATCH_FIXED = _EPOCH_SEQ.size
"""What a BATCH carries before its records: epoch and seq."""
SNAPSHOT_FIXED = _SNAPSHOT.size
"""What a SNAPSHOT carries before its chunk: epoch, seq and flags."""
SNAPSHOT_CHUNK = 256 << 10
"""The most snapshot bytes one SNAPSHOT carries."""
DEFAULT_MAX_BATCH = 1 << 20
"""The most journal bytes one BATCH carries, unless C{[replication] max_batch} says."""
MIN_MAX_BATCH = 4096
MAX_MAX_BATCH = 64 << 20
"""The bounds of C{[replication] max_batch}."""
LAST = 0x01
"""SNAPSHOT's flag: this chunk ends the snapshot."""


class Replicate(NamedTuple):
    """(Standby to primary.) Stream to standby C{name}, which knows epoch C{epoch}."""

    epoch: int
    name: str


class SnapshotChunk(NamedTuple):
    """
    (Primary to standby.) Part of the journal as of batch C{seq} of C{epoch}:
    write C{data} after the chunks before it; C{last}: the snapshot is whole.
    """

    epoch: int
    seq: int
    last: bool
    data: bytes


class Batch(NamedTuple):
    """(Primary to standby.) Batch C{seq} of C{epoch}: append C{records} to the journal."""

    epoch: int
    seq: int
    records: bytes


class BatchAck(NamedTuple):
    """(Standby to primary.) Every batch of C{epoch} up to C{seq} is written and synced."""

    epoch: int
    seq: int


Message = Replicate | SnapshotChunk | Batch | BatchAck


def encode_replicate(epoch: int, name: str) -> bytes:
    """
    @raise ValueError: C{name} is empty or longer than L{MAX_NAME} bytes.
    """
    encoded = name.encode("utf-8")
    if not 0 < len(encoded) <= MAX_NAME:
        raise ValueError(f"a standby's name is 1 to {MAX_NAME} bytes of UTF-8, not {name!r}")
    return frame(MessageType.REPLICATE, _EPOCH.pack(epoch) + bytes((len(encoded),)) + encoded)


def encode_snapshot(epoch: int, seq: int, last: bool, data: bytes) -> bytes:
    if len(data) > SNAPSHOT_CHUNK:
        raise ValueError(f"a SNAPSHOT chunk is at most {SNAPSHOT_CHUNK} bytes, not {len(data)}")
    return frame(MessageType.SNAPSHOT, _SNAPSHOT.pack(epoch, seq, LAST if last else 0) + data)


def snapshot_frames(epoch: int, seq: int, data: bytes) -> Iterator[bytes]:
    """C{data}, a whole snapshot, as its SNAPSHOT frames in order (one at least)."""
    starts = range(0, len(data), SNAPSHOT_CHUNK) if data else range(1)
    final = starts[-1]
    for start in starts:
        yield encode_snapshot(epoch, seq, start == final, data[start : start + SNAPSHOT_CHUNK])


def encode_batch(epoch: int, seq: int, records: bytes) -> bytes:
    if not records:
        raise ValueError("a BATCH carries at least one byte of records")
    return frame(MessageType.BATCH, _EPOCH_SEQ.pack(epoch, seq) + records)


def encode_batch_ack(epoch: int, seq: int) -> bytes:
    return frame(MessageType.BATCH_ACK, _EPOCH_SEQ.pack(epoch, seq))


def decode_replicate(payload: bytes) -> Replicate:
    kind = MessageType.REPLICATE
    if len(payload) < _EPOCH.size + 1:
        raise bad(kind, f"needs at least {_EPOCH.size + 1} bytes, got {len(payload)}")
    (epoch,) = _EPOCH.unpack_from(payload)
    length = payload[_EPOCH.size]
    name = payload[_EPOCH.size + 1 :]
    if not length:
        raise bad(kind, "has an empty name")
    if len(name) != length:
        raise bad(kind, f"name of {length} bytes is followed by {len(name)}")
    try:
        return Replicate(epoch, name.decode("utf-8"))
    except UnicodeDecodeError:
        raise bad(kind, "name is not UTF-8") from None


def decode_snapshot(payload: bytes) -> SnapshotChunk:
    kind = MessageType.SNAPSHOT
    if len(payload) < SNAPSHOT_FIXED:
        raise bad(kind, f"needs at least {SNAPSHOT_FIXED} bytes, got {len(payload)}")
    if len(payload) > SNAPSHOT_FIXED + SNAPSHOT_CHUNK:
        raise bad(kind, f"chunk of {len(payload) - SNAPSHOT_FIXED} bytes exceeds {SNAPSHOT_CHUNK}")
    epoch, seq, flags = _SNAPSHOT.unpack_from(payload)
    if flags & ~LAST:
        raise bad(kind, f"has unknown flags 0x{flags:02x}")
    return SnapshotChunk(epoch, seq, bool(flags), payload[SNAPSHOT_FIXED:])


def decode_batch(payload: bytes) -> Batch:
    if len(payload) <= BATCH_FIXED:
        raise bad(MessageType.BATCH, f"needs more than {BATCH_FIXED} bytes, got {len(payload)}")
    epoch, seq = _EPOCH_SEQ.unpack_from(payload)
    if not seq:
        raise bad(MessageType.BATCH, "has seq 0")
    return Batch(epoch, seq, payload[BATCH_FIXED:])


def decode_batch_ack(payload: bytes) -> BatchAck:
    if len(payload) != BATCH_ACK_SIZE:
        raise bad(MessageType.BATCH_ACK, f"is {BATCH_ACK_SIZE} bytes, not {len(payload)}")
    return BatchAck(*_EPOCH_SEQ.unpack(payload))


def type_limits(max_batch: int) -> dict[int, int]:
    """
    The longest payload of each replication message, for a frame parser:
    a BATCH of at most C{max_batch} bytes of records (C{[replication]
    max_batch}); refused from its header past them.
    """
    return {
        MessageType.REPLICATE: MAX_REPLICATE,
        MessageType.SNAPSHOT: SNAPSHOT_FIXED + SNAPSHOT_CHUNK,
        MessageType.BATCH: BATCH_FIXED + max_batch,
        MessageType.BATCH_ACK: BATCH_ACK_SIZE,
    }


DECODERS: dict[int, Callable[[bytes], Message]] = {
    MessageType.REPLICATE: decode_replicate,
    MessageType.SNAPSHOT: decode_snapshot,
    MessageType.BATCH: decode_batch,
    MessageType.BATCH_ACK: decode_batch_ack,
}
