"""
A task's rare fields, in one record (L{Extras}) that only a task with any of them has.

L{WithExtras} reads and sets them as the task's own attributes.  A plain
task (no key, no deadline, no dependencies, ...) carries none of them: it
is smaller in memory, and its SUBMIT sets fewer fields.  The hot paths
test C{task.extras is None} once rather than read each field.
"""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Protocol

from attrs import define, fields_dict, frozen

from quicx.daemon.journal.interface import DeadInfo, SavedState
from quicx.protocol.parents import ParentPolicy
from quicx.protocol.taskflow import Backoff


@frozen
class After:
    """
    What a task waits for before it is due (L{quicx.daemon.queue.dependencies}):
    its C{parents}' outcomes, and group C{group}'s end (0: none).
    """

    parents: tuple[int, ...] = ()
    policy: ParentPolicy = ParentPolicy.FAIL
    group: int = 0


@define(eq=False, weakref_slot=False)
class Extras:
    """
    A task's rare fields (L{Task.extras}): what few tasks have, kept apart so
    that a plain task carries, and its SUBMIT sets, none of them.  Each is
    read and set as the task's own attribute (L{Extra}).

    @ivar key: its idempotency key; C{fairness}: its fairness key.
    @ivar owner: the TLS identity it was submitted under, if any.
    @ivar backoff: its own backoff (C{None}: its queue's).
    @ivar lease_until: when its delivery's lease runs out, once a TOUCH
        extended it (0: the queue's timeout from the dispatch).
    @ivar dead: why it died, while it is in the dead-letter set.
    @ivar forward_progress: its producer asked for its PROGRESS reports.
    @ivar keep_for: seconds its outcome is kept after it finishes, as its
        SUBMIT asked (0: as its queue says, or if its producer is gone).
    @ivar recovered: it came back from the journal (its producer is gone).
    @ivar group: the group it counts in until it finishes (0: none).
    @ivar trace: its producer's trace context, which its deliveries carry
        (L{quicx.protocol.taskflow.SubmitOptions.trace}).
    @ivar checkpoint: the last state a delivery of it saved, which its later
        deliveries carry (L{quicx.daemon.queue.checkpoints}).
    @ivar after: what it waits for before it is due, if it waits (see
        L{quicx.daemon.queue.dependencies}).
    @ivar watched: its outcome is wanted by a task that waits for it (or it
        waits itself): announced even when it is a DONE nobody else wants.
    @ivar parents: its parents' outcomes, as its deliveries carry them
        (TASK context items 0x23), once it no longer waits.
    @ivar deadline: it expires if not started by then (Unix seconds; 0: no
        deadline, or it started): see L{quicx.daemon.queue.expiry}.
    @ivar failures: the failed attempts it has had (kept here from its
        first: few tasks fail).
    @ivar retries: how many times its failures are retried, when its own
        (its SUBMIT's, or its queue's when it came back from the journal or
        moved); C{None}: its queue's (L{Retries}).
    @ivar due: when it runs, while it is delayed (Unix seconds; 0: not
        delayed): a delayed SUBMIT's, a retry's backoff, a debounce's window.
    """

    key: bytes | None = None
    fairness: bytes | None = None
    owner: str | None = None
    backoff: Backoff | None = None
    lease_until: float = 0.0
    dead: DeadInfo | None = None
    forward_progress: bool = False
    keep_for: float = 0.0
    recovered: bool = False
    group: int = 0
    trace: bytes | None = None
    checkpoint: SavedState | None = None
    after: After | None = None
    watched: bool = False
    parents: bytes | None = None
    deadline: float = 0.0
    failures: int = 0
    retries: int | None = None
    due: float = 0.0


NO_EXTRAS = Extras()
"""What a task without extras reads: every rare field's default."""


class HasExtras(Protocol):
    extras: Extras | None


class _DueOnly:
    """
    The rare fields of a task whose only one is its due time (a delayed
    SUBMIT's, most often): 40 B where an L{Extras} is 184, and cheaper to
    make.  Every other field reads its default (a class attribute, set
    below); setting one gives the task a whole L{Extras} in its place
    (L{Extra}, L{Retries}).  Code that sets a field of C{task.extras} itself
    does so only where the field is not its default, so never on one of these.
    """

    __slots__ = ("due",)

    def __init__(self, due: float) -> None:
        self.due = due


for _name, _field in fields_dict(Extras).items():
    if _name != "due":
        setattr(_DueOnly, _name, _field.default)

if TYPE_CHECKING:
    DueOnly = Extras  # to its readers it is one: every field reads as an Extras'
else:
    DueOnly = _DueOnly


def _whole(task: HasExtras) -> Extras:
    """The task's L{Extras}, made (or made whole, from a L{DueOnly}) to set a field of."""
    extras = task.extras
    if extras is None:
        extras = task.extras = Extras()
    elif isinstance(extras, _DueOnly):
        extras = task.extras = Extras(due=extras.due)
    return extras


class Extra:
    """
    A rare field of a task, kept in its L{Extras}: it reads the default
    while the task has none, and setting it other than the default gives
    the task its extras.  (The hot path tests C{task.extras} once instead.)
    """

    __slots__ = ("default", "name", "read")

    def __init__(self, name: str) -> None:
        self.name = name
        self.read = attrgetter(name)
        self.default = self.read(NO_EXTRAS)

    def __get__(self, task: HasExtras | None, owner: type) -> object:
        if task is None:
            return self
        extras = task.extras
        return self.default if extras is None else self.read(extras)

    def __set__(self, task: HasExtras, value: object) -> None:
        extras = task.extras
        if extras is None and (value is self.default or value == self.default):
            return
        setattr(_whole(task), self.name, value)


class Due(Extra):
    """
    A task's due time, a rare field that a task without others keeps in a
    L{DueOnly} (a whole L{Extras} is made only for another field).
    """

    __slots__ = ()

    def __set__(self, task: HasExtras, value: object) -> None:
        extras = task.extras
        if extras is not None:
            extras.due = value  # type: ignore[assignment]
        elif value:
            task.extras = _DueOnly(value)  # type: ignore[arg-type, assignment]


class _Policy(Protocol):
    @property
    def retries(self) -> int: ...


class Home(Protocol):
    """Where a task's queue's C{retries} are (a L{quicx.daemon.queue.queues.NamedQueue})."""

    @property
    def policy(self) -> _Policy: ...


class Homed(HasExtras, Protocol):
    @property
    def home(self) -> Home: ...


class Retries:
    """
    A task's C{retries}: its queue's policy's (C{[retries] retries}, or its
    C{[queue NAME]}'s), which most tasks keep, unless it has its own (its
    SUBMIT's), kept in its L{Extras}.  Setting its queue's value on a task
    without extras keeps none.
    """

    __slots__ = ()

    def __get__(self, task: Homed | None, owner: type) -> object:
        if task is None:
            return self
        extras = task.extras
        if extras is not None and extras.retries is not None:
            return extras.retries
        return task.home.policy.retries

    def __set__(self, task: Homed, value: int) -> None:
        extras = task.extras
        if extras is None and value == task.home.policy.retries:
            return
        _whole(task).retries = value


class WithExtras:
    """
    What gives a task (L{quicx.daemon.queue.model.Task}) the fields of
    L{Extras} as its own attributes (each an L{Extra}).
    """

    if not TYPE_CHECKING:
        # No instance dictionary.  (Hidden from mypy, whose slots check
        # would not see the fields below, set through their L{Extra}.)
        __slots__ = ()

    key: bytes | None
    fairness: bytes | None
    owner: str | None
    backoff: Backoff | None
    lease_until: float
    dead: DeadInfo | None
    forward_progress: bool
    keep_for: float
    recovered: bool
    group: int
    trace: bytes | None
    checkpoint: SavedState | None
    after: After | None
    watched: bool
    parents: bytes | None
    deadline: float
    failures: int
    retries: int
    due: float


for _name in fields_dict(Extras):
    setattr(
        WithExtras,
        _name,
        Retries() if _name == "retries" else Due(_name) if _name == "due" else Extra(_name),
    )
