"""
When a task runs, as clients give it: run-at times, backoffs, how long results are kept.

When a task runs, as clients are given it: times to run at (C{datetime}s,
Unix seconds, or ISO 8601 text for the C{quicx} command), backoffs (a
L{taskflow.Backoff}, or its text form), and how long its result is kept.
Durations and backoffs are read as the configuration reads them, by
L{quicx.protocol.durations}.
"""

from __future__ import annotations

import math
import re
from datetime import datetime

from quicx.protocol import start_options, taskflow
from quicx.protocol.durations import parse_backoff, parse_debounce, parse_duration

_NUMBER = re.compile(r"\d+(?:\.\d*)?|\.\d+")


def parse_time(text: str) -> float:
    """
    Unix seconds, from an ISO 8601 time with its zone (C{2026-12-01T09:00:00Z},
    C{2026-12-01 10:00+01:00}) or from Unix seconds.

    @raise ValueError: neither, or a time without a zone (whose zone would be
        a guess).
    """
    spoken = text.strip()
    if _NUMBER.fullmatch(spoken):
        return float(spoken)
    try:
        moment = datetime.fromisoformat(spoken)
    except ValueError:
        raise ValueError(
            f"{text!r} is not a time: give ISO 8601 with its zone"
            " (2026-12-01T09:00:00Z) or Unix seconds"
        ) from None
    return unix_seconds(moment)


def unix_seconds(moment: datetime | float) -> float:
    """
    C{moment} in Unix seconds.

    @raise ValueError: a C{datetime} without a zone.
    """
    if not isinstance(moment, datetime):
        return float(moment)
    if moment.utcoffset() is None:
        raise ValueError(f"{moment.isoformat()} has no time zone: give one (Z, +01:00 or a tzinfo)")
    return moment.timestamp()


def milliseconds(seconds: float) -> int:
    """
    C{seconds} rounded to whole milliseconds, as the wire carries them.

    @raise ValueError: not a finite number.
    """
    if not math.isfinite(seconds):
        raise ValueError(f"{seconds} is not a number of seconds")
    return round(seconds * 1000)


def as_backoff(value: str | taskflow.Backoff | None) -> taskflow.Backoff | None:
    """
    A backoff given as L{parse_backoff}'s text (C{exponential:1s:5m:20%},
    C{fixed:10s}) or as a L{taskflow.Backoff}.

    @raise ValueError: malformed text.
    """
    return parse_backoff(value) if isinstance(value, str) else value


def as_debounce(value: str | start_options.Debounce | None) -> start_options.Debounce | None:
    """
    A debounce given as L{parse_debounce}'s text (C{replace:2s}) or as a
    L{start_options.Debounce}.

    @raise ValueError: malformed text.
    """
    return parse_debounce(value) if isinstance(value, str) else value


def expiry(in_seconds: float | None, at: datetime | float | None) -> start_options.Expires | None:
    """
    A deadline to start, as SUBMIT carries it: C{in_seconds} from now, or
    C{at} a time (a C{datetime} with its zone, or Unix seconds).

    @raise ValueError: both given, or neither more than 0.
    """
    if in_seconds is not None and at is not None:
        raise ValueError("a task expires in some time or at a time, not both")
    if in_seconds is not None:
        if not 0 < in_seconds <= 0xFFFFFFFF / 1000:
            raise ValueError(f"expires_in is more than 0 seconds, up to 49 days, not {in_seconds}")
        return start_options.Expires(max(1, milliseconds(in_seconds)))
    if at is not None:
        return start_options.Expires(max(1, milliseconds(unix_seconds(at))), at=True)
    return None


MAX_TTL = 0xFFFFFFFF
"""The longest result TTL a SUBMIT carries, in seconds."""


def ttl_seconds(value: float | str) -> int:
    """
    How long a kept result lives, as SUBMIT carries it: whole seconds,
    rounded up, from seconds or a duration's text (C{1h}, C{30m}).

    @raise ValueError: not more than 0, past L{MAX_TTL}, or malformed text.
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"a result TTL is seconds or a duration such as 1h, not {value!r}")
    seconds = parse_duration(value) if isinstance(value, str) else value
    if not 0 < seconds <= MAX_TTL:
        raise ValueError(
            f"a result TTL is a positive number of seconds up to {MAX_TTL:,}"
            f" (rounded up to whole seconds), not {value}"
        )
    return math.ceil(seconds)
