"""
The text forms of durations (C{30s}, C{5m}) and backoffs (C{exponential:1s:5m}).

The text forms of durations and backoffs, shared by the configuration file,
the command line and the clients: C{30s}, C{5m}, C{1.5h}, C{250ms}, C{2d}
(a bare number is seconds), and C{exponential:1s:5m} or C{fixed:10s}, with
an optional jitter as a last field (C{exponential:1s:5m:20%}).
"""

from __future__ import annotations

import re

from quicx.protocol.start_options import Debounce, DebounceMode
from quicx.protocol.taskflow import Backoff, BackoffKind

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "": 1.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h|d|)\s*\Z")
MAX_MS = 0xFFFFFFFF
"""The longest backoff, as the wire carries it (u32 milliseconds)."""


def parse_duration(text: str) -> float:
    """
    Seconds, from C{30}, C{30s}, C{250ms}, C{5m}, C{1.5h} or C{2d}.

    @raise ValueError: it is not one.
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"{text!r} is not a duration (like 30s, 250ms, 5m, 1.5h, 2d)")
    return float(match.group(1)) * _UNITS[match.group(2)]


def format_duration(seconds: float) -> str:
    """The shortest of C{parse_duration}'s forms for C{seconds}."""
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("m", 60.0), ("s", 1.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds * 1000:g}ms"


def _milliseconds(text: str) -> int:
    value = round(parse_duration(text) * 1000)
    if value > MAX_MS:
        raise ValueError(f"{text!r} is longer than {MAX_MS} ms")
    return value


def parse_backoff(text: str) -> Backoff:
    """
    C{exponential:BASE:CAP[:JITTER%]} or C{fixed:WAIT[:JITTER%]}.

    @raise ValueError: it is not one, saying why.
    """
    kind, _, rest = text.strip().partition(":")
    fields = rest.split(":") if rest else []
    jitter = 0
    if fields and fields[-1].endswith("%"):
        try:
            jitter = int(fields.pop()[:-1])
        except ValueError:
            raise ValueError(f"backoff {text!r}: the jitter is a whole percentage") from None
        if not 0 <= jitter <= 100:
            raise ValueError(f"backoff {text!r}: the jitter is 0% to 100%")
    if kind == "fixed" and len(fields) == 1:
        wait = _milliseconds(fields[0])
        return Backoff(BackoffKind.FIXED, wait, wait, jitter)
    if kind == "exponential" and len(fields) == 2:
        base, cap = _milliseconds(fields[0]), _milliseconds(fields[1])
        if base > cap:
            raise ValueError(f"backoff {text!r}: the base is longer than the cap")
        return Backoff(BackoffKind.EXPONENTIAL, base, cap, jitter)
    raise ValueError(
        f"{text!r} is not a backoff (like exponential:1s:5m, fixed:10s, exponential:1s:5m:20%)"
    )


def format_backoff(backoff: Backoff) -> str:
    kind, base_ms, cap_ms, jitter = backoff
    suffix = f":{jitter}%" if jitter else ""
    if kind == BackoffKind.FIXED:
        return f"fixed:{format_duration(base_ms / 1000)}{suffix}"
    return f"exponential:{format_duration(base_ms / 1000)}:{format_duration(cap_ms / 1000)}{suffix}"


def parse_debounce(text: str) -> Debounce:
    """
    A debounce, from C{MODE:WINDOW}: C{drop:5s}, C{replace:2s}, C{extend:500ms}.

    @raise ValueError: it is not one, or its window is not 1 ms to 2**32 - 1 ms.
    """
    mode, _, window = text.partition(":")
    modes = {m.name.lower(): m for m in DebounceMode}
    if mode.strip().lower() not in modes or not window:
        raise ValueError(f"{text!r} is not a debounce (like replace:2s, extend:5s or drop:1m)")
    window_ms = _milliseconds(window)
    if not window_ms:
        raise ValueError(f"{text!r}: a debounce window is 1 ms or more")
    return Debounce(modes[mode.strip().lower()], window_ms)
