"""How long a failed task waits before its next attempt."""

from __future__ import annotations

from collections.abc import Callable

from quicx.protocol.taskflow import Backoff, BackoffKind

MAX_SHIFT = 40
"""Exponents past this saturate at the cap (2**40 ms is 35 years)."""


def retry_wait(backoff: Backoff, failures: int, random: Callable[[], float]) -> float:
    """
    Seconds before retry number C{failures} (1 after the first failure):
    the base (fixed), or the base doubled per earlier failure up to the cap
    (exponential), less up to C{jitter} percent of it, drawn by C{random}
    (uniform in [0, 1)).  Always within [wait x (1 - jitter/100), wait].
    """
    kind, base_ms, cap_ms, jitter = backoff
    if kind == BackoffKind.FIXED:
        wait = float(base_ms)
    else:
        wait = float(min(cap_ms, base_ms << min(max(failures - 1, 0), MAX_SHIFT)))
    return wait * (1.0 - jitter / 100 * random()) / 1000
