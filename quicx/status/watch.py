"""
C{quicx status --watch}: what went through since the last refresh, and the state now.

C{quicx status --watch}: a status document every interval, shown as what
went through since the one before (L{activity}) and the queues, workers and
memory now.

On a terminal, rich's L{Live} redraws one view in place; anywhere else
(a pipe, a file) each refresh is a plain block of text after the last, with
no escape codes, so the output can be kept as a log.  With C{--json}, each
status document is one line of JSON.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, TextIO

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from quicx.documents.status import Queue, StatusDocument, read_status
from quicx.documents.units import format_size
from quicx.status.activity import Activity, Flow, activity
from quicx.status.text import bar, human_duration, latency, printable, rate, thousands

MAX_ROWS = 8
"""Queues (and task types) shown at most, busiest first; the rest are counted."""

PLAIN_WIDTH = 100
"""The width of the plain blocks: the view fits it."""
TEXT_ONLY: dict[str, Any] = {"highlight": False, "markup": False, "emoji": False}
"""What a console of ours leaves as it is: the daemon's and clients' text."""

LATENCIES = ("wait p50", "p95", "p99", "run p50", "p95", "p99")
"""The latency columns' headings (L{activity.PERCENTILES} of each)."""

Fetch = Callable[[], dict[str, Any]]


def polled(
    fetch: Fetch,
    interval: float,
    count: int | None,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[dict[str, Any]]:
    """
    C{fetch()}'s documents, one every C{interval} seconds, C{count} of them
    (C{None}: for ever).  The times are on a fixed schedule; a fetch slower
    than the interval starts the schedule again from its end.
    """
    due = clock()
    for fetched in itertools.count():
        if fetched == count:
            return
        if fetched:
            due += interval
            late = clock() - due
            if late > 0:
                due += late
            else:
                sleep(-late)
        yield fetch()


def watch(
    fetch: Fetch,
    out: TextIO,
    interval: float,
    count: int | None = None,
    as_json: bool = False,
    sleep: Callable[[float], object] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    views: Callable[[Iterator[dict[str, Any]]], Iterator[RenderableType]] | None = None,
) -> None:
    """
    Show C{fetch()}'s documents on C{out}, C{count} times (C{None}: until
    interrupted): as lines of JSON, or as views in place on a terminal, or
    as plain blocks.  Whatever C{fetch} raises ends it.

    @param views: makes the views of the documents (default: a status
        document's, from what went through since the one before).
    """
    documents = polled(fetch, interval, count, sleep, clock)
    if as_json:
        for document in documents:
            out.write(json.dumps(document) + "\n")
            out.flush()
        return
    made = (views or _views)(documents)
    if out.isatty():
        with Live(console=Console(file=out, **TEXT_ONLY), auto_refresh=False) as live:
            for shown in made:
                live.update(shown, refresh=True)
        return
    console = plain_console(out)
    for shown in made:
        console.print(shown)
        console.print()
        out.flush()


def plain_console(out: TextIO | None = None, width: int = PLAIN_WIDTH) -> Console:
    """A console writing plain text to C{out} (C{None}: to capture), C{width} wide."""
    return Console(file=out, width=width, force_terminal=False, color_system=None, **TEXT_ONLY)


def _views(documents: Iterator[dict[str, Any]]) -> Iterator[RenderableType]:
    """A L{view} of each document, from what went through since the one before."""
    earlier = None
    for later in documents:
        document = read_status(later)
        yield view(document, activity(earlier, document))
        earlier = document


def view(status: StatusDocument, moved: Activity) -> RenderableType:
    """One refresh: the header, the traffic, the queues, workers and memory."""
    return Group(
        _header(status, moved),
        Text(),
        _traffic(moved),
        Text(),
        *_queues(status.queues),
        *_totals(status),
    )


def _header(status: StatusDocument, moved: Activity) -> Text:
    now = datetime.fromtimestamp((status.started_at or 0.0) + status.uptime)
    over = "since start" if moved.since_start else f"over the last {moved.seconds:.1f} s"
    return Text(
        f"Quicx {status.version}   pid {status.pid}   up {human_duration(status.uptime)}"
        f"   {now:%Y-%m-%d %H:%M:%S}   tasks per second {over}",
        style="bold",
    )


def _traffic(moved: Activity) -> Table:
    """Rates and latency percentiles: overall, per queue, per task type."""
    table = _table()
    table.add_column("", no_wrap=True, overflow="ellipsis", max_width=24)
    for heading in ("submitted", "done", "failed", *LATENCIES):
        table.add_column(heading, justify="right", no_wrap=True)
    table.add_row(*_flow_cells("all", moved.overall), style="bold")
    for kind, flows in (("queue", moved.queues), ("type", moved.types)):
        for flow in flows[:MAX_ROWS]:
            table.add_row(*_flow_cells(f"{kind} {printable(flow.name)}", flow))
        if len(flows) > MAX_ROWS:
            table.add_row(f"  + {len(flows) - MAX_ROWS} more {kind}s", style="dim")
    return table


def _flow_cells(label: str, flow: Flow) -> list[str]:
    return [
        label,
        rate(flow.submitted),
        rate(flow.done),
        rate(flow.failed),
        *(latency(seconds) for seconds in flow.wait),
        *(latency(seconds) for seconds in flow.run),
    ]


def _queues(queues: Sequence[Queue]) -> list[RenderableType]:
    """Each queue's tasks and workers now, the fullest first."""
    if not queues:
        return []
    table = _table()
    table.add_column("queue", no_wrap=True, overflow="ellipsis", max_width=24)
    for heading in ("queued", "running", "delayed", "dead", "workers", "idle"):
        table.add_column(heading, justify="right", no_wrap=True)
    paused = any(queue.paused for queue in queues)
    if paused:
        table.add_column("")
    fullest = sorted(queues, key=lambda q: (-q.depth - q.running, q.name))
    for queue in fullest[:MAX_ROWS]:
        table.add_row(
            queue.name,
            *map(
                thousands,
                (
                    queue.depth,
                    queue.running,
                    queue.delayed,
                    queue.dead,
                    queue.workers,
                    queue.idle_workers,
                ),
            ),
            *(["paused" if queue.paused else ""] if paused else []),
        )
    if len(queues) > MAX_ROWS:
        table.add_row(f"  + {len(queues) - MAX_ROWS} more queues", style="dim")
    return [table, Text()]


def _totals(status: StatusDocument) -> list[RenderableType]:
    """Workers, connections, kept results and dead letters; the pool's memory."""
    tasks, connections = status.tasks, status.connections
    used, total = status.memory.used, status.memory.total
    return [
        Text(
            f"workers {thousands(connections.workers)}"
            f" ({thousands(connections.idle_workers)} idle)"
            f"   connections {thousands(connections.total)}"
            f"   results kept {thousands(status.results.kept)}"
            f"   dead letters {thousands(tasks.dead_now)}"
            f"   delayed {thousands(tasks.delayed)}"
        ),
        Text(
            f"memory  {bar(used, total)}  {format_size(used)} / {format_size(total)}"
            f"  ({100 * used / total:.1f}%)"
        ),
    ]


def _table() -> Table:
    return Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
