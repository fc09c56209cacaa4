"""
Routing by task type: which workers run a task's type, and the tasks no connected worker runs.

A version-2 worker may announce the task types it runs (ANNOUNCE: see
L{quicx.daemon.queue.workers}); one that does not runs every type, as every
worker did before (its L{Session.handles} is C{None}), and costs the
dispatch one test per task.  The dispatcher
(L{quicx.daemon.queue.dispatcher}) offers a task only to a worker that runs
its type.  A task that no idle worker runs is set aside by type
(L{NamedQueue.park}), out of the dispatch order, so the tasks behind it go
on to the workers that run theirs: no head-of-line blocking.  A worker that
runs its type, when it has credits free, puts back that many of the oldest
set aside first (L{NamedQueue.unpark}), at the head of their priority.
Each task is set aside at most once per worker's free credit, so the work
stays proportional to the tasks dispatched.

This module reads what that leaves: whether a task's type has a worker, for
INSPECT (C{quicx task ID}), and the tasks set aside that no connected
worker runs, for the status document.
"""

from __future__ import annotations

from collections.abc import Iterable

from quicx.daemon.queue.model import Session, Steering, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.protocol.session import Role


def runs(worker: Session, task_type: bytes) -> bool:
    """Whether C{worker} runs tasks of C{task_type}."""
    return worker.handles is None or task_type in worker.handles


def steered(worker: Session) -> bool:
    """Whether C{worker} was told to go quiet or to terminate (it is dealt nothing)."""
    return worker.card is not None and worker.card.state is not Steering.ACTIVE


def workers_of(sessions: Iterable[Session], queue: NamedQueue[Task, Session]) -> list[Session]:
    """The workers subscribed to C{queue}."""
    return [s for s in sessions if s.role is Role.WORKER and queue in s.subscriptions]


def unhandled(sessions: Iterable[Session], task: Task) -> bool:
    """Whether C{task}'s queue has workers and none of them runs its type."""
    workers = workers_of(sessions, task.home)
    return bool(workers) and not any(runs(w, task.task_type) for w in workers)


def unroutable(
    sessions: Iterable[Session], queues: Iterable[NamedQueue[Task, Session]]
) -> dict[str, dict[str, int]]:
    """
    The tasks set aside that no connected worker of their queue runs: by
    queue, by type, how many.  (A task is counted once the dispatcher met
    it with only workers that do not run its type idle.)
    """
    parked = [queue for queue in queues if queue.parked]
    if not parked:
        return {}
    serving: dict[NamedQueue[Task, Session], list[Session]] = {queue: [] for queue in parked}
    for session in sessions:  # once, not once per queue
        if session.role is Role.WORKER:
            for queue in session.subscriptions:
                if queue in serving:
                    serving[queue].append(session)
    found: dict[str, dict[str, int]] = {}
    for queue in parked:
        for task_type, fifo in queue.parking.items():
            if fifo and not any(runs(w, task_type) for w in serving[queue]):
                by_type = found.setdefault(queue.name, {})
                by_type[task_type.decode("utf-8", "replace")] = len(fifo)
    return found


def why(sessions: Iterable[Session], task: Task) -> dict[str, str] | None:
    """
    INSPECT's reason for a queued task that waits for a worker of its type:
    none of its queue's workers runs it (C{no_worker_for_type}), or those
    that do are busy (C{type_workers_busy}); C{None}: neither.
    """
    workers = workers_of(sessions, task.home)
    name = task.task_type.decode("utf-8", "replace")
    if workers and not any(runs(w, task.task_type) for w in workers):
        return {
            "reason": "no_worker_for_type",
            "type": name,
            "text": f"no connected worker handles type {name}",
        }
    if task.home.parked and task.home.is_parked(task):
        return {
            "reason": "type_workers_busy",
            "type": name,
            "text": f"the workers that handle type {name} are busy",
        }
    return None
