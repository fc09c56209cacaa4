"""
Priority aging: the starvation bound C{W} of a queue's lower priorities.

A queue deals its highest priority first, so a stream of high-priority
tasks that keeps its workers busy would keep every lower priority waiting
for ever.  With C{aging} = C{W} seconds (C{[queues] aging}, C{[queue NAME]
aging}; 0: off, the strict order), one rule changes that:

  A priority below the highest one queued is B{overdue} when its B{head}
  (the task it would deal next: FIFO, or its fairness keys' turn) became
  ready C{W} seconds ago or more.  The queue deals the head of the overdue
  priority whose head is oldest; with none overdue, its highest priority's
  task, as without aging.  Nothing changes within one priority.

What it bounds: a task of a lower priority that is its priority's head
from the moment it becomes ready (submitted, due, or requeued; a trickle:
nothing of its own priority queued ahead of it) is handed to the first free
worker credit of its queue after C{ready + W}, before any task of a higher
priority, behind only the overdue heads older than it.  A backlog of one
priority (without fairness keys) drains oldest first once overdue, one task
per dispatch, so a task with C{k} tasks ahead of it that are overdue starts
by the C{k+1}-th dispatch after C{ready + W}.  Preconditions: workers keep
taking tasks from the queue, and the task is not held back by a limit of its
own (C{key_concurrency}, C{rate}, C{key_rate}) or a pause.

Cost: with one priority queued, one comparison per dispatch
(L{quicx.daemon.queue.queues.NamedQueue.take}) and one per task queued into
an empty priority.  With several, a binary heap of the lower priorities'
heads, checked lazily: an entry is pushed when a priority's head changes
(it gets its first task, it stops being the highest, a task is put back at
its head, taken from it or removed), once per head, and a stale one is
dropped when it reaches the top; so a dispatch costs O(log p) for p
priorities queued (at most 256), never a walk of the queue.  The heap is
rebuilt from the priorities when it holds more than L{MAX_ENTRIES}, so it
stays bounded.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Generic, Protocol, TypeVar

from attrs import define, field

MAX_ENTRIES = 1024
"""Entries the heap may hold before it is rebuilt (four per priority)."""


class Aged(Protocol):
    """What aging reads of a task."""

    ready_at: float
    ticket: int


T = TypeVar("T", bound=Aged)
T_co = TypeVar("T_co", bound=Aged, covariant=True)


class Lane(Protocol[T_co]):
    """What aging reads of a priority's tasks (L{quicx.daemon.queue.queues.Level})."""

    @property
    def size(self) -> int: ...

    def peek(self) -> T_co: ...


Entry = tuple[float, int, int]
"""A head: when it became ready, its priority, its ticket."""


@define(eq=False)
class Aging(Generic[T]):
    """
    One queue's aging.

    @ivar limit: C{W}, in seconds (more than 0).
    @ivar levels: the queue's priorities (shared, not copied).
    @ivar order: the queue's priorities with tasks, ascending (shared).
    @ivar heads: the heap of the lower priorities' heads (some stale).
    @ivar watched: the ticket of each priority's head that has an entry in
        C{heads} (so a head is pushed once, however often it is watched).
    @ivar promoted: tasks dealt before a higher priority's because they were
        overdue, since the queue was made.
    """

    limit: float
    levels: Mapping[int, Lane[T]]
    order: list[int]
    heads: list[Entry] = field(factory=list)
    watched: dict[int, int] = field(factory=dict)
    promoted: int = 0

    def arrived(self, priority: int, fresh: bool) -> None:
        """
        A task was queued at C{priority} while another priority is queued,
        into an empty priority (C{fresh}) or at its head.
        """
        order = self.order
        if priority != order[-1]:
            self.watch(priority)
        elif fresh:
            self.watch(order[-2])  # the priority it displaced from the top

    def watch(self, priority: int) -> None:
        """C{priority}'s head may have changed: watch it, unless it is empty or the highest."""
        level = self.levels[priority]
        if not level.size or priority == self.order[-1]:
            return
        head = level.peek()
        if self.watched.get(priority) == head.ticket:
            return
        self.watched[priority] = head.ticket
        heads = self.heads
        heapq.heappush(heads, (head.ready_at, priority, head.ticket))
        if len(heads) > MAX_ENTRIES:
            levels = self.levels
            self.heads = [
                (head.ready_at, p, head.ticket)
                for p in self.order[:-1]
                for head in (levels[p].peek(),)
            ]
            heapq.heapify(self.heads)
            self.watched = {p: ticket for _, p, ticket in self.heads}

    def due(self, now: float) -> int | None:
        """The overdue priority whose head is oldest at C{now}; C{None}: none is."""
        heads = self.heads
        deadline = now - self.limit
        levels, top = self.levels, self.order[-1]
        while heads:
            ready, priority, ticket = heads[0]
            if ready > deadline:
                return None
            level = levels[priority]
            if level.size and priority < top and level.peek().ticket == ticket:
                return priority
            # Empty or the highest (watched again once lower and queued), or
            # a head since taken (its successor is watched).
            heapq.heappop(heads)
            if self.watched.get(priority) == ticket:
                del self.watched[priority]
        return None
