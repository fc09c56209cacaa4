"""
A task's state, and every move between states the kernel makes, in one table.

In the manner of h11's C{_state.py}: L{TRANSITIONS} is the whole lifecycle;
L{move} is the one way the kernel changes a task's state (a plain
assignment: the tests check each move against the table).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Protocol


class TaskState(enum.Enum):
    PENDING = "pending"
    """Submitted, its record not yet durable: its SUBMIT is not answered."""
    QUEUED = "queued"
    """In its queue, waiting for a worker."""
    DELAYED = "delayed"
    """Waiting for its due time (a delayed SUBMIT, or a retry's backoff)."""
    HELD = "held"
    """At a worker (its current delivery)."""
    DEAD = "dead"
    """Failed for good, in the dead-letter set."""
    FINISHED = "finished"
    WAITING = "waiting"
    """Accepted, waiting for its parents' outcomes (or its group) before it is due."""
    """Its outcome is decided: it is no longer live."""


PENDING, QUEUED, DELAYED, HELD, DEAD, FINISHED, WAITING = TaskState

TRANSITIONS: Mapping[TaskState, frozenset[TaskState]] = {
    # Accepted (its record durable): queued (then maybe handed to an idle
    # worker at once) or delayed; recovered from the journal: also dead.
    PENDING: frozenset({QUEUED, DELAYED, DEAD, WAITING}),
    # Delivered (or taken back by a late outcome of an earlier delivery);
    # cancelled or purged; expired; delayed again by a debounce's
    # extend, expired into the dead-letter set.
    QUEUED: frozenset({HELD, FINISHED, DELAYED, DEAD}),
    # Due; cancelled or purged; expired; taken back by a late outcome of an
    # earlier delivery (which then counts as its holder); expired
    # into the dead-letter set.
    DELAYED: frozenset({QUEUED, FINISHED, HELD, DEAD}),
    # Requeued (its worker left, its lease ran out); retried after a backoff;
    # failed for good, into the dead-letter set or not; done.
    HELD: frozenset({QUEUED, DELAYED, DEAD, FINISHED}),
    # Replayed; dropped (bounds, purge); taken back by a late outcome.
    DEAD: frozenset({QUEUED, FINISHED, HELD}),
    FINISHED: frozenset(),
    # Due (every parent has an outcome: queued, or delayed until its time);
    # failed by its policy, or cancelled.
    WAITING: frozenset({QUEUED, DELAYED, FINISHED}),
}


class Stateful(Protocol):
    state: TaskState


def move(task: Stateful, to: TaskState) -> None:
    """Move C{task} to state C{to} (one of L{TRANSITIONS}C{[task.state]})."""
    task.state = to


def allowed(old: TaskState, new: TaskState) -> bool:
    """Whether the table lets a task move from C{old} to C{new}."""
    return new in TRANSITIONS[old]
