"""
The event bus's recording: each step the kernel announces, as a lifecycle event.

L{EventRecorder} implements the kernel's task hooks (see
L{quicx.daemon.queue.hooks.Subscribers}) by recording events in an
L{IEvents}; the kernel subscribes one only while events have somewhere to
go (the event bus sets C{QueueService.events} then), so with no files and
no watcher recording costs nothing.
"""

from __future__ import annotations

from quicx.daemon.queue.hooks import IEvents, due_ms, record
from quicx.daemon.queue.model import Session, Task
from quicx.protocol.codec import ErrorCode


class EventRecorder:
    """The lifecycle events of the tasks, recorded in C{events}."""

    def __init__(self, events: IEvents) -> None:
        self.events = events

    def accepted(self, task: Task) -> None:
        record(self.events, "submitted", task, None, due_ms(task.due))

    def recovered(self, task: Task, due: float) -> None:
        # The reports join it to its submit (in the run before).
        record(self.events, "recovered", task, None, due_ms(due))

    def delivered(self, task: Task, worker: Session) -> None:
        record(self.events, "dispatched", task, worker)

    def retrying(
        self, task: Task, worker: Session | None, reason: str, attempt: int | None
    ) -> None:
        record(self.events, "retrying", task, worker, reason, attempt)

    def requeued(self, task: Task, cause: str) -> None:
        record(self.events, "requeued", task, None, cause)

    def done(self, task: Task, worker: Session, attempt: int) -> None:
        record(self.events, "done", task, worker, None, attempt)

    def failed(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        record(self.events, "failed", task, worker, reason, attempt)

    def buried(self, task: Task, worker: Session | None, reason: str, attempt: int | None) -> None:
        """It failed, then it died: two events."""
        self.failed(task, worker, reason, attempt)
        record(self.events, "dead", task, None, reason)

    def replayed(self, task: Task) -> None:
        record(self.events, "replayed", task, None, None)

    def cancelled(self, task: Task, why: str) -> None:
        record(self.events, "cancelled", task, None, why)

    def dropped(self, task: Task, why: str) -> None:
        record(self.events, "dropped", task, None, why)

    def expired(self, task: Task, why: str) -> None:
        record(self.events, "expired", task, None, why)

    def debounced(self, task: Task, mode: str) -> None:
        record(self.events, "debounced", task, None, mode)

    def moved(self, task: Task, old: str) -> None:
        record(self.events, "moved", task, None, old)

    def rejected(
        self, session: Session | None, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        producer = None if session is None else session.session_id
        self.events.record(
            "rejected", None, task_type, size, producer, None, 0, (int(code), reason)
        )
