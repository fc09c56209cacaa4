"""
The queue and journal's interfaces (L{IJournal}, L{IJournalOwner}) and L{NullJournal}.

What the queue asks of a journal (L{IJournal}), what a journal asks of the
queue (L{IJournalOwner}), and the journal used when none is configured
(L{NullJournal}).

The queue (L{quicx.daemon.queue.core}) calls its journal only through
L{IJournal} (it reads L{quicx.daemon.journal.records.Recovery} at start-up):
it never knows which journal it has, and the writer never imports the queue.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from typing import Any, Protocol

from attrs import frozen
from zope.interface import Attribute, Interface, implementer

from quicx.protocol.taskflow import Result


class RareFields(Protocol):
    """
    What the journal reads of a task's rare fields at once, where most tasks
    have none (L{Record.extras}): the same as L{Record}'s.
    """

    @property
    def due(self) -> float: ...

    @property
    def failures(self) -> int: ...

    @property
    def backoff(self) -> tuple[int, int, int, int] | None: ...

    @property
    def keep_for(self) -> float: ...

    @property
    def group(self) -> int: ...

    @property
    def trace(self) -> bytes | None: ...

    @property
    def after(self) -> WaitsFor | None: ...


class Record(Protocol):
    """What the journal reads of a task."""

    @property
    def extras(self) -> RareFields | None:
        """Its rare fields, if it has any (read once where a plain task's are all defaults)."""

    @property
    def task_id(self) -> int: ...

    @property
    def task_type(self) -> bytes: ...

    @property
    def size(self) -> int: ...

    @property
    def queue(self) -> str: ...

    @property
    def priority(self) -> int: ...

    @property
    def enqueued_at(self) -> float:
        """When the daemon accepted it (Unix seconds)."""

    @property
    def key(self) -> bytes | None:
        """Its idempotency key."""

    @property
    def fairness(self) -> bytes | None:
        """Its fairness key."""

    @property
    def due(self) -> float:
        """When a delayed task runs (Unix seconds; 0: it is not delayed)."""

    @property
    def retries(self) -> int:
        """How many times its failures are retried."""

    @property
    def failures(self) -> int:
        """The failed attempts it has had."""

    @property
    def ended_attempts(self) -> int:
        """Its deliveries that ended: failed, lost or timed out (not one running now)."""

    @property
    def backoff(self) -> tuple[int, int, int, int] | None:
        """Its own backoff (kind, base ms, cap ms, jitter percent), if it has one."""

    @property
    def dead(self) -> DeadInfo | None:
        """Why it died, if it is in a dead-letter set."""

    @property
    def keep_for(self) -> float:
        """Seconds its outcome is kept after it finishes, as its SUBMIT asked (0: not asked)."""

    @property
    def group(self) -> int:
        """The group it is a member of (0: none)."""

    @property
    def trace(self) -> bytes | None:
        """Its producer's trace context, as its SUBMIT carried it."""

    @property
    def after(self) -> WaitsFor | None:
        """What it waits for before it is due, if it waits."""

    @property
    def deadline(self) -> float:
        """When it expires if not started by then (Unix seconds; 0: no deadline)."""


OUTCOMES = ("done", "failed", "cancelled", "expired")
"""How a task can end; the journal records which."""


@frozen
class KeyEntry:
    """
    An idempotency key of a finished task, remembered for the dedup window.

    @ivar submitted_at: when its task was accepted (Unix seconds): the
        window counts from then.
    @ivar outcome: one of L{OUTCOMES}.
    """

    queue: str
    key: bytes
    task_id: int
    submitted_at: float
    outcome: str


@frozen
class DeadInfo:
    """Why and when a task went to its dead-letter set, and the worker that last ran it."""

    died_at: float
    reason: str
    worker: str


@frozen
class SavedState:
    """A running task's last checkpoint: its C{state}, and when it was saved (Unix seconds)."""

    state: Result
    saved_at: float


@frozen
class KeptEntry:
    """
    A kept outcome (see L{quicx.daemon.queue.results}).

    @ivar state: an L{quicx.protocol.outcomes.OutcomeState} (done, failed,
        cancelled or dead).
    @ivar kind: the result's kind (a L{quicx.protocol.taskflow.ResultKind}); 0:
        C{data} is a reason (UTF-8), or a done task gave no result.
    @ivar expires_at: when it is forgotten (Unix seconds).
    @ivar automatic: nobody asked for it to be kept (its producer was gone):
        evicted before those that were asked for.
    """

    task_id: int
    state: int
    kind: int
    expires_at: float
    data: bytes
    automatic: bool = False


@frozen
class GroupEntry:
    """
    A group's state (see L{quicx.daemon.queue.groups}): its phase (a
    L{quicx.protocol.outcomes.GroupPhase}), when it opened and finished
    (Unix seconds; 0: not yet), and its members' counts.
    """

    group_id: int
    phase: int
    opened_at: float
    finished_at: float = 0.0
    members: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0


class WaitsFor(Protocol):
    """What a waiting task waits for (L{quicx.daemon.queue.model.After})."""

    @property
    def parents(self) -> tuple[int, ...]: ...

    @property
    def policy(self) -> int: ...

    @property
    def group(self) -> int: ...


@frozen
class ParentEntry:
    """
    An outcome a waiting task needs (a PARENT record, kind 24): task
    C{task_id}'s state (an L{quicx.protocol.outcomes.OutcomeState}), its
    result's kind (0: C{data} is a reason) and data; C{group}: the group it
    is a member of, when a callback of that group keeps it (0: a parent's).
    """

    task_id: int
    group: int
    state: int
    kind: int
    data: bytes


@frozen
class Snapshot:
    """
    The queue's durable state, for compaction.

    @ivar tasks: the live tasks and their payloads, oldest first.
    @ivar paused: the paused queues.
    @ivar keys: the remembered keys of finished tasks.
    @ivar fired: each schedule's last fire time.
    @ivar schedules: the run-time schedules' SCHEDULE payloads, by name.
    @ivar shared: each shared-data name's current version and data.
    @ivar kept: the kept outcomes, oldest first.
    @ivar forgotten: the ids of outcomes that were kept and no longer are.
    @ivar evicted: those of C{forgotten} that were evicted (not expired).
    @ivar groups: the groups, open or remembered.
    @ivar checkpoints: the live tasks' checkpoints, by task id.
    """

    tasks: Iterable[tuple[Record, bytes]]
    paused: Iterable[str]
    keys: Iterable[KeyEntry]
    fired: Iterable[tuple[str, float]] = ()
    schedules: Iterable[tuple[str, bytes]] = ()
    shared: Iterable[tuple[str, int, bytes]] = ()
    kept: Iterable[KeptEntry] = ()
    forgotten: Iterable[int] = ()
    groups: Iterable[GroupEntry] = ()
    evicted: Container[int] = frozenset()
    checkpoints: Iterable[tuple[int, SavedState]] = ()
    parents: Iterable[ParentEntry] = ()


class IJournalOwner(Interface):
    """The queue, as its journal sees it."""

    # The tasks given back are the owner's own, as it gave them to
    # IJournal.record_submit: of its record type, which an interface cannot
    # name (hence Any).

    def accepted(tasks: list[Any]) -> None:
        """These tasks' SUBMIT records are durable: they may be acknowledged."""

    def refused(tasks: list[Any], reason: str, in_doubt: bool) -> None:
        """
        These tasks' records could not be written: refuse them.  C{in_doubt}:
        the failed write could not be cut back, so a record may survive.
        """

    def snapshot() -> Snapshot:
        """The queue's durable state now (for compaction)."""


class IJournal(Interface):
    """Where accepted tasks and their outcomes are recorded."""

    path = Attribute("The journal file's path, or C{None} without one.")
    broken = Attribute("Why the journal stopped writing, or C{''}.")

    def bind(owner: IJournalOwner) -> None:
        """Attach the queue, before the journal starts."""

    def record_submit(task: Record, payload: bytes) -> bool:
        """
        Record an accepted task (its id is the next the owner issued).

        @return: whether it may be acknowledged now; if not, the journal
            calls the owner's C{accepted} or C{refused} with it later.
        """

    def record_outcome(task: Record, outcome: str) -> None:
        """Record that C{task} is finished: C{outcome} is one of L{OUTCOMES}."""

    def record_pause(queue: str, paused: bool) -> None:
        """Record that C{queue} was paused or resumed."""

    def record_retry(task: Record) -> None:
        """Record that C{task} failed and waits until C{task.due} to run again."""

    def record_dead(task: Record) -> None:
        """Record that C{task} went to its dead-letter set (C{task.dead} says why)."""

    def record_replay(task: Record) -> None:
        """Record that dead C{task} is back in its queue, its failures reset."""

    def record_move(task: Record, old_queue: str) -> None:
        """Record that C{task} moved from C{old_queue} to its queue now (a bulk action's move)."""

    def record_attempts(task: Record) -> None:
        """Record that a delivery of C{task} ended (lost, timed out) and it is queued again."""

    def record_replace(task: Record, payload: bytes) -> None:
        """Record that a debounced SUBMIT replaced C{task}'s payload (and due time)."""

    def record_fired(schedule: str, fire_time: float) -> None:
        """Record that C{schedule} fired for C{fire_time} (after its task's SUBMIT)."""

    def record_schedule(schedule: str, definition: bytes | None) -> None:
        """Record a schedule added at run time (its SCHEDULE payload), or removed (C{None})."""

    def record_shared(name: str, version: int, data: bytes) -> None:
        """Record version C{version} of shared data C{name} (0: it was deleted)."""

    def record_result(entry: KeptEntry) -> None:
        """Record a kept outcome (after its task's own outcome record)."""

    def record_forgotten(task_id: int, size: int, evicted: bool) -> None:
        """
        Record that the kept outcome of C{task_id} (C{size} bytes of data)
        is forgotten: C{evicted} before its time, or expired.
        """

    def record_parent(entry: ParentEntry) -> None:
        """An outcome a waiting task needs (before the task's SUBMIT, or after the outcome)."""

    def record_group(entry: GroupEntry) -> None:
        """Record a group's state now: opened, closed, finished or forgotten."""

    def record_checkpoint(task_id: int, saved: SavedState) -> None:
        """Record C{saved}, the last state a delivery of live task C{task_id} saved."""

    def durable() -> Any:
        """
        A C{Deferred} that fires once every record so far is as durable as
        the policy promises an acknowledged task is; C{None} when they are
        already (answers to CANCEL, PAUSE, RESUME and PURGE wait for it).
        """


@implementer(IJournal)
class NullJournal:
    """No journal: every task may be acknowledged at once, nothing is kept."""

    path: str | None = None
    broken = ""

    def bind(self, owner: IJournalOwner) -> None:
        pass

    def record_submit(self, task: Record, payload: bytes) -> bool:
        return True

    def record_outcome(self, task: Record, outcome: str) -> None:
        pass

    def record_pause(self, queue: str, paused: bool) -> None:
        pass

    def record_retry(self, task: Record) -> None:
        pass

    def record_dead(self, task: Record) -> None:
        pass

    def record_replay(self, task: Record) -> None:
        pass

    def record_move(self, task: Record, old_queue: str) -> None:
        pass

    def record_attempts(self, task: Record) -> None:
        pass

    def record_replace(self, task: Record, payload: bytes) -> None:
        pass

    def record_fired(self, schedule: str, fire_time: float) -> None:
        pass

    def record_schedule(self, schedule: str, definition: bytes | None) -> None:
        pass

    def record_shared(self, name: str, version: int, data: bytes) -> None:
        pass

    def record_result(self, entry: KeptEntry) -> None:
        pass

    def record_forgotten(self, task_id: int, size: int, evicted: bool) -> None:
        pass

    def record_parent(self, entry: ParentEntry) -> None:
        pass

    def record_group(self, entry: GroupEntry) -> None:
        pass

    def record_checkpoint(self, task_id: int, saved: SavedState) -> None:
        pass

    def durable(self) -> None:
        return None
