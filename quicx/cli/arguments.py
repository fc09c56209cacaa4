"""
What the commands' parsers are made of: argparse types, setting flags, shared options.

The pieces the commands' parsers are made of: argparse types that check a
value as the daemon would (task ids, queue names, durations, keys), the
setting flags, the option sets several commands share, and L{Commands}, which
each command module adds its parsers to.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Callable, Sequence
from typing import NoReturn

from quicx.cli.common import CONFIG_VARIABLE, T
from quicx.clients.address import ADDRESS_VARIABLE, DEFAULT_ADDRESS
from quicx.clients.cluster import TaskRef
from quicx.daemon import config as configuration
from quicx.daemon.fleet.instances import MAX_PROCESSES
from quicx.protocol import admin, codec, durations, parents, wire
from quicx.protocol.codec import MAX_OPTION, check_queue
from quicx.protocol.shared_data import MAX_FOLLOW
from quicx.protocol.taskflow import MAX_SUBSCRIPTIONS


class Parser(argparse.ArgumentParser):
    """argparse, but a usage mistake is one line (the usage is in --help)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def bounded_int(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer from C{low} to C{high}."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value

    return parse


def duration(text: str) -> float:
    """An argparse type: seconds, more than 0 (and under a year)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds")
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} seconds: it must be more than 0")
    if value >= MAX_DURATION:
        raise argparse.ArgumentTypeError(f"{text} seconds: it must be under a year")
    return value


MAX_DURATION = 365 * 86400.0


def queue_name(text: str) -> str:
    try:
        check_queue(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def queue_list(text: str) -> tuple[str, ...]:
    names = tuple(queue_name(name.strip()) for name in text.split(","))
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names a queue twice")
    if len(names) > MAX_SUBSCRIPTIONS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SUBSCRIPTIONS} queues")
    return names


def option_key(text: str) -> bytes:
    """An argparse type: an idempotency or fairness key, 1 to 255 bytes as given."""
    key = os.fsencode(text)
    if not 0 < len(key) <= MAX_OPTION:
        raise argparse.ArgumentTypeError(f"a key is 1 to {MAX_OPTION} bytes, not {len(key)}")
    return key


def name_of(what: str) -> Callable[[str], str]:
    """An argparse type: the name of C{what}, made as a queue name is."""

    def parse(text: str) -> str:
        try:
            check_queue(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"a {what} name is 1 to 64 letters, digits or '_.:-', not {text!r}"
            ) from None
        return text

    return parse


schedule_name = name_of("schedule")


shared_name = name_of("shared-data")


def shared_names(text: str) -> tuple[str, ...]:
    """An argparse type: shared-data names, comma-separated (as FOLLOW takes them)."""
    names = tuple(shared_name(name.strip()) for name in text.split(","))
    if len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(f"{text!r} names shared data twice")
    if len(names) > MAX_FOLLOW:
        raise argparse.ArgumentTypeError(f"at most {MAX_FOLLOW} names")
    return names


MAX_DELAY = 0xFFFFFFFF / 1000
"""The longest delay a SUBMIT carries, in seconds (about 49 days)."""


def delay_seconds(text: str) -> float:
    """A delay (see L{durations.parse_duration}), in seconds; at most L{MAX_DELAY}."""
    seconds = durations.parse_duration(text)
    if seconds > MAX_DELAY:
        raise ValueError(f"{text}: a delay is at most {MAX_DELAY:g} s (about 49 days)")
    return seconds


def expiry_seconds(text: str) -> float:
    """A deadline to start from now (see L{durations.parse_duration}): 1 ms to about 49 days."""
    seconds = durations.parse_duration(text)
    if not 0.001 <= seconds <= MAX_DELAY:
        raise ValueError(f"{text}: an expiry is 1ms to {MAX_DELAY:g} s (about 49 days)")
    return seconds


def interval_seconds(text: str) -> int:
    """A schedule's interval (see L{durations.parse_duration}): whole seconds, 1 or more."""
    seconds = durations.parse_duration(text)
    if seconds != int(seconds) or not 1 <= seconds <= admin.MAX_INTERVAL:
        raise ValueError(f"{text}: an interval is whole seconds, from 1s to {admin.MAX_INTERVAL}s")
    return int(seconds)


def task_type(text: str) -> str:
    """An argparse type: a task type the protocol can carry (1 to 255 bytes)."""
    try:
        wire.encode_submit(os.fsencode(text), b"")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def task_argument(text: str) -> int | TaskRef:
    """An argparse type: a task id, plain (C{42}) or with its daemon (C{42@tcp:HOST:PORT})."""
    number, at, _ = text.partition("@")
    plain = bounded_int(1, codec.MAX_TASK_ID)(number)
    if not at:
        return plain
    try:
        return TaskRef.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def parent_ids(text: str) -> tuple[int, ...]:
    """An argparse type: task ids, comma-separated (C{12,13}), each once, at most C{MAX_PARENTS}."""
    ids = tuple(map(bounded_int(1, codec.MAX_TASK_ID), text.split(",")))
    if len(ids) > parents.MAX_PARENTS:
        raise argparse.ArgumentTypeError(
            f"a task waits for at most {parents.MAX_PARENTS} parents, not {len(ids)}"
        )
    if len(set(ids)) != len(ids):
        raise argparse.ArgumentTypeError(f"{text!r} names a parent twice")
    return ids


def configuration_argument(parse: Callable[[str], T]) -> Callable[[str], T]:
    """
    An argparse type from a parser that raises C{ValueError}: a
    L{quicx.daemon.config} value parser, or a L{durations} or L{timing} one.
    """

    def argument(text: str) -> T:
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return argument


def setting_argument(setting: configuration.Setting) -> Callable[[str], str]:
    """An argparse type: a setting's text, checked (and read again with the file's)."""
    check = configuration_argument(setting.kind.parse)

    def argument(text: str) -> str:
        check(text)
        return text

    return argument


def add_setting_flags(
    add_argument: Callable[..., argparse.Action], settings: Sequence[configuration.Setting]
) -> None:
    """
    C{--FLAG VALUE} for each of C{settings}, as C{twistd quicx} takes them,
    with C{add_argument} (a parser's or an argument group's).
    """
    for setting in settings:
        choices = setting.kind.choices
        checked: dict[str, object] = (
            {"choices": choices}
            if choices
            else {"metavar": setting.metavar, "type": setting_argument(setting)}
        )
        add_argument(
            f"--{setting.flag}",
            dest=setting.name,
            action="append" if setting.repeatable else "store",
            help=setting.flag_help().replace("%", "%%"),
            **checked,
        )


class Commands:
    """The subcommands' parsers, added in turn, and each one's line for C{quicx --help}."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parsers = parser.add_subparsers(
            dest="command", metavar="COMMAND", required=True, help=argparse.SUPPRESS
        )
        self.helps: dict[str, str] = {}

    def add(self, name: str, help: str, description: str) -> argparse.ArgumentParser:
        """Command C{name}'s parser: C{help} for C{quicx --help}, C{description} for its own."""
        self.helps[name] = help
        return self.parsers.add_parser(name, help=help, description=description)

    def looking(self, name: str, help: str, description: str) -> argparse.ArgumentParser:
        """A command that looks (L{looking_options})."""
        return looking_options(self.add(name, help, description))

    def acting(self, name: str, help: str, description: str) -> argparse.ArgumentParser:
        """An admin command, through the control socket (L{acting_options})."""
        return acting_options(
            self.add(name, help, description + " Goes through the control socket.")
        )


def connect_option(
    sub: argparse.ArgumentParser, several: bool = False, failover: bool = False
) -> None:
    """
    C{--connect}: the daemon's address (a list of them if C{several});
    with C{failover}, C{--failover}: the list is one replicated shard.
    """
    sub.add_argument(
        "--connect",
        metavar="ADDRESS[,ADDRESS...]" if several else "ADDRESS",
        help=f"the daemon{'s (one or a comma-separated list of)' if several else ''}:"
        f" tcp:HOST:PORT, unix:PATH or tls:HOST:PORT"
        f" (default ${ADDRESS_VARIABLE}, else {DEFAULT_ADDRESS})",
    )
    if failover:
        sub.add_argument(
            "--failover",
            action="store_true",
            help="the --connect list names one replicated shard's primary and standbys:"
            " follow its primary (without it, a list is a cluster of independent daemons)",
        )


def config_option(sub: argparse.ArgumentParser) -> None:
    """C{--config} and C{--instance}: the daemon whose settings, socket and pid file to use."""
    sub.add_argument(
        "--config",
        "-c",
        metavar="FILE",
        default=os.environ.get(CONFIG_VARIABLE) or None,
        help=f"the daemon's quicx.conf (default ${CONFIG_VARIABLE}, else the built-in one)",
    )
    sub.add_argument(
        "--instance",
        metavar="I",
        type=bounded_int(0, MAX_PROCESSES - 1),
        help="daemon I of a set (start --processes, or one systemd unit each): its port is"
        " port + I, its control socket, pid file and journal its own (docs/operations.md)",
    )


def named_settings(*names: str) -> list[configuration.Setting]:
    """The settings of C{names}, for L{add_setting_flags}."""
    return [configuration.BY_NAME[name] for name in names]


def waiting_options(sub: argparse.ArgumentParser) -> None:
    """C{--wait}, C{--timeout} and C{--connect}: a command that may wait for an outcome."""
    sub.add_argument("--wait", action="store_true", help="wait for it to finish")
    sub.add_argument(
        "--timeout", type=duration, default=30.0, help="seconds to wait (30), or for an answer"
    )
    connect_option(sub)


def looking_options(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """C{--json}, C{--timeout} and C{--connect}: a command that looks, over the wire."""
    sub.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
    sub.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
    connect_option(sub)
    return sub


def acting_options(sub: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """C{--config}, C{--control}, C{--port} and C{--timeout}: an admin command."""
    config_option(sub)
    add_setting_flags(sub.add_argument, named_settings("control", "port"))
    sub.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
    return sub
