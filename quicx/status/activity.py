"""
What went through the daemon between two status documents: rates and percentiles.

What went through the daemon between two status documents: tasks per
second submitted, done and failed, and the wait and run percentiles, for
the daemon as a whole, per queue and per task type.

Pure functions over the documents' C{telemetry} tallies (see
docs/operations.md and L{quicx.documents.status}): the counts and histogram
buckets of the later one less those of the earlier one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import attrs

from quicx.documents.cluster import Moved, Status, bucket_bounds, same_run
from quicx.documents.latency import quantile
from quicx.documents.status import read_status

PERCENTILES = (0.5, 0.95, 0.99)
"""The fractions each latency is shown at: p50, p95, p99."""


@attrs.frozen
class Flow:
    """
    One row's traffic over the interval: the daemon's (C{name} C{"all"}),
    a queue's or a task type's.

    @ivar submitted: tasks accepted per second.
    @ivar done: tasks done per second.
    @ivar failed: tasks failed per second, into the dead letters or not.
    @ivar wait: the p50, p95 and p99 (seconds) of the waits, ready to
        dispatched, that ended in the interval; C{None} each without any.
    @ivar run: the same of the runs, dispatched to reported.
    @ivar moved: tasks submitted, done and failed in the interval (a count,
        for ordering the rows busiest first).
    """

    name: str
    submitted: float
    done: float
    failed: float
    wait: tuple[float | None, ...]
    run: tuple[float | None, ...]
    moved: int


@attrs.frozen
class Activity:
    """
    The interval between two status documents, and what went through.

    @ivar seconds: its length, by the daemon's clock.
    @ivar since_start: whether it runs from the daemon's start (there was no
        earlier document from this daemon process).
    @ivar queues: a L{Flow} per queue, busiest first.
    @ivar types: a L{Flow} per task type, busiest first.
    """

    seconds: float
    since_start: bool
    overall: Flow
    queues: tuple[Flow, ...]
    types: tuple[Flow, ...]


def _flow(name: str, moved: Moved, seconds: float, bounds: Sequence[float]) -> Flow:
    def rate(count: int) -> float:
        return count / seconds if seconds > 0 else 0.0

    counts = moved.counts
    return Flow(
        name=name,
        submitted=rate(counts["submitted"]),
        done=rate(counts["done"]),
        failed=rate(counts["failed"]),
        wait=percentiles(moved.wait, bounds),
        run=percentiles(moved.run, bounds),
        moved=counts["submitted"] + counts["done"] + counts["failed"],
    )


def percentiles(counts: Sequence[int], bounds: Sequence[float]) -> tuple[float | None, ...]:
    """The L{PERCENTILES} of histogram bucket C{counts} (C{None} each when empty)."""
    return tuple(quantile(counts, fraction, bounds) for fraction in PERCENTILES)


def activity(earlier: Status | None, later: Status) -> Activity:
    """
    What went through between status documents C{earlier} and C{later}:
    since the daemon started when C{earlier} is C{None} or came from
    another daemon process (one restarted in between).
    """
    document = read_status(later)
    before = read_status(earlier) if earlier is not None and same_run(earlier, later) else None
    bounds = bucket_bounds(document)
    then = {tally.key: tally for tally in before.telemetry.tallies} if before else {}
    overall = Moved()
    queues: dict[str, Moved] = {}
    types: dict[str, Moved] = {}
    for tally in document.telemetry.tallies:
        for row in (
            overall,
            queues.setdefault(tally.queue, Moved()),
            types.setdefault(tally.type, Moved()),
        ):
            row.add(tally, then.get(tally.key))
    seconds = document.uptime - (before.uptime if before else 0.0)
    return Activity(
        seconds=seconds,
        since_start=before is None,
        overall=_flow("all", overall, seconds, bounds),
        queues=_rows(queues, seconds, bounds),
        types=_rows(types, seconds, bounds),
    )


def _rows(sums: Mapping[str, Moved], seconds: float, bounds: Sequence[float]) -> tuple[Flow, ...]:
    return busiest(_flow(name, total, seconds, bounds) for name, total in sums.items())


def busiest(flows: Iterable[Flow]) -> tuple[Flow, ...]:
    """C{flows}, the most tasks moved first, then by name."""
    return tuple(sorted(flows, key=lambda flow: (-flow.moved, flow.name)))
