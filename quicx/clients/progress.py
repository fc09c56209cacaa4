"""
Progress reports, both ways: from a worker's handler, to a producer's callback.

Progress reports, both ways: a worker's handler says how far it has got
(L{ten_thousandths}, as PROGRESS carries the fraction), and a producer that
asked for them hands each to the callback it gave its submit
(L{ProgressListeners}).  Sans-I/O, shared by the blocking and the Twisted
clients and the worker runner.

Reports for a task come in the order the worker sent them, and before the
task's outcome; after the outcome none comes.  Reports are no answers, and
are not held back behind them, so one may come before the OK that gives the
submit its task id: such early reports are kept, a bounded number, until
the callback is known.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable

from attrs import frozen

from quicx.protocol import outcomes

MAX_EARLY = 1000
"""Reports kept for tasks whose callback is not known yet; the oldest go first."""


@frozen
class ProgressReport:
    """
    How far a task has got, as its worker reported it.

    @ivar fraction: 0.0 to 1.0.
    @ivar message: the worker's words (may be empty).
    """

    task_id: int
    fraction: float
    message: str

    @classmethod
    def of(cls, message: outcomes.Progress) -> ProgressReport:
        return cls(message.task_id, message.fraction / outcomes.MAX_FRACTION, message.message)


Listener = Callable[[ProgressReport], object]
"""A submit's C{progress} callback."""


def ten_thousandths(fraction: float) -> int:
    """
    C{fraction} (0 to 1) as PROGRESS carries it.

    @raise ValueError: not from 0 to 1.
    """
    if not 0 <= fraction <= 1:
        raise ValueError(f"a progress fraction is 0 to 1, not {fraction}")
    return round(fraction * outcomes.MAX_FRACTION)


class ProgressListeners:
    """The progress callbacks of one producer connection, by task."""

    def __init__(self, keep: int = MAX_EARLY) -> None:
        self.keep = keep
        self._listeners: dict[int, Listener] = {}
        self._early: OrderedDict[int, list[ProgressReport]] = OrderedDict()
        self._early_count = 0

    def listen(self, task_id: int, listener: Listener) -> list[ProgressReport]:
        """Hand C{task_id}'s reports to C{listener}; returns those that came before."""
        self._listeners[task_id] = listener
        early = self._early.pop(task_id, [])
        self._early_count -= len(early)
        return early

    def report(self, message: outcomes.Progress) -> tuple[Listener, ProgressReport] | None:
        """
        A report came: its listener and the report to hand it, or C{None}
        when the listener is not known yet (the report is kept).
        """
        report = ProgressReport.of(message)
        listener = self._listeners.get(report.task_id)
        if listener is not None:
            return listener, report
        self._early.setdefault(report.task_id, []).append(report)
        self._early_count += 1
        while self._early_count > self.keep:
            _, dropped = self._early.popitem(last=False)
            self._early_count -= len(dropped)
        return None

    def forget(self, task_id: int) -> None:
        """C{task_id}'s outcome came: no report follows it."""
        if self._listeners or self._early:
            self._listeners.pop(task_id, None)
            self._early_count -= len(self._early.pop(task_id, ()))

    def clear(self) -> None:
        """The connection closed."""
        self._listeners.clear()
        self._early.clear()
        self._early_count = 0
