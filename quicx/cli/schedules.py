"""
C{quicx schedules}, C{schedule add} and C{schedule remove}.

Schedules: C{quicx schedules} lists them, C{quicx schedule add} and C{remove}
change the run-time ones (through the control socket).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from typing import Any

from quicx.cli.arguments import (
    Commands,
    acting_options,
    bounded_int,
    configuration_argument,
    interval_seconds,
    queue_name,
    schedule_name,
    task_type,
)
from quicx.cli.common import ask, print_json, read_payload, table, utc_time
from quicx.clients.blocking import QuicxClient
from quicx.protocol import admin, durations
from quicx.status.text import printable


def add_schedules(commands: Commands) -> None:
    """C{quicx schedules}: its parser and options."""
    schedules = commands.looking(
        "schedules",
        "list the schedules",
        "List the schedules, from the configuration and added at run time: each one's"
        " cron expression or interval, zone, task type, queue, and its next and last"
        " fire (UTC). --json prints the daemon's array (see docs/protocol.md).",
    )
    schedules.set_defaults(run=cmd_schedules)


def cmd_schedules(args: argparse.Namespace) -> int:
    schedules = ask(args, QuicxClient.schedules)
    if args.json:
        print_json(schedules)
        return 0
    if not schedules:
        print("no schedules")
        return 0
    rows = [
        [s["name"], _cadence(s), s["timezone"], printable(s["type"]), s["queue"] or "(default)",
         utc_time(s["next_fire"]), utc_time(s["last_fire"])]
        for s in schedules
    ]  # fmt: skip
    sys.stdout.write(
        table(
            ["name", "schedule", "zone", "type", "queue", "next fire", "last fire"], rows, "<<<<<<<"
        )
    )
    return 0


def _cadence(schedule: Mapping[str, Any]) -> str:
    """C{cron 0 3 * * *} or C{every 10m}."""
    if schedule.get("cron"):
        return f"cron {schedule['cron']}"
    return f"every {durations.format_duration(schedule['every'])}"


def add_schedule(commands: Commands) -> None:
    """C{quicx schedule add} and C{remove}: its parser and options."""
    schedule = commands.add(
        "schedule",
        "add or remove a run-time schedule",
        "Add (or replace) or remove a schedule that submits a task on a cron expression"
        " or at an interval. Schedules a [schedule NAME] section declares are changed in"
        " the configuration, not here. Goes through the control socket.",
    ).add_subparsers(dest="action", metavar="ACTION", required=True)
    add = acting_options(
        schedule.add_parser(
            "add",
            help="add or replace a schedule",
            description="Submit a task of TYPE with PAYLOAD ('-': stdin) on --cron (5 fields,"
            " in --tz) or --every interval, from now on.",
        )
    )
    add.add_argument("name", type=schedule_name)
    cadence = add.add_mutually_exclusive_group(required=True)
    cadence.add_argument("--cron", metavar="EXPR", help="a 5-field cron expression: '0 3 * * *'")
    cadence.add_argument(
        "--every",
        type=configuration_argument(interval_seconds),
        metavar="DURATION",
        help="an interval: 90 (seconds), 10m, 1.5h",
    )
    add.add_argument("type", type=task_type, help="the task type")
    add.add_argument("payload", help="the payload, or - for stdin")
    add.add_argument("--tz", default="UTC", metavar="ZONE", help="the cron's IANA zone (UTC)")
    add.add_argument("--queue", type=queue_name, help="the queue (default: the daemon's)")
    add.add_argument("--priority", type=bounded_int(0, 255), help="0 to 255 (default: the queue's)")
    add.add_argument(
        "--missed",
        choices=[m.name.lower() for m in admin.Missed],
        default="once",
        help="what to fire for times the daemon was down: none, once (default), or all",
    )
    add.add_argument(
        "--catch-up",
        type=bounded_int(0, 0xFFFF),
        default=100,
        metavar="N",
        help="with --missed all: at most N of them (100)",
    )
    add.set_defaults(run=cmd_schedule_add)
    remove = acting_options(
        schedule.add_parser(
            "remove", help="remove a schedule", description="Remove a run-time schedule."
        )
    )
    remove.add_argument("name", type=schedule_name)
    remove.set_defaults(run=cmd_schedule_remove)


def cmd_schedule_add(args: argparse.Namespace) -> int:
    payload = read_payload(args.payload)
    answer = ask(
        args,
        lambda client: client.schedule(
            args.name,
            os.fsencode(args.type),
            payload,
            cron=args.cron,
            every=args.every,
            timezone=args.tz,
            queue=args.queue,
            priority=args.priority,
            missed=args.missed,
            catch_up=args.catch_up,
        ),
        admin=True,
    )
    print(
        f"schedule {answer['name']}: {_cadence(answer)} ({answer['timezone']}),"
        f" next fire {utc_time(answer['next_fire'])}"
    )
    return 0


def cmd_schedule_remove(args: argparse.Namespace) -> int:
    answer = ask(args, lambda client: client.unschedule(args.name), admin=True)
    print(f"schedule {answer['name']} removed")
    return 0
