"""
C{quicx dlq}: the dead-letter set, listed, shown, replayed or purged.
"""

from __future__ import annotations

import argparse
import base64
import sys
import time

from quicx.cli.arguments import (
    Commands,
    acting_options,
    bounded_int,
    looking_options,
    queue_name,
    task_argument,
)
from quicx.cli.common import (
    CommandError,
    age,
    ask,
    local_task,
    one_line,
    print_json,
    reason_text,
    table,
    task_daemon,
)
from quicx.protocol.errors import NotFound
from quicx.status.text import printable, thousands


def add_dlq(commands: Commands) -> None:
    """C{quicx dlq list}, C{show}, C{replay} and C{purge}: its parser and options."""
    dlq = commands.add(
        "dlq",
        "list, show, replay or purge dead tasks",
        "The dead-letter set: tasks that failed for good after their retries (or"
        " were failed as unrecoverable). list and show look; replay and purge act,"
        " through the control socket.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    dead_list = looking_options(
        dlq.add_parser(
            "list",
            help="the dead tasks, oldest first",
            description="List the dead tasks of QUEUE (default: of every queue), oldest"
            " first: id, queue, type, failures, how long dead, the last reason.",
        )
    )
    dead_list.add_argument("queue", nargs="?", type=queue_name)
    dead_list.add_argument("-n", type=bounded_int(1, 1000), default=100, help="how many (100)")
    dead_list.set_defaults(run=cmd_dlq_list)
    dead_show = looking_options(
        dlq.add_parser(
            "show",
            help="a dead task and its payload",
            description="Show a dead task: its failures, last worker, reason and payload.",
        )
    )
    dead_show.add_argument("id", type=task_argument)
    dead_show.add_argument(
        "--payload", action="store_true", help="write only its payload's bytes to stdout"
    )
    dead_show.set_defaults(run=cmd_dlq_show)
    replay = acting_options(
        dlq.add_parser(
            "replay",
            help="queue dead tasks again",
            description="Put the dead task ID (or, with --all, every dead task of --queue, or"
            " of every queue) back in its queue, its failures reset. Goes through the"
            " control socket.",
        )
    )
    replay.add_argument("id", nargs="?", type=task_argument)
    replay.add_argument("--all", action="store_true", help="every dead task (of --queue)")
    replay.add_argument("--queue", type=queue_name, help="with --all: only this queue's")
    replay.set_defaults(run=cmd_dlq_replay)
    dead_purge = acting_options(
        dlq.add_parser(
            "purge",
            help="drop dead tasks",
            description="Drop the dead tasks of QUEUE (default: of every queue) for good."
            " Goes through the control socket.",
        )
    )
    dead_purge.add_argument("queue", nargs="?", type=queue_name)
    dead_purge.add_argument("--yes", action="store_true", help="yes, drop them")
    dead_purge.set_defaults(run=cmd_dlq_purge)


def cmd_dlq_list(args: argparse.Namespace) -> int:
    document = ask(args, lambda client: client.dead(args.queue, args.n))
    if args.json:
        print_json(document)
        return 0
    tasks = document["tasks"]
    if not tasks:
        print(f"no dead tasks{_in_queue(args.queue)}")
        return 0
    now = time.time()
    rows = [
        [str(t["id"]), t["queue"], t["type"], thousands(t["failures"]),
         age(max(0.0, now - t["died_at"])), one_line(t["reason"])]
        for t in tasks
    ]  # fmt: skip
    sys.stdout.write(
        table(["id", "queue", "type", "failures", "dead for", "reason"], rows, "><<>><")
    )
    if document["total"] > len(tasks):
        print(
            f"{_dead_tasks(document['total'])}{_in_queue(args.queue)}:"
            f" the oldest {len(tasks)} shown (-n shows more)"
        )
    return 0


def cmd_dlq_show(args: argparse.Namespace) -> int:
    task_id, address = task_daemon(args)
    try:
        task = ask(args, lambda client: client.task(task_id), address=address)
    except NotFound:
        raise CommandError(f"no dead task {args.id} (quicx dlq list shows them)") from None
    if task["state"] != "dead":
        raise CommandError(
            f"task {args.id} is {task['state']}, not dead (see quicx task {args.id})"
        )
    payload = base64.b64decode(task["payload_base64"])
    if args.payload:
        sys.stdout.buffer.write(payload)
        return 0
    if args.json:
        print_json(task)
        return 0
    print(
        f"task {task['id']} ({printable(task['type'])}): dead in queue {task['queue']},"
        f" priority {task['priority']}, {thousands(task['size'])} bytes,"
        f" dead for {age(max(0.0, time.time() - task['died_at']))}"
    )
    print(f"  failures: {task['failures']}, the last on {task['worker'] or 'no worker'}")
    print(f"  reason: {reason_text(task['reason'], 4)}")
    print(f"  payload: {_shown(payload)}")
    return 0


def _shown(payload: bytes) -> str:
    """A payload as text when it is printable UTF-8, else as a Python bytes literal."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        return repr(payload)
    return text if text.isprintable() else repr(payload)


def cmd_dlq_replay(args: argparse.Namespace) -> int:
    if (args.id is None) != args.all:
        raise CommandError("name a dead task's ID, or --all (not both)", status=2)
    if args.queue is not None and not args.all:
        raise CommandError("--queue goes with --all (a task's own queue is known)", status=2)
    task_id = 0 if args.id is None else local_task(args)
    answer = ask(args, lambda client: client.replay(task_id, args.queue), admin=True)
    replayed = answer["replayed"]
    if args.id is not None:
        print(f"task {args.id} replayed: queued again, its failures reset")
    elif replayed:
        print(
            f"{_dead_tasks(len(replayed))} replayed{_in_queue(args.queue)}:"
            f" {', '.join(map(str, replayed))}"
        )
    else:
        print(f"no dead tasks to replay{_in_queue(args.queue)}")
    return 0


def cmd_dlq_purge(args: argparse.Namespace) -> int:
    if not args.yes:
        whose = f"of queue {args.queue}" if args.queue else "of every queue"
        raise CommandError(f"dlq purge drops every dead task {whose}: add --yes to do it", status=2)
    answer = ask(args, lambda client: client.dead_purge(args.queue), admin=True)
    print(f"{_dead_tasks(answer['purged'])} dropped{_in_queue(args.queue)}")
    return 0


def _dead_tasks(count: int) -> str:
    return "1 dead task" if count == 1 else f"{thousands(count)} dead tasks"


def _in_queue(queue: str | None) -> str:
    return f" in queue {queue}" if queue else ""
