"""
The autoscaling signal: each queue's workers needed to keep its p95 queue wait under a target.

What KEDA or the Kubernetes HPA scales workers on (docs/integrations.md):
C{[autoscale] target} on, the daemon keeps, per queue, a window of its
recent arrivals and run times, taken from the lifecycle events at each of
the event bus's flushes (L{Autoscaler.take}), and every C{interval} seconds
replays each window through the capacity what-if's model of the dispatch
(L{quicx.model.sizing}) for the fewest workers whose p95 wait is at most the
target.  The estimates are the C{quicx_autoscale_*} gauges of C{/metrics}
and the JSON of C{/autoscale} on the same listener.

Bounded: a window keeps at most C{max_jobs} arrivals (those of the last
C{window} seconds) and C{max_jobs} run times (the latest), and deliveries
in flight up to C{max_jobs}; at most C{[queues] max_queues} queues have a
window (a queue idle for a whole window is forgotten).  Off the hot path:
recording costs the core one tuple per event (the bus's), the windows are
fed a flush at a time, and an estimate takes one queue's window (sorts its
arrivals) or replays at most L{quicx.model.sizing.CHUNK} of its jobs per reactor turn
(L{Autoscaler.longest_step} says how long the longest took).

The model's inputs, as the events give them: a task arrives when it is
submitted (at its due time if delayed), recovered, or retried (at its
outcome: the backoff is not known); a delivery runs from its dispatch, or
its worker's report before if later (a worker runs what it holds one at a
time, as in the what-if); the window's arrivals are replayed each with the
recent run times in turn.  Whatever the replay says, a queue with tasks
queued needs one worker, and none says less than C{min_workers}.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from attrs import define, field, frozen
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.config.sections import AutoscaleSettings
from quicx.daemon.observe.events import Event
from quicx.model.sizing import Search, window
from quicx.net.twisted_types import Service

ARRIVALS = frozenset({"submitted", "recovered", "retrying"})
REPORTS = frozenset({"done", "failed", "retrying"})
"""The outcomes whose delivery ran its whole run: its worker reported."""


@frozen
class Estimate:
    """One queue's estimate: the workers needed, the p95 wait (s) with them, from what."""

    workers: int
    p95: float
    arrivals: int
    runs: int
    saturated: bool

    def document(self) -> dict[str, Any]:
        return {
            "workers": self.workers,
            "p95_wait_seconds": round(self.p95, 6),
            "arrivals": self.arrivals,
            "runs": self.runs,
            "saturated": self.saturated,
        }


@define
class QueueWindow:
    """One queue's recent arrivals and run times (ms), and its deliveries in flight."""

    max_jobs: int
    arrivals: deque[int] = field(init=False)
    runs: deque[int] = field(init=False)
    dispatched: dict[tuple[int, int], int] = field(factory=dict)  # (task, attempt): ms

    def __attrs_post_init__(self) -> None:
        self.arrivals = deque(maxlen=self.max_jobs)
        self.runs = deque(maxlen=self.max_jobs)

    def recent(self, since: int, now: int) -> list[int]:
        """The arrivals from C{since} to C{now}, ascending; older ones are let go."""
        arrivals = self.arrivals
        while arrivals and arrivals[0] < since:
            arrivals.popleft()
        return sorted(t for t in arrivals if since <= t <= now)


class Autoscaler(Service):
    """
    The windows and estimates of every queue (see the module's docstring).

    @ivar queued: the tasks queued now in a queue, by its name.
    @ivar longest_step: the longest one simulation took, in seconds.
    """

    def __init__(
        self,
        settings: AutoscaleSettings,
        max_queues: int,
        queued: Callable[[str], int],
        scheduler: IReactorTime,
        clock: Callable[[], float] = time.time,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.settings = settings
        self.max_queues = max_queues
        self.queued = queued
        self.scheduler = scheduler
        self.clock = clock
        self.timer = timer
        self.windows: dict[str, QueueWindow] = {}
        self.estimates: dict[str, Estimate] = {}
        self.reported: dict[int, int] = {}  # worker: ms of its last report
        self.longest_step = 0.0
        # The round's queues: each one's search (once its window is taken), arrivals and runs.
        self._round: list[tuple[str, Search | None, int, int]] = []
        self._since = self._now = 0  # the round's window (ms)
        self._call: IDelayedCall | None = None

    # -- the windows ------------------------------------------------------------------

    def take(self, events: list[Event]) -> None:
        """Feed the windows the events of one flush of the event bus."""
        for when, kind, task, _, _, _, worker, attempt, extra, queue, _ in events:
            if queue is None or task is None:
                continue
            found = self.windows.get(queue)
            if found is None:
                if len(self.windows) >= self.max_queues or kind not in ARRIVALS:
                    continue
                found = self.windows[queue] = QueueWindow(self.settings.max_jobs)
            ms = int(when * 1000)
            if kind == "dispatched":
                if len(found.dispatched) < self.settings.max_jobs:
                    found.dispatched[task, attempt] = ms
                continue
            if kind in REPORTS or kind == "requeued":
                self._ended(found, ms, kind, task, attempt, worker)
            if kind in ARRIVALS:
                due = extra if kind != "retrying" and isinstance(extra, int) else 0
                found.arrivals.append(max(ms, due))

    def _ended(
        self, found: QueueWindow, ms: int, kind: str, task: int, attempt: int, worker: int | None
    ) -> None:
        """A delivery ended: a worker that reported ran it from its dispatch or last report."""
        dispatched = found.dispatched.pop((task, attempt), None)
        if kind == "requeued" or worker is None:
            return
        before = self.reported.pop(worker, None)
        if dispatched is not None:
            found.runs.append(ms - max(dispatched, before or dispatched))
        if len(self.reported) >= self.settings.max_jobs:
            del self.reported[next(iter(self.reported))]
        self.reported[worker] = ms

    # -- the estimates ----------------------------------------------------------------

    def startService(self) -> None:
        super().startService()
        self._call = self.scheduler.callLater(self.settings.interval, self.estimate)

    def stopService(self) -> Any:
        if self._call is not None and self._call.active():
            self._call.cancel()
        self._call = None
        self._round = []
        return super().stopService()

    def estimate(self) -> None:
        """Start a round: every queue's window, then its search, a step a reactor turn."""
        now = int(self.clock() * 1000)
        self._since, self._now = now - int(self.settings.window * 1000), now
        self._round = [(name, None, 0, 0) for name in self.windows]
        self._step()

    def _step(self) -> None:
        """
        One step of the round's first queue: its window taken (its arrivals
        sorted), or its search's next replay of at most
        L{quicx.model.sizing.CHUNK} jobs; the next at the reactor's next turn.
        """
        if self._round:
            started = self.timer()
            self._advance()
            self.longest_step = max(self.longest_step, self.timer() - started)
        delay = 0.0 if self._round else self.settings.interval
        self._call = self.scheduler.callLater(delay, self._step if self._round else self.estimate)

    def _advance(self) -> None:
        name, search, arrivals_taken, runs_taken = self._round[0]
        found = self.windows.get(name)
        if found is None:
            self._round.pop(0)
        elif search is None:
            arrivals = found.recent(self._since, self._now)
            if not arrivals and not found.dispatched:
                del self.windows[name]  # idle for a whole window
                self.estimates.pop(name, None)
                self._round.pop(0)
                return
            work = window(arrivals, list(found.runs), self.queued(name), self._now)
            search = Search(work, self.settings.target * 1000, self.settings.max_workers)
            self._round[0] = (name, search, len(arrivals), len(found.runs))
        elif search.step():
            self._round.pop(0)
            result = search.result
            self.estimates[name] = Estimate(
                result.workers, result.p95 / 1000, arrivals_taken, runs_taken, result.saturated
            )

    def workers(self, queue: str) -> Estimate:
        """C{queue}'s estimate, floored: one worker while it has tasks queued, C{min_workers}."""
        found = self.estimates.get(queue) or Estimate(0, 0.0, 0, 0, False)
        floor = max(self.settings.min_workers, 1 if self.queued(queue) else 0)
        if found.workers >= floor:
            return found
        return Estimate(floor, found.p95, found.arrivals, found.runs, found.saturated)

    def document(self, queue: str | None = None) -> dict[str, Any]:
        """What C{/autoscale} answers: every queue's estimate, or (C{queue}) one's."""
        head = {"target_seconds": self.settings.target, "window_seconds": self.settings.window}
        if queue is not None:
            return {"queue": queue, **self.workers(queue).document(), **head}
        names = sorted(set(self.estimates) | set(self.windows))
        return {**head, "queues": {name: self.workers(name).document() for name in names}}

    def json(self, queue: str | None = None) -> bytes:
        return json.dumps(self.document(queue), sort_keys=True).encode() + b"\n"
