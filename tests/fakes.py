"""
Fakes for driving the queue core in-process: peers that decode what the queue
sends them, a journal the test syncs or fails by hand, and a queue built on a
L{task.Clock}.  No reactor, no sockets.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from functools import partial
from typing import Any, cast

from attrs import frozen
from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, Logger, formatEvent
from zope.interface import implementer

from quicx.daemon.journal.interface import (
    DeadInfo,
    GroupEntry,
    IJournal,
    IJournalOwner,
    KeptEntry,
    ParentEntry,
    Record,
    SavedState,
)
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.queue import pmad
from quicx.daemon.queue.admission import Admission, ScheduledTask
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import After, Session, Task
from quicx.daemon.queue.state import TaskState, allowed
from quicx.daemon.speakers import SPEAKERS
from quicx.protocol import registry, taskflow, wire
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.session import IPeer, Role


@implementer(IPeer)
class FakePeer:
    """A connection that keeps what the queue sends it, decoded."""

    def __init__(self, queue: QueueService, name: str, version: int = 1) -> None:
        self.queue = queue
        self.peer_name = name
        self.parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)
        self.received: list[Any] = []
        self.session: Session = queue.open_session(self, SPEAKERS[version])
        self._decode = partial(registry.decode, version=version)

    def sendFrame(self, data: bytes) -> None:
        assert self.session.connected, f"a frame sent to {self.peer_name} after it left"
        for frame in self.parser.feed(data):
            assert isinstance(frame, Frame)
            assert self.parser.version == self.session.version, "a frame of the wrong version"
            self.received.append(self._decode(frame.message_type, frame.payload))

    def disconnect(self) -> None:
        self.queue.close_session(self.session)

    def take(self) -> list[Any]:
        received, self.received = self.received, []
        return received

    def task_ids(self) -> list[int]:
        """The ids of the TASKs received since the last C{take}, taking them all."""
        return [m.task_id for m in self.take() if isinstance(m, wire.Task | taskflow.Task)]


@frozen
class Written:
    """A task as the journal reads it (a L{Record}): to write its records by hand."""

    task_id: int
    task_type: bytes
    queue: str
    priority: int
    enqueued_at: float
    key: bytes | None = None
    fairness: bytes | None = None
    due: float = 0.0
    retries: int = 0
    failures: int = 0
    backoff: tuple[int, int, int, int] | None = None
    keep_for: float = 0.0
    group: int = 0
    size: int = 0
    ended_attempts: int = 0
    dead: DeadInfo | None = None
    trace: bytes | None = None
    after: After | None = None
    deadline: float = 0.0

    @property
    def extras(self) -> Written:
        """(A task keeps its rare fields in its extras: this, in itself.)"""
        return self


@implementer(IJournal)
class FakeJournal:
    """
    Records outcomes; holds each SUBMIT until the test says its record is
    synced (L{sync}) or failed (L{fail}), unless C{waits} is false (a journal
    that syncs on an interval: every task is acknowledged at once).

    @ivar broken: set by a test to make the journal refuse every SUBMIT.
    """

    path = "fake"

    def __init__(self, waits: bool = True) -> None:
        self.waits = waits
        self.broken = ""
        self.waiting: list[Task] = []
        self.outcomes: list[tuple[int, str]] = []
        self.pauses: list[tuple[str, bool]] = []
        self.changes: list[tuple[str, int]] = []
        self.fired: list[tuple[str, float]] = []
        self.schedules: list[tuple[str, bytes | None]] = []
        self.shared: list[tuple[str, int, bytes]] = []
        self.results: list[KeptEntry | int] = []
        self.groups: list[GroupEntry] = []
        self.checkpoints: list[tuple[int, SavedState]] = []
        self.parents: list[ParentEntry] = []
        self.syncing: list[Deferred[None]] | None = None

    def bind(self, owner: IJournalOwner) -> None:
        self.owner = owner

    def record_submit(self, task: Record, payload: bytes) -> bool:
        if not self.waits:
            return True
        self.waiting.append(cast(Task, task))  # the queue's own tasks
        return False

    def record_outcome(self, task: Record, outcome: str) -> None:
        self.outcomes.append((task.task_id, outcome))

    def record_pause(self, queue: str, paused: bool) -> None:
        self.pauses.append((queue, paused))

    def record_retry(self, task: Record) -> None:
        self.changes.append(("retry", task.task_id))

    def record_dead(self, task: Record) -> None:
        self.changes.append(("dead", task.task_id))

    def record_replay(self, task: Record) -> None:
        self.changes.append(("replay", task.task_id))

    def record_attempts(self, task: Record) -> None:
        self.changes.append(("attempts", task.task_id))

    def record_replace(self, task: Record, payload: bytes) -> None:
        self.changes.append(("replace", task.task_id))

    def record_move(self, task: Record, old_queue: str) -> None:
        self.changes.append(("moved", task.task_id))

    def record_fired(self, schedule: str, fire_time: float) -> None:
        self.fired.append((schedule, fire_time))

    def record_schedule(self, schedule: str, definition: bytes | None) -> None:
        self.schedules.append((schedule, definition))

    def record_shared(self, name: str, version: int, data: bytes) -> None:
        self.shared.append((name, version, data))

    def record_result(self, entry: KeptEntry) -> None:
        self.results.append(entry)

    def record_forgotten(self, task_id: int, size: int, evicted: bool = False) -> None:
        self.results.append(task_id)

    def record_group(self, entry: GroupEntry) -> None:
        self.groups.append(entry)

    def record_checkpoint(self, task_id: int, saved: SavedState) -> None:
        self.checkpoints.append((task_id, saved))

    def record_parent(self, entry: ParentEntry) -> None:
        self.parents.append(entry)

    def durable(self) -> Deferred[None] | None:
        """C{None} (all is durable), unless a test set C{syncing}: then one more to fire."""
        if self.syncing is None:
            return None
        self.syncing.append(Deferred())
        return self.syncing[-1]

    def sync(self) -> None:
        waiting, self.waiting = self.waiting, []
        self.owner.accepted(waiting)

    def fail(self, in_doubt: bool = False) -> None:
        waiting, self.waiting = self.waiting, []
        self.owner.refused(waiting, "No space left on device", in_doubt)


def default_pool() -> pmad.Pmad:
    return pmad.Pmad(1 << 20, pmad.default_classes())


EMPTY_POOL_BYTES = default_pool().bytes_used

BLOCK = 64
"""The one block size of L{small_pool}."""


def small_pool(blocks: int) -> pmad.Pmad:
    """A pool of exactly C{blocks} blocks of L{BLOCK} bytes, so it can fill up."""
    stride = pmad.BLOCK_HEADER_SIZE + BLOCK
    metadata = 16  # the lookup table of one class, rounded up to 16 bytes
    pool = pmad.Pmad(metadata + blocks * stride, [pmad.SizeClass(BLOCK, Decimal(100))])
    assert pool.blocks_total == [blocks] and pool.metadata_bytes == metadata
    return pool


def make_queue(
    clock: Clock | None = None,
    journal: FakeJournal | None = None,
    pool: pmad.Pmad | None = None,
    log: list[str] | None = None,
    **kwargs: Any,
) -> QueueService:
    """
    A queue on C{clock}; with C{log}, every line its task log writes (each
    failure, requeue and late outcome, as it happens) is appended there.
    """
    clock = clock or Clock()
    kwargs.setdefault("scheduler", clock)
    if log is None:
        failures = LogSummary(Logger(), 60.0)
    else:
        observer = cast(ILogObserver, lambda event: log.append(formatEvent(event)))
        failures = LogSummary(Logger(observer=observer))
    return QueueService(
        pool or default_pool(),
        clock=clock.seconds,
        journal=journal,
        failures=failures,
        **kwargs,
    )


def submit_to(
    kernel: QueueService,
    session: Session,
    task_type: bytes,
    payload: bytes,
    *fields: Any,
    **named: Any,
) -> None:
    """
    A SUBMIT into C{kernel}, as the server hands it on: its options
    (L{taskflow.SubmitOptions}'s fields) made one value, admitted.
    """
    options = taskflow.SubmitOptions(*fields, **named)
    Admission(kernel).submit(session, task_type, payload, options)


def fire_to(kernel: QueueService, name: str, fire_time: float, spec: ScheduledTask) -> None:
    """Schedule C{name}'s firing for C{fire_time}, as the schedules hand it on."""
    Admission(kernel).fire(name, fire_time, spec)


def producer_of(queue: QueueService, name: str = "producer") -> FakePeer:
    peer = FakePeer(queue, name)
    queue.claim_role(peer.session, Role.PRODUCER)
    return peer


def worker_of(queue: QueueService, credits: int = 1, name: str = "worker") -> FakePeer:
    """A worker that has sent its first READY."""
    peer = FakePeer(queue, name)
    queue.claim_role(peer.session, Role.WORKER)
    queue.ready(peer.session, credits)
    return peer


def v2_producer_of(queue: QueueService, name: str = "producer") -> FakePeer:
    peer = FakePeer(queue, name, version=2)
    queue.claim_role(peer.session, Role.PRODUCER)
    return peer


def v2_worker_of(
    queue: QueueService, credits: int = 1, queues: tuple[str, ...] = (), name: str = "worker"
) -> FakePeer:
    """A version-2 worker subscribed to C{queues} (default: the default queue), READY sent."""
    peer = FakePeer(queue, name, version=2)
    queue.claim_role(peer.session, Role.WORKER)
    if queues:
        queue.subscribe(peer.session, queues)
    queue.ready(peer.session, credits)
    return peer


class CheckedStates:
    """
    Stands in for L{Task}'s C{state} slot: every move a task makes is
    checked against L{TRANSITIONS} (a move the table does not allow raises
    at once) and kept in C{moves}.
    """

    def __init__(self) -> None:
        self.slot = Task.__dict__["state"]
        self.moves: set[tuple[TaskState, TaskState]] = set()

    def __get__(self, task: Task | None, owner: type) -> Any:
        return self if task is None else self.slot.__get__(task, owner)

    def __set__(self, task: Task, new: TaskState) -> None:
        try:
            old = self.slot.__get__(task, Task)
        except AttributeError:  # the constructor's
            old = None
        if old is not None:
            assert allowed(old, new), f"task {task.task_id}: {old.name} -> {new.name}"
            self.moves.add((old, new))
        self.slot.__set__(task, new)


@contextmanager
def checked_states() -> Iterator[CheckedStates]:
    """Check every task's moves against the table while in this block."""
    checker = CheckedStates()
    setattr(Task, "state", checker)  # noqa: B010 (a slot: mypy would refuse the assignment)
    try:
        yield checker
    finally:
        setattr(Task, "state", checker.slot)  # noqa: B010
