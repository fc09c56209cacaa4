"""
Progress reports: each task's last one, and a throttle on those that go out.

A worker's PROGRESS for a task it holds is kept as the task's last report
(INSPECT shows it) and, when someone wants it (the producer asked, or the
events log is on), goes out through the C{out} callback: at most one per
task per C{interval}.  A report that comes sooner is held, replacing any
report held before it (counted in L{ProgressBook.coalesced}), and goes out
when the interval ends; a task that finishes first drops it, its outcome
superseding it.  Reports go out in the order they came.

At most one timer per task, armed only while a report is held; a task's
entry lives until it finishes, so entries are bounded by the live tasks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from attrs import define, frozen
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.queue.policy import ProgressSettings


@frozen
class Report:
    """
    One PROGRESS: of delivery C{token}, C{fraction} ten-thousandths done,
    C{message}; C{at}: when it arrived (Unix seconds).
    """

    token: int
    fraction: int
    message: str
    at: float


class _Task(Protocol):
    @property
    def task_id(self) -> int: ...


T = TypeVar("T", bound=_Task)


@define(eq=False)
class _Entry(Generic[T]):
    """
    One task's reports: the C{last} that came, when one last went out, the
    one C{held} until the interval ends and its C{timer}.
    """

    task: T
    last: Report
    sent_at: float = float("-inf")
    held: Report | None = None
    timer: IDelayedCall | None = None


class ProgressBook(Generic[T]):
    """
    @ivar entries: the running tasks that reported progress, by id (most
        often none: a task's end asks only then).
    @ivar coalesced: reports replaced by a later one before they went out.
    """

    def __init__(
        self,
        reactor: IReactorTime,
        clock: Callable[[], float],
        settings: ProgressSettings,
        out: Callable[[T, Report], None],
    ) -> None:
        self._reactor = reactor
        self._clock = clock
        self.settings = settings
        self._out = out
        self.entries: dict[int, _Entry[T]] = {}
        self.coalesced = 0

    def report(self, task: T, token: int, fraction: int, message: str, goes_out: bool) -> None:
        """
        Keep a report of C{task} as its last; if it C{goes_out}, send it now
        or when the task's interval ends.
        """
        now = self._clock()
        report = Report(token, fraction, message, now)
        entry = self.entries.get(task.task_id)
        if entry is None:
            entry = self.entries[task.task_id] = _Entry(task, report)
        else:
            entry.last = report
        if not goes_out:
            return
        if entry.held is not None:
            entry.held = report
            self.coalesced += 1
            return
        wait = entry.sent_at + self.settings.interval - now
        if wait <= 0:
            entry.sent_at = now
            self._out(task, report)
            return
        entry.held = report
        entry.timer = self._reactor.callLater(wait, self._due, entry)

    def _due(self, entry: _Entry[T]) -> None:
        held = entry.held
        assert held is not None
        entry.held = entry.timer = None
        entry.sent_at = self._clock()
        self._out(entry.task, held)

    def last(self, task_id: int) -> Report | None:
        """The last report of task C{task_id}, if it has sent one."""
        entry = self.entries.get(task_id)
        return None if entry is None else entry.last

    def finished(self, task_id: int) -> None:
        """Forget a finished task: a report it held never goes out."""
        entry = self.entries.pop(task_id, None)
        if entry is not None and entry.timer is not None:
            entry.timer.cancel()

    def stop(self) -> None:
        """Cancel every timer (the daemon stops)."""
        for entry in self.entries.values():
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None
