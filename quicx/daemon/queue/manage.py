"""
Cancel a task not yet running; pause, resume or purge a queue: for producers and people.

L{Manage} moves tasks through the kernel it is handed (L{IKernel}) and never
imports it.
"""

from __future__ import annotations

from typing import Any

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.state import DEAD, DELAYED, WAITING
from quicx.daemon.queue.tell import tell_outcome
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState


class Manage:
    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel

    def cancel(self, session: Session, task_id: int) -> dict[str, Any]:
        """
        Cancel a queued task: its producer hears CANCELLED.

        @raise Refused: (not found) no such live task; (forbidden) not
            C{session}'s to cancel; (conflict) a worker is running it.
        """
        task = self.kernel._live.get(task_id)
        if task is None or not task.accepted:
            raise Refused(ErrorCode.NOT_FOUND, f"no queued or running task {task_id}")
        if not (
            session.admin
            or task.producer is session
            or (session.identity is not None and task.owner == session.identity)
        ):
            raise Refused(
                ErrorCode.FORBIDDEN,
                f"task {task_id} was submitted by another client;"
                " cancelling it needs the admin role",
            )
        return self.cancel_task(task, f"cancelled by {session.peer.peer_name}")

    def cancel_task(self, task: Task, why: str) -> dict[str, Any]:
        """
        Cancel C{task}, a live task, for an admin: see L{cancel}.

        @raise Refused: (conflict) a worker is running it, or it is dead.
        """
        task_id = task.task_id
        if task.holder is not None:
            raise Refused(
                ErrorCode.CONFLICT,
                f"task {task_id} is running on {task.holder.peer.peer_name};"
                " a running task is not interrupted",
            )
        if task.state is DEAD:
            raise Refused(
                ErrorCode.CONFLICT,
                f"task {task_id} is dead: replay it or purge the dead-letter set",
            )
        self.withdraw(task, why)
        self.kernel._forget_if_idle(task.home)
        return {"id": task_id, "state": "cancelled", "queue": task.home.name}

    def withdraw(self, task: Task, why: str) -> None:
        """
        Cancel C{task}, queued or delayed: taken off, its producer told
        CANCELLED (its queue is left for the caller to forget if idle).
        """
        if task.state is DELAYED:
            self.kernel._undelay(task)
        elif task.state is not WAITING:  # (a waiting task waits in no queue)
            task.home.remove(task)
        self._cancel(task, why)

    def _cancel(self, task: Task, why: str) -> None:
        """Finish a task taken off its queue as cancelled."""
        kernel = self.kernel
        kernel._end(task, "cancelled")
        for cancelled in kernel.hooks.cancelled:
            cancelled(task, why)
        producer = task.producer
        if producer is not None:
            producer.outstanding -= 1
            tell_outcome(producer, task.task_id, "cancelled", "")
        for settled in kernel.hooks.settled:
            settled(task, OutcomeState.CANCELLED, None, why)

    def set_paused(self, name: str, paused: bool) -> dict[str, Any]:
        """
        Pause (creating the queue) or resume a queue; journaled.

        @raise Refused: (not found) resuming a queue that does not exist;
            (queue full) pausing a new queue past C{max_queues}.
        """
        queue = self.kernel._queue(name) if paused else self.kernel.find_queue(name)
        if queue.paused != paused:
            queue.paused = paused
            self.kernel.journal.record_pause(name, paused)
            if paused:
                self.kernel.log.info("queue {queue} paused", log_id="queue.paused", queue=name)
            else:
                self.kernel.log.info("queue {queue} resumed", log_id="queue.resumed", queue=name)
                self.kernel.dispatcher.serve_queue(queue)
                self.kernel._forget_if_idle(queue)
        return {"queue": name, "paused": paused}

    def purge(self, name: str) -> dict[str, Any]:
        """Cancel every queued task of a queue. @raise Refused: (not found) no such queue."""
        queue = self.kernel.find_queue(name)
        tasks = list(queue.tasks())
        for task in tasks:
            queue.remove(task)
            self._cancel(task, "its queue was purged")
        if queue.delayed:
            delayed = [task for task in self.kernel.delays if task.home is queue]
            for task in delayed:
                self.kernel._undelay(task)
                self._cancel(task, "its queue was purged")
            tasks += delayed
        self.kernel._forget_if_idle(queue)
        if tasks:
            self.kernel.log.info(
                "queue {queue} purged: {count} tasks",
                log_id="queue.purged",
                queue=name,
                count=len(tasks),
            )
        return {"queue": name, "purged": len(tasks)}
