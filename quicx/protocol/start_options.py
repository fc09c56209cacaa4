"""
Version 2's SUBMIT options of when a task may start: a debounce (0x10) and a deadline (0x11).

Their values (L{Debounce}, L{Expires}), encoded and decoded here, for
L{quicx.protocol.taskflow}'s SUBMIT (its L{SubmitOptions} carries them);
docs/protocol.md ("Version 2: debounce and expiry") has their layouts and
rules.  Sans I/O.
"""

from __future__ import annotations

import struct
from enum import IntEnum
from typing import NamedTuple, Protocol

from quicx.protocol.codec import TASK_ID, U64, MessageType, bad

DEBOUNCE_TAG = 0x10
EXPIRES_TAG = 0x11
MAX_MS = 0xFFFFFFFF
"""The longest window, and the longest expiry from now (u32 ms, about 49 days)."""


class DebounceMode(IntEnum):
    """What a SUBMIT does to the waiting task its key names (L{Debounce})."""

    DROP = 1
    """It is answered as a duplicate: the task stays as it is."""
    REPLACE = 2
    """Its payload replaces the task's, which keeps its place and due time."""
    EXTEND = 3
    """Its payload replaces the task's, whose window starts again."""


class Debounce(NamedTuple):
    """
    A keyed SUBMIT's debounce: its task waits C{window_ms} before it may
    start, and while it waits, a SUBMIT of the same key folds into it as
    C{mode} says.
    """

    mode: DebounceMode
    window_ms: int


class Expires(NamedTuple):
    """
    A task's deadline to start: C{ms} from its SUBMIT (C{at} false) or at
    C{ms} since the Unix epoch (C{at} true).  Not started by then, it
    ends expired.
    """

    ms: int
    at: bool = False


_DEBOUNCE = struct.Struct(">BI")
_MODES = frozenset(DebounceMode)


class Starting(Protocol):
    """What the options of a SUBMIT say of when it may start (L{taskflow.SubmitOptions})."""

    @property
    def debounce(self) -> Debounce | None: ...

    @property
    def expires(self) -> Expires | None: ...

    @property
    def key(self) -> bytes | None: ...

    @property
    def delay_ms(self) -> int | None: ...

    @property
    def run_at_ms(self) -> int | None: ...


def encode_start_options(submit: Starting) -> bytes:
    """
    The debounce and expiry options of C{submit}'s options.

    @raise ValueError: one is out of range, or a debounce comes without a
        key or with a delay.
    """
    options = b""
    debounce, expires = submit.debounce, submit.expires
    if debounce is not None:
        if submit.key is None:
            raise ValueError("a debounce needs a key")
        if submit.delay_ms is not None or submit.run_at_ms is not None:
            raise ValueError("a debounce is a delay of its own: not with a delay or run-at")
        mode, window_ms = debounce
        if mode not in _MODES:
            raise ValueError(f"a debounce mode is 1 (drop), 2 (replace) or 3 (extend), not {mode}")
        if not 1 <= window_ms <= MAX_MS:
            raise ValueError(f"a debounce window is 1 to {MAX_MS} ms, not {window_ms}")
        options += bytes((DEBOUNCE_TAG, _DEBOUNCE.size)) + _DEBOUNCE.pack(mode, window_ms)
    if expires is not None:
        ms, at = expires
        if at:
            if not 1 <= ms < 1 << 64:
                raise ValueError(f"an expiry time is a u64 of milliseconds, not {ms}")
            options += bytes((EXPIRES_TAG, 8)) + U64.pack(ms)
        else:
            if not 1 <= ms <= MAX_MS:
                raise ValueError(f"an expiry is 1 to {MAX_MS} ms from now, not {ms}")
            options += bytes((EXPIRES_TAG, 4)) + TASK_ID.pack(ms)
    return options


def decode_debounce(value: bytes) -> Debounce:
    """@raise MalformedMessage: C{value} is not a debounce."""
    if len(value) != _DEBOUNCE.size:
        raise bad(MessageType.SUBMIT, f"debounce must be {_DEBOUNCE.size} bytes, not {len(value)}")
    mode, window_ms = _DEBOUNCE.unpack(value)
    if mode not in _MODES:
        raise bad(
            MessageType.SUBMIT,
            f"debounce mode must be 1 (drop), 2 (replace) or 3 (extend), not {mode}",
        )
    if not window_ms:
        raise bad(MessageType.SUBMIT, "has a debounce window of 0 ms")
    return Debounce(DebounceMode(mode), window_ms)


def decode_expires(value: bytes) -> Expires:
    """@raise MalformedMessage: C{value} is not an expiry."""
    if len(value) == 4:
        expires = Expires(TASK_ID.unpack(value)[0])
    elif len(value) == 8:
        expires = Expires(U64.unpack(value)[0], at=True)
    else:
        raise bad(
            MessageType.SUBMIT,
            f"expiry must be 4 bytes (ms from now) or 8 bytes (ms since the epoch),"
            f" not {len(value)}",
        )
    if not expires.ms:
        raise bad(MessageType.SUBMIT, "has an expiry of 0")
    return expires


def check_debounce(named: dict[str, object]) -> None:
    """@raise MalformedMessage: a SUBMIT's options have a debounce without a key, or a delay."""
    if "debounce" not in named:
        return
    if "key" not in named:
        raise bad(MessageType.SUBMIT, "has a debounce without a key")
    if "delay_ms" in named or "run_at_ms" in named:
        raise bad(MessageType.SUBMIT, "has both a debounce and a delay or time to run at")
