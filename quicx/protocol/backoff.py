"""
A retry backoff, as a SUBMIT's option carries it (moved out of
L{quicx.protocol.taskflow}, which re-exports every name).
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple

from quicx.protocol.codec import bad


class BackoffKind(IntEnum):
    FIXED = 0
    EXPONENTIAL = 1


class Backoff(NamedTuple):
    """
    How long a failed task waits before its next attempt: C{base_ms}
    (fixed), or C{base_ms * 2 ** (failures - 1)} up to C{cap_ms}
    (exponential), less a random part of up to C{jitter} percent.
    """

    kind: BackoffKind = BackoffKind.EXPONENTIAL
    base_ms: int = 1000
    cap_ms: int = 300_000
    jitter: int = 0


_BACKOFF = struct.Struct(">BIIB")


def encode_backoff(backoff: Backoff) -> bytes:
    """
    C{[kind u8][base_ms u32][cap_ms u32][jitter u8]}.

    @raise ValueError: a field is out of range.
    """
    kind, base_ms, cap_ms, jitter = backoff
    if kind not in tuple(BackoffKind):
        raise ValueError(f"a backoff is fixed (0) or exponential (1), not {kind}")
    if not 0 <= base_ms <= cap_ms <= 0xFFFFFFFF:
        raise ValueError(f"a backoff needs 0 <= base <= cap < 2**32 ms, not {base_ms}, {cap_ms}")
    if not 0 <= jitter <= 100:
        raise ValueError(f"a backoff's jitter is 0 to 100 percent, not {jitter}")
    return _BACKOFF.pack(kind, base_ms, cap_ms, jitter)


def decode_backoff(message_type: int, value: bytes) -> Backoff:
    """@raise MalformedMessage: C{value} is not a backoff."""
    if len(value) != _BACKOFF.size:
        raise bad(message_type, f"backoff must be {_BACKOFF.size} bytes, not {len(value)}")
    kind, base_ms, cap_ms, jitter = _BACKOFF.unpack(value)
    if kind not in _BACKOFF_KINDS:
        raise bad(message_type, f"backoff kind must be 0 (fixed) or 1 (exponential), not {kind}")
    if base_ms > cap_ms:
        raise bad(message_type, f"backoff base {base_ms} ms exceeds its cap {cap_ms} ms")
    if jitter > 100:
        raise bad(message_type, f"backoff jitter must be 0 to 100 percent, not {jitter}")
    return Backoff(BackoffKind(kind), base_ms, cap_ms, jitter)


_BACKOFF_KINDS = frozenset(BackoffKind)
