"""
The dead-letter side of the kernel: burying, dropping, replaying and purging dead tasks.

L{Graveyard} owns the L{DeadLetters} set and its expiry timer; it moves
tasks through the kernel it is handed (L{IKernel}) and never imports it.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IDelayedCall

from quicx.daemon.journal.interface import DeadInfo
from quicx.daemon.queue.deadletters import DeadLetters
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DEAD, move
from quicx.protocol.codec import ErrorCode


class Graveyard:
    """
    The dead tasks (L{letters}) of C{kernel}.

    @ivar dropped: dead tasks dropped since start (past the bounds, or purged).
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        limits = kernel.limits
        self.letters: DeadLetters[Task] = DeadLetters(limits.dead_max_count, limits.dead_max_age)
        self.dropped = 0
        self._timer: IDelayedCall | None = None

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()

    def bury(self, task: Task, reason: str, worker: str) -> None:
        """Move C{task} to the dead-letter set, dropping the oldest past its bounds."""
        kernel = self.kernel
        kernel.progress.finished(task.task_id)
        task.dead = DeadInfo(kernel.clock(), reason, worker)
        move(task, DEAD)
        kernel.journal.record_dead(task)
        task.home.dead += 1
        self.keep([task])

    def keep(self, tasks: list[Task]) -> None:
        """Keep these dead tasks (oldest first), dropping the oldest past the bounds."""
        for task in tasks:
            for old in self.letters.add(task):
                self.drop(old, "pushed out of the dead-letter set (max_count)")
        self._arm_expiry()

    def unbury(self, task: Task) -> None:
        self.letters.remove(task)
        task.home.dead -= 1
        task.dead = None

    def drop(self, task: Task, why: str) -> None:
        """Finish a dead task for good: it leaves the journal and the pool."""
        self.unbury(task)
        self.dropped += 1
        kernel = self.kernel
        kernel._end(task, "failed")
        kernel.failures.note(
            "dead task dropped",
            task.task_type,
            why,
            "dead task {task_id} dropped: {why}",
            log_id="task.dead_dropped",
            task_id=task.task_id,
            why=why,
        )
        kernel._forget_if_idle(task.home)

    def _arm_expiry(self) -> None:
        timer = self._timer
        letters = self.letters
        oldest = letters.oldest()
        if not letters.max_age or oldest is None or (timer is not None and timer.active()):
            return
        assert oldest.dead is not None
        wait = max(0.0, oldest.dead.died_at + letters.max_age - self.kernel.clock())
        self._timer = self.kernel.scheduler.callLater(wait, self._expire)

    def _expire(self) -> None:
        self._timer = None
        for task in self.letters.expired(self.kernel.clock()):
            self.drop(task, "older than max_age")
        self._arm_expiry()

    def dead_tasks(self, queue: str | None, limit: int) -> dict[str, Any]:
        """The dead tasks of C{queue} (C{None}: of every queue), oldest first."""
        tasks = list(self.letters.of(queue))
        return {"total": len(tasks), "tasks": [describe_dead(t) for t in tasks[:limit]]}

    def replay(self, task_id: int, queue: str | None) -> dict[str, Any]:
        """
        Put dead task C{task_id} (or, with 0, every dead task of C{queue})
        back in its queue, its failures reset.

        @raise Refused: (not found) C{task_id} is not a dead task.
        """
        if task_id:
            task = self.letters.get(task_id)
            if task is None:
                raise Refused(ErrorCode.NOT_FOUND, f"task {task_id} is not in a dead-letter set")
            tasks = [task]
        else:
            tasks = list(self.letters.of(queue))
        kernel = self.kernel
        queues: dict[NamedQueue[Task, Session], None] = {}
        limits = kernel.limits.results
        now = kernel.clock()
        for task in tasks:
            self.unbury(task)
            task.failures = 0
            task.ready_at = now
            if task.task_id in kernel.kept and not task.keep_for:
                # Its death was kept: its next outcome replaces it.
                task.keep_for = min(limits.ttl, limits.max_ttl)
            kernel.journal.record_replay(task)
            for replayed in kernel.hooks.replayed:
                replayed(task)
            kernel._push(task)
            queues[task.home] = None
        for home in queues:
            kernel.dispatcher.serve_queue(home)
        return {"replayed": [task.task_id for task in tasks]}

    def purge_dead(self, queue: str | None) -> dict[str, Any]:
        """Drop the dead tasks of C{queue} (C{None}: of every queue)."""
        tasks = list(self.letters.of(queue))
        for task in tasks:
            self.drop(task, "purged")
        return {"purged": len(tasks)}

    def purge_task(self, task_id: int) -> dict[str, Any]:
        """
        Drop dead task C{task_id} for good.

        @raise Refused: (not found) C{task_id} is not a dead task.
        """
        task = self.letters.get(task_id)
        if task is None:
            raise Refused(ErrorCode.NOT_FOUND, f"task {task_id} is not in a dead-letter set")
        self.drop(task, "purged")
        return {"purged": 1}


def describe_dead(task: Task) -> dict[str, Any]:
    dead = task.dead
    assert dead is not None
    return {
        "id": task.task_id,
        "queue": task.queue,
        "type": task.task_type.decode("utf-8", "replace"),
        "size": task.size,
        "priority": task.priority,
        "failures": task.failures,
        "reason": dead.reason,
        "worker": dead.worker,
        "died_at": round(dead.died_at, 3),
    }
