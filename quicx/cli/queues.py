"""
The queues: C{quicx queues} and C{peek} look, C{pause}, C{resume} and C{purge}
act (through the control socket).
"""

from __future__ import annotations

import argparse
import sys

from quicx.cli.arguments import Commands, bounded_int, queue_name
from quicx.cli.common import CommandError, age, ask, print_json, table
from quicx.clients.blocking import QuicxClient
from quicx.status.text import printable, thousands


def add_queues(commands: Commands) -> None:
    """C{quicx queues}: its parser and options."""
    queues = commands.looking(
        "queues",
        "list the queues",
        "List the queues: tasks queued (by priority) and running, workers subscribed,"
        " pause, and the age of the oldest task. --json prints an array of objects with"
        " at least name, depth, paused, workers (see docs/protocol.md).",
    )
    queues.set_defaults(run=cmd_queues)


def cmd_queues(args: argparse.Namespace) -> int:
    queues = ask(args, QuicxClient.queues)
    if args.json:
        print_json(queues)
        return 0
    rows = [
        [
            q["name"] + (" (paused)" if q["paused"] else ""),
            thousands(q["depth"]),
            thousands(q["running"]),
            # A daemon without delays and dead letters has neither.
            thousands(q.get("delayed", 0)),
            thousands(q.get("dead", 0)),
            thousands(q["workers"]),
            age(q["oldest_age"]),
            " ".join(f"{p}:{n}" for p, n in q["priorities"].items()) or "-",
        ]
        for q in queues
    ]
    header = ["queue", "queued", "running", "delayed", "dead", "workers", "oldest", "by priority"]
    sys.stdout.write(table(header, rows, "<>>>>>><"))
    return 0


def add_peek(commands: Commands) -> None:
    """C{quicx peek}: its parser and options."""
    peek = commands.looking(
        "peek",
        "show a queue's next tasks",
        "Show the next tasks of QUEUE in dispatch order without taking them. --json"
        " prints an array of objects with at least id, type, queue, priority, state.",
    )
    peek.add_argument("queue", type=queue_name)
    peek.add_argument("-n", type=bounded_int(1, 1000), default=10, help="how many (10)")
    peek.set_defaults(run=cmd_peek)


def cmd_peek(args: argparse.Namespace) -> int:
    tasks = ask(args, lambda client: client.peek(args.queue, args.n))
    if args.json:
        print_json(tasks)
        return 0
    if not tasks:
        print(f"queue {args.queue} has no queued task")
        return 0
    rows = [
        [str(t["id"]), printable(t["type"]), str(t["priority"]), t["state"],
         thousands(t["size"]), age(t["age"]), printable(t["fairness_key"] or "-")]
        for t in tasks
    ]  # fmt: skip
    sys.stdout.write(
        table(["id", "type", "priority", "state", "bytes", "age", "fairness key"], rows, "><><>><")
    )
    return 0


def add_queue_actions(commands: Commands) -> None:
    """C{quicx pause}, C{resume} and C{purge}: its parser and options."""
    for name, help, description in (
        ("pause", "stop dispatching from a queue", "The queue keeps accepting tasks."),
        ("resume", "dispatch from a paused queue again", "Dispatch starts again at once."),
        ("purge", "cancel every queued task of a queue", "Running tasks are left alone."),
    ):
        action = commands.acting(name, help, description)
        action.add_argument("queue", type=queue_name)
        if name == "purge":
            action.add_argument("--yes", action="store_true", help="yes, cancel them all")
        action.set_defaults(run=cmd_queue_action)


def cmd_queue_action(args: argparse.Namespace) -> int:
    if args.command == "purge" and not args.yes:
        raise CommandError(
            f"purge cancels every queued task of {args.queue}: add --yes to do it", status=2
        )
    answer = ask(args, lambda client: getattr(client, args.command)(args.queue), admin=True)
    if args.command == "purge":
        print(f"queue {answer['queue']}: {thousands(answer['purged'])} queued tasks cancelled")
    else:
        print(f"queue {answer['queue']} {'paused' if answer['paused'] else 'resumed'}")
    return 0
