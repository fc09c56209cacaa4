"""
The queue's records: a live L{Task}, a connection's L{Session}, a refusal, the counters.

They hold state and nothing else: the kernel (L{quicx.daemon.queue.core})
and its features move them.
"""

from __future__ import annotations

import enum

from attrs import define, field, frozen

from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue.extras import After as After
from quicx.daemon.queue.extras import Extras, WithExtras
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.speaker import Speaker
from quicx.daemon.queue.state import PENDING, TaskState
from quicx.protocol import session as protocol
from quicx.protocol.codec import ErrorCode


@define(eq=False, weakref_slot=False)
class Task(WithExtras):
    """
    A live task: queued, or held by a worker.

    The payload is not here: it lives in PMAD block C{block}.  Its rare
    fields (keys, a deadline, a checkpoint, what it waits for, its failures,
    retries of its own, its due time while delayed, ...) are in its
    L{Extras}, if it has any, and read as its own attributes (its
    C{retries}: its queue's, unless its own).  Its SUBMIT's answer is not
    kept either (L{reply}).

    @ivar producer: the session that submitted it, told of the outcome;
        C{None} for a task recovered from the journal.
    @ivar home: the queue it belongs to.
    @ivar priority: 0 to 255, higher first.
    @ivar enqueued_at: when it was submitted (Unix seconds).
    @ivar attempts: how many times it has been handed to a worker.
    @ivar dispatched_at: when it was last handed to a worker.
    @ivar holder: the worker holding its current delivery, if any.
    @ivar state: where it is in its life (see L{quicx.daemon.queue.state}):
        FINISHED once its outcome is decided (a task taken back at its
        timeout can still be at another worker when the first outcome
        arrives).
    @ivar token: the fencing token of its current (or last) delivery.
    @ivar ticket: its place in its queue's FIFO while queued (see
        L{quicx.daemon.queue.queues.Level}).
    @ivar extras: its rare fields, if it has any (L{Extras}).
    @ivar tally: what it counts in: its queue and type's L{Tally}.
    @ivar ready_at: when it last became ready to run (queued, or due, or
        requeued), for its wait time.
    """

    task_id: int
    task_type: bytes
    block: int
    size: int
    producer: Session | None
    home: NamedQueue[Task, Session]
    priority: int
    enqueued_at: float
    attempts: int = 0
    dispatched_at: float = 0.0
    holder: Session | None = None
    state: TaskState = PENDING
    token: int = 0
    ticket: int = 0
    extras: Extras | None = None
    tally: Tally = field(kw_only=True)
    ready_at: float = field(kw_only=True)

    @property
    def accepted(self) -> bool:
        """Its SUBMIT was answered OK (its record is durable)."""
        return self.state is not PENDING

    @property
    def reply(self) -> bytes | None:
        """
        The answer to its SUBMIT once decided, while it waits in its
        producer's L{Session.replies}: OK once accepted (not kept: derived from
        its state; a refused task's ERROR takes its place there instead, see
        L{quicx.daemon.queue.journal_side.refused}).
        """
        producer = self.producer
        if self.state is PENDING or producer is None:
            return None
        return producer.speaker.ok(self.task_id)

    @property
    def queue(self) -> str:
        return self.home.name

    @property
    def ended_attempts(self) -> int:
        """Its deliveries that ended (what the journal keeps of C{attempts})."""
        return self.attempts - (self.holder is not None)


@define(eq=False)
class Duplicate:
    """A SUBMIT whose key names a task not yet accepted: its answer waits for that task's."""

    session: Session
    reply: bytes | None = None


@define(eq=False)
class Session(protocol.Session[Task]):
    """
    A connection, holding these tasks.

    @ivar speaker: its protocol version's replies (see L{Speaker}).
    @ivar admin: it may pause, resume, purge and cancel any task.
    @ivar identity: its TLS certificate identity, if it has one.
    @ivar client: what its HELLO said it is (name and version).
    @ivar subscriptions: the queues a worker serves, in order.
    @ivar waiting: it is among the idle workers of its queues.
    @ivar held_progress: while its output is backed up (C{paused}), the
        latest PROGRESS of each of its tasks, by task id: sent when the
        output drains, if the task has not finished by then.
    @ivar failed_in_row: the outcomes it reported since its last success,
        all failures.
    @ivar failing_until: it is passed over while another worker is idle
        until then (see L{quicx.daemon.queue.dispatch}).
    @ivar handles: the task types a version-2 worker announced it runs
        (C{None}: every type; see L{quicx.daemon.queue.routing}).
    @ivar card: what it announced of itself, and whether it was told to go
        quiet or terminate (see L{quicx.daemon.queue.workers}).
    """

    speaker: Speaker = field(kw_only=True)
    admin: bool = False
    identity: str | None = None
    client: str = ""
    subscriptions: tuple[NamedQueue[Task, Session], ...] = field(factory=tuple)
    waiting: bool = False
    held_progress: dict[int, bytes] = field(factory=dict)
    failed_in_row: int = 0
    failing_until: float = 0.0
    handles: frozenset[bytes] | None = None
    card: WorkerCard | None = None

    @property
    def version(self) -> int:
        """The protocol version it speaks."""
        return self.speaker.version


class Steering(enum.Enum):
    """A worker's state as the daemon steers it (L{quicx.daemon.queue.workers})."""

    ACTIVE = "active"
    QUIET = "quiet"
    TERMINATING = "terminating"


@define(eq=False)
class WorkerCard:
    """
    What a version-2 worker announced of itself (its ANNOUNCE), and its state.

    @ivar pid: its process id (0: not said).
    """

    name: str = ""
    host: str = ""
    pid: int = 0
    state: Steering = Steering.ACTIVE


class Refused(Exception):
    """
    A request the queue turns down: answered ERROR C{code}, C{str(self)}.

    @ivar log_id: when the refusal is a limit hit, the id of its log line
        (see L{QueueService.limit_hit}); C{None}: it is not logged.
    """

    def __init__(self, code: ErrorCode, message: str, log_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.log_id = log_id


@frozen
class Counters:
    """Totals since start, for the status view."""

    submitted: int
    completed: int
    failed: int
    rejected: int
    requeued: int
    timed_out: int
    given_up: int
    late_outcomes: int
    cancelled: int
    duplicates: int
    retried: int
    dead: int
    dead_dropped: int
    stale_outcomes: int
    delayed: int
    results_kept: int
    results_evicted: int
    results_expired: int
