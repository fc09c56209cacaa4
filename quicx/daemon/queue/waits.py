"""
Waits: connections waiting for a task's outcome (AWAIT) or a group's end
(GROUP WAIT).

Each wait ends once: when its task or group is decided (the queue core
L{pop}s every wait on it), at its timeout (one timer is armed at a time,
for the earliest: a L{Delays} of waits), or when its connection closes
(L{drop}).  The waits are bounded in all (C{max_waiters}) and per
connection (C{max_waiters_per_connection}).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from enum import Enum
from typing import Generic, TypeVar

from attrs import define
from twisted.internet.interfaces import IReactorTime

from quicx.daemon.queue.delays import Delays
from quicx.daemon.queue.results import ResultLimits


class Target(Enum):
    """What a wait is for."""

    TASK = "task"
    GROUP = "group"


S = TypeVar("S", bound=Hashable)


@define(eq=False)
class Wait(Generic[S]):
    """
    C{session} waits for task or group C{target_id} until C{due} (Unix seconds).
    """

    session: S
    target: Target
    target_id: int
    due: float = 0.0


class Waits(Generic[S]):
    """The waits now, by what they wait for and by connection."""

    def __init__(
        self,
        limits: ResultLimits,
        scheduler: IReactorTime,
        clock: Callable[[], float],
        timed_out: Callable[[Wait[S]], None],
    ) -> None:
        """@param timed_out: told of each wait that reached its timeout (it has ended)."""
        self.max_waiters = limits.max_waiters
        self.max_per_connection = limits.max_waiters_per_connection
        self.max_wait = limits.max_wait
        self._clock = clock
        self._timed_out = timed_out
        self._by_target: dict[tuple[Target, int], dict[Wait[S], None]] = {}
        self._by_session: dict[S, dict[Wait[S], None]] = {}
        self._timer: Delays[Wait[S]] = Delays(scheduler, clock, self._due)
        self.count = 0

    def refusal(self, session: S) -> str | None:
        """Why C{session} may not wait for one more thing now, if it may not."""
        if self.count >= self.max_waiters:
            return f"too many waits (max_waiters = {self.max_waiters})"
        held = self._by_session.get(session)
        if (0 if held is None else len(held)) >= self.max_per_connection:
            return (
                "too many waits on this connection"
                f" (max_waiters_per_connection = {self.max_per_connection})"
            )
        return None

    def add(self, session: S, target: Target, target_id: int, timeout: float) -> None:
        """
        C{session} waits for C{target_id} up to C{timeout} seconds (at most
        C{max_wait}); the caller checked L{refusal}.
        """
        wait = Wait(session, target, target_id)
        self._by_target.setdefault((target, target_id), {})[wait] = None
        self._by_session.setdefault(session, {})[wait] = None
        self.count += 1
        self._timer.add(wait, self._clock() + min(timeout, self.max_wait))

    def holds(self, session: S) -> bool:
        """Whether C{session} waits for anything."""
        return session in self._by_session

    def pop(self, target: Target, target_id: int) -> list[S]:
        """End every wait for C{target_id} (it is decided): their sessions, in order."""
        waits = self._by_target.pop((target, target_id), None)
        if not waits:
            return []
        for wait in waits:
            self._timer.remove(wait)
            self._off_session(wait)
        return [wait.session for wait in waits]

    def drop(self, session: S) -> None:
        """End C{session}'s waits, unanswered (its connection closed)."""
        waits = self._by_session.pop(session, {})
        self.count -= len(waits)
        for wait in waits:
            self._timer.remove(wait)
            self._off_target(wait)

    def _due(self, waits: list[Wait[S]]) -> None:
        """(The timer.) These waits reached their timeouts."""
        for wait in waits:
            self._off_target(wait)
            self._off_session(wait)
            self._timed_out(wait)

    def _off_target(self, wait: Wait[S]) -> None:
        key = (wait.target, wait.target_id)
        waits = self._by_target[key]
        del waits[wait]
        if not waits:
            del self._by_target[key]

    def _off_session(self, wait: Wait[S]) -> None:
        self.count -= 1
        held = self._by_session[wait.session]
        del held[wait]
        if not held:
            del self._by_session[wait.session]

    def stop(self) -> None:
        self._timer.stop()
