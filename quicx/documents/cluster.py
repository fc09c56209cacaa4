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

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs
from attrs import frozen

from quicx.documents.latency import LATENCY_BUCKETS, quantile

PERCENTILES = {"p50": 0.5, "p95": 0.95, "p99": 0.99}
"""The latency percentiles shown, by name."""

COUNTS = ("submitted", "done", "failed", "cancelled")
"""The tasks counted since each daemon started (C{failed}: dead ones too)."""

NOW = ("queued", "running", "delayed", "dead", "workers", "idle_workers", "connections")
"""What each daemon holds now."""


def same_run(earlier: Mapping[str, Any] | None, later: Mapping[str, Any]) -> bool:
    """
    Whether C{earlier} came from the same daemon process as C{later}, before
    it (not when either has no numeric C{uptime}: a peer's document may be
    anything).
    """
    if earlier is None:
        return False
    before, after = earlier.get("uptime"), later.get("uptime")
    return (
        earlier.get("pid") == later.get("pid")
        and earlier.get("started_at") == later.get("started_at")
        and isinstance(before, int | float)
        and isinstance(after, int | float)
        and before <= after
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
    status: Mapping[str, Any] | None = None
    earlier: Mapping[str, Any] | None = None
    error: str = ""

    def answered(self, status: Mapping[str, Any]) -> Member:
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

    def add(self, later: Mapping[str, Any], earlier: Mapping[str, Any] | None) -> None:
        """Add one tally's growth from C{earlier} (C{None}: from zero) to C{later}."""

        def grew(key: str) -> int:
            return int(later.get(key, 0)) - (int(earlier.get(key, 0)) if earlier else 0)

        self.counts["submitted"] += grew("submitted")
        self.counts["done"] += grew("done")
        self.counts["failed"] += grew("failed") + grew("dead")
        self.counts["cancelled"] += grew("cancelled")
        for mine, key in ((self.wait, "wait"), (self.run, "run")):
            counts = later[key]["counts"]
            before = earlier[key]["counts"] if earlier else [0] * len(counts)
            if not mine:
                mine.extend([0] * len(counts))
            for index, (now, then) in enumerate(zip(counts, before, strict=True)):
                mine[index] += now - then


def _moved(earlier: Mapping[str, Any] | None, later: Mapping[str, Any]) -> Moved:
    """Everything the telemetry of C{later} counted since C{earlier} (C{None}: since start)."""
    before = {
        (tally["queue"], tally["type"]): tally
        for tally in ((earlier or {}).get("telemetry") or {}).get("tallies", ())
    }
    moved = Moved()
    for tally in ((later.get("telemetry") or {}).get("tallies")) or ():
        moved.add(tally, before.get((tally["queue"], tally["type"])))
    return moved


def _bounds(status: Mapping[str, Any]) -> tuple[float, ...]:
    return tuple((status.get("telemetry") or {}).get("buckets") or LATENCY_BUCKETS)


def _percentiles(counts: Sequence[int], bounds: Sequence[float]) -> dict[str, float | None]:
    if not counts:
        return dict.fromkeys(PERCENTILES)
    return {name: quantile(counts, fraction, bounds) for name, fraction in PERCENTILES.items()}


def _now(status: Mapping[str, Any]) -> dict[str, int]:
    tasks, connections = status.get("tasks", {}), status.get("connections", {})
    return {
        "queued": tasks.get("queued", 0),
        "running": tasks.get("running", 0),
        "delayed": tasks.get("delayed", 0),
        "dead": tasks.get("dead_now", 0),
        "workers": connections.get("workers", 0),
        "idle_workers": connections.get("idle_workers", 0),
        "connections": connections.get("total", 0),
    }


def _row(member: Member) -> tuple[dict[str, Any], Moved | None]:
    """One daemon's entry in the view, and what it moved over its interval."""
    status = member.status
    if status is None:
        return {"address": member.address, "up": False, "error": member.error}, None
    since = _moved(None, status)
    moved = since if member.earlier is None else _moved(member.earlier, status)
    seconds = status["uptime"] - (member.earlier["uptime"] if member.earlier else 0.0)
    bounds = _bounds(status)
    return {
        "address": member.address,
        "up": True,
        "version": status.get("version"),
        "pid": status.get("pid"),
        "uptime": status["uptime"],
        "tasks": since.counts,
        **_now(status),
        "memory": dict(status.get("memory", {"used": 0, "total": 0})),
        "seconds": seconds,
        "since_start": member.earlier is None,
        "rates": {
            key: (moved.counts[key] / seconds if seconds > 0 else 0.0)
            for key in ("submitted", "done", "failed")
        },
        "wait": _percentiles(moved.wait, bounds),
        "run": _percentiles(moved.run, bounds),
    }, moved


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
    rows, moved, bounds = [], [], set()
    for member in members:
        try:
            row, its = _row(member)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
            reason = f"its status document cannot be read: {type(e).__name__}: {e}"
            row, its = _row(member.failed(reason))
        rows.append(row)
        if its is not None and member.status is not None:
            moved.append(its)
            bounds.add(_bounds(member.status))
    same = next(iter(bounds)) if len(bounds) == 1 else None
    return {"daemons": rows, "total": _total(rows, moved, same)}
