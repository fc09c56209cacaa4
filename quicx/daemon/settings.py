"""
Configuration: every setting once, and everything that follows from it.

Each field of L{Config} that is a setting is declared with L{setting} (or
L{repeated}): its section and key in C{quicx.conf}, the syntax of its value
(a L{Kind}, which holds its bounds), its default and a line of help.
L{SETTINGS} is that table; from it come the file's parser and its errors,
the C{twistd quicx} and C{quicx start} flags (C{--FLAG}, one per setting),
C{quicx init}'s file (L{render}) and the table in C{docs/configuration.md}
(checked by C{tests/test_docs.py}).  Checks across settings (L{validate})
live here too, and apply alike to a file and to flags.

The file format is the reference product's: C{[section]} headers and
C{key = value} lines, C{#} or C{;} comments, and the C{class} key repeated
once per size class.  It is parsed here rather than with L{configparser}
because keys repeat and every error must name the file and line.

Files written for the reference product (C{[server] port}, C{[allocator]
pool_size} and C{class}) work unchanged; the other keys are additions
documented in C{docs/configuration.md}.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal, InvalidOperation
from enum import Enum
from pathlib import Path
from typing import Any, Generic, TypeVar

import attrs
from attrs import Factory, define, field, frozen

from quicx.daemon.journal.records import (
    DEFAULT_COMPACT_FACTOR,
    DEFAULT_COMPACT_MIN_SIZE,
    MAX_SHARED_DATA,
    FsyncPolicy,
)
from quicx.daemon.observe.events import Compression
from quicx.daemon.observe.logformat import LogFormat
from quicx.daemon.observe.telemetry import DEFAULT_MAX_SERIES, DEFAULT_MAX_TYPES
from quicx.daemon.queue import pmad, schedules
from quicx.daemon.queue.dispatch import DispatchSettings, Order
from quicx.daemon.queue.groups import GroupLimits
from quicx.daemon.queue.policy import (
    DEFAULT_BACKOFF,
    ProgressSettings,
    QueueLimits,
    QueuePolicy,
    SharedLimits,
    SubscriberLimits,
)
from quicx.daemon.queue.results import ResultLimits, Share
from quicx.daemon.queue.schedules import MAX_CATCH_UP, ScheduleSpec
from quicx.net.addresses import split_addresses
from quicx.net.busypoll import DEFAULT_SPIN
from quicx.net.certificates import Authorization, identities
from quicx.net.tls import TlsSettings
from quicx.protocol.admin import Missed
from quicx.protocol.codec import MAX_CREDITS, MAX_QUEUE_NAME, MAX_TYPE_LENGTH, check_queue
from quicx.protocol.durations import format_backoff, parse_backoff
from quicx.protocol.taskflow import Backoff

DEFAULT_PORT = 16381
DEFAULT_HEARTBEAT_INTERVAL = 30.0
DEFAULT_HEARTBEAT_TIMEOUT = 90.0
MAX_BUSY_POLL = 0.01


@frozen
class Limits:
    """
    What one connection may do (see docs/operations.md, "Limits").

    @ivar max_connections: connections past this are refused with an ERROR.
    @ivar first_frame_timeout: seconds a new connection has to send a whole
        frame before it is closed; 0 turns it off.
    @ivar max_type_length: the longest task type a SUBMIT may name (bytes).
    @ivar max_reason_length: the longest FAILED reason accepted (bytes).
    @ivar max_output_buffer: unsent bytes a connection may have queued before
        the daemon stops reading from it until they drain.
    @ivar max_credits: the most tasks one worker connection may hold at once
        (a READY asking for more is granted this many).
    @ivar monitor_slice: seconds of the reactor one connection's monitor
        queries may hold in a turn; the rest of what it sent waits for the
        next turn, so that other connections are served in between.
    """

    max_connections: int = 4096
    first_frame_timeout: float = 10.0
    max_type_length: int = MAX_TYPE_LENGTH
    max_reason_length: int = 1024
    max_output_buffer: int = 1 << 20
    max_credits: int = 1024
    monitor_slice: float = 0.002


_DEFAULT_LIMITS = Limits()
_DEFAULT_PROGRESS = ProgressSettings()
_DEFAULT_SHARED = SharedLimits()
_DEFAULT_RESULTS = ResultLimits()
_DEFAULT_GROUPS = GroupLimits()
_DEFAULT_SUBSCRIBERS = SubscriberLimits()
_DEFAULT_DISPATCH = DispatchSettings()


class ConfigError(Exception):
    """
    The configuration cannot be used; the message names where and why.
    """


# -- the syntax of values ------------------------------------------------------------------

T = TypeVar("T")
Item = TypeVar("Item")
E = TypeVar("E", bound=Enum)

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


def _number(value: float) -> str:
    """The shortest text that reads back as C{value}."""
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    text = f"{value:g}"
    return text if float(text) == value else repr(value)


class Kind(Generic[T]):
    """
    The syntax of one value: how it is read (L{parse}, which enforces the
    bounds), how it is written (L{format}) and its bounds in words.
    """

    def metavar(self) -> str:
        """What C{--help} shows for the flag's value."""
        return "VALUE"

    def parse(self, text: str) -> T:
        """@raise ValueError: C{text} is no such value; the message says why."""
        raise NotImplementedError

    def format(self, value: T) -> str:
        return str(value)

    def bounds(self) -> str:
        """The values allowed, as the docs' table shows them; C{""}: any."""
        return ""

    def choices(self) -> tuple[str, ...] | None:
        """The only texts allowed, when they can be listed."""
        return None


@frozen
class Text(Kind[str]):
    """A path, endpoint or name, as written."""

    def metavar(self) -> str:
        return "TEXT"

    def parse(self, text: str) -> str:
        return text.strip()


@frozen
class Seconds(Kind[float]):
    """Seconds from C{low} (0 unless given): under a billion, or at most C{high}."""

    def metavar(self) -> str:
        return "SECONDS"

    high: float | None = None
    low: float = 0

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number of seconds") from None
        if self.high is None:
            if not self.low <= value < 1e9:
                raise ValueError(f"{text} seconds is out of range")
        elif not self.low <= value <= self.high:
            raise ValueError(f"{text} seconds is out of range ({self.bounds()})")
        return value

    def format(self, value: float) -> str:
        return _number(value)

    def bounds(self) -> str:
        return f"≥ {self.low:g}" if self.high is None else f"{self.low:g} to {self.high:g}"


@frozen
class Integer(Kind[int]):
    """
    A whole number from C{low} to C{high} (C{None}: no upper bound), with
    the size suffixes C{K}, C{M}, C{G}; C{size}: a number of bytes.
    """

    low: int = 0
    high: int | None = None
    size: bool = False

    def metavar(self) -> str:
        return "SIZE" if self.size else "N"

    def parse(self, text: str) -> int:
        try:
            value = parse_size(text)
        except ValueError:
            if self.size:
                raise
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < self.low or (self.high is not None and value > self.high):
            raise ValueError(f"{text} is out of range ({self.bounds()})")
        return value

    def bounds(self) -> str:
        if self.high is None:
            return f"≥ {_short_size(self.low)}" if self.low else ""
        return f"{_short_size(self.low)} to {_short_size(self.high)}"


@frozen
class SizeOrShare(Kind[Share]):
    """A size in bytes (suffixes allowed), or a share of the pool: C{25%}."""

    def metavar(self) -> str:
        return "SIZE|PERCENT%"

    def parse(self, text: str) -> Share:
        value = text.strip()
        if not value.endswith("%"):
            return Share(parse_size(value))
        try:
            percent = Decimal(value[:-1].strip())
        except InvalidOperation:
            raise ValueError(f"{text!r} is not a size or a percentage") from None
        if not 0 <= percent <= 100:
            raise ValueError(f"{text} is out of range ({self.bounds()})")
        return Share(percent=percent)

    def format(self, value: Share) -> str:
        return _short_size(value.size) if value.percent is None else f"{value.percent}%"

    def bounds(self) -> str:
        return "a size, or 0% to 100% of pool_size"


@frozen
class Port(Kind[int]):
    def metavar(self) -> str:
        return "PORT"

    def parse(self, text: str) -> int:
        if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
            raise ValueError(f"{text!r} is not a port number (0 to 65535)")
        return int(text)

    def bounds(self) -> str:
        return "0 to 65535"


@frozen
class Number(Kind[float]):
    """A number from C{low} to C{high}."""

    def metavar(self) -> str:
        return "X"

    low: float
    high: float

    def parse(self, text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a number") from None
        if not self.low <= value <= self.high:
            raise ValueError(f"{text} is out of range ({self.bounds()})")
        return value

    def format(self, value: float) -> str:
        return _number(value)

    def bounds(self) -> str:
        return f"{self.low:g} to {self.high:g}"


@frozen
class YesNo(Kind[bool]):
    def metavar(self) -> str:
        return "yes|no"

    def parse(self, text: str) -> bool:
        value = text.strip().lower()
        if value in ("yes", "true", "on", "1"):
            return True
        if value in ("no", "false", "off", "0"):
            return False
        raise ValueError(f"{text!r} is not yes or no")

    def format(self, value: bool) -> str:
        return "yes" if value else "no"

    def bounds(self) -> str:
        return "yes or no"


@frozen
class Choice(Kind[E]):
    """One of an enumeration's members: its value when that is text, else its name in lower case."""

    enum: type[E]

    def metavar(self) -> str:
        return "|".join(self._names())

    def _names(self) -> tuple[str, ...]:
        return tuple(self.format(member) for member in self.enum)

    def parse(self, text: str) -> E:
        wanted = text.strip().lower()
        for member in self.enum:
            if self.format(member) == wanted:
                return member
        raise ValueError(f"{text!r} is not one of {', '.join(self._names())}")

    def format(self, value: E) -> str:
        return value.value if isinstance(value.value, str) else value.name.lower()

    def bounds(self) -> str:
        return ", ".join(self._names())

    def choices(self) -> tuple[str, ...]:
        return self._names()


@frozen
class TaskType(Kind[bytes]):
    def metavar(self) -> str:
        return "TYPE"

    def parse(self, text: str) -> bytes:
        encoded = text.encode("utf-8")
        if not 0 < len(encoded) <= MAX_TYPE_LENGTH:
            raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes")
        return encoded

    def format(self, value: bytes) -> str:
        return value.decode("utf-8")

    def bounds(self) -> str:
        return f"1 to {MAX_TYPE_LENGTH} bytes"


@frozen
class SizeClassKind(Kind[pmad.SizeClass]):
    def metavar(self) -> str:
        return "SIZE,PERCENT"

    def parse(self, text: str) -> pmad.SizeClass:
        parts = [p.strip() for p in text.split(",")]
        if len(parts) != 2:
            raise ValueError(f"{text!r} is not SIZE,PERCENT")
        try:
            size = parse_size(parts[0])
            percent = Decimal(parts[1].rstrip("%"))
        except (ValueError, InvalidOperation):
            raise ValueError(f"{text!r} is not SIZE,PERCENT") from None
        return pmad.SizeClass(size, percent)

    def format(self, value: pmad.SizeClass) -> str:
        return f"{value.size},{value.percent}"

    def bounds(self) -> str:
        return "sizes ascending, percents summing to 100"


@frozen
class Names(Kind[frozenset[str]]):
    """Comma-separated names (certificate common names)."""

    def metavar(self) -> str:
        return "NAME,..."

    def parse(self, text: str) -> frozenset[str]:
        return identities(text)

    def format(self, value: frozenset[str]) -> str:
        return ", ".join(sorted(value))


MAX_PEERS = 64
"""The most daemons C{[cluster] peers} may name."""


@frozen
class Addresses(Kind[str]):
    """
    Daemons' addresses, comma-separated (as C{$QUICX_ADDRESS} lists them):
    kept as C{"tcp:h1:16381, tcp:h2:16381"}, each normalized, at most
    L{MAX_PEERS}.
    """

    def metavar(self) -> str:
        return "ADDRESS,..."

    def parse(self, text: str) -> str:
        if not text.strip():
            return ""
        found = split_addresses(text)
        if len(found) > MAX_PEERS:
            raise ValueError(f"{len(found)} addresses, more than {MAX_PEERS}")
        return ", ".join(found)

    def bounds(self) -> str:
        return f"up to {MAX_PEERS} addresses"


@frozen
class Versions(Kind[frozenset[int]]):
    """The protocol versions the daemon accepts: C{1}, C{2} or C{1, 2}."""

    def metavar(self) -> str:
        return "1,2"

    def parse(self, text: str) -> frozenset[int]:
        parts = {part.strip() for part in text.split(",")}
        if not parts or not parts <= {"1", "2"}:
            raise ValueError(f"{text!r} is not 1, 2 or '1, 2'")
        return frozenset(int(part) for part in parts)

    def format(self, value: frozenset[int]) -> str:
        return ", ".join(str(v) for v in sorted(value))

    def bounds(self) -> str:
        return "1, 2, or both"


@frozen
class BackoffText(Kind[Backoff]):
    """A backoff: C{exponential:BASE:CAP[:JITTER%]} or C{fixed:WAIT[:JITTER%]}."""

    def metavar(self) -> str:
        return "BACKOFF"

    def parse(self, text: str) -> Backoff:
        return parse_backoff(text)

    def format(self, value: Backoff) -> str:
        return format_backoff(value)

    def bounds(self) -> str:
        return "durations like 250ms, 1s, 5m, 1h; jitter 0% to 100%"


@frozen
class QueueName(Kind[str]):
    """A queue name: 1 to 64 letters, digits or C{_ . : -}."""

    def metavar(self) -> str:
        return "QUEUE"

    def parse(self, text: str) -> str:
        try:
            check_queue(text)
        except ValueError as e:
            raise ValueError(str(e)) from None
        return text

    def bounds(self) -> str:
        return f"1 to {MAX_QUEUE_NAME} of A-Z a-z 0-9 _ . : -"


@frozen
class CronExpression(Kind[str]):
    """A 5-field cron expression (see L{quicx.daemon.queue.schedules})."""

    def metavar(self) -> str:
        return "CRON"

    def parse(self, text: str) -> str:
        expression = text.strip()
        schedules.check_cron(expression)
        return expression

    def bounds(self) -> str:
        return "5 fields"


@frozen
class TimeZone(Kind[str]):
    """An IANA time zone name: C{UTC}, C{Europe/Paris}."""

    def metavar(self) -> str:
        return "ZONE"

    def parse(self, text: str) -> str:
        name = text.strip()
        schedules.check_timezone(name)
        return name

    def bounds(self) -> str:
        return "an IANA time zone"


@frozen
class Payload(Kind[bytes]):
    """A task payload, written as UTF-8 text on one line."""

    def metavar(self) -> str:
        return "TEXT"

    def parse(self, text: str) -> bytes:
        return text.strip().encode("utf-8")

    def format(self, value: bytes) -> str:
        return value.decode("utf-8")


BUSY_POLL = Seconds(high=MAX_BUSY_POLL)
"""Seconds to spin before sleeping (see L{quicx.net.busypoll}): 0 to 10 ms."""


# -- the table -----------------------------------------------------------------------------


@frozen
class Setting:
    """
    One setting: a field of L{Config}, a key of the file, a flag.

    @ivar name: the L{Config} attribute.
    @ivar kind: the syntax of its value (of each value, for a repeatable one).
    @ivar help: one line, for C{--help} and C{quicx init}.
    @ivar flag: C{--FLAG} on the command line.
    @ivar unset: what the default means, in the docs, when it is no value.
    @ivar collect: for a repeatable key, turns the list of its values into
        the field's value; C{None} for a key that may appear once.
    """

    section: str
    key: str
    kind: Kind[Any]
    help: str
    flag: str = ""
    metavar: str = ""
    unset: str = ""
    collect: Callable[[list[Any]], object] | None = None
    name: str = ""
    default: object = None

    @property
    def repeatable(self) -> bool:
        return self.collect is not None

    def texts(self, value: object) -> list[str]:
        """C{value} as the file writes it: one text per line, none when unset."""
        if self.collect is not None:
            items = sorted(value) if isinstance(value, frozenset) else value or ()
            assert isinstance(items, (list, tuple))
            return [self.kind.format(item) for item in items]
        if value is None or value == "":
            return []
        return [self.kind.format(value)]

    def combine(self, values: list[object]) -> object:
        """
        The field's value given the values of its lines or flags (the last
        one wins for a key that may appear once).
        """
        return self.collect(values) if self.collect is not None else values[-1]

    def shown_default(self) -> str:
        """The default as the docs' table shows it."""
        return self.unset or ", ".join(f"`{text}`" for text in self.texts(self.default))

    def flag_help(self) -> str:
        """The help with the range and whether it repeats: for C{--help} and C{quicx init}."""
        bounds = f" Range: {self.kind.bounds()}." if self.kind.bounds() else ""
        return f"{self.help}{bounds}{' Repeatable.' if self.repeatable else ''}"


_SETTING = "quicx.setting"


def setting(
    section: str,
    key: str,
    kind: Kind[Any],
    default: T,
    help: str,
    *,
    flag: str = "",
    metavar: str = "",
    unset: str = "",
) -> T:
    """A L{Config} field that is a setting of C{quicx.conf}'s C{[section] key}."""
    spec = Setting(section, key, kind, help, flag, metavar, unset)
    return field(default=default, metadata={_SETTING: spec})


def repeated(
    section: str,
    key: str,
    kind: Kind[Item],
    collect: Callable[[list[Item]], T],
    default: T,
    help: str,
    *,
    flag: str = "",
    metavar: str = "",
    unset: str = "",
) -> T:
    """A setting whose key may repeat: C{collect} makes the field's value of the values."""
    spec = Setting(section, key, kind, help, flag, metavar, unset, collect)
    return field(default=default, metadata={_SETTING: spec})


def _tuple(values: list[Item]) -> tuple[Item, ...]:
    return tuple(values)


def _frozenset(values: list[Item]) -> frozenset[Item]:
    return frozenset(values)


@frozen
class Config:
    """
    Everything the daemon is configured with: the settings, in the order of
    the docs' tables, then where they came from.

    C{control}, C{pid_file}: C{""} for the default path (L{control_path},
    L{pid_path}); C{control = none} turns the control socket off.
    C{journal}, C{events_directory}: C{""} for none.
    C{allowed_types}, C{tls_producers}...: C{None} for anyone.
    """

    port: int = setting(
        "server",
        "port",
        Port(),
        DEFAULT_PORT,
        "The TCP port, on 127.0.0.1 only; `listen` replaces it.",
    )
    listen: tuple[str, ...] = repeated(
        "server",
        "listen",
        Text(),
        _tuple,
        (),
        "Listen on this endpoint string, e.g. tcp:16381 (replaces port).",
        metavar="ENDPOINT",
        unset="`tcp:PORT:interface=127.0.0.1`",
    )
    heartbeat_interval: float = setting(
        "server",
        "heartbeat_interval",
        Seconds(),
        DEFAULT_HEARTBEAT_INTERVAL,
        "Seconds of silence before a HEARTBEAT (0: off).",
    )
    heartbeat_timeout: float = setting(
        "server",
        "heartbeat_timeout",
        Seconds(),
        DEFAULT_HEARTBEAT_TIMEOUT,
        "Seconds of silence before a peer is dropped (more than the interval).",
    )
    control: str = setting(
        "server",
        "control",
        Text(),
        "",
        "Control socket path for `quicx status` ('none': off).",
        metavar="PATH",
        unset="`$XDG_RUNTIME_DIR/quicx-PORT.sock`, or under `/tmp`",
    )
    pid_file: str = setting(
        "server",
        "pid_file",
        Text(),
        "",
        "Where `quicx start` records its pid (under twistd: twistd's --pidfile).",
        metavar="PATH",
        unset="`$XDG_RUNTIME_DIR/quicx-PORT.pid`, or under `/tmp`",
    )
    drain_timeout: float = setting(
        "server",
        "drain_timeout",
        Seconds(),
        30.0,
        "On stop, wait this long for queued and running tasks to finish (0: don't).",
    )
    spare_busy_workers: bool = setting(
        "server",
        "spare_busy_workers",
        YesNo(),
        False,
        "yes: never drop a silent worker that holds a task.",
    )
    busy_poll: float = setting(
        "server",
        "busy_poll",
        BUSY_POLL,
        DEFAULT_SPIN,
        "Poll sockets this many seconds before sleeping (0: off).",
    )
    pool_size: int = setting(
        "allocator",
        "pool_size",
        Integer(size=True),
        pmad.DEFAULT_POOL_SIZE,
        "PMAD pool size in bytes (suffixes K, M, G).",
    )
    classes: tuple[pmad.SizeClass, ...] = repeated(
        "allocator",
        "class",
        SizeClassKind(),
        _tuple,
        tuple(pmad.default_classes()),
        "A size class: block payload size, percent of the pool.",
        flag="class",
        unset="the built-in layout (below)",
    )
    allowed_types: frozenset[bytes] | None = repeated(
        "tasks",
        "allow",
        TaskType(),
        _frozenset,
        None,
        "Accept SUBMITs of this task type only.",
        flag="allow",
        unset="any type",
    )
    task_timeout: float = setting(
        "tasks",
        "timeout",
        Seconds(),
        0.0,
        "Requeue a task a worker holds longer than this many seconds (0: never).",
    )
    max_attempts: int = setting(
        "tasks",
        "max_attempts",
        Integer(0, 1_000_000),
        0,
        "Deliveries a task gets before it fails as given up (0: no limit).",
    )
    max_delay: float = setting(
        "tasks",
        "max_delay",
        Seconds(),
        365 * 86400.0,
        "The furthest ahead a SUBMIT may delay its task, in seconds.",
    )
    max_delayed: int = setting(
        "tasks",
        "max_delayed",
        Integer(0, 1_000_000_000),
        1_000_000,
        "Delayed tasks at most (SUBMITs past it are refused; retries always wait).",
    )
    max_lease: float = setting(
        "tasks",
        "max_lease",
        Seconds(),
        86400.0,
        "The longest one TOUCH may extend a task's lease, in seconds.",
    )
    max_connections: int = setting(
        "limits",
        "max_connections",
        Integer(1, 1_000_000),
        _DEFAULT_LIMITS.max_connections,
        "Connections past this are refused.",
    )
    first_frame_timeout: float = setting(
        "limits",
        "first_frame_timeout",
        Seconds(),
        _DEFAULT_LIMITS.first_frame_timeout,
        "Seconds a new connection has to send a whole frame (0: off).",
    )
    monitor_slice: float = setting(
        "limits",
        "monitor_slice",
        Seconds(high=1.0, low=0.0001),
        _DEFAULT_LIMITS.monitor_slice,
        "Seconds of the event loop one connection's monitor queries (INSPECT, PEEK, QUEUES, ...)"
        " may hold in a turn before the rest wait for the next.",
    )
    max_type_length: int = setting(
        "limits",
        "max_type_length",
        Integer(1, MAX_TYPE_LENGTH, size=True),
        _DEFAULT_LIMITS.max_type_length,
        "The longest task type a SUBMIT may name, in bytes.",
    )
    max_reason_length: int = setting(
        "limits",
        "max_reason_length",
        Integer(1, 1 << 20, size=True),
        _DEFAULT_LIMITS.max_reason_length,
        "The longest FAILED reason, in bytes.",
    )
    max_output_buffer: int = setting(
        "limits",
        "max_output_buffer",
        Integer(4096, 1 << 30, size=True),
        _DEFAULT_LIMITS.max_output_buffer,
        "Unsent bytes a connection may pile up before the daemon stops reading it.",
    )
    max_credits: int = setting(
        "limits",
        "max_credits",
        Integer(1, MAX_CREDITS),
        _DEFAULT_LIMITS.max_credits,
        "The most tasks one worker connection may hold at once.",
    )
    tls_certificate: str = setting(
        "tls",
        "certificate",
        Text(),
        "",
        "The daemon's certificate chain (PEM), for tls: listeners.",
        metavar="FILE",
        unset="none",
    )
    tls_private_key: str = setting(
        "tls",
        "private_key",
        Text(),
        "",
        "Its private key (PEM).",
        metavar="FILE",
        unset="the certificate file",
    )
    tls_client_ca: str = setting(
        "tls",
        "client_ca",
        Text(),
        "",
        "CA certificates (PEM) that tls: clients' certificates must be signed by.",
        metavar="FILE",
        unset="none",
    )
    tls_producers: frozenset[str] | None = setting(
        "tls",
        "producers",
        Names(),
        None,
        "Certificate common names that may SUBMIT (needs client_ca).",
        unset="any",
    )
    tls_workers: frozenset[str] | None = setting(
        "tls",
        "workers",
        Names(),
        None,
        "Certificate common names that may send READY (needs client_ca).",
        unset="any",
    )
    tls_monitors: frozenset[str] | None = setting(
        "tls",
        "monitors",
        Names(),
        None,
        "Certificate common names that may ask STATS (needs client_ca).",
        unset="any",
    )
    tls_admins: frozenset[str] | None = setting(
        "tls",
        "admins",
        Names(),
        None,
        "Certificate common names that may pause, resume, purge and cancel any task.",
        unset="none (the control socket only)",
    )
    protocol_versions: frozenset[int] = setting(
        "protocol",
        "versions",
        Versions(),
        frozenset({1, 2}),
        "The protocol versions accepted (1: exactly the protocol page's daemon).",
    )
    default_queue: str = setting(
        "protocol",
        "default_queue",
        QueueName(),
        "default",
        "Where a SUBMIT without a queue goes, and what version-1 workers serve.",
    )
    max_queues: int = setting(
        "queues",
        "max_queues",
        Integer(1, 1_000_000),
        1000,
        "The most queues that may exist at once.",
    )
    default_max_depth: int = setting(
        "queues",
        "max_depth",
        Integer(0),
        0,
        "Queued tasks a queue without a [queue NAME] max_depth may hold (0: pool only).",
        flag="max-depth",
    )
    default_priority: int = setting(
        "queues",
        "priority",
        Integer(0, 255),
        0,
        "The priority of a task that names none, in a queue without its own.",
        flag="default-priority",
    )
    max_key_length: int = setting(
        "queues",
        "max_key_length",
        Integer(1, 255),
        255,
        "The longest idempotency or fairness key, in bytes.",
    )
    dedup_window: float = setting(
        "queues",
        "dedup_window",
        Seconds(),
        3600.0,
        "Seconds an idempotency key is remembered after its task was submitted.",
    )
    max_dedup_keys: int = setting(
        "queues",
        "max_dedup_keys",
        Integer(0, 100_000_000),
        100_000,
        "Keys of finished tasks remembered at most (the oldest go first).",
    )
    max_fairness_keys: int = setting(
        "queues",
        "max_fairness_keys",
        Integer(1, 100_000_000),
        10_000,
        "Fairness keys with limit state, across all queues.",
    )
    dispatch: Order = setting(  # noqa: RUF009 (returns a field)
        "queues",
        "dispatch",
        Choice(Order),
        _DEFAULT_DISPATCH.order,
        "Which idle worker gets the next task: the one idle last, or the one idle longest.",
    )
    failing_streak: int = setting(
        "queues",
        "failing_streak",
        Integer(0, 1_000_000),
        _DEFAULT_DISPATCH.failing_streak,
        "lifo: failures in a row after which a worker gets tasks only when no other is idle"
        " (0: off).",
    )
    failing_window: float = setting(
        "queues",
        "failing_window",
        Seconds(),
        _DEFAULT_DISPATCH.failing_window,
        "lifo: seconds after its latest failure that such a worker stays behind (0: off).",
    )
    default_retries: int = setting(
        "retries",
        "retries",
        Integer(0, 65535),
        0,
        "How many times a failed task is retried, in a queue without its own.",
    )
    default_backoff: Backoff = setting(  # noqa: RUF009 (a NamedTuple: immutable)
        "retries",
        "backoff",
        BackoffText(),
        DEFAULT_BACKOFF,
        "The wait before each retry, in a queue without its own.",
    )
    count_lost: bool = setting(
        "retries",
        "count_lost",
        YesNo(),
        False,
        "yes: a task taken back from a lost or too-slow worker counts as a failure.",
    )
    dead_max_count: int = setting(
        "dead_letters",
        "max_count",
        Integer(0, 100_000_000),
        10_000,
        "Dead tasks kept at most, across all queues (the oldest go first; 0: none).",
        flag="dead-max-count",
    )
    dead_max_age: float = setting(
        "dead_letters",
        "max_age",
        Seconds(),
        7 * 86400.0,
        "Seconds a dead task is kept (0: until pushed out by max_count).",
        flag="dead-max-age",
    )
    max_schedules: int = setting(
        "schedules",
        "max_schedules",
        Integer(0, 100_000),
        100,
        "The most schedules: the [schedule NAME] sections and those added at run time.",
    )
    progress_interval: float = setting(
        "progress",
        "interval",
        Seconds(high=60),
        _DEFAULT_PROGRESS.interval,
        "Seconds between two progress reports of one task that go out (0: each goes out).",
    )
    max_progress_message: int = setting(
        "progress",
        "max_message",
        Integer(0, 65535, size=True),
        _DEFAULT_PROGRESS.max_message,
        "The longest PROGRESS message, in bytes.",
    )
    shared_max_size: int = setting(
        "shared",
        "max_size",
        Integer(0, MAX_SHARED_DATA, size=True),
        _DEFAULT_SHARED.max_size,
        "The most data one version of a shared name may have, in bytes.",
    )
    shared_max_names: int = setting(
        "shared",
        "max_names",
        Integer(1, 100_000),
        _DEFAULT_SHARED.max_names,
        "The most shared names at once (and names one connection may follow).",
    )
    shared_max_memory: int = setting(
        "shared",
        "max_memory",
        Integer(0, 1 << 32, size=True),
        _DEFAULT_SHARED.max_memory,
        "The most data all shared names may hold together, in bytes.",
    )
    result_max_size: int = setting(
        "results",
        "max_size",
        Integer(0, pmad.MAX_CLASS_SIZE, size=True),
        _DEFAULT_RESULTS.max_size,
        "The longest result an ACK may carry, in bytes (and at most the largest class).",
    )
    result_ttl: float = setting(
        "results",
        "ttl",
        Seconds(low=1),
        _DEFAULT_RESULTS.ttl,
        "Seconds an outcome is kept when its SUBMIT or queue names no time.",
    )
    result_max_ttl: float = setting(
        "results",
        "max_ttl",
        Seconds(low=1),
        _DEFAULT_RESULTS.max_ttl,
        "The longest an outcome is kept, in seconds.",
    )
    result_max_count: int = setting(
        "results",
        "max_count",
        Integer(0, 100_000_000),
        _DEFAULT_RESULTS.max_count,
        "Outcomes kept at most (the oldest are evicted first).",
    )
    result_max_memory: Share = setting(  # noqa: RUF009 (returns a field)
        "results",
        "max_memory",
        SizeOrShare(),
        _DEFAULT_RESULTS.max_memory,
        "Pool memory kept outcomes may take: a size, or a share of pool_size.",
    )
    max_waiters: int = setting(
        "results",
        "max_waiters",
        Integer(0, 100_000_000),
        _DEFAULT_RESULTS.max_waiters,
        "AWAITs and group WAITs waiting at once, in all.",
    )
    max_waiters_per_connection: int = setting(
        "results",
        "max_waiters_per_connection",
        Integer(0, 100_000_000),
        _DEFAULT_RESULTS.max_waiters_per_connection,
        "AWAITs and group WAITs waiting at once on one connection.",
    )
    max_wait: float = setting(
        "results",
        "max_wait",
        Seconds(),
        _DEFAULT_RESULTS.max_wait,
        "The longest one AWAIT or group WAIT waits, in seconds (longer is cut to it).",
    )
    max_groups: int = setting(
        "groups",
        "max_groups",
        Integer(1, 100_000_000),
        _DEFAULT_GROUPS.max_groups,
        "Groups at most, open or finished (the oldest finished are forgotten first).",
    )
    group_ttl: float = setting(
        "groups",
        "ttl",
        Seconds(),
        _DEFAULT_GROUPS.ttl,
        "Seconds a finished group is remembered.",
    )
    group_idle_close: float = setting(
        "groups",
        "idle_close",
        Seconds(),
        _DEFAULT_GROUPS.idle_close,
        "Seconds an open group may go without a new member before the daemon closes it (0: never).",
    )
    events_directory: str = setting(
        "events",
        "directory",
        Text(),
        "",
        "Write task lifecycle events (NDJSON) into this directory.",
        flag="events",
        metavar="DIR",
        unset="none",
    )
    events_max_bytes: int = setting(
        "events",
        "max_bytes",
        Integer(4096, 1 << 40, size=True),
        64 << 20,
        "Start a new events file past this size.",
    )
    events_max_age: float = setting(
        "events",
        "max_age",
        Seconds(),
        3600.0,
        "...or past this many seconds.",
    )
    events_compress: Compression = setting(  # noqa: RUF009 (returns a field)
        "events",
        "compress",
        Choice(Compression),
        Compression.NONE,
        "Compress each events file once a newer one starts (in a thread of its own).",
    )
    events_max_subscribers: int = setting(
        "events",
        "max_subscribers",
        Integer(0, 10_000),
        _DEFAULT_SUBSCRIBERS.max_subscribers,
        "Connections that may watch live events at once (WATCH; 0: none).",
    )
    events_max_held: int = setting(
        "events",
        "max_held",
        Integer(0, 10_000_000),
        _DEFAULT_SUBSCRIBERS.max_held,
        "Events held for one subscriber that reads too slowly; older ones are dropped.",
    )
    metrics_listen: str = setting(
        "metrics",
        "listen",
        Text(),
        "",
        "Serve Prometheus metrics at /metrics on this endpoint (tcp:9464:interface=127.0.0.1).",
        flag="metrics-listen",
        metavar="ENDPOINT",
        unset="none",
    )
    metrics_max_types: int = setting(
        "metrics",
        "max_types",
        Integer(1, 100_000),
        DEFAULT_MAX_TYPES,
        "Task types with labels of their own; later types count as `other`.",
    )
    metrics_max_series: int = setting(
        "metrics",
        "max_series",
        Integer(1, 1_000_000),
        DEFAULT_MAX_SERIES,
        "(queue, type) pairs with labels of their own; later pairs count as queue `other`.",
    )
    metrics_max_scrapes: int = setting(
        "metrics",
        "max_scrapes",
        Integer(1, 1000),
        8,
        "Scrapes answered at once, until each scraper has read its text; one more gets 503.",
    )
    metrics_max_connections: int = setting(
        "metrics",
        "max_connections",
        Integer(1, 100_000),
        16,
        "Connections to /metrics at once; one more is answered 503 and closed.",
    )
    web_listen: str = setting(
        "web",
        "listen",
        Text(),
        "",
        "Serve the web dashboard on this endpoint (e.g. tcp:8080:interface=127.0.0.1).",
        flag="web-listen",
        metavar="ENDPOINT",
        unset="none",
    )
    web_admin_token: str = setting(
        "web",
        "admin_token",
        Text(),
        "",
        "A bearer token that gives the dashboard's admin role (every action).",
        unset="none",
    )
    web_monitor_token: str = setting(
        "web",
        "monitor_token",
        Text(),
        "",
        "A bearer token that gives the dashboard's monitor role (read only).",
        unset="none",
    )
    web_history: float = setting(
        "web",
        "history",
        Seconds(),
        3600.0,
        "Seconds of per-second figures the dashboard's charts keep (in memory).",
    )
    web_max_streams: int = setting(
        "web",
        "max_streams",
        Integer(1, 10_000),
        32,
        "Live dashboard streams (open pages) at once; one more is refused (503).",
    )
    web_max_connections: int = setting(
        "web",
        "max_connections",
        Integer(1, 100_000),
        64,
        "Connections to the dashboard at once; one more is answered 503 and closed.",
    )
    cluster_peers: str = setting(
        "cluster",
        "peers",
        Addresses(),
        "",
        "The other daemons of a cluster, polled for the dashboard's and /metrics' cluster view.",
        flag="cluster-peers",
        unset="none",
    )
    cluster_interval: float = setting(
        "cluster",
        "interval",
        Seconds(3600, 0.1),
        5.0,
        "Seconds between two polls of every peer's status.",
    )
    cluster_timeout: float = setting(
        "cluster",
        "timeout",
        Seconds(60, 0.1),
        2.0,
        "Seconds a peer has to answer a poll; past it, it shows as down.",
    )
    cluster_max_status: int = setting(
        "cluster",
        "max_status",
        Integer(64 << 10, 64 << 20, size=True),
        4 << 20,
        "The longest status document taken from a peer; a longer one shows it as down.",
    )
    journal: str = setting(
        "journal",
        "path",
        Text(),
        "",
        "Keep accepted tasks in this write-ahead journal file.",
        metavar="FILE",
        unset="none",
    )
    fsync: FsyncPolicy = setting(  # noqa: RUF009 (returns a field)
        "journal",
        "fsync",
        Choice(FsyncPolicy),
        FsyncPolicy.EVERYSEC,
        "When journal records reach the disk.",
    )
    compact_factor: float = setting(
        "journal",
        "compact_factor",
        Number(1.5, 1000),
        DEFAULT_COMPACT_FACTOR,
        "Compact the journal when it is this many times what a compaction keeps...",
    )
    compact_min_size: int = setting(
        "journal",
        "compact_min_size",
        Integer(size=True),
        DEFAULT_COMPACT_MIN_SIZE,
        "...and at least this big.",
    )
    log_summary_interval: float = setting(
        "log",
        "summary_interval",
        Seconds(),
        5.0,
        "Log failed, requeued and given-up tasks, and limits hit again, in a summary this often"
        " (0: each).",
    )
    log_format: LogFormat = setting(  # noqa: RUF009 (returns a field)
        "log",
        "format",
        Choice(LogFormat),
        LogFormat.TEXT,
        "Log lines on stdout as text, or as one JSON object per line.",
    )
    queue_sections: Mapping[str, Mapping[str, Any]] = field(factory=dict)
    schedule_sections: Mapping[str, ScheduleSpec] = field(factory=dict)
    source: str = "built-in default"

    @property
    def limits(self) -> Limits:
        return Limits(
            self.max_connections,
            self.first_frame_timeout,
            self.max_type_length,
            self.max_reason_length,
            self.max_output_buffer,
            self.max_credits,
            self.monitor_slice,
        )

    @property
    def queue_limits(self) -> QueueLimits:
        """The queues' limits; a C{[queue NAME]} key left out takes the C{[queues]} default."""
        defaults = QueuePolicy(
            max_depth=self.default_max_depth,
            priority=self.default_priority,
            retries=self.default_retries,
            backoff=self.default_backoff,
        )
        return QueueLimits(
            self.protocol_versions,
            self.default_queue,
            self.max_queues,
            self.max_key_length,
            self.dedup_window,
            self.max_dedup_keys,
            self.max_fairness_keys,
            self.max_delay,
            self.max_delayed,
            self.max_lease,
            self.count_lost,
            self.dead_max_count,
            self.dead_max_age,
            {name: attrs.evolve(defaults, **keys) for name, keys in self.queue_sections.items()},
            defaults,
            ResultLimits(
                self.result_max_size,
                self.result_ttl,
                self.result_max_ttl,
                self.result_max_count,
                self.result_max_memory,
                self.max_waiters,
                self.max_waiters_per_connection,
                self.max_wait,
            ),
            GroupLimits(self.max_groups, self.group_ttl, self.group_idle_close),
            DispatchSettings(self.dispatch, self.failing_streak, self.failing_window),
        )

    @property
    def progress(self) -> ProgressSettings:
        return ProgressSettings(self.progress_interval, self.max_progress_message)

    @property
    def shared(self) -> SharedLimits:
        return SharedLimits(self.shared_max_size, self.shared_max_names, self.shared_max_memory)

    @property
    def peers(self) -> tuple[str, ...]:
        """C{[cluster] peers}, one address each (none: the cluster view is off)."""
        return split_addresses(self.cluster_peers) if self.cluster_peers else ()

    @property
    def subscribers(self) -> SubscriberLimits:
        return SubscriberLimits(self.events_max_subscribers, self.events_max_held)

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(
            self.tls_certificate,
            self.tls_private_key,
            self.tls_client_ca,
            Authorization(self.tls_producers, self.tls_workers, self.tls_monitors, self.tls_admins),
        )

    @property
    def authorization(self) -> Authorization | None:
        """Who may take each role, when any list is set."""
        lists = (self.tls_producers, self.tls_workers, self.tls_monitors, self.tls_admins)
        return self.tls.authorization if any(x is not None for x in lists) else None

    @property
    def endpoints(self) -> tuple[str, ...]:
        return self.listen or (f"tcp:{self.port}:interface=127.0.0.1",)

    @property
    def control_path(self) -> str | None:
        """The control socket's path, or C{None} when it is turned off."""
        if self.control.lower() == "none":
            return None
        return self.control or default_runtime_path(self.port, "sock")

    @property
    def pid_path(self) -> str:
        return self.pid_file or default_runtime_path(self.port, "pid")


def _table() -> tuple[Setting, ...]:
    found = []
    for attribute in attrs.fields(Config):
        spec = attribute.metadata.get(_SETTING)
        if isinstance(spec, Setting):
            found.append(
                attrs.evolve(
                    spec,
                    name=attribute.name,
                    default=attribute.default,
                    flag=spec.flag or attribute.name.replace("_", "-"),
                    metavar=spec.metavar or spec.kind.metavar(),
                )
            )
    return tuple(found)


SETTINGS = _table()
"""Every setting, in the order of the docs' tables."""

SECTIONS = tuple(dict.fromkeys(s.section for s in SETTINGS))
BY_NAME = {s.name: s for s in SETTINGS}
_BY_KEY = {(s.section, s.key): s for s in SETTINGS}


@frozen
class SectionKey:
    """
    A key of a C{[queue NAME]} or C{[schedule NAME]} section: a field of
    C{record} (L{QueuePolicy}, L{ScheduleSpec}).

    @ivar attribute: the field's name, when it is not C{key}.
    @ivar unset: what the default is, in the docs, when it is no value.
    """

    record: type
    key: str
    kind: Kind[Any]
    help: str
    unset: str = ""
    attribute: str = ""

    @property
    def field(self) -> str:
        return self.attribute or self.key

    @property
    def default(self) -> object:
        """The field's default (L{attrs.NOTHING} when it has none)."""
        return attrs.fields_dict(self.record)[self.field].default

    @property
    def shown_default(self) -> str:
        return self.unset or f"`{self.kind.format(self.default)}`"


QUEUE_KEYS = (
    SectionKey(QueuePolicy, "max_depth", Integer(0),
               "Queued tasks it may hold (0: only the pool bounds it).", "`[queues] max_depth`"),
    SectionKey(QueuePolicy, "priority", Integer(0, 255), "The priority of a task that names none.",
               "`[queues] priority`"),
    SectionKey(QueuePolicy, "timeout", Seconds(),
               "Seconds a worker may hold one of its tasks (0: never).", "`[tasks] timeout`"),
    SectionKey(QueuePolicy, "key_concurrency", Integer(0),
               "Tasks of one fairness key running at once (0: any)."),
    SectionKey(QueuePolicy, "rate", Number(0, 1e6),
               "Tasks per second the queue may start (0: no limit)."),
    SectionKey(QueuePolicy, "burst", Integer(0),
               "Tokens of the rate's bucket (0: one second's worth)."),
    SectionKey(QueuePolicy, "key_rate", Number(0, 1e6),
               "Tasks per second one fairness key may start (0: any)."),
    SectionKey(QueuePolicy, "key_burst", Integer(0),
               "Tokens of the key rate's bucket (0: one second's worth)."),
    SectionKey(QueuePolicy, "retries", Integer(0, 65535),
               "How many times a failed task is retried.", "`[retries] retries`"),
    SectionKey(QueuePolicy, "backoff", BackoffText(),
               "The wait before each retry (with its jitter).", "`[retries] backoff`"),
    SectionKey(QueuePolicy, "keep_results", YesNo(),
               "Keep every task's outcome and result, as if its SUBMIT asked."),
    SectionKey(QueuePolicy, "result_ttl", Seconds(low=1),
               "Seconds the queue keeps an outcome.", "`[results] ttl`"),
)  # fmt: skip
"""The keys of a C{[queue NAME]} section, in the docs' order."""

SCHEDULE_KEYS = (
    SectionKey(ScheduleSpec, "cron", CronExpression(),
               "Fire on this cron expression, in timezone (or give every).", "none"),
    SectionKey(ScheduleSpec, "every", Seconds(low=1),
               "Fire every this many seconds (or give cron).", "none"),
    SectionKey(ScheduleSpec, "timezone", TimeZone(), "The time zone cron is read in."),
    SectionKey(ScheduleSpec, "type", TaskType(), "The task type to submit (required).",
               "none (required)", "task_type"),
    SectionKey(ScheduleSpec, "payload", Payload(), "The task's payload, as UTF-8 text.", "empty"),
    SectionKey(ScheduleSpec, "queue", QueueName(), "The queue to submit into.",
               "`[protocol] default_queue`"),
    SectionKey(ScheduleSpec, "priority", Integer(0, 255), "The task's priority.",
               "the queue's `priority`"),
    SectionKey(ScheduleSpec, "missed", Choice(Missed),
               "Firings missed while the daemon was down: fire none, the latest, or each."),
    SectionKey(ScheduleSpec, "catch_up", Integer(0, MAX_CATCH_UP),
               "With missed = all, the most missed firings fired (the latest)."),
)  # fmt: skip
"""The keys of a C{[schedule NAME]} section, in the docs' order."""

QUEUE_SECTION = "queue"
SCHEDULE_SECTION = "schedule"
_SECTION_KEYS = {
    QUEUE_SECTION: {k.key: k for k in QUEUE_KEYS},
    SCHEDULE_SECTION: {k.key: k for k in SCHEDULE_KEYS},
}
_SECTION_NAMES: dict[str, Callable[[str], object]] = {
    QUEUE_SECTION: check_queue,
    SCHEDULE_SECTION: schedules.check_name,
}


def default_runtime_path(port: int, suffix: str) -> str:
    """C{$XDG_RUNTIME_DIR/quicx-PORT.SUFFIX}, or under the temporary directory."""
    directory = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(directory, f"quicx-{port}.{suffix}")


# -- checks across settings ----------------------------------------------------------------


class Conflict(ValueError):
    """
    Settings that cannot go together.

    @ivar names: the settings to blame, the likeliest first.
    @ivar index: which of a repeatable setting's values, when one is.
    """

    def __init__(self, message: str, *names: str, index: int | None = None) -> None:
        super().__init__(message)
        self.names = names
        self.index = index


def validate(config: Config) -> None:
    """
    Check a configuration as a whole, building (and releasing) its pool so
    that a layout that does not fit is refused before the daemon starts.

    @raise Conflict: it is unusable.
    """
    if config.heartbeat_interval and config.heartbeat_timeout <= config.heartbeat_interval:
        raise Conflict(
            f"heartbeat_timeout ({config.heartbeat_timeout:g} s) must be longer than"
            f" heartbeat_interval ({config.heartbeat_interval:g} s)",
            "heartbeat_timeout",
            "heartbeat_interval",
        )
    if config.authorization is not None and not config.tls_client_ca:
        role = next(
            s
            for s in (
                BY_NAME[n] for n in ("tls_producers", "tls_workers", "tls_monitors", "tls_admins")
            )
            if getattr(config, s.name) is not None
        )
        raise Conflict(
            f"{role.key} needs client_ca: identities come from client certificates", role.name
        )
    if (
        config.web_listen
        and not (config.web_admin_token or config.web_monitor_token)
        and not (config.web_listen.startswith("tls:") and config.tls_client_ca)
    ):
        raise Conflict(
            "[web] listen needs admin_token or monitor_token (or a tls: listener and"
            " [tls] client_ca): without one no request would get in",
            "web_listen",
        )
    queues = {*config.queue_sections, config.default_queue}
    if len(queues) > config.max_queues:
        raise Conflict(
            f"{len(queues)} queues exist from the start (the [queue NAME] sections and the"
            f" default queue), more than max_queues = {config.max_queues}",
            "max_queues",
        )
    if len(config.schedule_sections) > config.max_schedules:
        raise Conflict(
            f"{len(config.schedule_sections)} [schedule NAME] sections, more than"
            f" max_schedules = {config.max_schedules}",
            "max_schedules",
        )
    try:
        pmad.Pmad(config.pool_size, list(config.classes)).close()
    except pmad.LayoutError as e:
        raise Conflict(str(e), "classes", "pool_size", index=e.index) from None


# -- the file ------------------------------------------------------------------------------


def parse(text: str, source: str = "<string>") -> Config:
    """
    Parse the text of a C{quicx.conf}.

    @raise ConfigError: with C{source:line:} and the reason.
    """
    lines: dict[Setting, list[tuple[int, object]]] = {}
    named: dict[str, dict[str, _Named]] = {kind: {} for kind in _SECTION_KEYS}
    section: str | None = None
    current: _Named | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError(f"{where}: malformed section header {line!r}")
            section = line[1:-1].strip()
            head, _, name = section.partition(" ")
            current = None
            if head.lower() in named:
                current = _named_section(head.lower(), name.strip(), number, where, named)
                section = current.title
                continue
            section = section.lower()
            if section not in SECTIONS:
                raise ConfigError(f"{where}: unknown section [{section}]")
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if not equals:
            raise ConfigError(f"{where}: expected 'key = value', got {line!r}")
        if section is None:
            raise ConfigError(f"{where}: '{key}' appears before any [section]")
        if current is not None:
            current.read(key, value.strip(), number, where)
            continue
        spec = _BY_KEY.get((section, key))
        if spec is None:
            raise ConfigError(f"{where}: unknown key '{key}' in [{section}]")
        previous = lines.setdefault(spec, [])
        if previous and not spec.repeatable:
            raise ConfigError(f"{where}: '{key}' is set again (first set on line {previous[0][0]})")
        try:
            previous.append((number, spec.kind.parse(value.strip())))
        except ValueError as e:
            raise ConfigError(f"{where}: {key}: {e}") from None
    values = {spec: [value for _, value in found] for spec, found in lines.items()}
    config = _evolve(
        Config(
            queue_sections={name: q.values for name, q in named[QUEUE_SECTION].items()},
            schedule_sections={
                name: _schedule(s, source) for name, s in named[SCHEDULE_SECTION].items()
            },
            source=source,
        ),
        values,
    )
    try:
        validate(config)
    except Conflict as e:
        raise ConfigError(f"{_blame(e, lines, source)}: {e}") from None
    return config


@define
class _Named:
    """
    A C{[queue NAME]} or C{[schedule NAME]} section as read.

    @ivar kind: C{queue} or C{schedule}.
    @ivar line: its header's line.
    @ivar values: each key's value, by key.
    @ivar lines: each key's line, by key.
    """

    kind: str
    name: str
    line: int
    values: dict[str, Any] = Factory(dict)
    lines: dict[str, int] = Factory(dict)

    @property
    def title(self) -> str:
        return f"{self.kind} {self.name}"

    def read(self, key: str, value: str, number: int, where: str) -> None:
        """One C{key = value} line. @raise ConfigError: an unknown or repeated key, a bad value."""
        keys = _SECTION_KEYS[self.kind]
        spec = keys.get(key)
        if spec is None:
            known = ", ".join(keys)
            raise ConfigError(f"{where}: unknown key '{key}' in [{self.title}] (known: {known})")
        if key in self.values:
            raise ConfigError(
                f"{where}: '{key}' is set again in [{self.title}] (first on line {self.lines[key]})"
            )
        try:
            self.values[key] = spec.kind.parse(value)
        except ValueError as e:
            raise ConfigError(f"{where}: [{self.title}] {key}: {e}") from None
        self.lines[key] = number


def _named_section(
    kind: str, name: str, number: int, where: str, named: Mapping[str, dict[str, _Named]]
) -> _Named:
    """Start a C{[KIND NAME]} section. @raise ConfigError: a bad or repeated name."""
    if not name:
        raise ConfigError(f"{where}: [{kind}] needs the {kind}'s name: [{kind} NAME]")
    try:
        _SECTION_NAMES[kind](name)
    except ValueError as e:
        raise ConfigError(f"{where}: [{kind} {name}]: {e}") from None
    declared = named[kind]
    if name in declared:
        raise ConfigError(
            f"{where}: [{kind} {name}] is declared again (first on line {declared[name].line})"
        )
    declared[name] = _Named(kind, name, number)
    return declared[name]


def _schedule(section: _Named, source: str) -> ScheduleSpec:
    """The schedule a C{[schedule NAME]} section declares. @raise ConfigError: it is incomplete."""
    found = section.lines
    if "cron" in found and "every" in found:
        later = max(("cron", "every"), key=found.__getitem__)
        raise ConfigError(
            f"{source}:{found[later]}: [{section.title}] {later}: a schedule has cron or every,"
            " not both"
        )
    if "cron" not in found and "every" not in found:
        raise ConfigError(f"{source}:{section.line}: [{section.title}] needs cron or every")
    if "type" not in found:
        raise ConfigError(f"{source}:{section.line}: [{section.title}] needs a type")
    keys = _SECTION_KEYS[SCHEDULE_SECTION]
    return ScheduleSpec(
        name=section.name,
        source="config",
        **{keys[key].field: value for key, value in section.values.items()},
    )


def _evolve(config: Config, values: Mapping[Setting, list[object]]) -> Config:
    """C{config} with each setting's values in it."""
    changes: dict[str, Any] = {spec.name: spec.combine(found) for spec, found in values.items()}
    return attrs.evolve(config, **changes)


def _blame(
    conflict: Conflict, lines: Mapping[Setting, list[tuple[int, object]]], source: str
) -> str:
    """C{source:LINE} of the first blamed setting the file sets; C{source} if none."""
    for name in conflict.names:
        found = lines.get(BY_NAME[name])
        if found:
            index = min(conflict.index or 0, len(found) - 1) if BY_NAME[name].repeatable else 0
            return f"{source}:{found[index][0]}"
    return source


def load(path: str | Path) -> Config:
    """
    Read and parse C{path}.

    @raise ConfigError: the file cannot be read or is invalid.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read configuration: {e}") from None
    return parse(text, str(path))


# -- flags ---------------------------------------------------------------------------------


def with_flags(config: Config, given: Iterable[tuple[Setting, str]]) -> Config:
    """
    C{config} with the settings given as C{--FLAG TEXT} on a command line:
    a repeatable flag's values replace the file's, and for any other the
    last one given wins.

    @raise ConfigError: C{--FLAG: why} for a value that is not one, and
        C{command line: why (--FLAG)} for settings that conflict.
    """
    values: dict[Setting, list[object]] = {}
    for spec, text in given:
        try:
            values.setdefault(spec, []).append(spec.kind.parse(text))
        except ValueError as e:
            raise ConfigError(f"--{spec.flag}: {e}") from None
    if not values:
        return config
    result = _evolve(config, values)
    try:
        validate(result)
    except Conflict as e:
        flags = [f"--{BY_NAME[name].flag}" for name in e.names if BY_NAME[name] in values]
        blamed = f" ({', '.join(flags)})" if flags else ""
        raise ConfigError(f"command line: {e}{blamed}") from None
    return result


# -- writing a file ------------------------------------------------------------------------


def render(config: Config, notes: Iterable[str] = ()) -> str:
    """
    The text of a C{quicx.conf} equivalent to C{config}, every setting with
    its help; one that is unset is there commented out (C{quicx init}).
    C{notes}, lines of text, come first as comments (a profile's).
    """
    lines = [
        "# quicx.conf -- every setting, with its help (see docs/configuration.md).",
        "# A commented-out key is unset: the daemon uses the default named there.",
        *(f"# {note}".rstrip() for note in notes),
    ]
    for section in SECTIONS:
        lines += ["", f"[{section}]"]
        for spec in SETTINGS:
            if spec.section != section:
                continue
            lines.append(f"# {spec.flag_help()}")
            texts = spec.texts(getattr(config, spec.name))
            if texts:
                lines += [f"{spec.key} = {text}" for text in texts]
            else:
                lines.append(f"# {spec.key} =   (default: {spec.unset.replace('`', '')})")
    queue_keys = _SECTION_KEYS[QUEUE_SECTION]
    for name, keys in config.queue_sections.items():
        lines += ["", f"[queue {name}]"]
        lines += [f"{key} = {queue_keys[key].kind.format(value)}" for key, value in keys.items()]
    for name, schedule in config.schedule_sections.items():
        lines += ["", f"[schedule {name}]"]
        lines += [
            f"{k.key} = {k.kind.format(value)}"
            for k in SCHEDULE_KEYS
            if (value := getattr(schedule, k.field)) != k.default
        ]
    lines += [
        "",
        "# One section per declared queue; every key is optional (see docs/configuration.md):",
        "# [queue NAME]",
        *(f"# {k.key} =   ({k.help})" for k in QUEUE_KEYS),
        "",
        "# One section per schedule; it needs cron or every, and type (see docs/configuration.md):",
        "# [schedule NAME]",
        *(f"# {k.key} =   ({k.help})" for k in SCHEDULE_KEYS),
    ]
    return "\n".join(lines) + "\n"
