"""
What the kernel's collaborators may use of it: they are handed it and never import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from quicx.daemon.journal.interface import IJournal
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue import pmad
from quicx.daemon.queue.deadletters import DeadLetters
from quicx.daemon.queue.dedup import KeyTable
from quicx.daemon.queue.delays import Delays
from quicx.daemon.queue.dispatcher import Dispatcher
from quicx.daemon.queue.groups import Groups
from quicx.daemon.queue.hooks import IEvents, IScheduleBook, ISharedData, Subscribers
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.outcomes import Outcomes
from quicx.daemon.queue.policy import QueueLimits
from quicx.daemon.queue.progress import ProgressBook
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.results import KeptOutcomes
from quicx.protocol import taskflow


class IGraveyard(Protocol):
    @property
    def letters(self) -> DeadLetters[Task]: ...

    def keep(self, tasks: list[Task]) -> None:
        """Keep these dead tasks (oldest first)."""

    def bury(self, task: Task, reason: str, worker: str) -> None:
        """Move C{task} to the dead-letter set."""


class IKernel(Protocol):
    """The kernel, as the dead letters, leases, drain and the journal's side see it."""

    draining: bool
    random: Callable[[], float]

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
    def log(self) -> Logger: ...

    def find_queue(self, name: str) -> NamedQueue[Task, Session]:
        """@raise Refused: (not found) there is no queue C{name}."""

    def _tell_outcome(
        self,
        session: Session,
        task_id: int,
        outcome: str,
        reason: str,
        result: taskflow.Result | None = None,
    ) -> None:
        """Send C{session} a task's outcome in its version."""

    @property
    def sessions(self) -> dict[int, Session]: ...

    @property
    def queues(self) -> dict[str, NamedQueue[Task, Session]]: ...

    @property
    def task_timeout(self) -> float: ...

    @property
    def tasks_running(self) -> int: ...

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
        self, task: Task, why: str, cause: str, at_head: bool = True, worker: str = ""
    ) -> None:
        """Queue C{task} again, or fail it once it was delivered C{max_attempts} times."""

    def _become_idle(self, session: Session) -> None:
        """C{session} reported a task: serve it again."""
