"""
What the load saw during one row, as plain records: the counters
(L{tools.failover.count}) read nothing else, so that hand-made traces test them.

Times are C{time.time()} seconds, taken in one process (the matrix's), so
they compare across producers, workers and the role poller.  A task is
known by its idempotency key (its payload is the key): a key acknowledged
twice under two ids, or run under an id the producer never heard of, is
still one task.
"""

from __future__ import annotations

from attrs import define, field

APPLIED = "applied"
"""The daemon took the outcome: no error came back before the answer to the probe sent after it."""
STALE = "stale"
"""ERROR 0x08: the outcome's delivery was not the task's current one."""
REFUSED = "refused"
"""Another ERROR (0x0C not primary, 0x02 not held, ...): not applied."""
UNANSWERED = "unanswered"
"""The connection went away before the probe's answer: not known."""
VERDICTS = (APPLIED, STALE, REFUSED, UNANSWERED)

DONE = "done"
"""Final state: the primary keeps the task's outcome (its result: the applied delivery's token)."""
UNKNOWN = "unknown"
"""Final state: the primary does not know the task (an acknowledged task lost)."""
PENDING = "pending"
"""Final state: known but not finished when the drain ended."""
OTHER = "other"
"""Final state: failed, cancelled, or an outcome forgotten."""

PRIMARY = "primary"
DOWN = "down"
"""A role sample of a daemon that did not answer its control socket in time."""


@define(frozen=True)
class Ack:
    """A producer read OK for C{key}'s SUBMIT: task C{task_id}, at C{at}."""

    key: str
    task_id: int
    at: float


@define(frozen=True)
class Delivery:
    """A worker got task C{task_id} (C{key}) with delivery token C{token}, at C{at}."""

    key: str
    task_id: int
    token: int
    at: float
    worker: str = ""


@define(frozen=True)
class Outcome:
    """
    A worker's ACK of delivery C{token} of C{key}, sent at C{sent} and
    answered (L{VERDICTS}) at C{answered}.
    """

    key: str
    task_id: int
    token: int
    sent: float
    answered: float
    verdict: str
    worker: str = ""


@define(frozen=True)
class RoleSample:
    """Daemon C{daemon} said it was C{role} at C{at} (L{DOWN}: it did not answer)."""

    daemon: str
    role: str
    at: float


@define(frozen=True)
class Final:
    """
    What the surviving primary says of C{key}'s task at the end: a state
    (L{DONE}, L{UNKNOWN}, L{PENDING}, L{OTHER}) and, when done, the token
    its kept result names (0 if none).
    """

    key: str
    state: str
    token: int = 0


@define
class Trace:
    """Every record of one row."""

    acks: list[Ack] = field(factory=list)
    deliveries: list[Delivery] = field(factory=list)
    outcomes: list[Outcome] = field(factory=list)
    roles: list[RoleSample] = field(factory=list)
    finals: dict[str, Final] = field(factory=dict)
