"""
A cluster's daemons side by side, and their totals.  Pure functions over
their status documents (see docs/operations.md, "A cluster").

Each daemon is a L{Member}: its address and its latest status document (or
why it did not answer), and the one before, so that its rates and latency
percentiles cover the time between the two.  L{cluster_view} makes of the
members the document that C{quicx status --connect A,B --json}, the
dashboard's C{/api/cluster} and the C{quicx_cluster_*} metrics show.

The totals add the counts up, and the rates (each daemon's over its own
interval).  A total percentile is computed from the daemons' histogram
buckets added up -- never from their percentiles -- and only when every
daemon up uses the same bucket bounds; otherwise it is C{None}.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs
from attrs import frozen

from quicx.documents.latency import LATENCY_BUCKETS, quantile
from quicx.documents.status import StatusDocument, Tally, read_status
from quicx.documents.typed import DocumentError, as_json

PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
"""The latency percentiles shown, by name."""

COUNTS = ("submitted", "done", "failed", "cancelled")
"""The tasks counted since each daemon started (C{failed}: dead ones too)."""

Status = StatusDocument | Mapping[str, Any]
"""A status document, typed or as JSON gave it (read with L{read_status})."""

NOW = ("queued", "running", "delayed", "dead", "workers", "idle_workers", "connections")
"""What each daemon holds now."""


def same_run(earlier: Status | None, later: Status) -> bool:
    """
    Whether C{earlier} came from the same daemon process as C{later}, before
    it (not when either cannot be read: a peer's document may be anything).
    """
    if earlier is None:
        return False
    try:
        before, after = read_status(earlier), read_status(later)
    except DocumentError:
        return False
    return (
        before.pid == after.pid
        and before.started_at == after.started_at
        and before.uptime <= after.uptime
    )


@frozen
class Member:
    """
    One daemon of the cluster, as last asked.

    @ivar address: how it is reached (its label in every view).
    @ivar status: its latest status document; C{None} when it did not answer.
    @ivar earlier: the document before C{status}, from the same daemon
        process, or C{None}: the rates then run from its start.
    @ivar error: why it did not answer (when C{status} is C{None}).
    """

    address: str
    status: Status | None = None
    earlier: Status | None = None
    error: str = ""

    def answered(self, status: Status) -> Member:
        """This member after a new document: the latest becomes the one before."""
        earlier = self.status if self.status is not None and same_run(self.status, status) else None
        return Member(self.address, status, earlier)

    def failed(self, error: str) -> Member:
        """This member after a poll that got no document."""
        return Member(self.address, error=error)


@attrs.define
class Moved:
    """
    Tasks counted (L{COUNTS}), and the wait and run histogram buckets, over
    an interval: of one tally, or of several added up.
    """

    counts: dict[str, int] = attrs.Factory(lambda: dict.fromkeys(COUNTS, 0))
    wait: list[int] = attrs.Factory(list)
    run: list[int] = attrs.Factory(list)

    def add(self, later: Tally, earlier: Tally | None) -> None:
        """Add one tally's growth from C{earlier} (C{None}: from zero) to C{later}."""

        def grew(count: Callable[[Tally], int]) -> int:
            return count(later) - (count(earlier) if earlier else 0)

        self.counts["submitted"] += grew(lambda tally: tally.submitted)
        self.counts["done"] += grew(lambda tally: tally.done)
        self.counts["failed"] += grew(lambda tally: tally.failed + tally.dead)
        self.counts["cancelled"] += grew(lambda tally: tally.cancelled)
        for mine, now, then in (
            (self.wait, later.wait, earlier.wait if earlier else None),
            (self.run, later.run, earlier.run if earlier else None),
        ):
            before = then.counts if then else (0,) * len(now.counts)
            if not mine:
                mine.extend([0] * len(now.counts))
            for index, (count, counted) in enumerate(zip(now.counts, before, strict=True)):
                mine[index] += count - counted


def _moved(earlier: StatusDocument | None, later: StatusDocument) -> Moved:
    """Everything the telemetry of C{later} counted since C{earlier} (C{None}: since start)."""
    before = {tally.key: tally for tally in earlier.telemetry.tallies} if earlier else {}
    moved = Moved()
    for tally in later.telemetry.tallies:
        moved.add(tally, before.get(tally.key))
    return moved


def bucket_bounds(status: StatusDocument) -> tuple[float, ...]:
    """The bounds of C{status}'s latency buckets."""
    return status.telemetry.buckets or LATENCY_BUCKETS


def _percentiles(counts: Sequence[int], bounds: Sequence[float]) -> dict[str, float | None]:
    if not counts:
        return dict.fromkeys(PERCENTILES)
    return {name: quantile(counts, fraction, bounds) for name, fraction in PERCENTILES.items()}


def _now(status: StatusDocument) -> dict[str, int]:
    tasks, connections = status.tasks, status.connections
    return {
        "queued": tasks.queued,
        "running": tasks.running,
        "delayed": tasks.delayed,
        "dead": tasks.dead_now,
        "workers": connections.workers,
        "idle_workers": connections.idle_workers,
        "connections": connections.total,
    }


def _row(member: Member) -> tuple[dict[str, Any], Moved | None, tuple[float, ...]]:
    """
    One daemon's entry in the view, what it moved over its interval and its
    bucket bounds (none for a daemon down).
    """
    if member.status is None:
        return {"address": member.address, "up": False, "error": member.error}, None, ()
    status = read_status(member.status)
    earlier = None if member.earlier is None else read_status(member.earlier)
    since = _moved(None, status)
    moved = since if earlier is None else _moved(earlier, status)
    seconds = status.uptime - (earlier.uptime if earlier else 0.0)
    return (
        {
            "address": member.address,
            "up": True,
            "version": status.version,
            "pid": status.pid,
            "uptime": status.uptime,
            "tasks": since.counts,
            **_now(status),
            "memory": as_json(status.memory),
            "seconds": seconds,
            "since_start": earlier is None,
            "rates": {
                key: (moved.counts[key] / seconds if seconds > 0 else 0.0)
                for key in ("submitted", "done", "failed")
            },
            "wait": _percentiles(moved.wait, bucket_bounds(status)),
            "run": _percentiles(moved.run, bucket_bounds(status)),
        },
        moved,
        bucket_bounds(status),
    )


def _total(
    rows: Sequence[dict[str, Any]], moved: Sequence[Moved], bounds: Sequence[float] | None
) -> dict[str, Any]:
    """The daemons up added up; percentiles only with C{bounds} (the same for all)."""
    up = [row for row in rows if row["up"]]
    total: dict[str, Any] = {
        "daemons": len(rows),
        "up": len(up),
        "down": len(rows) - len(up),
        "tasks": {key: sum(row["tasks"][key] for row in up) for key in COUNTS},
        **{key: sum(row[key] for row in up) for key in NOW},
        "memory": {key: sum(row["memory"][key] for row in up) for key in ("used", "total")},
        "rates": {
            key: sum(row["rates"][key] for row in up) for key in ("submitted", "done", "failed")
        },
    }
    for key in ("wait", "run"):
        if bounds is None:
            total[key] = dict.fromkeys(PERCENTILES)
            continue
        histograms = [counts for one in moved if (counts := getattr(one, key))]
        total[key] = _percentiles([sum(b) for b in zip(*histograms, strict=True)], bounds)
    return total


def cluster_view(members: Iterable[Member]) -> dict[str, Any]:
    """
    The document of the cluster: C{daemons}, one entry per member in order
    (C{up}; the counts, what it holds now, memory, rates and percentiles;
    or the C{error} of one that is down), and their C{total}.
    """
    rows, moved, found = [], [], set()
    for member in members:
        try:
            row, its, bounds = _row(member)
        except ValueError as e:  # DocumentError: a peer's document may be anything
            reason = f"its status document cannot be read: {type(e).__name__}: {e}"
            row, its, bounds = _row(member.failed(reason))
        rows.append(row)
        if its is not None:
            moved.append(its)
            found.add(bounds)
    same = next(iter(found)) if len(found) == 1 else None
    return {"daemons": rows, "total": _total(rows, moved, same)}
