"""
C{quicx tasks ACTION}: cancel, retry, replay, purge or move the tasks that match a filter.
"""

from __future__ import annotations

import argparse

from quicx.cli.arguments import (
    Commands,
    add_setting_flags,
    config_option,
    duration,
    named_settings,
    queue_name,
    task_type,
)
from quicx.cli.common import ask, print_json
from quicx.protocol.bulk import BulkAction
from quicx.protocol.durations import parse_duration
from quicx.status.text import thousands

_DONE = {
    BulkAction.CANCEL: "cancelled",
    BulkAction.RETRY: "retried",
    BulkAction.REPLAY: "replayed",
    BulkAction.PURGE: "purged",
    BulkAction.MOVE: "moved",
}
_HELP = {
    BulkAction.CANCEL: "cancel queued and delayed tasks (their producers hear CANCELLED)",
    BulkAction.RETRY: "run now: replay dead tasks, queue tasks waiting out a retry's backoff",
    BulkAction.REPLAY: "put dead tasks back in their queues, their failures reset",
    BulkAction.PURGE: "delete queued, delayed and dead tasks",
    BulkAction.MOVE: "move queued, delayed and dead tasks to the queue --to, keeping their ids",
}


def age(text: str) -> float:
    """An argparse type: an age (C{90}, C{30s}, C{10m}, C{2d}), in seconds."""
    try:
        return parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_tasks(commands: Commands) -> None:
    """C{quicx tasks cancel|retry|replay|purge|move}: their parsers and filter options."""
    actions = commands.add(
        "tasks",
        "cancel, retry, replay, purge or move the tasks a filter matches",
        "Act on every task that matches the filter (all the options given must match), a"
        " bounded number per turn of the daemon's event loop; --dry-run only counts them."
        " A running task is never touched. Goes through the control socket.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    for action in BulkAction:
        name = action.name.lower()
        sub = actions.add_parser(name, help=_HELP[action], description=_HELP[action] + ".")
        sub.add_argument("--queue", type=queue_name, help="tasks of this queue")
        sub.add_argument("--type", type=task_type, dest="task_type", help="tasks of this type")
        sub.add_argument("--key-prefix", metavar="PREFIX", help="tasks whose key starts so")
        sub.add_argument(
            "--state",
            action="append",
            choices=("queued", "delayed", "dead", "waiting"),
            help="tasks in this state (repeat for several; default: every state it acts on)",
        )
        sub.add_argument(
            "--older-than", type=age, metavar="AGE", help="submitted at least AGE ago (10m, 2d)"
        )
        sub.add_argument(
            "--newer-than", type=age, metavar="AGE", help="submitted less than AGE ago"
        )
        sub.add_argument(
            "--reason-contains", metavar="TEXT", help="dead tasks whose failure reason has TEXT"
        )
        if action is BulkAction.MOVE:
            sub.add_argument("--to", type=queue_name, required=True, help="the queue to move to")
        sub.add_argument("--dry-run", action="store_true", help="count and show some, change none")
        sub.add_argument("--json", action="store_true", help="print the daemon's JSON answer")
        config_option(sub)
        add_setting_flags(sub.add_argument, named_settings("control", "port"))
        sub.add_argument(
            "--timeout", type=duration, default=300.0, help="seconds to wait for the end (300)"
        )
        sub.set_defaults(run=cmd_tasks, bulk_action=action)


def cmd_tasks(args: argparse.Namespace) -> int:
    action: BulkAction = args.bulk_action
    where = {
        "queue": args.queue,
        "task_type": args.task_type,
        "key_prefix": args.key_prefix,
        "states": args.state or (),
        "older_than": args.older_than or 0.0,
        "newer_than": args.newer_than or 0.0,
        "reason": args.reason_contains,
        "to": getattr(args, "to", None),
    }
    answer = ask(
        args,
        lambda client: client.bulk(action.name.lower(), args.dry_run, **where),
        admin=True,
    )
    if args.json:
        print_json(answer)
        return 0
    matched = _tasks(answer["matched"])
    into = f" to queue {answer['to']}" if "to" in answer else ""
    if args.dry_run:
        sample = ", ".join(map(str, answer["sample"]))
        print(
            f"dry run: {matched} would be {_DONE[action]}{into}"
            + (f" (e.g. {sample})" if sample else "")
        )
        return 0
    of = thousands(answer["matched"])
    line = f"{_tasks(answer['acted'])} {_DONE[action]}{into}, of {of} matched"
    if answer["skipped"]:
        line += f"; {thousands(answer['skipped'])} left (target full, or its key taken there)"
    print(line)
    return 0


def _tasks(count: int) -> str:
    return "1 task" if count == 1 else f"{thousands(count)} tasks"
