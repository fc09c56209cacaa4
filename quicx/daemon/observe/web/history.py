"""
The dashboard's memory: a sample of the daemon's figures a second, in a ring.

The dashboard's memory: one L{Sample} of the daemon's figures a second, the
last C{[web] history} seconds of them in a ring (what the charts of the last
hour draw).

Sampling reads totals the core keeps anyway (its counters, the telemetry's
histograms), so it costs nothing per task: once a second it sums the
histograms of every (queue, type) tally and takes the difference from the
second before, which gives that second's wait and run percentiles.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from attrs import fields, frozen

from quicx.daemon.queue.core import QueueService
from quicx.documents.latency import quantile


@frozen
class Sample:
    """
    The daemon's figures at C{time} (Unix seconds): totals since start, the
    rates per second since the sample before, what is queued, running,
    delayed and dead now, the workers and connections, the pool bytes used,
    and the wait and run percentiles (seconds) of the tasks dispatched and
    finished in that second (C{None}: there were none).
    """

    time: float
    submitted: int
    done: int
    failed: int
    submitted_rate: float
    done_rate: float
    failed_rate: float
    queued: int
    running: int
    delayed: int
    dead: int
    workers: int
    connections: int
    pool_used: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None

    def as_dict(self) -> dict[str, Any]:
        return dict(zip(FIELDS, self.as_row(), strict=True))

    def as_row(self) -> list[Any]:
        """The values in the order of L{FIELDS} (the history's compact form)."""
        return [getattr(self, name) for name in FIELDS]


FIELDS: tuple[str, ...] = tuple(field.name for field in fields(Sample))


@frozen
class _Totals:
    """What the next sample's rates and percentiles are counted from."""

    time: float
    submitted: int
    done: int
    failed: int
    wait: list[int]
    run: list[int]


def _percentile(before: list[int], after: list[int], fraction: float) -> float | None:
    found = quantile([b - a for a, b in zip(before, after, strict=True)], fraction)
    return None if found is None else round(found, 6)


class History:
    """
    The samples of the last C{seconds} seconds, oldest first; L{sample} takes
    one (a timer calls it every second) and tells each listener.

    @ivar latest: the newest sample, kept even when C{seconds} is 0.
    """

    def __init__(self, queue: QueueService, seconds: float) -> None:
        self.queue = queue
        self.samples: deque[Sample] = deque(maxlen=int(seconds))
        self.latest: Sample | None = None
        self._listeners: list[Callable[[Sample], object]] = []
        self._last: _Totals | None = None

    def listen(self, listener: Callable[[Sample], object]) -> None:
        """Call C{listener} with each new sample."""
        self._listeners.append(listener)

    def _totals(self) -> _Totals:
        queue = self.queue
        total = queue.telemetry.total()
        counters = queue.counters(total)
        return _Totals(
            queue.clock(),
            counters.submitted,
            counters.completed,
            counters.failed,
            total.wait.counts,
            total.run.counts,
        )

    def sample(self) -> Sample | None:
        """
        Take a sample now and tell the listeners; the first call only sets
        where the rates count from (C{None}).
        """
        now, last = self._totals(), self._last
        self._last = now
        if last is None:
            return None
        queue = self.queue
        stats = queue.stats()
        elapsed = max(now.time - last.time, 1e-6)
        sample = Sample(
            time=round(now.time, 3),
            submitted=now.submitted,
            done=now.done,
            failed=now.failed,
            submitted_rate=round((now.submitted - last.submitted) / elapsed, 3),
            done_rate=round((now.done - last.done) / elapsed, 3),
            failed_rate=round((now.failed - last.failed) / elapsed, 3),
            queued=stats.queue_depth,
            running=queue.tasks_running,
            delayed=queue.delays.count,
            dead=len(queue.dead_letters),
            workers=stats.workers_total,
            connections=len(queue.sessions),
            pool_used=stats.pmad_bytes_used,
            wait_p50=_percentile(last.wait, now.wait, 0.5),
            wait_p95=_percentile(last.wait, now.wait, 0.95),
            run_p50=_percentile(last.run, now.run, 0.5),
            run_p95=_percentile(last.run, now.run, 0.95),
        )
        self.samples.append(sample)
        self.latest = sample
        for listener in self._listeners:
            listener(sample)
        return sample

    def as_dict(self) -> dict[str, Any]:
        """The ring for C{/api/history}: the field names once, then a row per sample."""
        return {
            "seconds": self.samples.maxlen,
            "fields": list(FIELDS),
            "rows": [sample.as_row() for sample in self.samples],
        }
