"""
C{quicx events} (live lifecycle events) and C{quicx report} (the PySpark report).

Task lifecycle events: C{quicx events} prints them live, C{quicx report} runs
the PySpark report over the files the daemon writes them to.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections.abc import Mapping
from typing import Any

from quicx.cli.arguments import (
    Commands,
    bounded_int,
    connect_option,
    duration,
    queue_name,
    task_type,
)
from quicx.cli.common import CommandError, ask, one_line
from quicx.clients.blocking import QuicxClient
from quicx.clients.watching import MISSED
from quicx.protocol.monitor import EVENT_KINDS
from quicx.report.pipeline import what_if_workers
from quicx.status.text import printable, thousands


def add_events(commands: Commands) -> None:
    """C{quicx events}: its parser and options."""
    events = commands.add(
        "events",
        "print task lifecycle events as they happen",
        "Print the daemon's task lifecycle events live: one line per event (time in UTC,"
        " event, task, queue, type, worker, and the event's own fields such as a reason),"
        " or with --json the daemon's NDJSON lines (the events files' schema). When the"
        " daemon dropped events because this command read too slowly, a line says how many"
        ' ("missed N events"; with --json, {"event":"missed","count":N}). Repeat --queue,'
        " --type and --kind to watch several; without them, every event.",
    )
    events.add_argument(
        "--json", action="store_true", help="print the daemon's NDJSON lines as they come"
    )
    events.add_argument(
        "--timeout", type=duration, default=10.0, help="seconds to wait for the daemon (10)"
    )
    connect_option(events)
    events.add_argument("--follow", "-f", action="store_true", help="keep printing (Ctrl-C ends)")
    events.add_argument(
        "--count",
        metavar="N",
        type=bounded_int(1, 1 << 62),
        help="stop after N events (implies --follow)",
    )
    events.add_argument("--queue", type=queue_name, action="append", help="only this queue")
    events.add_argument("--type", type=task_type, action="append", help="only this task type")
    events.add_argument(
        "--kind", choices=EVENT_KINDS, action="append", metavar="KIND",
        help=f"only this kind of event: {', '.join(EVENT_KINDS)}",
    )  # fmt: skip
    events.set_defaults(run=cmd_events)


def cmd_events(args: argparse.Namespace) -> int:
    if not args.follow and args.count is None:
        raise CommandError("events: give --follow, or --count N to stop after N events", 2)
    return ask(args, lambda client: _print_events(args, client))


def _print_events(args: argparse.Namespace, client: QuicxClient) -> int:
    """
    Print each live event as it comes, flushed when no more are waiting (a
    pipe sees each batch at once), up to --count.
    """
    printed = 0
    events = client.events(args.queue or (), args.type or (), args.kind or ())
    write = sys.stdout.write
    for event in events:
        if args.json:
            write(json.dumps(event, ensure_ascii=False, separators=(",", ":")) + "\n")
        elif event["event"] == MISSED:
            write(f"missed {thousands(event['count'])} events\n")
        else:
            write(event_line(event) + "\n")
        if event["event"] != MISSED:
            printed += 1
            if printed == args.count:
                break
        if not events.waiting:
            sys.stdout.flush()
    return 0


_EVENT_FIELDS = frozenset(
    {"v", "t", "event", "task", "type", "size", "producer", "worker", "attempt", "queue"}
    | {"priority"}
)


@functools.lru_cache(maxsize=4)
def _clock(second: int) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(second))


def event_line(event: Mapping[str, Any]) -> str:
    """
    One event for people: its time (UTC), kind, task, queue, type, worker,
    and its own fields (C{reason: SMTP 550}).
    """
    second, millisecond = divmod(event["t"], 1000)
    task, worker = event["task"], event["worker"]
    line = (
        f"{_clock(second)}.{millisecond:03d}Z  {event['event']:<10}  "
        f"{'-' if task is None else f'#{task}':<8}  {event['queue'] or '-'}"
        f"  {printable(event['type'])}"
    )
    if worker is not None:
        line += f"  worker {worker}"
    if len(event) > len(_EVENT_FIELDS):
        line += "  " + ", ".join(
            f"{key}: {one_line(str(value))}"
            for key, value in event.items()
            if key not in _EVENT_FIELDS
        )
    return line


def add_report(commands: Commands) -> None:
    """C{quicx report}: its parser and options."""
    report = commands.add(
        "report",
        "a PySpark report over lifecycle events",
        "Read the daemon's event files (paths or any URI Spark reads) and write"
        " Parquet tables and report.html to --out (see docs/pipeline.md)."
        " Needs quicx[spark] and Java.",
    )
    report.add_argument("events", nargs="+", help="event files or directories")
    report.add_argument("--out", required=True, help="where the tables and report.html go")
    report.add_argument("--master", help="the Spark master (default local[*])")
    report.add_argument(
        "--what-if",
        type=what_if_workers,
        metavar="workers=N,N...",
        help="also predict queue waits and backlog with these numbers of workers"
        " (e.g. workers=1,2,4,8; see docs/pipeline.md)",
    )
    report.add_argument(
        "--timings", action="store_true", help="print the seconds each phase took to stderr"
    )
    report.set_defaults(run=cmd_report)


def cmd_report(args: argparse.Namespace) -> int:
    try:
        import pyspark  # noqa: F401
    except ImportError as e:
        raise CommandError(f"the report needs PySpark: pip install 'quicx[spark]' ({e})") from None
    from quicx.report import pipeline as report

    argv = [*args.events, f"--out={args.out}"]
    if args.master:
        argv.append(f"--master={args.master}")
    if args.what_if:
        argv.append("--what-if=workers=" + ",".join(map(str, args.what_if)))
    if args.timings:
        argv.append("--timings")
    return report.main(argv)
