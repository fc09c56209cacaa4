"""
What every command shares: addresses, calling a daemon, output, exit statuses.

What every command shares: the daemon's configuration and address from the
command line, calling a daemon, the output helpers (tables, ages, times,
reasons made printable), and the mapping of mistakes to one stderr line and
an exit status.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from quicx.clients.address import ADDRESS_VARIABLE, default_address, parse_address, split_addresses
from quicx.clients.blocking import QuicxClient
from quicx.clients.cluster import TaskRef
from quicx.daemon import config as configuration
from quicx.daemon.fleet.instances import MAX_PROCESSES, indexed, instance_config
from quicx.protocol.errors import NotFinished, QuicxError
from quicx.status.text import human_duration, printable

CONFIG_VARIABLE = "QUICX_CONFIG"

T = TypeVar("T")


class CommandError(Exception):
    """A user-facing failure: printed as one line (two at most), exit C{status}."""

    def __init__(self, message: str, status: int = 1) -> None:
        super().__init__(message)
        self.status = status


def daemon_config(args: argparse.Namespace) -> configuration.Config:
    """
    The daemon's configuration: C{--config}'s file (default C{$QUICX_CONFIG}),
    or the built-in one, with the command's setting flags applied.
    """
    given = []
    for setting in configuration.SETTINGS:
        value = getattr(args, setting.name, None)
        if value is not None:
            given += [(setting, text) for text in (value if setting.repeatable else [value])]
    try:
        base = configuration.load(args.config) if args.config else configuration.Config()
        config = configuration.with_flags(base, given)
        return config if args.instance is None else instance_config(config, args.instance)
    except configuration.ConfigError as e:
        raise CommandError(str(e)) from None


def setting_arguments(args: argparse.Namespace) -> list[str]:
    """C{--config} and the setting flags given on the command line, as given."""
    given = [f"--config={args.config}"] if args.config else []
    for setting in configuration.SETTINGS:
        value = getattr(args, setting.name, None)
        if value is not None:
            texts = value if setting.repeatable else [value]
            given += [f"--{setting.flag}={text}" for text in texts]
    return given


def control_path(args: argparse.Namespace, ways: str = "--control PATH or --config FILE") -> str:
    """
    The daemon's control socket path; a L{CommandError} that says C{ways} to
    name it when it is the default, absent, and C{$QUICX_ADDRESS} is set.
    """
    path = daemon_config(args).server.control_path
    if path is None:
        raise CommandError("the configuration turns the control socket off (control = none)")
    count = 0 if args.instance is not None or os.path.exists(path) else set_size(path)
    if count:
        raise CommandError(
            f"no daemon at {path}, but {count} of a set (quicx start --processes) at"
            f" {indexed(path, 0)} ...: give --instance I, from 0 to {count - 1}"
        )
    named = getattr(args, "control", None) or args.config
    if not named and os.environ.get(ADDRESS_VARIABLE) and not os.path.exists(path):
        raise CommandError(
            f"no daemon: control socket {path} does not exist; this command reads the"
            f" control socket, not ${ADDRESS_VARIABLE}: give {ways}"
        )
    return path


def set_size(path: str) -> int:
    """How many daemons of a set have their control socket beside C{path}: C{.0}, C{.1} ..."""
    count = 0
    while count < MAX_PROCESSES and os.path.exists(indexed(path, count)):
        count += 1
    return count


def check_address(address: str) -> None:
    """
    L{CommandError} unless C{address} is one daemon's well-formed address
    whose C{tls:} files, if any, can be read.
    """
    try:
        tls = parse_address(address)[2]
        if tls is not None:
            tls.context()
    except ValueError as e:  # TlsConfigError included
        raise CommandError(f"bad address: {e}") from None


def client_addresses(args: argparse.Namespace) -> tuple[str, ...]:
    """The daemons' addresses, one or a comma-separated list, each checked."""
    try:
        addresses = split_addresses(args.connect or default_address())
    except ValueError as e:
        raise CommandError(f"bad address list: {e}") from None
    for address in addresses:
        check_address(address)
    return addresses


def task_daemon(args: argparse.Namespace) -> tuple[int, str]:
    """
    C{args.id}'s number and the daemon that has it: the one an C{ID@ADDRESS}
    names, else C{--connect}'s, which must then be one daemon (ids are per daemon).
    """
    if isinstance(args.id, TaskRef):
        check_address(args.id.daemon)
        return args.id.id, args.id.daemon
    addresses = client_addresses(args)
    if len(addresses) > 1:
        raise CommandError(
            f"--connect (or ${ADDRESS_VARIABLE}) names {len(addresses)} daemons, and a task id"
            f" means something on one: give the task as ID@ADDRESS, as quicx submit prints it",
            status=2,
        )
    return args.id, addresses[0]


def local_task(args: argparse.Namespace) -> int:
    """C{args.id} for the control socket: a plain id, as that socket is one daemon's."""
    if isinstance(args.id, TaskRef):
        raise CommandError(
            f"quicx {args.command} goes through the control socket of the daemon --config"
            f" names: give task {args.id.id} there as a plain id, with the --config of the"
            f" daemon at {args.id.daemon} (and --instance I for daemon I of a set)",
            status=2,
        )
    task_id: int = args.id
    return task_id


def one_daemon(args: argparse.Namespace) -> str:
    """C{--connect}'s daemon, checked; a list is refused, as the command talks to one."""
    addresses = client_addresses(args)
    if len(addresses) > 1:
        raise CommandError(
            f"quicx {args.command} talks to one daemon, and --connect (or ${ADDRESS_VARIABLE})"
            f" names {len(addresses)}: give one with --connect",
            status=2,
        )
    return addresses[0]


def ask(
    args: argparse.Namespace,
    call: Callable[[QuicxClient], T],
    admin: bool = False,
    address: str | None = None,
) -> T:
    """
    Call the daemon: over the control socket (the admin role), at
    C{address}, or at --connect's.  A value the client refuses to send (its
    C{ValueError}) is a usage mistake.
    """
    if address is None:
        address = f"unix:{control_path(args)}" if admin else one_daemon(args)
    try:
        with QuicxClient(address, timeout=args.timeout) as client:
            return call(client)
    except NotFinished:
        raise  # the daemon's answer: the wait ran out
    except TimeoutError:
        raise CommandError(f"no answer from {address} within {args.timeout:g} s") from None
    except ValueError as e:
        raise CommandError(str(e), status=2) from None


def read_payload(given: str) -> bytes:
    """A payload argument: C{-} reads stdin; else its bytes as given, even those not UTF-8."""
    return sys.stdin.buffer.read() if given == "-" else os.fsencode(given)


def print_value(value: object) -> None:
    """A task's result: bytes as they are, text as it is, anything else as JSON."""
    if isinstance(value, bytes):
        sys.stdout.buffer.write(value)
        if sys.stdout.isatty() and not value.endswith(b"\n"):
            sys.stdout.buffer.write(b"\n")  # a prompt after it, on a terminal only
        sys.stdout.buffer.flush()
    elif isinstance(value, str):
        print(value)
    else:
        print(json.dumps(value, ensure_ascii=False))


def print_json(document: object) -> None:
    print(json.dumps(document, indent=2, ensure_ascii=False))


def age(seconds: float | None) -> str:
    return "-" if seconds is None else human_duration(seconds)


def table(header: Sequence[str], rows: list[list[str]], align: str) -> str:
    """Plain columns, each aligned as C{align} says: C{<} left (text), C{>} right (numbers)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            cell.ljust(width) if side == "<" else cell.rjust(width)
            for cell, width, side in zip(cells, widths, align, strict=True)
        ).rstrip()

    return "\n".join([line(header), *(line(row) for row in rows)]) + "\n"


_TRACEBACK = "\nTraceback (most recent call last):"
"""Where the traceback the Python worker sends after a failure's reason begins."""


def one_line(text: str, width: int = 60) -> str:
    """C{text} on one line, cut to C{width}; a failure's reason without its traceback."""
    reason, traced, _ = text.partition(_TRACEBACK)
    flat = printable(" ".join(reason.split())) + (" ..." if traced else "")
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def reason_text(text: str, indent: int) -> str:
    """A failure's reason: its first line, then its other lines (a traceback) indented."""
    first, *rest = text.rstrip("\n").split("\n")
    return "".join([printable(first)] + [f"\n{' ' * indent}{printable(line)}" for line in rest])


def utc_time(unix: float | None) -> str:
    """A time the daemon gave, in UTC: C{2026-12-01 09:00:00Z}; C{-} for none."""
    if unix is None:
        return "-"
    return datetime.fromtimestamp(unix, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def run_command(args: argparse.Namespace) -> int:
    """
    Run the command C{args} names: its exit status, or a mistake's as one
    line on stderr (a L{CommandError}'s own, 1 for the daemon's errors, 130 for
    Ctrl-C, 141 when stdout's reader went away), never a traceback.
    """
    try:
        status: int = args.run(args)
        sys.stdout.flush()  # a closed pipe shows here, not at exit
        return status
    except CommandError as e:
        print(f"quicx: {e}", file=sys.stderr)
        return e.status
    except QuicxError as e:
        print(f"quicx: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`quicx task 3 | head -2`): stop quietly, as a
        # shell tool killed by SIGPIPE does; nothing more is written to it.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
