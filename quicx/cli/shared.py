"""
What workers share and producers group: C{quicx publish} (shared data) and
C{quicx group} (a group of tasks' progress).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from quicx.cli.arguments import (
    Commands,
    bounded_int,
    connect_option,
    duration,
    shared_name,
    waiting_options,
)
from quicx.cli.common import CommandError, ask, print_json
from quicx.protocol import codec
from quicx.protocol.errors import GroupUnknown, NotFinished
from quicx.status.text import thousands


def add_group(commands: Commands) -> None:
    """C{quicx group}: its parser and options."""
    group = commands.add(
        "group",
        "show a group of tasks",
        "Show group GID: open, closed or finished, and its tasks done, failed, cancelled"
        " and pending. With --wait, wait for it to finish: exit 0 when every task is done,"
        " 1 otherwise.",
    )
    group.add_argument("group", metavar="GID", type=bounded_int(1, codec.MAX_TASK_ID))
    group.add_argument("--json", action="store_true", help="print the group's JSON state")
    waiting_options(group)
    group.set_defaults(run=cmd_group)


def cmd_group(args: argparse.Namespace) -> int:
    try:
        if args.wait:
            state = ask(args, lambda client: client.wait_group(args.group, timeout=args.timeout))
        else:
            state = ask(args, lambda client: client.group(args.group))
    except NotFinished as e:
        assert e.state is not None
        print(_group_line(e.state))
        raise CommandError(
            f"group {args.group} has not finished within {args.timeout:g} s"
        ) from None
    if args.json:
        print_json(state)
        return 0 if state["state"] != "unknown" and (not args.wait or _all_done(state)) else 1
    if state["state"] == "unknown":
        raise CommandError(str(GroupUnknown(args.group)))
    else:
        print(_group_line(state))
    return 0 if not args.wait or _all_done(state) else 1


def _all_done(state: Mapping[str, Any]) -> bool:
    return bool(state["done"] == state["members"])


def _group_line(state: Mapping[str, Any]) -> str:
    """C{group 7: finished, 1,000 tasks: 990 done, 8 failed, 2 cancelled, 0 pending}."""
    members = state["members"]
    return (
        f"group {state['group']}: {state['state']}, {thousands(members)}"
        f" task{'' if members == 1 else 's'}: {thousands(state['done'])} done,"
        f" {thousands(state['failed'])} failed, {thousands(state['cancelled'])} cancelled,"
        f" {thousands(state['pending'])} pending"
    )


def add_publish(commands: Commands) -> None:
    """C{quicx publish}: its parser and options."""
    publish = commands.add(
        "publish",
        "publish shared data to the workers",
        "Publish FILE ('-': stdin) as the next version of shared data NAME: every worker"
        " that follows NAME (quicx worker --follow NAME) gets it once, and handlers read"
        " it as context.shared[NAME]. --delete deletes NAME.",
    )
    publish.add_argument("name", type=shared_name)
    publish.add_argument("file", nargs="?", help="the data, or - for stdin")
    publish.add_argument("--delete", action="store_true", help="delete NAME")
    publish.add_argument("--timeout", type=duration, default=10.0, help="seconds to wait (10)")
    connect_option(publish)
    publish.set_defaults(run=cmd_publish)


def cmd_publish(args: argparse.Namespace) -> int:
    if args.delete == (args.file is not None):
        raise CommandError("give the data's FILE ('-': stdin), or --delete (not both)", status=2)
    if args.delete:
        ask(args, lambda client: client.unpublish(args.name))
        print(f"shared data {args.name} deleted")
        return 0
    try:
        data = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    except OSError as e:
        raise CommandError(f"cannot read {args.file}: {e.strerror}") from None
    answer = ask(args, lambda client: client.publish(args.name, data))
    print(
        f"shared data {answer['name']} version {answer['version']}:"
        f" {thousands(answer['size'])} bytes, {_followers(answer['followers'])}"
    )
    return 0


def _followers(count: int) -> str:
    return "1 worker follows it" if count == 1 else f"{thousands(count)} workers follow it"
