"""
Checkpoints: each running task's last saved state, bounded, journaled, handed to its next delivery.

A worker's CHECKPOINT for the delivery it holds replaces the task's last
one (L{quicx.daemon.queue.model.Task.checkpoint}), is journaled, and rides
every later delivery's TASK: a retry after a failure, a redelivery after
the worker was lost or its lease ran out, a replay out of the dead-letter
set, a restart of the daemon.  It is freed when the task finishes (the
kernel's C{_end}: done, failed for good, cancelled, dropped from the
dead-letter set).  The states' bytes are bounded in all (C{[checkpoints]
max_memory}) and each (C{max_size}).

L{Checkpoints} is handed the kernel (L{IKernel}) and never imports it; it
hears the kernel's C{recovered} hook to count the states a journal kept.
A task that never checkpoints costs nothing here: its C{checkpoint} is
C{None}, tested once as it ends and once as it is delivered.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import frozen

from quicx.daemon.journal.interface import SavedState
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.protocol.checkpoints import context_size
from quicx.protocol.codec import ErrorCode
from quicx.protocol.taskflow import MAX_TASK_CONTEXT, Result, task_context

Delivery = Callable[[Session, int, int, str], Task]


@frozen
class CheckpointSettings:
    """
    The C{[checkpoints]} settings.

    @ivar max_size: the largest state one checkpoint may carry (bytes; at
        most L{quicx.protocol.checkpoints.MAX_CHECKPOINT}).
    @ivar max_memory: the most bytes all tasks' states may hold together.
    """

    max_size: int = 16 << 10
    max_memory: int = 4 << 20


class Checkpoints:
    """
    @ivar settings: its limits (the daemon sets the configured ones).
    @ivar held: tasks that have a checkpoint now; C{bytes}: their states' bytes.
    """

    def __init__(
        self, kernel: IKernel, delivery: Delivery, settings: CheckpointSettings | None = None
    ) -> None:
        self.kernel = kernel
        self._delivery = delivery
        self.settings = settings or CheckpointSettings()
        self.held = 0
        self.bytes = 0

    def save(self, session: Session, task_id: int, token: int, state: Result) -> None:
        """
        Keep C{state} as the last checkpoint of C{task_id}, which C{session}
        holds in delivery C{token}, and journal it.

        @raise Refused: (stale) the delivery is not the task's current one;
            (payload too large) the state is over C{max_size}, or would not
            fit its TASK's context beside the task's other items; (queue full)
            it would take the states past C{max_memory}.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        task = self._delivery(session, task_id, token, "CHECKPOINT")
        settings = self.settings
        size = len(state.data)
        if size > settings.max_size:
            raise Refused(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"task {task_id}: a checkpoint of {size} bytes exceeds [checkpoints] max_size"
                f" ({settings.max_size})",
            )
        room = _room(task)
        if context_size(size) > room:
            raise Refused(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"task {task_id}: a checkpoint of {size} bytes does not fit its TASK's context"
                f" beside its parents' outcomes and keys ({room} bytes left there)",
            )
        old = task.checkpoint
        grows = size - (0 if old is None else len(old.state.data))
        if grows > 0 and self.bytes + grows > settings.max_memory:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"task {task_id}: checkpoint memory is full ([checkpoints] max_memory ="
                f" {settings.max_memory} bytes, {self.bytes} held by {self.held} tasks);"
                " the task's last checkpoint stands",
                log_id="limit.checkpoints",
            )
        task.checkpoint = saved = SavedState(state, self.kernel.clock())
        self.bytes += grows
        self.held += old is None
        self.kernel.journal.record_checkpoint(task_id, saved)

    def fit(self, task: Task) -> None:
        """
        (The dependencies, as C{task}, back from the journal, is handed its
        parents' outcomes again: with a larger C{[dependencies] max_results}
        than when it saved its checkpoint, more of them.)  Let go of its
        checkpoint if its TASK's context has no room for it beside them.
        """
        saved = task.checkpoint
        if saved is not None and context_size(len(saved.state.data)) > _room(task):
            self.kernel.log.warn(
                "task {task_id}: its checkpoint of {size} bytes no longer fits its TASK beside"
                " its parents' outcomes; let go (the task starts from its beginning)",
                log_id="checkpoint.dropped",
                task_id=task.task_id,
                size=len(saved.state.data),
            )
            self.finished(task)

    def finished(self, task: Task) -> None:
        """(The kernel, as C{task}, which has a checkpoint, ends.) Free it."""
        saved = task.checkpoint
        if saved is not None:
            task.checkpoint = None
            self.held -= 1
            self.bytes -= len(saved.state.data)

    def recovered(self, task: Task, due: float) -> None:
        """(A kernel hook.) A task the journal kept: count its checkpoint, if any."""
        saved = task.checkpoint
        if saved is not None:
            self.held += 1
            self.bytes += len(saved.state.data)

    def describe(self, task: Task) -> dict[str, Any] | None:
        """What INSPECT says of C{task}'s checkpoint: its size and when it was saved."""
        saved = task.checkpoint
        if saved is None:
            return None
        return {"size": len(saved.state.data), "at": round(saved.saved_at, 3)}


def _room(task: Task) -> int:
    """
    The bytes C{task}'s TASK context (u16 long) has left for a checkpoint
    beside the task's own items: its keys, token, retries, trace and parents' outcomes.
    """
    return MAX_TASK_CONTEXT - len(
        task_context(task.key, task.fairness, 1, 0, 0, task.retries, task.trace, None, task.parents)
    )
