"""
A task's parents' outcomes as its handler reads them (C{context.parents}), sans-I/O.

A task submitted with C{after=[...]} (or C{after_group=...}) runs once its
parents finished; its TASK carries their outcomes
(L{quicx.protocol.parents.Parents}), which the worker runner and the asyncio
worker hand its handler as L{Parent}s.
"""

from __future__ import annotations

from typing import Any

from attrs import frozen

from quicx.protocol import parents as wire
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.taskflow import Result, ResultKind


@frozen
class Parent:
    """
    One parent's outcome (or, for a group's callback, one member's).

    @ivar state: C{"done"}, C{"failed"}, C{"dead"}, C{"cancelled"},
        C{"expired"} (not started before its deadline), or C{"unknown"} (its
        outcome was lost to a restart).
    @ivar result: the value its handler returned (as L{Result.value} restores
        it), when it is done with a result that fit the daemon's
        C{[dependencies] max_results}; else C{None}.
    @ivar reason: why it failed (its worker's reason), else C{""}.
    """

    task_id: int
    state: str
    result: Any = None
    reason: str = ""

    @property
    def done(self) -> bool:
        return self.state == "done"


def parents_of(carried: wire.Parents | None) -> tuple[Parent, ...]:
    """The L{Parent}s of what a TASK carried (none: an empty tuple)."""
    if carried is None:
        return ()
    return tuple(_parent(outcome) for outcome in carried.outcomes)


def _parent(outcome: wire.ParentOutcome) -> Parent:
    state = OutcomeState(outcome.state)
    if state is OutcomeState.DONE:
        value = Result(ResultKind(outcome.kind), outcome.data).value() if outcome.kind else None
        return Parent(outcome.task_id, "done", value)
    reason = outcome.data.decode("utf-8", "replace")
    return Parent(outcome.task_id, state.name.lower(), None, reason)
