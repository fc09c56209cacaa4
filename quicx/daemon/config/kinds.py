"""
The syntax of settings' values: one L{Kind} record, and the kinds the settings use, as data.

A kind is what a value's text may be: how it is read (C{parse}, which
enforces the bounds and says why a text is refused), how it is written back
(C{format}), and how C{--help}, C{quicx init} and the docs' table describe it
(C{metavar}, C{bounds}, C{choices}).  Each kind below is one L{Kind} made by
a small function, not a class of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from enum import Enum
from functools import partial
from typing import Any, Generic, TypeVar

from attrs import frozen

from quicx.daemon.queue import pmad, schedules
from quicx.daemon.queue.results import Share
from quicx.net.addresses import split_addresses
from quicx.net.certificates import identities
from quicx.protocol.codec import MAX_QUEUE_NAME, MAX_TYPE_LENGTH, check_queue
from quicx.protocol.durations import format_backoff, parse_backoff
from quicx.protocol.taskflow import Backoff

T = TypeVar("T")
E = TypeVar("E", bound=Enum)

MAX_BUSY_POLL = 0.01
MAX_PEERS = 64
"""The most daemons C{[cluster] peers} may name."""


@frozen
class Kind(Generic[T]):
    """
    The syntax of one value.

    @ivar metavar: what C{--help} shows for a flag's value.
    @ivar parse: text -> value; raises L{ValueError} saying why the text is none.
    @ivar format: value -> the text the file writes.
    @ivar bounds: the values allowed, as the docs' table shows them (C{""}: any).
    @ivar choices: the only texts allowed, when they can be listed.
    """

    metavar: str
    parse: Callable[[str], T]
    format: Callable[[T], str] = str
    bounds: str = ""
    choices: tuple[str, ...] | None = None


# -- sizes and numbers ---------------------------------------------------------------------

_SIZE = re.compile(r"(?i)^\s*(\d+)\s*(k|kb|kib|m|mb|mib|g|gb|gib)?\s*$")
_MULTIPLIERS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """Parse C{8388608}, C{8M}, C{8MiB} (binary multiples) into bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size in bytes (like 8388608 or 8MiB)")
    number, unit = match.groups()
    return int(number) * (_MULTIPLIERS[unit[0].lower()] if unit else 1)


def _short_size(count: int) -> str:
    """C{4096} -> C{'4K'}: a bound as the file may write it."""
    for suffix, multiple in reversed(_MULTIPLIERS.items()):
        if count >= multiple and count % multiple == 0:
            return f"{count // multiple}{suffix.upper()}"
    return str(count)


def _format_number(value: float) -> str:
    """The shortest text that reads back as C{value}."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:g}"
    return text if float(text) == value else repr(value)


def _float(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not {what}") from None


def _seconds(low: float, high: float | None, bounds: str, text: str) -> float:
    value = _float(text, "a number of seconds")
    if high is None:
        if not low <= value < 1e9:
            raise ValueError(f"{text} seconds is out of range")
    elif not low <= value <= high:
        raise ValueError(f"{text} seconds is out of range ({bounds})")
    return value


def seconds(high: float | None = None, low: float = 0) -> Kind[float]:
    """Seconds from C{low} (0 unless given): under a billion, or at most C{high}."""
    bounds = f"≥ {low:g}" if high is None else f"{low:g} to {high:g}"
    return Kind("SECONDS", partial(_seconds, low, high, bounds), _format_number, bounds)


def _integer(low: int, high: int | None, size: bool, bounds: str, text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError:
        if size:
            raise
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < low or (high is not None and value > high):
        raise ValueError(f"{text} is out of range ({bounds})")
    return value


def integer(low: int = 0, high: int | None = None, size: bool = False) -> Kind[int]:
    """
    A whole number from C{low} to C{high} (C{None}: no upper bound), with
    the size suffixes C{K}, C{M}, C{G}; C{size}: a number of bytes.
    """
    if high is None:
        bounds = f"≥ {_short_size(low)}" if low else ""
    else:
        bounds = f"{_short_size(low)} to {_short_size(high)}"
    return Kind("SIZE" if size else "N", partial(_integer, low, high, size, bounds), str, bounds)


def _number(low: float, high: float, bounds: str, text: str) -> float:
    value = _float(text, "a number")
    if not low <= value <= high:
        raise ValueError(f"{text} is out of range ({bounds})")
    return value


def number(low: float, high: float) -> Kind[float]:
    """A number from C{low} to C{high}."""
    bounds = f"{low:g} to {high:g}"
    return Kind("X", partial(_number, low, high, bounds), _format_number, bounds)


_SHARE_BOUNDS = "a size, or 0% to 100% of pool_size"


def _share(text: str) -> Share:
    value = text.strip()
    if not value.endswith("%"):
        return Share(parse_size(value))
    try:
        percent = Decimal(value[:-1].strip())
    except InvalidOperation:
        raise ValueError(f"{text!r} is not a size or a percentage") from None
    if not 0 <= percent <= 100:
        raise ValueError(f"{text} is out of range ({_SHARE_BOUNDS})")
    return Share(percent=percent)


def _format_share(value: Share) -> str:
    return _short_size(value.size) if value.percent is None else f"{value.percent}%"


SIZE_OR_SHARE = Kind("SIZE|PERCENT%", _share, _format_share, _SHARE_BOUNDS)
"""A size in bytes (suffixes allowed), or a share of the pool: C{25%}."""


def _port(text: str) -> int:
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise ValueError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


PORT = Kind("PORT", _port, str, "0 to 65535")


def _yes_no(text: str) -> bool:
    value = text.strip().lower()
    if value in ("yes", "true", "on", "1"):
        return True
    if value in ("no", "false", "off", "0"):
        return False
    raise ValueError(f"{text!r} is not yes or no")


YES_NO = Kind("yes|no", _yes_no, lambda value: "yes" if value else "no", "yes or no")


# -- names, lists and enumerations ---------------------------------------------------------


def _member_name(member: Enum) -> str:
    return member.value if isinstance(member.value, str) else member.name.lower()


def _member(enum: type[E], names: tuple[str, ...], text: str) -> E:
    wanted = text.strip().lower()
    for member in enum:
        if _member_name(member) == wanted:
            return member
    raise ValueError(f"{text!r} is not one of {', '.join(names)}")


def choice(enum: type[E]) -> Kind[E]:
    """One of an enumeration's members: its value when that is text, else its name in lower case."""
    names = tuple(_member_name(member) for member in enum)
    parse = partial(_member, enum, names)
    return Kind("|".join(names), parse, _member_name, ", ".join(names), names)


def _strip(text: str) -> str:
    return text.strip()


def text(metavar: str = "TEXT") -> Kind[str]:
    """A path, endpoint or name, as written."""
    return Kind(metavar, _strip)


def _task_type(text: str) -> bytes:
    encoded = text.encode("utf-8")
    if not 0 < len(encoded) <= MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes")
    return encoded


def _utf8(value: bytes) -> str:
    return value.decode("utf-8")


TASK_TYPE = Kind("TYPE", _task_type, _utf8, f"1 to {MAX_TYPE_LENGTH} bytes")

PAYLOAD = Kind("TEXT", lambda text: text.strip().encode("utf-8"), _utf8)
"""A task payload, written as UTF-8 text on one line."""


def _size_class(text: str) -> pmad.SizeClass:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not SIZE,PERCENT")
    try:
        size = parse_size(parts[0])
        percent = Decimal(parts[1].rstrip("%"))
    except (ValueError, InvalidOperation):
        raise ValueError(f"{text!r} is not SIZE,PERCENT") from None
    return pmad.SizeClass(size, percent)


SIZE_CLASS = Kind(
    "SIZE,PERCENT",
    _size_class,
    lambda value: f"{value.size},{value.percent}",
    "sizes ascending, percents summing to 100",
)

NAMES = Kind("NAME,...", identities, lambda value: ", ".join(sorted(value)))
"""Comma-separated names (certificate common names)."""


def _addresses(text: str) -> str:
    if not text.strip():
        return ""
    found = split_addresses(text)
    if len(found) > MAX_PEERS:
        raise ValueError(f"{len(found)} addresses, more than {MAX_PEERS}")
    return ", ".join(found)


ADDRESSES = Kind("ADDRESS,...", _addresses, str, f"up to {MAX_PEERS} addresses")
"""
Daemons' addresses, comma-separated (as C{$QUICX_ADDRESS} lists them): kept
as C{"tcp:h1:16381, tcp:h2:16381"}, each normalized, at most L{MAX_PEERS}.
"""


def _versions(text: str) -> frozenset[int]:
    parts = {part.strip() for part in text.split(",")}
    if not parts or not parts <= {"1", "2"}:
        raise ValueError(f"{text!r} is not 1, 2 or '1, 2'")
    return frozenset(int(part) for part in parts)


VERSIONS = Kind(
    "1,2", _versions, lambda value: ", ".join(str(v) for v in sorted(value)), "1, 2, or both"
)
"""The protocol versions the daemon accepts: C{1}, C{2} or C{1, 2}."""

BACKOFF: Kind[Backoff] = Kind(
    "BACKOFF",
    parse_backoff,
    format_backoff,
    "durations like 250ms, 1s, 5m, 1h; jitter 0% to 100%",
)
"""A backoff: C{exponential:BASE:CAP[:JITTER%]} or C{fixed:WAIT[:JITTER%]}."""


def _queue_name(text: str) -> str:
    try:
        check_queue(text)
    except ValueError as e:
        raise ValueError(str(e)) from None
    return text


QUEUE_NAME = Kind("QUEUE", _queue_name, str, f"1 to {MAX_QUEUE_NAME} of A-Z a-z 0-9 _ . : -")


def _checked(check: Callable[[str], Any], text: str) -> str:
    value = text.strip()
    check(value)
    return value


CRON = Kind("CRON", partial(_checked, schedules.check_cron), str, "5 fields")
"""A 5-field cron expression (see L{quicx.daemon.queue.schedules})."""

TIME_ZONE = Kind("ZONE", partial(_checked, schedules.check_timezone), str, "an IANA time zone")
"""An IANA time zone name: C{UTC}, C{Europe/Paris}."""

BUSY_POLL = seconds(high=MAX_BUSY_POLL)
"""Seconds to spin before sleeping (see L{quicx.net.busypoll}): 0 to 10 ms."""


MAX_ETCD_ENDPOINTS = 16
"""The most URLs C{[replication] etcd} may name."""


def _urls(text: str) -> str:
    urls = [url.strip() for url in text.split(",") if url.strip()]
    for url in urls:
        if not re.fullmatch(r"https?://[^/\s,]+(:\d+)?/?", url):
            raise ValueError(
                f"{url!r} is not an http:// or https:// URL (like http://127.0.0.1:2379)"
            )
    if len(urls) > MAX_ETCD_ENDPOINTS:
        raise ValueError(f"{len(urls)} URLs, more than {MAX_ETCD_ENDPOINTS}")
    return ", ".join(urls)


URLS = Kind("URL,...", _urls, str, f"up to {MAX_ETCD_ENDPOINTS} http(s) URLs")
"""The lease store's URLs, comma-separated (C{[replication] etcd})."""


def _host_port(text: str) -> str:
    value = text.strip()
    host, colon, port = value.rpartition(":")
    if not value:
        return ""
    if not colon or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ValueError(f"{text!r} is not HOST:PORT (like 10.0.0.1:16381)")
    return value


HOST_PORT = Kind("HOST:PORT", _host_port, str, "a host and a port")
"""Where others reach a listener of this daemon."""


def _shard_name(text: str) -> str:
    value = text.strip()
    if value and not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", value):
        raise ValueError(f"{text!r} is not 1 to 64 of A-Z a-z 0-9 _ . -")
    return value


MEMBER_NAME = Kind("NAME", _shard_name, str, "1 to 64 of A-Z a-z 0-9 _ . -")
"""A shard's or daemon's name (a part of the lease store's keys)."""


def _key_prefix(text: str) -> str:
    value = text.strip().rstrip("/")
    if not re.fullmatch(r"(/[A-Za-z0-9_.-]+)+", value):
        raise ValueError(f"{text!r} is not a key prefix like /quicx")
    return value


KEY_PREFIX = Kind("PREFIX", _key_prefix, str, "/ and names of A-Z a-z 0-9 _ . -")
"""Where a shard's keys live in the lease store."""
