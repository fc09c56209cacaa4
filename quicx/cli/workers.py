"""
The workers: C{quicx workers} looks; C{quiet} and C{terminate} steer them (the control socket).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from quicx.cli.arguments import Commands
from quicx.cli.common import CommandError, age, ask, print_json, table
from quicx.clients.blocking import QuicxClient
from quicx.status.text import printable, thousands


def add_workers(commands: Commands) -> None:
    """C{quicx workers}: its parser and options."""
    workers = commands.looking(
        "workers",
        "list the connected workers",
        "List the connected workers, one row per connection: id, name, host and pid"
        " (when the worker announced them), address, queues, the task types it runs"
        " (all: every type), credits, the tasks it holds and the longest for how long,"
        " and its state (active, quiet, terminating). --json prints the daemon's array"
        " of records (see docs/protocol.md).",
    )
    workers.set_defaults(run=cmd_workers)


def cmd_workers(args: argparse.Namespace) -> int:
    records = ask(args, QuicxClient.workers)
    if args.json:
        print_json(records)
        return 0
    if not records:
        print("no worker is connected")
        return 0
    rows = [
        [
            str(w["id"]),
            printable(w["name"] or "-"),
            printable(w["host"] or "-"),
            str(w["pid"] or "-"),
            printable(w["address"]),
            ",".join(w["queues"]) or "-",
            "all" if w["types"] is None else printable(",".join(w["types"])),
            thousands(w["credits"]),
            thousands(w["holding"]),
            age(max((t["for"] for t in w["tasks"]), default=None)),
            w["state"],
        ]
        for w in records
    ]
    header = ["id", "name", "host", "pid", "address", "queues", "types", "credits", "held",
              "longest", "state"]  # fmt: skip
    sys.stdout.write(table(header, rows, "><<><<<>>><"))
    return 0


def add_steering(commands: Commands) -> None:
    """C{quicx quiet} and C{terminate}: their parsers and options."""
    for name, help, description in (
        (
            "quiet",
            "tell workers to finish what they hold and take no more",
            "The daemon deals the worker no more tasks at once and tells it (STOP);"
            " it stays connected, idle, until it leaves or is terminated.",
        ),
        (
            "terminate",
            "tell workers to stop now; what they hold runs elsewhere",
            "The tasks the worker holds are queued again at once, it is told to stop"
            " (STOP), and its connection is closed after [limits] terminate_grace.",
        ),
    ):
        action = commands.acting(
            name,
            help,
            description + " WORKER is an id (quicx workers), a name, or HOST:PID: every"
            " connection of that worker; --all steers every version-2 worker.",
        )
        action.add_argument("worker", nargs="?", metavar="WORKER")
        action.add_argument("--all", action="store_true", help="every version-2 worker")
        action.set_defaults(run=cmd_steer)


def cmd_steer(args: argparse.Namespace) -> int:
    if args.all == (args.worker is not None):
        raise CommandError(f"{args.command} needs WORKER or --all (not both)", status=2)
    answer = ask(args, lambda client: _steer(client, args.command, args.worker), admin=True)
    steered = answer["workers"]
    if not steered:
        print(f"no version-2 worker to {args.command}")
    else:
        done = "quiet" if args.command == "quiet" else "terminating"
        print(f"{done}: worker{'s' if len(steered) > 1 else ''} {', '.join(map(str, steered))}")
    return 0


def _steer(client: QuicxClient, action: str, worker: str | None) -> dict[str, Any]:
    """STEER each worker C{worker} names (C{None}: all), over one connection."""
    steer = client.quiet if action == "quiet" else client.terminate
    if worker is None:
        return steer(0)
    if worker.isdigit():
        return steer(int(worker))
    chosen = [w["id"] for w in client.workers() if worker in (w["name"], _host_pid(w))]
    if not chosen:
        raise CommandError(f"no connected worker is named {worker!r} (see quicx workers)")
    steered: list[int] = []
    for each in chosen:
        steered += steer(each)["workers"]
    return {"action": action, "workers": steered}


def _host_pid(record: dict[str, Any]) -> str:
    return f"{record['host']}:{record['pid']}" if record["pid"] else ""
