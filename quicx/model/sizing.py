"""
The fewest workers that keep a workload's p95 queue wait under a target, by the dispatch model.

What the daemon's autoscaling signal computes for each queue, every few
seconds, from its last minute's arrivals and run times: the jobs are
replayed through the capacity what-if's model (L{quicx.model.dispatch}) for
a number of workers chosen by bisection between 1 and the most considered
(at most the jobs: with as many workers, none waits), at most L{CHUNK}
jobs a L{Search.step}, so that a caller on an event loop can run the steps
apart.  The wait falls as workers are added (the same jobs, more of them
served at once), which is what the bisection needs.

A window is one queue of tasks of one priority, each run once, none
cancelled: there the model's dispatch is first come, first served, and a
job starts when it is ready or when the first of the workers frees,
whichever is later (L{Replay}: a heap of the workers' free times, the
waits the same as L{quicx.model.dispatch.simulate}'s, at a fraction of
its cost; tests/model/test_sizing.py holds the two to the same answers).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from attrs import define, field, frozen

from quicx.model.dispatch import Job, Step, percentile

QUANTILE = 0.95
"""The wait quantile held under the target."""

CHUNK = 500
"""The most jobs one L{Search.step} replays (and a step that ends a
simulation sorts its waits): what bounds the time a step holds the loop."""


@frozen
class Sizing:
    """
    What a search found.

    @ivar workers: the fewest workers whose p95 wait is at most the target
        (the most considered when none is; 0 for no jobs).
    @ivar p95: the p95 wait (ms) the model predicts with them.
    @ivar saturated: even the most workers considered miss the target.
    @ivar simulations: the simulations run to find it.
    """

    workers: int
    p95: float
    saturated: bool = False
    simulations: int = 0


@frozen
class Window:
    """
    A queue's recent jobs: each one's ready time (ms, ascending) and run
    time (ms); L{jobs} as L{quicx.model.dispatch.simulate} replays them.
    """

    ready: tuple[int, ...]
    runs: tuple[int, ...]
    queues: tuple[str, ...] = ("",)

    def run(self, job: int) -> int:
        """Job C{job}'s run time: the recent run times in turn."""
        return self.runs[job % len(self.runs)]

    @property
    def jobs(self) -> tuple[Job, ...]:
        return tuple(
            Job(task, "", 0, at, (Step(self.run(task)),)) for task, at in enumerate(self.ready)
        )


def window(arrivals: Sequence[int], runs: Sequence[int], queued: int = 0, now: int = 0) -> Window:
    """
    The jobs of C{arrivals} (ready times, ms, ascending), each with a run
    time of C{runs} (ms) in turn: what arrived, and what running took; and
    C{queued} more ready at C{now}, the tasks queued now: the replay gives
    the window's arrivals workers from its start, which the tasks queued now
    did not have (they would be served by the workers added now).
    """
    return Window((*arrivals, *[now] * queued), tuple(runs) or (0,))


@define
class Replay:
    """
    One simulation of a L{Window} through C{workers}, first come first
    served, L{CHUNK} jobs at a time: its L{waits} once L{done}.
    """

    work: Window
    workers: int
    waits: list[int] = field(init=False, factory=list)
    _free: list[int] = field(init=False)  # a heap of the times the workers free

    def __attrs_post_init__(self) -> None:
        first = self.work.ready[0] if self.work.ready else 0
        self._free = [first] * min(self.workers, len(self.work.ready))

    @property
    def done(self) -> bool:
        return len(self.waits) == len(self.work.ready)

    def advance(self, most: int = CHUNK) -> bool:
        """Replay up to C{most} more jobs; whether all have been."""
        ready, runs, free, waits = self.work.ready, self.work.runs, self._free, self.waits
        count = len(runs)
        start = len(waits)
        for job in range(start, min(start + most, len(ready))):
            at = ready[job]
            begins = free[0]
            if begins < at:
                begins = at
            heapq.heapreplace(free, begins + runs[job % count])
            waits.append(begins - at)
        return self.done


@define
class Search:
    """
    The fewest workers, from 1 to C{most}, whose p95 wait over C{work} is
    at most C{target} ms: a bisection, a L{Replay} of at most L{CHUNK} jobs
    a L{step}.
    """

    work: Window
    target: float
    most: int
    low: int = field(init=False, default=1)
    high: int = field(init=False)
    p95: dict[int, float] = field(init=False, factory=dict)  # by workers tried
    _replay: Replay | None = field(init=False, default=None)

    def __attrs_post_init__(self) -> None:
        # As many workers as jobs: none waits (and more would change nothing).
        self.high = max(1, min(self.most, len(self.work.ready)))

    @property
    def done(self) -> bool:
        if not self.work.ready:
            return True
        return self.low >= self.high and self.high in self.p95

    def step(self) -> bool:
        """Replay up to L{CHUNK} jobs; whether the search is over."""
        if self.done:
            return True
        if self._replay is None:
            workers = (self.low + self.high) // 2 if self.low < self.high else self.high
            self._replay = Replay(self.work, workers)
        replay = self._replay
        if not replay.advance():
            return False
        self._replay = None
        workers = replay.workers
        self.p95[workers] = p95 = percentile(replay.waits, QUANTILE)
        if self.low < self.high:
            if p95 <= self.target:
                self.high = workers
            else:
                self.low = workers + 1
        return self.done

    @property
    def result(self) -> Sizing:
        """What it found (once L{done})."""
        if not self.work.ready:
            return Sizing(0, 0.0)
        p95 = self.p95[self.high]
        return Sizing(self.high, p95, p95 > self.target, len(self.p95))


def workers_needed(
    arrivals: Sequence[int],
    runs: Sequence[int],
    target: float,
    most: int,
    queued: int = 0,
    now: int = 0,
) -> Sizing:
    """L{Search} to its end, at once: the fewest workers that hold the p95 wait at C{target} ms."""
    search = Search(window(arrivals, runs, queued, now), target, most)
    while not search.step():
        pass
    return search.result
