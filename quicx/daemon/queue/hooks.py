"""
The kernel's announcements: what it tells of a task's life, and to whom.

L{IEvents} is where lifecycle events go (the event bus); L{record} is the
one spelling of an event from a task.
"""

from __future__ import annotations

from typing import Any, Protocol

from quicx.daemon.queue.model import Session, Task


class IEvents(Protocol):
    """Where the core records lifecycle events: L{quicx.daemon.observe.eventbus.EventBus}."""

    def record(
        self,
        kind: str,
        task_id: int | None,
        task_type: bytes,
        size: int,
        producer: int | None,
        worker: int | None,
        attempt: int,
        extra: Any = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None: ...

    def forget(self, session: Session) -> None:
        """C{session} closed."""

    def caught_up(self, session: Session) -> None:
        """C{session}'s output drained."""


def record(
    events: IEvents,
    kind: str,
    task: Task,
    worker: Session | None = None,
    extra: object = None,
    attempt: int | None = None,
) -> None:
    """
    Record one step of C{task}'s life; C{attempt}: of the delivery it
    concerns, if not the latest.
    """
    producer = task.producer
    events.record(
        kind,
        task.task_id,
        task.task_type,
        task.size,
        producer.session_id if producer is not None else None,
        worker.session_id if worker is not None else None,
        task.attempts if attempt is None else attempt,
        extra,
        task.home.name,
        task.priority,
    )


class IScheduleBook(Protocol):
    """The schedules, as the queue's journal snapshot reads them."""

    def last_fires(self) -> list[tuple[str, float]]:
        """Each schedule's last fire time."""

    def definitions(self) -> list[tuple[str, bytes]]:
        """The run-time schedules' SCHEDULE payloads, by name."""


class ISharedData(Protocol):
    """The shared data, as the queue sees it."""

    def versions(self) -> list[tuple[str, int, bytes]]:
        """Each name's current version and data (for the journal's snapshot)."""

    def unfollow(self, session: Session) -> None:
        """Forget a connection that closed."""

    def caught_up(self, session: Session) -> None:
        """C{session}'s output drained: send it the newest of what it missed."""


def due_ms(due: float) -> int | None:
    """A delayed task's due time as its events give it (epoch ms), or C{None}: not delayed."""
    return round(due * 1000) if due else None
