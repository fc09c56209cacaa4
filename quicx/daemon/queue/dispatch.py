"""
Which idle worker is offered the next task, and the guard against one that fails everything.

Which idle worker is offered the next task: the order of a queue's idle
workers, and the guard against a worker that fails everything.

Sans-I/O: the queue core (L{quicx.daemon.queue.core}) keeps each queue's idle
workers in an ordered dict, in the order they are offered tasks: a worker
that goes idle goes first under C{lifo}, last under C{fifo}; one dealt a
task that keeps a credit free goes last in both.  It asks L{offer} whom to
offer a task when the first worker may not take it, and tells
L{note_outcome} each worker's outcomes; the times come from the core.

Two orders (C{[queues] dispatch}):

  - C{lifo} (the default): the worker that freed a credit last (its DONE,
    FAILED, or READY) is offered the next task.  At light load that worker
    is still awake (it may be polling its socket), so the task starts sooner.
    It comes with the guard: a worker whose last C{failing_streak} outcomes
    were failures, the latest less than C{failing_window} seconds ago, is
    offered a task only when no other idle worker may take it; and a task
    being retried is offered to another worker than the one it last failed
    on, when one is idle.
  - C{fifo}: the worker idle longest is offered the next task (the protocol
    page's rule, and the daemon's before), without the guard.

In both, a worker dealt a task that keeps a credit free goes behind the
other idle workers, so a burst is dealt one task per worker per turn; and a
task never goes to a worker that still runs a late copy of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from typing import Protocol, TypeVar

from attrs import frozen


class Order(Enum):
    """The order idle workers are offered tasks in."""

    LIFO = "lifo"
    FIFO = "fifo"


@frozen
class DispatchSettings:
    """
    The C{[queues]} dispatch settings.

    @ivar order: which idle worker is offered a task first.
    @ivar failing_streak: failures in a row that make a worker failing
        (0: the guard is off).
    @ivar failing_window: seconds a failing worker stays behind the others
        after its latest failure (0: the guard is off).
    """

    order: Order = Order.LIFO
    failing_streak: int = 3
    failing_window: float = 10.0

    @property
    def lifo(self) -> bool:
        return self.order is Order.LIFO

    @property
    def guarded(self) -> bool:
        """Failing workers are passed over (C{lifo} only)."""
        return self.lifo and self.failing_streak > 0 and self.failing_window > 0


class Idler(Protocol):
    """What the order reads of a worker."""

    session_id: int
    failing_until: float
    failed_in_row: int
    handles: frozenset[bytes] | None

    @property
    def overdue(self) -> Mapping[int, object]: ...


W = TypeVar("W", bound=Idler)


def note_outcome(settings: DispatchSettings, worker: Idler, failed: bool, now: float) -> None:
    """
    C{worker} reported an outcome at C{now}: a success ends its streak of
    failures; a failure that makes C{failing_streak} or more in a row makes
    it failing for C{failing_window} seconds.
    """
    if not failed:
        worker.failed_in_row = 0
        worker.failing_until = 0.0
        return
    worker.failed_in_row += 1
    if settings.guarded and worker.failed_in_row >= settings.failing_streak:
        worker.failing_until = now + settings.failing_window


def offer(
    idle: Mapping[int, W], now: float, task_id: int = 0, avoid: int = 0, task_type: bytes = b""
) -> W | None:
    """
    The worker of C{idle} (a queue's idle workers, in the order they are
    offered tasks) that runs C{task_type} (see L{quicx.daemon.queue.routing})
    to offer task C{task_id}: the first that is not failing
    at C{now} and is not worker C{avoid} (the one the task last failed on);
    else C{avoid}, if it is not failing (one failure of this task says less
    than a streak of failures); else the first.  Never a worker that runs a
    late copy of the task: C{None} if every one does.
    """
    fallback = None
    for worker in idle.values():
        if worker.overdue and task_id in worker.overdue:
            continue
        if worker.handles is not None and task_type not in worker.handles:
            continue
        if worker.failing_until <= now:
            if worker.session_id != avoid:
                return worker
            fallback = worker
        elif fallback is None:
            fallback = worker
    return fallback
