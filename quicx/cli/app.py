"""
The C{quicx} command's top parser, its commands' parsers in order, and L{main}.

The C{quicx} command assembled: the top parser, each command's parser from
its module, in the order argparse lists them, and L{main}.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence

from quicx import version_line
from quicx.cli import (
    bulk,
    daemon,
    dlq,
    events,
    queues,
    roles,
    schedules,
    shared,
    status,
    tasks,
    worker,
    workers,
)
from quicx.cli.arguments import Commands, Parser
from quicx.cli.common import run_command

COMMANDS: tuple[Callable[[Commands], None], ...] = (
    daemon.add_start,
    daemon.add_stop,
    status.add_status,
    tasks.add_submit,
    tasks.add_result,
    shared.add_group,
    shared.add_publish,
    queues.add_queues,
    queues.add_peek,
    tasks.add_task,
    schedules.add_schedules,
    events.add_events,
    tasks.add_cancel,
    queues.add_queue_actions,
    dlq.add_dlq,
    bulk.add_tasks,
    schedules.add_schedule,
    roles.add_roles,
    worker.add_worker,
    workers.add_workers,
    workers.add_steering,
    daemon.add_version,
    daemon.add_init,
    events.add_report,
    daemon.add_repair_journal,
)
"""Each command's parser, added in this order: a mistyped command's error lists them so."""

GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("run the daemon", ("start", "stop", "init", "repair-journal")),
    (
        "producers and monitors",
        (
            "submit",
            "result",
            "group",
            "publish",
            "status",
            "queues",
            "peek",
            "task",
            "schedules",
            "events",
        ),
    ),
    (
        "admins",
        ("cancel", "pause", "resume", "purge", "dlq", "tasks", "schedule", "step-down", "promote"),
    ),
    ("workers", ("worker", "workers", "quiet", "terminate")),
    ("data", ("report",)),
    ("about quicx", ("version",)),
)
"""The commands, by who uses them, as C{quicx --help} lists them."""


def command_list(helps: Mapping[str, str]) -> str:
    """The commands under their L{GROUPS}' headings, for C{quicx --help}."""
    grouped = [name for _, names in GROUPS for name in names]
    if sorted(grouped) != sorted(helps):
        raise AssertionError(f"GROUPS lists {grouped}, the parser has {sorted(helps)}")
    width = max(map(len, helps)) + 4
    lines = []
    for title, names in GROUPS:
        lines += ["", f"{title}:", *(f"  {name:<{width}}{helps[name]}" for name in names)]
    return "\n".join(lines[1:])


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="quicx",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="'quicx COMMAND --help' shows a command's options.",
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = Commands(parser)
    for add in COMMANDS:
        add(commands)
    # After the subcommands: their usage lines start with the parser's prog.
    parser.usage = "quicx [-h] [--version] COMMAND ..."
    parser.description = "The Quicx task queue.\n\n" + command_list(commands.helps)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(build_parser().parse_args(argv))
