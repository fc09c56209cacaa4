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
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState


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
TaskHook = Callable[[Task], None]
WorkerHook = Callable[[Task, Session], None]
Done = Callable[[Task, Session, int], None]
Failed = Callable[[Task, Session | None, str, int | None], None]
Why = Callable[[Task, str], None]
Settled = Callable[[Task, OutcomeState, taskflow.Result | None, str], None]
Recovered = Callable[[Task, float], None]
Rejected = Callable[[Session | None, ErrorCode, str, bytes, int], None]


class Subscribers:
    """
    The kernel's subscribers, by hook: for each hook, the bound methods of
    those that implement it (a method of the hook's name), in the order
    given; a hook nobody implements costs the kernel one empty loop.

    The hooks, as the kernel announces them (a task's, in its life's order):
      - C{accepted(task)}: its SUBMIT is answered OK; it is queued or delayed;
      - C{recovered(task, due)}: it came back from the journal (C{due}: 0
        or when it runs);
      - C{delivered(task, worker)}: handed to C{worker};
      - C{retrying(task, worker, reason, attempt)}: an attempt failed, it
        runs again after its backoff;
      - C{requeued(task, cause)}: taken back from its worker, queued again;
      - C{done(task, worker, attempt)}: its worker's DONE finished it;
      - C{failed(task, worker, reason, attempt)}: it fails for good
        (C{worker}, C{attempt}: C{None} when given up);
      - C{buried(task, worker, reason, attempt)}: it fails for good, into
        the dead-letter set;
      - C{replayed(task)}: out of the dead-letter set, queued again;
      - C{cancelled(task, why)}: cancelled or purged before it ran;
      - C{settled(task, state, result, reason)}: its outcome is decided and
        told to its producer: for those that keep it, wait for it, count
        it in a group.  Announced for every outcome but a DONE nobody else
        can want (see L{quicx.daemon.queue.core.QueueService.done}: the
        hot path's one test);
      - C{withdrawn(task)}: its SUBMIT, not yet answered, is refused after
        all (its journal record could not be written): it never existed;
      - C{dropped(task, why)}: lost as the daemon stops without a journal;
      - C{rejected(session, code, reason, task_type, size)}: a SUBMIT (or a
        schedule's firing: C{session} C{None}) refused;
      - C{session_closed(session)}: a connection closed (after the kernel
        forgot its subscriptions, before its tasks are requeued);
      - C{output_drained(session)}: its output drained: send it what was
        held back;
      - C{expired(task, why)}: not started before its deadline, it ends
        expired (L{quicx.daemon.queue.expiry});
      - C{debounced(task, mode)}: a SUBMIT of its key folded into it, as its
        debounce's C{mode} (C{drop}, C{replace}, C{extend}) says
        (L{quicx.daemon.queue.debounce});
      - C{moved(task, old)}: a bulk action moved it (queued, delayed or
        dead) out of queue C{old} into its C{home} (L{quicx.daemon.queue.bulk}).

    A new feature that must hear of a task's or a session's life implements
    the hooks it needs and is handed to the kernel (see
    L{quicx.daemon.queue.core.QueueService.plug}).
    """

    __slots__ = HOOKS = (
        "accepted",
        "recovered",
        "delivered",
        "retrying",
        "requeued",
        "done",
        "failed",
        "buried",
        "replayed",
        "cancelled",
        "settled",
        "withdrawn",
        "dropped",
        "rejected",
        "session_closed",
        "output_drained",
        "expired",
        "debounced",
        "moved",
    )

    accepted: tuple[TaskHook, ...]
    recovered: tuple[Recovered, ...]
    delivered: tuple[WorkerHook, ...]
    retrying: tuple[Failed, ...]
    requeued: tuple[Why, ...]
    done: tuple[Done, ...]
    failed: tuple[Failed, ...]
    buried: tuple[Failed, ...]
    replayed: tuple[TaskHook, ...]
    cancelled: tuple[Why, ...]
    settled: tuple[Settled, ...]
    withdrawn: tuple[TaskHook, ...]
    dropped: tuple[Why, ...]
    rejected: tuple[Rejected, ...]
    session_closed: tuple[SessionHook, ...]
    output_drained: tuple[SessionHook, ...]
    expired: tuple[Why, ...]
    debounced: tuple[Why, ...]
    moved: tuple[Why, ...]

    def __init__(self, subscribers: Iterable[object] = ()) -> None:
        those = tuple(subscribers)
        for name in self.HOOKS:
            setattr(self, name, _hook(those, name))


def _hook(subscribers: tuple[object, ...], name: str) -> tuple[Callable[..., None], ...]:
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
