"""
Delayed tasks: a heap of due times with one timer armed at a time.

A task waits here until its due time (a delayed SUBMIT, or a retry's
backoff; or whatever time the attribute C{field} names: a deadline to
start), then L{Delays} hands it back through its C{due} callback, in due
order, its time set to 0.  Tasks falling due together are handed back in batches of
C{batch}, each batch in its own reactor turn, so that 100,000 tasks due in
the same second never stall the daemon.  A task taken out early (a cancel)
stays in the heap until it surfaces, unless such leftovers outnumber the
live entries, when the heap is rebuilt: its size stays within twice the
delayed tasks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from twisted.internet.interfaces import IDelayedCall, IReactorTime

T = TypeVar("T")

BATCH = 1000
"""The most tasks handed back in one reactor turn."""


class Delays(Generic[T]):
    """
    @ivar count: the tasks delayed now.
    @ivar field: the attribute of each task that holds its time (Unix
        seconds; 0 while it is not held here).
    """

    def __init__(
        self,
        reactor: IReactorTime,
        clock: Callable[[], float],
        due: Callable[[list[T]], None],
        batch: int = BATCH,
        field: str = "due",
    ) -> None:
        self.field = field
        self._reactor = reactor
        self._clock = clock
        self._due = due
        self._batch = batch
        self._heap: list[tuple[float, int, T]] = []
        self._sequence = 0
        self._timer: IDelayedCall | None = None
        self.count = 0

    def add(self, task: T, due: float) -> None:
        """Hold C{task} until C{due} (Unix seconds)."""
        setattr(task, self.field, due)
        self._sequence += 1
        heapq.heappush(self._heap, (due, self._sequence, task))
        self.count += 1
        if self._heap[0][2] is task:
            self._arm()

    def remove(self, task: T) -> None:
        """Take C{task} out before its time (it must be delayed)."""
        setattr(task, self.field, 0.0)
        self.count -= 1
        if len(self._heap) > 2 * self.count + 64:
            field = self.field
            self._heap = [entry for entry in self._heap if getattr(entry[2], field) == entry[0]]
            heapq.heapify(self._heap)

    def __iter__(self) -> Iterator[T]:
        """The delayed tasks, in no order."""
        field = self.field
        return (task for due, _, task in self._heap if getattr(task, field) == due)

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def _drop_stale(self) -> None:
        heap, field = self._heap, self.field
        while heap and getattr(heap[0][2], field) != heap[0][0]:
            heapq.heappop(heap)

    def _arm(self) -> None:
        self._drop_stale()
        if not self._heap:
            self.stop()
            return
        delay = max(0.0, self._heap[0][0] - self._clock())
        timer = self._timer
        if timer is not None and timer.active():
            if abs(timer.getTime() - (self._reactor.seconds() + delay)) < 0.0005:
                return
            timer.cancel()
        self._timer = self._reactor.callLater(delay, self._fire)

    def _fire(self) -> None:
        self._timer = None
        now = self._clock()
        heap, field = self._heap, self.field
        ready: list[T] = []
        while heap and len(ready) < self._batch:
            due, _, task = heap[0]
            if getattr(task, field) != due:
                heapq.heappop(heap)
                continue
            if due > now:
                break
            heapq.heappop(heap)
            setattr(task, field, 0.0)
            ready.append(task)
        self.count -= len(ready)
        if ready:
            self._due(ready)
        self._arm()
