"""
Waiting on the daemon from any connection: AWAIT, answered with OUTCOME, and
GROUP's wait, answered with GROUP_STATE.  Sans-I/O, shared by the blocking
and the Twisted clients.

Such an answer is no ordinary reply: it comes at once when the task's
outcome (the group's end) is known, and otherwise when it happens or when
the wait's timeout passes, between the answers to other requests; and a
connection may wait on one task several times.  L{Waits} matches answers to
waits by task or group: a final answer (the outcome, a group finished or
unknown) ends every wait on it, one that says "not yet" ends the wait whose
timeout comes first.  A wait that ended on a final answer still owes its own
answer, which is absorbed when it comes; an answer nobody owes (the
GROUP_STATE the opener of a group hears when it finishes) answers nothing.

L{awaited_value} and L{finished_group} turn the answers into a value or the
client's exception.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from attrs import define

from quicx.protocol import outcomes
from quicx.protocol.errors import (
    GroupUnknown,
    NotFinished,
    OutcomeForgotten,
    TaskCancelled,
    TaskDead,
    TaskExpired,
    TaskFailed,
    TaskUnknown,
)
from quicx.protocol.outcomes import GroupPhase, OutcomeState

A = TypeVar("A")

MAX_WAIT_MS = 0xFFFFFFFF
"""The longest wait AWAIT and GROUP carry (the daemon cuts it to its C{max_wait})."""


@define(eq=False)
class Waiter(Generic[A]):
    """
    One wait sent to the daemon.

    @ivar deadline: when its timeout passes (any clock: only the order counts).
    @ivar answer: the answer that ended it, once one did.
    @ivar then: called with that answer.
    """

    deadline: float
    then: Callable[[A], object] | None = None
    answer: A | None = None


class Waits(Generic[A]):
    """The waits of one connection, on tasks or on groups (C{A}: the answer's type)."""

    def __init__(self, final: Callable[[A], bool]) -> None:
        self._final = final
        self._waiting: dict[int, list[Waiter[A]]] = {}
        # Answers still to come, by key: the unanswered waits' and those of
        # waits a final answer ended early.
        self._owed: Counter[int] = Counter()

    def add(
        self, key: int, deadline: float, then: Callable[[A], object] | None = None
    ) -> Waiter[A]:
        """A wait on C{key} was sent."""
        waiter: Waiter[A] = Waiter(deadline, then)
        self._waiting.setdefault(key, []).append(waiter)
        self._owed[key] += 1
        return waiter

    def refused(self, key: int, waiter: Waiter[A]) -> None:
        """The daemon refused C{waiter}'s wait (ERROR): no answer will come for it."""
        waiting = self._waiting.get(key, [])
        if waiter in waiting:
            waiting.remove(waiter)
            if not waiting:
                del self._waiting[key]
        self._owed[key] -= 1
        if self._owed[key] <= 0:
            del self._owed[key]

    def answer(self, key: int, answer: A) -> bool:
        """
        File an answer that came for C{key}, ending the waits it answers.

        @return: whether a wait of this connection's was owed it.
        """
        if not self._owed[key]:
            return False
        self._owed[key] -= 1
        if not self._owed[key]:
            del self._owed[key]
        waiting = self._waiting.get(key)
        if not waiting:
            return True
        if self._final(answer):
            ended = self._waiting.pop(key)
        else:
            first = min(waiting, key=lambda waiter: waiter.deadline)
            waiting.remove(first)
            if not waiting:
                del self._waiting[key]
            ended = [first]
        for waiter in ended:
            waiter.answer = answer
            if waiter.then is not None:
                waiter.then(answer)
        return True

    def clear(self) -> list[Waiter[A]]:
        """The connection closed: forget every wait; return those still unanswered."""
        unanswered = [waiter for waiting in self._waiting.values() for waiter in waiting]
        self._waiting, self._owed = {}, Counter()
        return unanswered


def outcome_waits() -> Waits[outcomes.Outcome]:
    return Waits(lambda outcome: outcome.state != OutcomeState.PENDING)


def group_waits() -> Waits[outcomes.GroupState]:
    return Waits(lambda state: state.phase in (GroupPhase.FINISHED, GroupPhase.UNKNOWN))


def wait_seconds(seconds: object) -> float:
    """
    A wait's C{seconds}, checked, and cut to the longest AWAIT and GROUP
    carry (about 49 days; the daemon cuts it further, to its C{max_wait}).

    @raise ValueError: less than 0, or not a number.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 0:
        raise ValueError(f"a wait is 0 seconds or more, not {seconds!r}")
    return min(float(seconds), MAX_WAIT_MS / 1000)


def wait_ms(seconds: float) -> int:
    """A wait of C{seconds} (see L{wait_seconds}), as AWAIT and GROUP carry it."""
    return round(seconds * 1000)


def awaited_value(outcome: outcomes.Outcome) -> Any:
    """
    What a task's OUTCOME says: the handler's return value for DONE
    (C{None} when it gave none); otherwise the exception.

    @raise TaskFailed: it failed (C{TaskDead}: and is in the dead-letter set).
    @raise TaskCancelled: it was cancelled before it ran.
    @raise TaskExpired: it was not started before its deadline.
    @raise OutcomeForgotten: its kept outcome expired, or was evicted.
    @raise TaskUnknown: no such task, or its outcome was not kept.
    @raise NotFinished: it had not finished when the wait ended.
    """
    task_id, state = outcome.task_id, outcome.state
    if state == OutcomeState.DONE:
        return None if outcome.result is None else outcome.result.value()
    if state == OutcomeState.FAILED:
        raise TaskFailed(task_id, outcome.reason)
    if state == OutcomeState.DEAD:
        raise TaskDead(task_id, outcome.reason)
    if state == OutcomeState.CANCELLED:
        raise TaskCancelled(task_id)
    if state == OutcomeState.EXPIRED:
        raise TaskExpired(task_id, outcome.reason)
    if state == OutcomeState.FORGOTTEN:
        raise OutcomeForgotten(task_id, outcome.reason)
    if state == OutcomeState.UNKNOWN:
        raise TaskUnknown(task_id)
    raise NotFinished(f"task {task_id} has not finished yet")


def group_document(state: outcomes.GroupState) -> dict[str, Any]:
    """A GROUP_STATE as the dict the INFO of a GROUP request has (less its times)."""
    return {
        "group": state.group,
        "state": state.phase.name.lower(),
        "members": state.members,
        "done": state.done,
        "failed": state.failed,
        "cancelled": state.cancelled,
        "pending": state.pending,
    }


def finished_group(state: outcomes.GroupState) -> dict[str, Any]:
    """
    The state of a group whose wait ended, as L{group_document} has it,
    if the group finished.

    @raise GroupUnknown: no such group (or it is forgotten).
    @raise NotFinished: it had not finished when the wait ended (its
        C{state} is the group's then).
    """
    if state.phase == GroupPhase.UNKNOWN:
        raise GroupUnknown(state.group)
    document = group_document(state)
    if state.phase != GroupPhase.FINISHED:
        raise NotFinished(
            f"group {state.group} has not finished yet ({state.phase.name.lower()},"
            f" {state.pending} of {state.members} tasks to finish)",
            document,
        )
    return document
