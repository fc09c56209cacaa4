"""
The kernel's announcements: what it tells of a task's life, and to whom.

L{Subscribers} holds, per hook, the features that implement it: the kernel
calls them and nothing else of theirs.  L{IEvents} is where lifecycle
events go (the event bus); L{record} is the one spelling of an event from a
task.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
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


SessionHook = Callable[[Session], None]


class Subscribers:
    """
    The kernel's subscribers, by hook: for each hook, the bound methods of
    those that implement it (a method of the hook's name), in the order
    given; a hook nobody implements costs the kernel one empty loop.

    The hooks:
      - C{session_closed(session)}: a connection closed (after the kernel
        forgot its subscriptions, before its tasks are requeued);
      - C{output_drained(session)}: its output drained: send it what was
        held back.

    A new feature that must hear of a session's life implements the hook
    and is handed to the kernel (L{quicx.daemon.queue.core.QueueService.plug}).
    """

    __slots__ = ("output_drained", "session_closed")

    def __init__(self, subscribers: Iterable[object] = ()) -> None:
        those = tuple(subscribers)
        self.session_closed: tuple[SessionHook, ...] = _hook(those, "session_closed")
        self.output_drained: tuple[SessionHook, ...] = _hook(those, "output_drained")


def _hook(subscribers: tuple[object, ...], name: str) -> tuple[SessionHook, ...]:
    return tuple(getattr(s, name) for s in subscribers if callable(getattr(s, name, None)))


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
    """The shared data, as the queue's journal snapshot reads it."""

    def versions(self) -> list[tuple[str, int, bytes]]:
        """Each name's current version and data (for the journal's snapshot)."""


def due_ms(due: float) -> int | None:
    """A delayed task's due time as its events give it (epoch ms), or C{None}: not delayed."""
    return round(due * 1000) if due else None
