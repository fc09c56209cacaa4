"""
Counts and latencies per queue and task type: what C{quicx status}, the
Prometheus C{/metrics} and the web dashboard show.

Always on, and cheap enough to be: the core keeps one L{Tally} per (queue,
task type) and a task holds its own, so counting is an attribute increment
and a latency is one C{bisect} into fixed buckets.  Nothing here allocates
per task.

Label cardinality is bounded: past C{max_types} task types, further types
count as C{other}; past C{max_series} (queue, type) pairs, further pairs
count under queue C{other} too, whether their type has a label of its own
or counts as C{other}: there are at most C{max_series} pairs, and one
(C{other}, C{other}).  A type's label is its name decoded from UTF-8 (what
is not UTF-8 becomes U+FFFD), so two types may decode alike: the later one
counts as C{other}, as no two series may share their labels.
Tallies are never forgotten (Prometheus counters only go up), so these two
bounds are what bounds the memory.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from quicx.documents import status
from quicx.documents.latency import LATENCY_BUCKETS

JOURNAL_BUCKETS: tuple[float, ...] = (
    0.00001,
    0.000025,
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
)
"""Upper bounds (seconds) of the journal's write and sync buckets: from 10 µs."""

OTHER = "other"
"""The label that types (and queues) past the cardinality bounds count under."""

DEFAULT_MAX_TYPES = 50
DEFAULT_MAX_SERIES = 2000


class Histogram:
    """
    Counts of observations (seconds) per bucket of C{bounds} (their upper
    bounds), and their sum.  C{counts[i]} is the number in bucket C{i} alone
    (not cumulative); the last bucket has no upper bound.
    """

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.counts[bisect_left(self.bounds, seconds)] += 1
        self.total += seconds

    @property
    def count(self) -> int:
        return sum(self.counts)

    def add(self, other: Histogram) -> None:
        """Add C{other}'s observations to these."""
        self.counts = [a + b for a, b in zip(self.counts, other.counts, strict=True)]
        self.total += other.total

    def document(self) -> status.Histogram:
        """As the status document shows it."""
        return status.Histogram(tuple(self.counts), round(self.total, 6))


class Tally:
    """
    One (queue, task type)'s counts since start: tasks submitted (accepted),
    finished (done, failed, dead, cancelled), attempts retried and requeued;
    for each delivery a worker reported, its wait (from ready -- queued,
    due or requeued -- to dispatched) and its run (dispatched to reported).
    """

    __slots__ = (
        "cancelled",
        "dead",
        "debounced",
        "done",
        "expired",
        "failed",
        "queue",
        "requeued",
        "retried",
        "run",
        "submitted",
        "task_type",
        "wait",
    )

    OUTCOMES = ("done", "failed", "dead", "cancelled", "expired")
    COUNTS = ("submitted", *OUTCOMES, "retried", "requeued", "debounced")

    def __init__(self, queue: str, task_type: str) -> None:
        self.queue = queue
        self.task_type = task_type
        self.submitted = self.done = self.failed = self.dead = self.cancelled = 0
        self.retried = self.requeued = 0
        self.expired = self.debounced = 0
        self.wait = Histogram()
        self.run = Histogram()

    def ran(self, wait: float, run: float) -> None:
        """
        A delivery reported: it waited C{wait} seconds to be dispatched,
        then ran C{run}.  (One call for both: this is on the hot path.)
        """
        histogram = self.wait
        histogram.counts[bisect_left(LATENCY_BUCKETS, wait)] += 1
        histogram.total += wait
        histogram = self.run
        histogram.counts[bisect_left(LATENCY_BUCKETS, run)] += 1
        histogram.total += run

    def add(self, other: Tally) -> None:
        """Add C{other}'s counts and observations to these."""
        for name in Tally.COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.wait.add(other.wait)
        self.run.add(other.run)

    def copy(self) -> Tally:
        """A copy of these counts as they are now."""
        copy = Tally(self.queue, self.task_type)
        copy.add(self)
        return copy

    def document(self) -> status.Tally:
        """As the status document shows it."""
        return status.Tally(
            self.queue,
            self.task_type,
            **{name: getattr(self, name) for name in Tally.COUNTS},
            wait=self.wait.document(),
            run=self.run.document(),
        )


class Telemetry:
    """
    Every L{Tally}, and the rejected SUBMITs by error code.

    @ivar max_types: task types with a label of their own.
    @ivar max_series: (queue, type) pairs with labels of their own.
    """

    def __init__(self, max_types: int = DEFAULT_MAX_TYPES, max_series: int = DEFAULT_MAX_SERIES):
        self.max_types = max_types
        self.max_series = max_series
        self.tallies: dict[tuple[str, bytes], Tally] = {}
        self._types: dict[bytes, str] = {}
        self._labels: set[str] = set()
        self.rejected: Counter[str] = Counter()

    def tally(self, queue: str, task_type: bytes) -> Tally:
        """The tally a task of C{task_type} in C{queue} counts in (made on first use)."""
        found = self.tallies.get((queue, task_type))
        if found is not None:
            return found
        label = self._types.get(task_type)
        if label is None:
            decoded = task_type.decode("utf-8", "replace")
            if len(self._types) < self.max_types and decoded not in self._labels:
                label = self._types[task_type] = decoded
                self._labels.add(decoded)
            else:
                label = OTHER
        if label == OTHER:
            task_type = OTHER.encode()
            found = self.tallies.get((queue, task_type))
        if found is None:
            if len(self.tallies) >= self.max_series:
                # A new pair past the bound, of a type of its own or of other.
                queue, task_type, label = OTHER, OTHER.encode(), OTHER
                found = self.tallies.get((queue, task_type))
            if found is None:
                found = self.tallies[queue, task_type] = Tally(queue, label)
        return found

    def total(self) -> Tally:
        """Every tally added up (its queue and type C{*}): the daemon's own counts."""
        total = Tally("*", "*")
        for tally in self.tallies.values():
            total.add(tally)
        return total

    def document(self) -> status.Telemetry:
        """For the status document: bounds, every tally, rejections by code."""
        return status.Telemetry(
            LATENCY_BUCKETS,
            tuple(self.tallies[key].document() for key in sorted(self.tallies)),
            dict(self.rejected),
        )
