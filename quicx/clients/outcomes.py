"""
Outcome bookkeeping shared by the Twisted and blocking producer clients.

A producer's connection receives DONE (with the handler's result, if it
gave one) and FAILED for the tasks it submitted, whenever the workers finish
them, interleaved with its other replies.  An
L{OutcomeBook} remembers which tasks still owe an outcome and keeps outcomes
that arrived before anyone asked for them, up to a bound (the oldest are
forgotten first), so a producer that never asks does not grow without limit.
Before the outcome, a version-2 producer may hear RETRYING for a task that
failed and will run again: the book keeps those notices, as L{RetryNotice}s,
until they are asked for with the outcome.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from attrs import frozen

from quicx.protocol import admin, outcomes, taskflow, wire
from quicx.protocol.errors import (
    NotSubmittedHere,
    OutcomeUnknown,
    QuicxError,
    TaskCancelled,
    TaskFailed,
)

Outcome = QuicxError | taskflow.Result | None
"""
For DONE, its L{taskflow.Result}, or C{None} when the worker gave none;
L{TaskFailed} for FAILED, L{TaskCancelled} for CANCELLED, L{OutcomeUnknown}
if it never came.
"""

DEFAULT_KEEP = 100_000

_MISSING: Any = object()
NOT_ARRIVED: Any = object()
"""What L{OutcomeBook.taken} returns for an outcome that has not arrived."""


@frozen
class RetryNotice:
    """
    A task's attempt failed and it will run again: the daemon's RETRYING.

    @ivar attempt: the attempt that failed (1 for the first).
    @ivar due: when the next attempt is due (Unix seconds).
    @ivar reason: why the attempt failed, in the worker's words.
    """

    task_id: int
    attempt: int
    due: float
    reason: str

    @classmethod
    def of(cls, message: outcomes.Retrying) -> RetryNotice:
        return cls(message.task_id, message.attempt, message.due_ms / 1000, message.reason)


RetryListener = Callable[[RetryNotice], object]
"""What C{on_retry} is: called with each L{RetryNotice} of a task."""


class OutcomeBook:
    """
    @ivar keep: how many unclaimed outcomes are kept.
    """

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self.keep = keep
        self._open: set[int] = set()
        self._arrived: OrderedDict[int, Outcome] = OrderedDict()
        self._notices: dict[int, list[RetryNotice]] = {}

    def expect(self, task_id: int) -> None:
        """C{task_id} was accepted: its outcome will come."""
        self._open.add(task_id)

    def pending(self, task_id: int) -> bool:
        """Whether the outcome of C{task_id} has yet to arrive."""
        return task_id in self._open

    def arrived(self, task_id: int, outcome: Outcome) -> None:
        """Keep an outcome nobody is waiting for yet."""
        self._open.discard(task_id)
        self._arrived[task_id] = outcome
        while len(self._arrived) > self.keep:
            forgotten, _ = self._arrived.popitem(last=False)
            self._notices.pop(forgotten, None)

    def notice(self, notice: RetryNotice) -> None:
        """
        Keep a retry notice until L{notices} is asked for it; one for a task
        whose outcome is not pending (not submitted here, or settled) is
        dropped.
        """
        if notice.task_id in self._open:
            self._notices.setdefault(notice.task_id, []).append(notice)

    def notices(self, task_id: int) -> list[RetryNotice]:
        """Remove and return the retry notices kept for C{task_id}, oldest first."""
        return self._notices.pop(task_id, [])

    def take(self, task_id: int) -> Outcome:
        """
        Remove and return an outcome that has arrived.

        @raise NotSubmittedHere: (a C{KeyError}) it has not arrived (see
            L{pending}), or it was never expected, already taken, or forgotten.
        """
        outcome = self._arrived.pop(task_id, _MISSING)
        if outcome is _MISSING:
            raise NotSubmittedHere(task_id)
        self._notices.pop(task_id, None)
        return outcome

    def taken(self, task_id: int) -> Outcome:
        """
        L{take}, when it has arrived: else L{NOT_ARRIVED} (pending, or not
        expected here), without an exception's cost.
        """
        outcome = self._arrived.pop(task_id, NOT_ARRIVED)
        if outcome is not NOT_ARRIVED and self._notices:
            self._notices.pop(task_id, None)
        return outcome

    def lose_all(self) -> list[int]:
        """
        The connection closed: every pending outcome is now unknown, and is
        filed as an L{OutcomeUnknown}.  Returns the task ids concerned.
        """
        lost = sorted(self._open)
        for task_id in lost:
            self.arrived(task_id, OutcomeUnknown(task_id))
        return lost


def value_of(outcome: Outcome) -> Any:
    """
    The value of a task that is done: its handler's return value (C{None}
    when it gave none).

    @raise QuicxError: the outcome is not done (L{TaskFailed}...).
    """
    if isinstance(outcome, QuicxError):
        raise outcome
    return None if outcome is None else outcome.value()


def outcome_of(message: object) -> tuple[int, Outcome] | None:
    """The task id and outcome a DONE, FAILED or CANCELLED message carries, else C{None}."""
    if isinstance(message, taskflow.Done):
        return message.task_id, message.result
    if isinstance(message, wire.Done):
        return message.task_id, None
    if isinstance(message, wire.Failed):
        return message.task_id, TaskFailed(message.task_id, message.reason)
    if isinstance(message, admin.Cancelled):
        return message.task_id, TaskCancelled(message.task_id)
    return None
