"""
C{quicx status}: one daemon or a cluster, once or live, as text or JSON.

C{quicx status}: one daemon's status document from its control socket or over
the wire, a cluster's side by side, once or live (C{--watch}), as text or JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from quicx.cli.arguments import (
    Commands,
    add_setting_flags,
    bounded_int,
    config_option,
    duration,
    named_settings,
)
from quicx.cli.common import CommandError, control_path
from quicx.clients.address import ADDRESS_VARIABLE, parse_address, split_addresses
from quicx.clients.blocking import QuicxClient
from quicx.daemon.control import StatusUnavailable, fetch_status
from quicx.documents.status import (
    Journal,
    Queue,
    Shared,
    SizeClass,
    StatusDocument,
    read_status,
)
from quicx.documents.typed import DocumentError
from quicx.documents.units import format_size
from quicx.protocol.errors import QuicxError
from quicx.status.text import bar, human_duration, printable, thousands


def add_status(commands: Commands) -> None:
    """C{quicx status}: its parser and options."""
    status = commands.add(
        "status",
        "show what the daemon is doing",
        "Show version, pid, uptime, task totals, memory and size-class use from"
        " the daemon's control socket, or over the wire with --connect. Exits 1 if no"
        " daemon answers. With --connect A,B,... every daemon is shown side by side with"
        " their total, a daemon that does not answer as down (exit 1 then). --watch shows,"
        " every --interval, the tasks per second and latencies since the refresh before,"
        " the queues, workers and memory, in place on a terminal and as one plain block"
        " per refresh otherwise, until Ctrl-C (exit 0) or --count refreshes; it exits 1"
        " when the daemon goes away.",
    )
    config_option(status)
    add_setting_flags(status.add_argument, named_settings("control", "port"))
    status.add_argument(
        "--connect",
        metavar="ADDRESS[,ADDRESS...]",
        help="ask over the wire, not the control socket; several daemons (a cluster,"
        " comma-separated) are shown side by side with their total",
    )
    status.add_argument(
        "--json",
        action="store_true",
        help="print the status document as JSON (with --watch: one a line)",
    )
    status.add_argument("--timeout", type=duration, default=5.0, help="seconds to wait (5)")
    shown = status.add_mutually_exclusive_group()
    shown.add_argument(
        "--classes",
        dest="every_class",  # not "classes": the [pool] setting's
        action="store_true",
        help="show every size class, not the fullest few",
    )
    shown.add_argument("--watch", action="store_true", help="refresh until Ctrl-C")
    status.add_argument(
        "--interval",
        type=duration,
        metavar="S",
        help="with --watch: seconds between refreshes (1)",
    )
    status.add_argument(
        "--count",
        type=bounded_int(1, 1 << 31),
        metavar="N",
        help="with --watch: stop after N refreshes",
    )
    status.set_defaults(run=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    if not args.watch and (args.interval or args.count):
        raise CommandError("--interval and --count go with --watch", status=2)
    listed = os.environ.get(ADDRESS_VARIABLE, "")
    if not args.connect and "," in listed:
        args.connect = listed  # a list of daemons is a cluster view, as with --connect
    if args.connect:
        return wire_status(args)
    path = control_path(args, "--control PATH, --config FILE or --connect ADDRESS")
    fetch = functools.partial(fetch_status, path, timeout=args.timeout)
    try:
        if args.watch:
            return watch_status(fetch, args)
        status = fetch()
    except StatusUnavailable as e:
        raise CommandError(str(e)) from None
    return show_status(status, args)


def show_status(status: Mapping[str, Any], args: argparse.Namespace) -> int:
    """The document as the daemon sent it (C{--json}), or its human view."""
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    try:
        shown = render_status(status, classes=args.every_class)
    except DocumentError as e:
        raise CommandError(f"the daemon's status document cannot be read: {e}") from None
    sys.stdout.write(shown)
    return 0


def watch_status(
    fetch: Callable[[], dict[str, Any]], args: argparse.Namespace, views: Any = None
) -> int:
    """C{quicx status --watch}: until Ctrl-C (exit 0), C{--count} or the daemon goes."""
    from quicx.status.watch import watch  # rich: loaded only to watch

    with suppress(KeyboardInterrupt):  # how a watch is meant to end
        watch(fetch, sys.stdout, args.interval or 1.0, args.count, as_json=args.json, views=views)
    return 0


def ask_status(address: str, timeout: float) -> dict[str, Any]:
    """
    The status document of the daemon at C{address}, over the wire (STATUS).

    @raise StatusUnavailable: with a one-line reason.
    """
    try:
        with QuicxClient(address, timeout=timeout) as client:
            return client.status()
    except TimeoutError:
        raise StatusUnavailable(f"no answer from {address} within {timeout:g} s") from None
    except OSError as e:
        raise StatusUnavailable(f"no daemon answers on {address}: {e.strerror or e}") from None
    except (QuicxError, ValueError) as e:
        raise StatusUnavailable(str(e)) from None


def wire_status(args: argparse.Namespace) -> int:
    """
    C{quicx status --connect A[,B...]}: one daemon as over the control
    socket; several side by side (exit 1 when one is down, but with --watch).
    """
    try:
        addresses = split_addresses(args.connect)
        for address in addresses:
            tls = parse_address(address)[2]
            if tls is not None:
                tls.context()
    except ValueError as e:  # TlsConfigError included
        raise CommandError(f"bad address: {e}") from None
    ask = functools.partial(ask_status, timeout=args.timeout)
    if len(addresses) == 1:
        fetch = functools.partial(ask, addresses[0])
        try:
            return watch_status(fetch, args) if args.watch else show_status(fetch(), args)
        except StatusUnavailable as e:
            raise CommandError(str(e)) from None
    from quicx.status.cluster import cluster_views, fetcher, render_cluster  # rich

    fetch_view = fetcher(addresses, ask)
    if args.watch:
        return watch_status(fetch_view, args, cluster_views)
    view = fetch_view()
    if args.json:
        print(json.dumps(view, indent=2))
    else:
        sys.stdout.write(render_cluster(view))
    return 1 if view["total"]["down"] else 0


FULLEST_CLASSES = 3
"""The size classes the folded status view shows: the fullest in use."""


def render_status(status: StatusDocument | Mapping[str, Any], classes: bool = False) -> str:
    """The human view of a status document: every size class's line if C{classes}."""
    status = read_status(status)
    tasks, connections = status.tasks, status.connections
    used, total = status.memory.used, status.memory.total
    lines = [
        f"Quicx {status.version} (protocol {', '.join(map(str, status.versions))})"
        f"   pid {status.pid}"
        f"   up {human_duration(status.uptime)}",
        f"  listening   {', '.join(status.listening) or '-'}",
        f"  config      {status.config}",
        *(() if status.replication is None else (f"  replication {status.replication.summary}",)),
        "",
        "Tasks",
        f"  submitted   {thousands(tasks.submitted):>14}",
        f"  completed   {thousands(tasks.completed):>14}",
        f"  failed      {thousands(tasks.failed):>14}",
        f"  rejected    {thousands(tasks.rejected):>14}",
        f"  requeued    {thousands(tasks.requeued):>14}",
        f"  cancelled   {thousands(tasks.cancelled):>14}"
        f"   ({thousands(tasks.duplicates)} duplicate submits answered)",
        f"  timed out   {thousands(tasks.timed_out):>14}"
        f"   ({thousands(tasks.late_outcomes)} outcomes came after another's)",
        f"  given up    {thousands(tasks.given_up):>14}   (counted in failed)",
        f"  retried     {thousands(tasks.retried):>14}"
        f"   ({thousands(tasks.stale_outcomes)} stale outcomes refused)",
        f"  dead        {thousands(tasks.dead):>14}"
        f"   ({thousands(tasks.dead_now)} kept,"
        f" {thousands(tasks.dead_dropped)} dropped)",
        f"  delayed     {thousands(tasks.delayed):>14}   (waiting for their time)",
        f"  expired     {thousands(tasks.expired):>14}   (not started before their deadline)",
        f"  debounced   {thousands(tasks.debounced):>14}   (submits folded into a queued task)",
        f"  waiting     {thousands(tasks.waiting):>14}   (for their parents or group, now)",
        f"  results     {thousands(tasks.results_kept):>14}"
        f"   ({thousands(status.results.kept)} kept now,"
        f" {thousands(tasks.results_evicted)} evicted,"
        f" {thousands(tasks.results_expired)} expired)",
        f"  in flight   {thousands(tasks.queued + tasks.running):>14}"
        f"   ({thousands(tasks.queued)} queued + {thousands(tasks.running)} running)",
        f"  checkpoints {thousands(status.checkpoints.kept):>14}"
        f"   ({format_size(status.checkpoints.bytes)} kept)",
        "",
        "Connections",
        f"  workers     {thousands(connections.workers):>14}"
        f"   ({thousands(connections.idle_workers)} idle)",
        f"  producers   {thousands(connections.producers):>14}"
        f"   ({thousands(connections.paused)} paused: not reading their replies)",
        f"  total       {thousands(connections.total):>14}",
        *(
            f"  {printable(c.client)} (protocol {c.protocol}):"
            f" {c.connections} {c.role}{'' if c.connections == 1 else 's'}"
            for c in status.clients
        ),
        "",
        *_queue_lines(status.queues),
        "Memory",
        f"  {bar(used, total)}  {format_size(used)} / {format_size(total)}"
        f"  ({100 * used / total:.1f}%)",
        *_shared_lines(status.shared),
        "",
        *_journal_lines(status.journal),
        *(_class_lines if classes else _folded_class_lines)(status.classes),
    ]
    return "\n".join(lines) + "\n"


def _class_lines(classes: Sequence[SizeClass]) -> list[str]:
    """Every size class: its blocks used out of its total, with a bar."""
    return ["Size classes      blocks used / total", *map(_class_line, classes)]


def _folded_class_lines(classes: Sequence[SizeClass]) -> list[str]:
    """How many size classes are in use, and the fullest few."""
    used = [c for c in classes if c.blocks_used]
    fullest = sorted(used, key=lambda c: (-c.blocks_used / c.blocks_total, c.size))
    blocks = sum(c.blocks_used for c in classes), sum(c.blocks_total for c in classes)
    return [
        f"Size classes      {len(used)} of {len(classes)} in use,"
        f" {thousands(blocks[0])} / {thousands(blocks[1])} blocks (--classes: each one)",
        *map(_class_line, fullest[:FULLEST_CLASSES]),
    ]


def _class_line(size_class: SizeClass) -> str:
    used, total = size_class.blocks_used, size_class.blocks_total
    return (
        f"  {thousands(size_class.size):>9} B  {bar(used, total)}"
        f"  {thousands(used):>9} / {thousands(total)}"
    )


def _queue_lines(queues: Sequence[Queue]) -> list[str]:
    if not queues:
        return []
    lines = ["Queues           queued   running   workers"]
    lines += [
        f"  {q.name[:12]:<12} {thousands(q.depth):>8} {thousands(q.running):>9}"
        f" {thousands(q.workers):>9}{'   paused' if q.paused else ''}"
        for q in queues
    ]
    return [*lines, ""]


def _shared_lines(shared: Shared | None) -> list[str]:
    """Shared data, outside the pool (a daemon before protocol v2 part 3 has none)."""
    if shared is None:
        return []
    return [
        f"  shared data: {thousands(shared.names)} names, {format_size(shared.bytes)}"
        f" ({thousands(shared.published)} versions published,"
        f" {thousands(shared.followers)} followers)"
    ]


def _journal_lines(journal: Journal | None) -> list[str]:
    if journal is None:
        return ["Journal     none: live tasks do not survive a restart", ""]
    lines = [
        f"Journal     {journal.path}   (fsync {journal.fsync})",
        f"  {format_size(journal.file_bytes)} on disk, {format_size(journal.live_bytes)}"
        f" live; {thousands(journal.syncs)} syncs, {journal.compactions} compactions",
    ]
    if journal.broken:
        lines.append(f"  BROKEN: {journal.broken} (new tasks are refused)")
    return [*lines, ""]
