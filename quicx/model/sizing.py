"""
The fewest workers that keep a workload's p95 queue wait under a target, by the dispatch model.

What the daemon's autoscaling signal computes for each queue, every few
seconds, from its last minute's arrivals and run times: the jobs are
replayed through L{quicx.model.dispatch.simulate} (the capacity what-if's
model) for a number of workers chosen by bisection between 1 and the most
considered, one simulation a L{Search.step}, so that a caller on an event
loop can run the steps apart.  The wait falls as workers are added (the
same jobs, more of them served at once), which is what the bisection needs.
"""

from __future__ import annotations

from collections.abc import Sequence

from attrs import define, field, frozen

from quicx.model.dispatch import Job, Step, percentile, simulate

QUANTILE = 0.95
"""The wait quantile held under the target."""


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
    """A queue's recent jobs, as L{simulate} replays them."""

    jobs: tuple[Job, ...]
    queues: tuple[str, ...] = ("",)


def window(arrivals: Sequence[int], runs: Sequence[int], queued: int = 0, now: int = 0) -> Window:
    """
    The jobs of C{arrivals} (ready times, ms, ascending), each with a run
    time of C{runs} (ms) in turn: what arrived, and what running took; and
    C{queued} more ready at C{now}, the tasks queued now: the replay gives
    the window's arrivals workers from its start, which the tasks queued now
    did not have (they would be served by the workers added now).
    """
    if not runs:
        runs = (0,)
    ready = [*arrivals, *[now] * queued]
    return Window(
        tuple(
            Job(task, "", 0, at, (Step(runs[task % len(runs)]),)) for task, at in enumerate(ready)
        )
    )


@define
class Search:
    """
    The fewest workers, from 1 to C{most}, whose p95 wait over C{work} is
    at most C{target} ms: a bisection, one simulation a L{step}.
    """

    work: Window
    target: float
    most: int
    low: int = field(init=False, default=1)
    high: int = field(init=False)
    p95: dict[int, float] = field(init=False, factory=dict)  # by workers tried

    def __attrs_post_init__(self) -> None:
        self.high = self.most

    @property
    def done(self) -> bool:
        if not self.work.jobs:
            return True
        return self.low >= self.high and self.high in self.p95

    def step(self) -> bool:
        """Run one simulation; whether the search is over."""
        if self.done:
            return True
        workers = (self.low + self.high) // 2 if self.low < self.high else self.high
        waits = [wait for _, _, wait in simulate(self.work, workers).waits]
        self.p95[workers] = p95 = percentile(waits, QUANTILE)
        if self.low < self.high:
            if p95 <= self.target:
                self.high = workers
            else:
                self.low = workers + 1
        return self.done

    @property
    def result(self) -> Sizing:
        """What it found (once L{done})."""
        if not self.work.jobs:
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
