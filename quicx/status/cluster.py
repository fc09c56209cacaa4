"""
C{quicx status --connect A,B,...}: several daemons side by side, and their total.

C{quicx status --connect A,B,...}: several daemons side by side, one column
each and one for their total (the document of L{cluster_view}), asked over
the wire at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from quicx.documents.cluster import PERCENTILES, Member, cluster_view
from quicx.documents.units import format_size
from quicx.status.text import NONE, human_duration, latency, printable, rate, thousands
from quicx.status.watch import plain_console

Ask = Callable[[str], Mapping[str, Any]]
"""Fetches one daemon's status document, or raises an exception whose text says why."""

PLAIN_WIDTH = 200
"""The width of the table when it is not on a terminal (no column is cut)."""


def polled(members: Sequence[Member], ask: Ask) -> list[Member]:
    """Each of C{members} asked again, all at once: answered, or down with the reason."""

    def one(member: Member) -> Member:
        try:
            return member.answered(ask(member.address))
        except Exception as e:  # any reason it did not answer: it is shown as down
            return member.failed(str(e))

    with ThreadPoolExecutor(max_workers=len(members)) as pool:
        return list(pool.map(one, members))


def fetcher(addresses: Sequence[str], ask: Ask) -> Callable[[], dict[str, Any]]:
    """A fetch of the cluster view for L{quicx.status.watch}: the rates since the fetch before."""
    members = [Member(address) for address in addresses]

    def fetch() -> dict[str, Any]:
        members[:] = polled(members, ask)
        return cluster_view(members)

    return fetch


def _cells(entry: Mapping[str, Any]) -> list[str]:
    """One column: a daemon's (up or down) or the total's."""
    if not entry.get("up", True):
        return ["down", *[NONE] * (len(ROWS) - 1)]
    memory = entry["memory"]
    used, total = memory["used"], memory["total"]
    first = (
        f"{entry['up']} of {entry['daemons']} up"
        if "daemons" in entry
        else f"up {human_duration(entry['uptime'])}"
    )
    return [
        first,
        *(thousands(entry["tasks"][key]) for key in ("submitted", "done", "failed", "cancelled")),
        *(rate(entry["rates"][key]) for key in ("submitted", "done", "failed")),
        *(thousands(entry[key]) for key in ("queued", "running", "delayed", "dead")),
        f"{thousands(entry['workers'])} ({thousands(entry['idle_workers'])} idle)",
        thousands(entry["connections"]),
        f"{format_size(used)} / {format_size(total)}",
        *(latency(entry["wait"][name]) for name in PERCENTILES),
        *(latency(entry["run"][name]) for name in PERCENTILES),
    ]


ROWS = (
    "",
    "submitted",
    "done",
    "failed",
    "cancelled",
    "submitted/s",
    "done/s",
    "failed/s",
    "queued",
    "running",
    "delayed",
    "dead",
    "workers",
    "connections",
    "memory",
    *(f"wait {name}" for name in PERCENTILES),
    *(f"run {name}" for name in PERCENTILES),
)
"""Each row's heading: the counts since start, rates, what is held now, percentiles."""


def cluster_table(view: Mapping[str, Any]) -> RenderableType:
    """The view: a column per daemon and the total's, then a line per daemon down."""
    daemons = view["daemons"]
    table = Table(box=None, pad_edge=False, header_style="bold", padding=(0, 1))
    table.add_column("", no_wrap=True)
    for entry in daemons:
        table.add_column(printable(entry["address"]), justify="right", no_wrap=True)
    table.add_column("total", justify="right", no_wrap=True, style="bold")
    columns = [_cells(entry) for entry in (*daemons, view["total"])]
    for index, heading in enumerate(ROWS):
        table.add_row(heading, *(column[index] for column in columns))
    up = [entry for entry in daemons if entry["up"]]
    over = (
        "since each daemon's start"
        if all(entry["since_start"] for entry in up)
        else f"over the last {max(entry['seconds'] for entry in up):.1f} s"
    )
    # Why one is down may hold what it sent (an ERROR's text): never a terminal's escape.
    down = [
        Text(printable(f"down: {entry['address']}: {entry['error']}"))
        for entry in daemons
        if not entry["up"]
    ]
    return Group(Text(f"Quicx cluster   tasks per second {over}", style="bold"), table, *down)


def cluster_views(documents: Iterator[dict[str, Any]]) -> Iterator[RenderableType]:
    """For L{quicx.status.watch.watch}: each cluster view as its table."""
    return (cluster_table(view) for view in documents)


def render_cluster(view: Mapping[str, Any]) -> str:
    """The view as plain text, for a one-shot C{quicx status --connect A,B}."""
    console = plain_console(width=PLAIN_WIDTH)
    with console.capture() as captured:
        console.print(cluster_table(view))
    return "\n".join(line.rstrip() for line in captured.get().splitlines()) + "\n"
