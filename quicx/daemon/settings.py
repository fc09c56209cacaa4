"""
Configuration: C{quicx.conf} and the built-in default.

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
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import attrs
from attrs import field, frozen

from quicx.daemon import pmad
from quicx.daemon.journal.records import (
    DEFAULT_COMPACT_FACTOR,
    DEFAULT_COMPACT_MIN_SIZE,
    FsyncPolicy,
)
from quicx.net.certificates import Authorization, identities
from quicx.net.tls import TlsSettings
from quicx.protocol.wire import MAX_CREDITS, MAX_TYPE_LENGTH

DEFAULT_PORT = 16381
DEFAULT_HEARTBEAT_INTERVAL = 30.0
DEFAULT_HEARTBEAT_TIMEOUT = 90.0


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
    """

    max_connections: int = 4096
    first_frame_timeout: float = 10.0
    max_type_length: int = MAX_TYPE_LENGTH
    max_reason_length: int = 1024
    max_output_buffer: int = 1 << 20
    max_credits: int = 1024


_DEFAULT_LIMITS = Limits()


class ConfigError(Exception):
    """
    The configuration cannot be used; the message names where and why.
    """


@frozen
class Config:
    """
    Everything the daemon is configured with.

    @ivar listen: endpoint descriptions to listen on; when empty, the daemon
        listens on C{tcp:PORT:interface=127.0.0.1}.
    @ivar allowed_types: the task types a SUBMIT may name, or C{None} for any.
    @ivar control: the control socket's path (C{quicx status}); C{""} for
        the default, C{"none"} for no control socket.
    @ivar pid_file: where C{quicx start} records its pid; C{""} for the default.
    @ivar journal: the write-ahead journal's path; C{""} for no journal.
    @ivar fsync: when journal records are synced to disk.
    @ivar compact_factor: the journal is compacted when it is this many times
        the size of its live tasks' records...
    @ivar compact_min_size: ...and at least this many bytes.
    @ivar source: where the configuration came from, for the start-up log.
    """

    port: int = DEFAULT_PORT
    listen: tuple[str, ...] = ()
    pool_size: int = pmad.DEFAULT_POOL_SIZE
    classes: tuple[pmad.SizeClass, ...] = field(factory=lambda: tuple(pmad.default_classes()))
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    heartbeat_timeout: float = DEFAULT_HEARTBEAT_TIMEOUT
    allowed_types: frozenset[bytes] | None = None
    control: str = ""
    pid_file: str = ""
    journal: str = ""
    fsync: FsyncPolicy = FsyncPolicy.EVERYSEC
    compact_factor: float = DEFAULT_COMPACT_FACTOR
    compact_min_size: int = DEFAULT_COMPACT_MIN_SIZE
    max_connections: int = _DEFAULT_LIMITS.max_connections
    first_frame_timeout: float = _DEFAULT_LIMITS.first_frame_timeout
    max_type_length: int = _DEFAULT_LIMITS.max_type_length
    max_reason_length: int = _DEFAULT_LIMITS.max_reason_length
    max_output_buffer: int = _DEFAULT_LIMITS.max_output_buffer
    max_credits: int = _DEFAULT_LIMITS.max_credits
    task_timeout: float = 0.0
    max_attempts: int = 0
    events_directory: str = ""
    events_max_bytes: int = 64 << 20
    events_max_age: float = 3600.0
    drain_timeout: float = 30.0
    spare_busy_workers: bool = False
    busy_poll: float = 0.0
    log_summary_interval: float = 5.0
    tls_certificate: str = ""
    tls_private_key: str = ""
    tls_client_ca: str = ""
    tls_producers: frozenset[str] | None = None
    tls_workers: frozenset[str] | None = None
    tls_monitors: frozenset[str] | None = None
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
        )

    @property
    def tls(self) -> TlsSettings:
        return TlsSettings(
            self.tls_certificate,
            self.tls_private_key,
            self.tls_client_ca,
            Authorization(self.tls_producers, self.tls_workers, self.tls_monitors),
        )

    @property
    def authorization(self) -> Authorization | None:
        """Who may take each role, when any list is set."""
        lists = (self.tls_producers, self.tls_workers, self.tls_monitors)
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


def default_runtime_path(port: int, suffix: str) -> str:
    """C{$XDG_RUNTIME_DIR/quicx-PORT.SUFFIX}, or under the temporary directory."""
    directory = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return os.path.join(directory, f"quicx-{port}.{suffix}")


_SIZE = re.compile(r"(?i)^\s*(\d+)\s*(k|kb|kib|m|mb|mib|g|gb|gib)?\s*$")
_MULTIPLIERS = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text: str) -> int:
    """Parse C{8388608}, C{8M}, C{8MiB} (binary multiples) into bytes."""
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size in bytes (like 8388608 or 8MiB)")
    number, unit = match.groups()
    return int(number) * (_MULTIPLIERS[unit[0].lower()] if unit else 1)


def format_size(count: float) -> str:
    """C{8388608} -> C{'8.0 MiB'}: the human reading of a byte count."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def parse_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < 1e9:
        raise ValueError(f"{text} seconds is out of range")
    return value


MAX_BUSY_POLL = 0.01


def parse_busy_poll(text: str) -> float:
    """Seconds to spin before sleeping (see L{quicx.net.busypoll}): 0 to 10 ms."""
    value = parse_seconds(text)
    if value > MAX_BUSY_POLL:
        raise ValueError(f"{text} seconds is out of range (0 to {MAX_BUSY_POLL:g})")
    return value


def parse_fsync(text: str) -> FsyncPolicy:
    try:
        return FsyncPolicy(text.strip().lower())
    except ValueError:
        raise ValueError(f"{text!r} is not one of always, everysec, no") from None


def _parse_compact_factor(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not 1.5 <= value <= 1000:
        raise ValueError(f"{text} is out of range (1.5 to 1000)")
    return value


def _parse_bool(text: str) -> bool:
    value = text.strip().lower()
    if value in ("yes", "true", "on", "1"):
        return True
    if value in ("no", "false", "off", "0"):
        return False
    raise ValueError(f"{text!r} is not yes or no")


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = parse_size(text)
        if not low <= value <= high:
            raise ValueError(f"{text} is out of range ({low} to {high})")
        return value

    return parse


def _parse_port(text: str) -> int:
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise ValueError(f"{text!r} is not a port number (0 to 65535)")
    return int(text)


def _parse_class(text: str) -> pmad.SizeClass:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) != 2:
        raise ValueError(f"{text!r} is not SIZE,PERCENT")
    try:
        size = parse_size(parts[0])
        percent = Decimal(parts[1].rstrip("%"))
    except (ValueError, InvalidOperation):
        raise ValueError(f"{text!r} is not SIZE,PERCENT") from None
    return pmad.SizeClass(size, percent)


def _parse_task_type(text: str) -> bytes:
    encoded = text.encode("utf-8")
    if not 0 < len(encoded) <= MAX_TYPE_LENGTH:
        raise ValueError(f"a task type is 1 to {MAX_TYPE_LENGTH} bytes")
    return encoded


@frozen
class _Key:
    """
    One key of the file: the L{Config} field it sets and how.

    @ivar collect: for a repeatable key, turns the list of its values into
        the field's value; C{None} for a key that may appear once.
    """

    field: str
    parse: Callable[[str], object]
    collect: Callable[[list[Any]], object] | None = None


_KEYS: dict[tuple[str, str], _Key] = {
    ("server", "port"): _Key("port", _parse_port),
    ("server", "listen"): _Key("listen", str.strip, tuple),
    ("server", "heartbeat_interval"): _Key("heartbeat_interval", parse_seconds),
    ("server", "heartbeat_timeout"): _Key("heartbeat_timeout", parse_seconds),
    ("server", "control"): _Key("control", str.strip),
    ("server", "pid_file"): _Key("pid_file", str.strip),
    ("allocator", "pool_size"): _Key("pool_size", parse_size),
    ("allocator", "class"): _Key("classes", _parse_class, tuple),
    ("tasks", "allow"): _Key("allowed_types", _parse_task_type, frozenset),
    ("server", "drain_timeout"): _Key("drain_timeout", parse_seconds),
    ("server", "spare_busy_workers"): _Key("spare_busy_workers", _parse_bool),
    ("server", "busy_poll"): _Key("busy_poll", parse_busy_poll),
    ("tasks", "timeout"): _Key("task_timeout", parse_seconds),
    ("tasks", "max_attempts"): _Key("max_attempts", _bounded_int(0, 1_000_000)),
    ("limits", "max_connections"): _Key("max_connections", _bounded_int(1, 1_000_000)),
    ("limits", "first_frame_timeout"): _Key("first_frame_timeout", parse_seconds),
    ("limits", "max_type_length"): _Key("max_type_length", _bounded_int(1, MAX_TYPE_LENGTH)),
    ("limits", "max_reason_length"): _Key("max_reason_length", _bounded_int(1, 1 << 20)),
    ("limits", "max_output_buffer"): _Key("max_output_buffer", _bounded_int(4096, 1 << 30)),
    ("limits", "max_credits"): _Key("max_credits", _bounded_int(1, MAX_CREDITS)),
    ("tls", "certificate"): _Key("tls_certificate", str.strip),
    ("tls", "private_key"): _Key("tls_private_key", str.strip),
    ("tls", "client_ca"): _Key("tls_client_ca", str.strip),
    ("tls", "producers"): _Key("tls_producers", identities),
    ("tls", "workers"): _Key("tls_workers", identities),
    ("tls", "monitors"): _Key("tls_monitors", identities),
    ("events", "directory"): _Key("events_directory", str.strip),
    ("events", "max_bytes"): _Key("events_max_bytes", _bounded_int(4096, 1 << 40)),
    ("events", "max_age"): _Key("events_max_age", parse_seconds),
    ("journal", "path"): _Key("journal", str.strip),
    ("journal", "fsync"): _Key("fsync", parse_fsync),
    ("journal", "compact_factor"): _Key("compact_factor", _parse_compact_factor),
    ("journal", "compact_min_size"): _Key("compact_min_size", parse_size),
    ("log", "summary_interval"): _Key("log_summary_interval", parse_seconds),
}


@frozen
class _Entry:
    value: object
    line: int


def parse(text: str, source: str = "<string>") -> Config:
    """
    Parse the text of a C{quicx.conf}.

    @raise ConfigError: with C{source:line:} and the reason.
    """
    entries: dict[tuple[str, str], list[_Entry]] = {}
    section: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ConfigError(f"{where}: malformed section header {line!r}")
            section = line[1:-1].strip().lower()
            if section not in {s for s, _ in _KEYS}:
                raise ConfigError(f"{where}: unknown section [{section}]")
            continue
        key, equals, value = line.partition("=")
        key = key.strip().lower()
        if not equals:
            raise ConfigError(f"{where}: expected 'key = value', got {line!r}")
        if section is None:
            raise ConfigError(f"{where}: '{key}' appears before any [section]")
        if (section, key) not in _KEYS:
            raise ConfigError(f"{where}: unknown key '{key}' in [{section}]")
        spec = _KEYS[section, key]
        previous = entries.setdefault((section, key), [])
        if previous and spec.collect is None:
            raise ConfigError(
                f"{where}: '{key}' is set again (first set on line {previous[0].line})"
            )
        try:
            previous.append(_Entry(spec.parse(value.strip()), number))
        except ValueError as e:
            raise ConfigError(f"{where}: {key}: {e}") from None
    return _build(entries, source)


def _build(entries: dict[tuple[str, str], list[_Entry]], source: str) -> Config:
    overrides: dict[str, Any] = {}
    for where, found in entries.items():
        spec = _KEYS[where]
        values = [entry.value for entry in found]
        overrides[spec.field] = spec.collect(values) if spec.collect else values[0]
    config = attrs.evolve(Config(source=source), **overrides)
    class_entries = entries.get(("allocator", "class"), [])

    def line_of(section: str, key: str, index: int = 0) -> str:
        found = entries.get((section, key))
        return f"{source}:{found[index].line}" if found else source

    try:
        validate(config)
    except pmad.LayoutError as e:
        if e.index is not None and class_entries:
            where = line_of("allocator", "class", min(e.index, len(class_entries) - 1))
        elif class_entries:
            where = line_of("allocator", "class")
        else:
            where = line_of("allocator", "pool_size")
        raise ConfigError(f"{where}: {e}") from None
    except _HeartbeatError as e:
        raise ConfigError(f"{line_of('server', 'heartbeat_timeout')}: {e}") from None
    except _TlsError as e:
        raise ConfigError(f"{line_of('tls', e.key)}: {e}") from None
    return config


class _HeartbeatError(ValueError):
    pass


class _TlsError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def validate(config: Config) -> None:
    """
    Check a configuration as a whole, building (and releasing) its pool so
    that a layout that does not fit is refused before the daemon starts.

    @raise pmad.LayoutError: the allocator layout is unusable.
    @raise ValueError: the heartbeat settings contradict each other.
    """
    if config.heartbeat_interval and config.heartbeat_timeout <= config.heartbeat_interval:
        raise _HeartbeatError(
            f"heartbeat_timeout ({config.heartbeat_timeout:g} s) must be longer than"
            f" heartbeat_interval ({config.heartbeat_interval:g} s)"
        )
    if config.authorization is not None and not config.tls_client_ca:
        key = next(
            k
            for k, v in (
                ("producers", config.tls_producers),
                ("workers", config.tls_workers),
                ("monitors", config.tls_monitors),
            )
            if v is not None
        )
        raise _TlsError(key, f"{key} needs client_ca: identities come from client certificates")
    pmad.Pmad(config.pool_size, list(config.classes)).close()


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


def render(config: Config) -> str:
    """The text of a C{quicx.conf} equivalent to C{config} (C{quicx init})."""
    lines = [
        "# quicx.conf -- see docs/configuration.md",
        "",
        "[server]",
        f"port = {config.port}",
        *(f"listen = {endpoint}" for endpoint in config.listen),
        f"heartbeat_interval = {config.heartbeat_interval:g}",
        f"heartbeat_timeout = {config.heartbeat_timeout:g}",
        *([f"control = {config.control}"] if config.control else []),
        *([f"pid_file = {config.pid_file}"] if config.pid_file else []),
        f"drain_timeout = {config.drain_timeout:g}",
        f"spare_busy_workers = {'yes' if config.spare_busy_workers else 'no'}",
        f"busy_poll = {config.busy_poll:g}",
        "",
        "[allocator]",
        f"pool_size = {config.pool_size}",
        *(f"class = {c.size},{c.percent}" for c in config.classes),
    ]
    lines += [
        "",
        "[tasks]",
        f"timeout = {config.task_timeout:g}",
        f"max_attempts = {config.max_attempts}",
    ]
    if config.allowed_types is not None:
        lines += [f"allow = {t.decode()}" for t in sorted(config.allowed_types)]
    lines += [
        "",
        "[limits]",
        f"max_connections = {config.max_connections}",
        f"first_frame_timeout = {config.first_frame_timeout:g}",
        f"max_type_length = {config.max_type_length}",
        f"max_reason_length = {config.max_reason_length}",
        f"max_output_buffer = {config.max_output_buffer}",
        f"max_credits = {config.max_credits}",
    ]
    tls_lines = [
        *([f"certificate = {config.tls_certificate}"] if config.tls_certificate else []),
        *([f"private_key = {config.tls_private_key}"] if config.tls_private_key else []),
        *([f"client_ca = {config.tls_client_ca}"] if config.tls_client_ca else []),
        *(
            f"{key} = {', '.join(sorted(names))}"
            for key, names in (
                ("producers", config.tls_producers),
                ("workers", config.tls_workers),
                ("monitors", config.tls_monitors),
            )
            if names is not None
        ),
    ]
    if tls_lines:
        lines += ["", "[tls]", *tls_lines]
    if config.events_directory:
        lines += [
            "",
            "[events]",
            f"directory = {config.events_directory}",
            f"max_bytes = {config.events_max_bytes}",
            f"max_age = {config.events_max_age:g}",
        ]
    if config.journal:
        lines += [
            "",
            "[journal]",
            f"path = {config.journal}",
            f"fsync = {config.fsync.value}",
            f"compact_factor = {config.compact_factor:g}",
            f"compact_min_size = {config.compact_min_size}",
        ]
    lines += ["", "[log]", f"summary_interval = {config.log_summary_interval:g}"]
    return "\n".join(lines) + "\n"
