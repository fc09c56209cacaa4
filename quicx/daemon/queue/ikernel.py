"""
What the kernel's collaborators may use of it: they are handed it and never import it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from quicx.daemon.journal.interface import IJournal, KeyEntry, ParentEntry
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue import pmad
from quicx.daemon.queue.deadletters import DeadLetters
from quicx.daemon.queue.dedup import KeyTable
from quicx.daemon.queue.delays import Delays
from quicx.daemon.queue.dispatcher import Dispatcher
from quicx.daemon.queue.groups import Groups
from quicx.daemon.queue.hooks import IEvents, IScheduleBook, ISharedData, Subscribers
from quicx.daemon.queue.model import Duplicate, Refused, Session, Task
from quicx.daemon.queue.outcomes import Outcomes
from quicx.daemon.queue.policy import QueueLimits
from quicx.daemon.queue.progress import ProgressBook
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.results import KeptOutcomes
from quicx.protocol import start_options, taskflow
from quicx.protocol.codec import ErrorCode


class IGraveyard(Protocol):
    @property
    def letters(self) -> DeadLetters[Task]: ...

    def unbury(self, task: Task) -> None:
        """Take C{task} out of the dead-letter set."""

    def keep(self, tasks: list[Task]) -> None:
        """Keep these dead tasks (oldest first)."""

    def bury(self, task: Task, reason: str, worker: str) -> None:
        """Move C{task} to the dead-letter set."""

    def drop(self, task: Task, why: str) -> None:
        """Finish dead C{task} for good."""

    def replay(self, task_id: int, queue: str | None) -> dict[str, Any]:
        """Put dead task C{task_id} back in its queue, its failures reset."""


class IFailing(Protocol):
    def fail_for_good(
        self,
        task: Task,
        reason: str,
        worker: str,
        session: Session | None,
        attempt: int | None,
        dead_letter: bool,
    ) -> None:
        """End C{task}, which no worker holds, as failed; tell its producer."""


class IWaitingRoom(Protocol):
    """The waiting tasks, as the kernel's side sees them (L{quicx.daemon.queue.dependencies})."""

    def check(self, options: taskflow.SubmitOptions) -> None:
        """@raise Refused: a SUBMIT may not wait for what C{options} name."""

    def attach(self, task: Task, options: taskflow.SubmitOptions) -> None:
        """C{task}, just made of C{options}, waits for what they name."""

    def wait(self, task: Task) -> None:
        """C{task}, accepted, is waiting: due now if it may be."""

    def entries(self) -> Iterator[ParentEntry]:
        """The outcomes the waiting tasks have heard (for a journal snapshot)."""

    def restore(self, waiting: Iterable[Task], entries: Iterable[ParentEntry]) -> None:
        """Take back the waiting tasks a journal kept."""


class IExpiry(Protocol):
    """Deadlines to start (L{quicx.daemon.queue.expiry.Expiry})."""

    def deadline(
        self,
        queue: NamedQueue[Task, Session],
        expires: start_options.Expires | None,
        due: float,
        now: float,
    ) -> float:
        """The deadline of a task submitted C{now}. @raise Refused: it cannot be met."""

    def watch(self, task: Task) -> None:
        """Hold C{task}, accepted and waiting, to its deadline."""

    def cancelled(self, task: Task, why: str) -> None:
        """C{task}, which waited, ended before its deadline (cancelled, or failed by a parent)."""


class ICheckpoints(Protocol):
    """Running tasks' checkpoints (L{quicx.daemon.queue.checkpoints.Checkpoints})."""

    def fit(self, task: Task) -> None:
        """Let go of C{task}'s checkpoint if its TASK's context has no room for it."""


class IDebouncing(Protocol):
    """Debounced SUBMITs (L{quicx.daemon.queue.debounce.Debouncing})."""

    def fold(
        self,
        session: Session,
        found: Task | KeyEntry | None,
        task_type: bytes,
        payload: bytes,
        debounce: start_options.Debounce,
        store: Callable[[bytes], int],
    ) -> bool:
        """Whether the SUBMIT folded into C{found} (and was answered)."""


class IKernel(Protocol):
    """
    The kernel, as its collaborators see it: the admission, the dead
    letters, the leases, the failures, the drain and the journal's side.

    @ivar draining: it takes no more tasks (the daemon is stopping).
    @ivar fairness_keys: the fairness keys with state, in every queue (at
        most C{limits.max_fairness_keys}).
    @ivar duplicates: SUBMITs answered as duplicates of a task, since start.
    @ivar duplicates_waiting: the duplicate SUBMITs waiting for the answer
        of the task they name, not yet accepted, by its id.
    """

    draining: bool
    random: Callable[[], float]
    fairness_keys: int
    duplicates: int

    @property
    def duplicates_waiting(self) -> dict[int, list[Duplicate]]: ...

    @property
    def allowed_types(self) -> frozenset[bytes] | None:
        """The task types a SUBMIT may name (C{None}: any)."""

    def queue_named(self, name: str | None) -> NamedQueue[Task, Session]:
        """
        The queue a SUBMIT names (C{None}: the default queue); a new one is
        not kept until a task is.

        @raise Refused: it is new, and would pass C{max_queues}.
        """

    def tally_of(self, queue: NamedQueue[Task, Session], task_type: bytes) -> Tally:
        """What a task of C{task_type} in C{queue} counts in."""

    def next_task_id(self) -> int:
        """A new task's id (ids increase and wrap, skipping live ones)."""

    def admit(self, task: Task, payload: bytes) -> None:
        """
        Take C{task}, whose SUBMIT passed its checks: answered OK and queued
        once its journal record is durable (at once, or later).
        """

    @property
    def max_result(self) -> int:
        """The longest result an ACK may carry."""

    def done(self, session: Session, task_id: int, result: taskflow.Result | None = None) -> None:
        """A worker's DONE (or ACK), with the task's C{result} if it gave one."""

    def failed(self, session: Session, task_id: int, reason: str, permanent: bool = False) -> None:
        """A worker's FAILED (or NACK): retried if it may be, else failed for good."""

    def check_drain(self) -> None:
        """A task or a worker left: the drain, if under way, fires once nothing is left."""

    def _new_queue(self, name: str, more: int = 0) -> NamedQueue[Task, Session]:
        """A new queue called C{name}, not kept in C{queues} yet."""

    def reject(self, session: Session, refusal: Refused, task_type: bytes, size: int) -> None:
        """Answer C{session}'s SUBMIT with the ERROR of C{refusal}; announce it."""

    def note_rejection(
        self, session: Session | None, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        """Announce a refused SUBMIT (or schedule firing: C{session} C{None})."""

    @property
    def max_attempts(self) -> int: ...

    _last_task_id: int

    @property
    def pool(self) -> pmad.Pmad: ...

    @property
    def _live(self) -> dict[int, Task]: ...

    @property
    def keys(self) -> KeyTable[Task]: ...

    @property
    def groups(self) -> Groups: ...

    @property
    def graveyard(self) -> IGraveyard: ...

    @property
    def schedules(self) -> IScheduleBook | None: ...

    @property
    def shared(self) -> ISharedData | None: ...

    @property
    def default_queue(self) -> NamedQueue[Task, Session]: ...

    def _queue(self, name: str) -> NamedQueue[Task, Session]:
        """The queue called C{name}, created on first use."""

    def _tally(self, queue: NamedQueue[Task, Session], task_type: bytes) -> Tally:
        """The tally of C{task_type} in C{queue}."""

    def _delay(self, task: Task, due: float) -> None:
        """Hold C{task} until C{due}."""

    def _undelay(self, task: Task) -> None:
        """Take C{task} out of the delayed tasks."""

    @property
    def delays(self) -> Delays[Task]: ...

    @property
    def outcomes(self) -> Outcomes: ...

    @property
    def failing(self) -> IFailing: ...

    @property
    def dependencies(self) -> IWaitingRoom: ...

    @property
    def log(self) -> Logger: ...

    def find_queue(self, name: str) -> NamedQueue[Task, Session]:
        """@raise Refused: (not found) there is no queue C{name}."""

    @property
    def sessions(self) -> dict[int, Session]: ...

    @property
    def queues(self) -> dict[str, NamedQueue[Task, Session]]: ...

    @property
    def task_timeout(self) -> float: ...

    @property
    def tasks_running(self) -> int: ...

    @property
    def queued(self) -> int:
        """Tasks waiting for a worker."""

    @property
    def clock(self) -> Callable[[], float]: ...

    @property
    def scheduler(self) -> IReactorTime: ...

    @property
    def journal(self) -> IJournal: ...

    @property
    def limits(self) -> QueueLimits: ...

    @property
    def failures(self) -> LogSummary: ...

    @property
    def progress(self) -> ProgressBook[Task]: ...

    @property
    def dispatcher(self) -> Dispatcher: ...

    @property
    def expiry(self) -> IExpiry: ...

    @property
    def checkpoints(self) -> ICheckpoints: ...

    @property
    def debouncing(self) -> IDebouncing: ...

    @property
    def kept(self) -> KeptOutcomes: ...

    @property
    def events(self) -> IEvents | None: ...

    @property
    def hooks(self) -> Subscribers:
        """The features that hear the kernel's announcements, by hook."""

    def _end(self, task: Task, outcome: str) -> None:
        """Forget a finished task."""

    def _forget_if_idle(self, queue: NamedQueue[Task, Session]) -> None:
        """Forget an undeclared queue nothing refers to any more."""

    def _push(self, task: Task) -> None:
        """Queue C{task} at its queue's tail."""

    def _requeue(
        self,
        task: Task,
        why: str,
        cause: str,
        at_head: bool = True,
        worker: str = "",
        lost: bool = True,
    ) -> None:
        """Queue C{task} again, or fail it once it was delivered C{max_attempts} times."""

    def _become_idle(self, session: Session) -> None:
        """C{session} reported a task: serve it again."""
