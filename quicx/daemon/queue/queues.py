"""
One named queue: its tasks by priority and fairness key, its limits, and
the workers waiting on it.

Sans-I/O and clock-driven: every method that depends on time takes C{now}.
The queue core (L{quicx.daemon.queue.core}) owns the queues and moves tasks
between them and workers.

Within a queue, tasks wait in one L{Level} per priority; the non-empty
priorities are kept sorted, so taking the next task is O(log n) in the
number of priorities (at most 256) plus O(1) in the tasks.  Within a level,
tasks wait in one FIFO per fairness key, and the keys take turns.  With
aging (L{quicx.daemon.queue.aging}), a lower priority whose next task has
waited C{aging} seconds goes first.

Each task queued gets a ticket from its level: counting up at the tail,
down at the head, so every FIFO is sorted by ticket and a task's place in
it is a binary search (L{Level.ahead}), not a walk of the queue.  At the
tail, a task whose id is past the level's last ticket takes its id as its
ticket (the same C{int} object: no allocation per queued task; ids count
up, so a fresh task's is); any other, the last ticket plus one.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict, deque
from collections.abc import Iterator
from itertools import islice
from operator import attrgetter
from typing import Generic, Protocol, TypeVar

from attrs import define, field

from quicx.daemon.observe.telemetry import Tally
from quicx.daemon.queue.aging import Aging
from quicx.daemon.queue.policy import QueuePolicy
from quicx.documents.status import Queue

RATE_WINDOW = 60.0
"""Seconds of finished tasks the drain rate is measured over."""
_DRAIN_SAMPLES = 4096


class HasFairness(Protocol):
    """Where a task's fairness key is kept (L{quicx.daemon.queue.extras.Extras})."""

    @property
    def fairness(self) -> bytes | None: ...


class Queued(Protocol):
    """What a queue reads of a task."""

    priority: int
    fairness: bytes | None
    enqueued_at: float
    ready_at: float
    ticket: int
    task_type: bytes
    task_id: int

    @property
    def extras(self) -> HasFairness | None:
        """Where its fairness key is, if it may have one (read on the hot path)."""


T = TypeVar("T", bound=Queued)
W = TypeVar("W")

_ticket = attrgetter("ticket")


@define
class TokenBucket:
    """C{rate} tokens a second, up to C{burst}; one task takes one."""

    rate: float
    burst: float
    tokens: float
    updated: float

    @classmethod
    def full(cls, rate: float, burst: int, now: float) -> TokenBucket:
        size = float(burst or max(1.0, rate))
        return cls(rate, size, size, now)

    def refill(self, now: float) -> None:
        if now > self.updated:
            self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
            self.updated = now

    def ready(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= 1.0

    def take(self) -> None:
        self.tokens -= 1.0

    def next_token(self, now: float) -> float:
        """When the next token is there (C{now} if it is)."""
        self.refill(now)
        return now if self.tokens >= 1.0 else now + (1.0 - self.tokens) / self.rate

    def is_full(self, now: float) -> bool:
        self.refill(now)
        return self.tokens >= self.burst


@define(eq=False)
class KeyState:
    """A fairness key's tasks queued and running in one queue, and its bucket."""

    queued: int = 0
    running: int = 0
    bucket: TokenBucket | None = None


@define(eq=False)
class Level(Generic[T]):
    """
    The tasks of one priority: a FIFO per fairness key, keys in turn (the
    first with tasks deals next, then goes to the back).  The FIFO of tasks
    without a key stays when empty (it is the common case: no allocation
    per task), behind the others; every other FIFO goes when empty.

    @ivar head: the ticket last given at the head (counting down from 0).
    @ivar tail: the ticket last given at the tail (counting up from 0: the
        task's id, if past it; see the module's docstring).
    """

    plain: deque[T] = field(factory=deque)
    fifos: OrderedDict[bytes | None, deque[T]] = field(init=False)
    size: int = 0
    head: int = 0
    tail: int = 0

    def __attrs_post_init__(self) -> None:
        self.fifos = OrderedDict({None: self.plain})

    def push(self, task: T, at_head: bool) -> None:
        key = task.fairness
        fifos = self.fifos
        fifo = fifos.get(key)
        if fifo is None:
            fifo = fifos[key] = deque()
        elif not fifo and not at_head and len(fifos) > 1:
            fifos.move_to_end(key)  # it joins the turns at the back
        if at_head:
            self.head -= 1
            task.ticket = self.head
            fifo.appendleft(task)
            self.fifos.move_to_end(key, last=False)
        else:
            task_id = task.task_id
            task.ticket = self.tail = task_id if task_id > self.tail else self.tail + 1
            fifo.append(task)
        self.size += 1

    def pop(self) -> T:
        """The next task in turn (there is one)."""
        fifos = self.fifos
        if len(fifos) == 1:  # no fairness keys: the common case, kept cheap
            self.size -= 1
            return self.plain.popleft()
        key = next(iter(fifos))
        fifo = fifos[key]
        if not fifo:  # the empty FIFO of tasks without a key: the next one
            fifos.move_to_end(key)
            key = next(iter(fifos))
            fifo = fifos[key]
        task = fifo.popleft()
        self.popped(key, fifo)
        return task

    def peek(self) -> T:
        """The task L{pop} would take (there is one)."""
        fifos = self.fifos
        if len(fifos) == 1:
            return self.plain[0]
        first = iter(fifos.values())
        fifo = next(first)
        return fifo[0] if fifo else next(first)[0]

    def popped(self, key: bytes | None, fifo: deque[T]) -> None:
        """A task was taken from C{fifo}, the FIFO of C{key}: its turn is over."""
        fifos = self.fifos
        if fifo:
            if len(fifos) > 1:
                fifos.move_to_end(key)
        elif key is not None:
            del fifos[key]
        elif len(fifos) > 1:
            fifos.move_to_end(key)
        self.size -= 1

    def remove(self, task: T) -> None:
        key = task.fairness
        fifo = self.fifos[key]
        # A binary search by ticket (the FIFO is sorted by it), not a walk
        # of the FIFO: a bulk action that takes tasks from deep in a long
        # queue costs O(log n) searching each, not O(n).
        del fifo[bisect.bisect_left(fifo, task.ticket, key=_ticket)]
        if not fifo and key is not None:
            del self.fifos[key]
        self.size -= 1

    def ahead(self, task: T) -> int:
        """
        How many of this level's tasks L{tasks} yields before C{task} (which
        is queued here): a binary search of its FIFO by ticket, and with
        fairness keys, a look at each other key's FIFO length (the keys deal
        in turns).
        """
        fifos = self.fifos
        fifo = fifos[task.fairness]
        rank = bisect.bisect_left(fifo, task.ticket, key=_ticket)
        if len(fifos) == 1:
            return rank
        ahead = rank
        turn = rank + 1  # the FIFOs before its own deal once more before it
        for other in fifos.values():
            if other is fifo:
                turn = rank
            else:
                ahead += min(len(other), turn)
        return ahead

    def tasks(self) -> Iterator[T]:
        """In the order they would be dealt (ignoring limits)."""
        fifos = [iter(f) for f in self.fifos.values()]
        while fifos:
            for fifo in list(fifos):
                task = next(fifo, None)
                if task is None:
                    fifos.remove(fifo)
                else:
                    yield task


@define(eq=False)
class NamedQueue(Generic[T, W]):
    """
    One queue.

    @ivar header: the name as a TASK carries it (C{[len u8][name]}).
    @ivar declared: it has a C{[queue NAME]} section: never forgotten.
    @ivar idle: the subscribed workers with a credit free, in the order they
        are offered tasks (see L{quicx.daemon.queue.dispatch}).
    @ivar subscribers: how many workers are subscribed.
    @ivar depth: tasks queued.
    @ivar pending: tasks accepted into it whose journal record is not yet
        durable: they join it once it is (and keep it from being forgotten).
    @ivar running: tasks held by workers.
    @ivar delayed: its tasks waiting for their time (delays and retries).
    @ivar dead: its tasks in the dead-letter set.
    @ivar waiting: its tasks waiting for their parents (in none of the
        counts above until they are released).
    @ivar keys: fairness keys with tasks queued or running, or a bucket not full.
    @ivar finished: when its recent tasks finished, for the drain rate.
    @ivar tallies: its task types' tallies, by type (a cache of the core's
        L{Telemetry}, up to its C{max_types}).
    @ivar types: those types' names, each one C{bytes} its tasks share
        (the name a SUBMIT carries is a new one each time: 33 bytes and
        more a queued task saved).
    @ivar aging: its starvation bound (C{None}: its policy's C{aging} is 0).
    @ivar parked: how many of its tasks are set aside by type, out of the
        dispatch order, because no idle worker runs their type (see
        L{quicx.daemon.queue.routing}): still queued, not in C{depth}.
    @ivar parking: those tasks, by type, by C{id()}, oldest first (their
        C{ticket}: the order they were set aside in): one is found and
        taken out in O(1).
    """

    name: str
    policy: QueuePolicy
    declared: bool
    paused: bool = False
    header: bytes = b""
    levels: dict[int, Level[T]] = field(factory=dict)
    order: list[int] = field(factory=list)  # priorities with tasks, ascending
    idle: OrderedDict[int, W] = field(factory=OrderedDict)
    subscribers: int = 0
    depth: int = 0
    pending: int = 0
    running: int = 0
    delayed: int = 0
    dead: int = 0
    waiting: int = 0
    keys: dict[bytes, KeyState] = field(factory=dict)
    bucket: TokenBucket | None = None
    finished: deque[float] = field(factory=lambda: deque(maxlen=_DRAIN_SAMPLES))
    limited: bool = False
    max_depth: int = 0
    priority: int = 0
    tallies: dict[bytes, Tally] = field(factory=dict)
    types: dict[bytes, bytes] = field(factory=dict)
    aging: Aging[T] | None = None
    parked: int = 0
    parking: dict[bytes, OrderedDict[int, T]] = field(factory=dict)
    _parked_last: int = 0

    def __attrs_post_init__(self) -> None:
        self.header = bytes((len(self.name),)) + self.name.encode("ascii")
        policy = self.policy
        if policy.aging:
            self.aging = Aging(policy.aging, self.levels, self.order)
        self.limited = bool(policy.key_concurrency or policy.rate or policy.key_rate)
        # The policy's, where the submit path reads them.
        self.max_depth, self.priority = policy.max_depth, policy.priority

    @property
    def forgettable(self) -> bool:
        """Nothing would be lost by forgetting it now."""
        return not (
            self.declared
            or self.paused
            or self.depth
            or self.pending
            or self.running
            or self.delayed
            or self.dead
            or self.waiting
            or self.subscribers
            or self.keys
            or self.bucket
            or self.parked
        )

    # -- tasks in ----------------------------------------------------------------

    def push(self, task: T, at_head: bool = False) -> bool:
        """
        Queue C{task}; at the head of its priority when given back.

        @return: whether its fairness key is new to this queue.
        """
        priority = task.priority
        level = self.levels.get(priority)
        if level is None:
            level = self.levels[priority] = Level()
        fresh = not level.size
        if fresh:
            bisect.insort(self.order, priority)
        extras = task.extras  # (a task's rare fields: see quicx.daemon.queue.extras)
        key = None if extras is None else extras.fairness
        if key is None and not at_head and len(level.fifos) == 1:
            task_id = task.task_id  # level.push(), for the common case
            task.ticket = level.tail = task_id if task_id > level.tail else level.tail + 1
            level.plain.append(task)
            level.size += 1
            if fresh and self.aging is not None and len(self.order) > 1:
                self.aging.arrived(priority, True)
        else:
            level.push(task, at_head)
            if (fresh or at_head) and self.aging is not None and len(self.order) > 1:
                self.aging.arrived(priority, fresh)
        self.depth += 1
        if key is None or not self.limited:
            return False
        state = self.keys.get(key)
        if state is None:
            self.keys[key] = KeyState(queued=1)
            return True
        state.queued += 1
        return False

    def remove(self, task: T) -> None:
        """Take C{task} out of the queue (cancelled, purged, or finished by a late outcome)."""
        if self.parked:
            fifo = self.parking.get(task.task_type)
            if fifo is not None and fifo.get(id(task)) is task:
                self._unpark_one(task)
                del fifo[id(task)]
                if not fifo:
                    del self.parking[task.task_type]
                return
        level = self.levels[task.priority]
        level.remove(task)
        self._shrunk(task.priority, level)
        if self.aging is not None:
            self.aging.watch(task.priority)
        if task.fairness is not None and self.limited:
            self.keys[task.fairness].queued -= 1

    def _shrunk(self, priority: int, level: Level[T]) -> None:
        # Empty levels stay (at most 256): a queue that keeps emptying
        # allocates nothing per task.
        self.depth -= 1
        if not level.size:
            self.order.remove(priority)

    # -- tasks out -------------------------------------------------------------

    def take(self, now: float) -> T | None:
        """
        The next task a worker may start now, taken off the queue; C{None}
        when there is none (empty, paused, or held back by a limit).
        """
        if self.paused or not self.depth:
            return None
        if not self.limited:
            order = self.order
            aging = self.aging
            if len(order) > 1 and aging is not None:
                heads = aging.heads  # (its oldest head is not overdue: most often)
                if heads and heads[0][0] <= now - aging.limit:
                    overdue = aging.due(now)
                    if overdue is not None:
                        return self._promote(overdue)
            level = self.levels[order[-1]]
            if len(level.fifos) == 1:  # level.pop(), for the common case
                task = level.plain.popleft()
                level.size -= 1
            else:
                task = level.pop()
            self.depth -= 1
            if not level.size:
                order.pop()
            self.running += 1
            return task
        return self._take_limited(now)

    def _promote(self, priority: int) -> T:
        """Take the head of C{priority}, overdue (see L{quicx.daemon.queue.aging})."""
        aging = self.aging
        assert aging is not None
        level = self.levels[priority]
        task = level.pop()
        self._shrunk(priority, level)
        self.running += 1
        aging.promoted += 1
        aging.watch(priority)
        return task

    def _take_limited(self, now: float) -> T | None:
        bucket = self.bucket
        if self.policy.rate:
            if bucket is None:
                bucket = self.bucket = TokenBucket.full(self.policy.rate, self.policy.burst, now)
            if not bucket.ready(now):
                return None
        aging = self.aging
        if aging is not None and len(self.order) > 1:
            overdue = aging.due(now)
            if overdue is not None:
                task = self._take_from(overdue, now)
                if task is not None:
                    aging.promoted += 1
                    return task
        for priority in reversed(self.order):
            task = self._take_from(priority, now)
            if task is not None:
                return task
        return None

    def _take_from(self, priority: int, now: float) -> T | None:
        """The first task of C{priority} in turn that its key's limits let start now."""
        level = self.levels[priority]
        for key, fifo in level.fifos.items():
            if not fifo or (key is not None and not self._key_may_start(key, now)):
                continue
            task = fifo.popleft()
            level.popped(key, fifo)
            self._shrunk(priority, level)
            if self.aging is not None:
                self.aging.watch(priority)
            if self.bucket is not None:
                self.bucket.take()
            if key is not None:
                state = self.keys[key]
                state.queued -= 1
                state.running += 1
                if state.bucket is not None:
                    state.bucket.take()
            self.running += 1
            return task
        return None

    def _key_may_start(self, key: bytes, now: float) -> bool:
        policy, state = self.policy, self.keys[key]
        if policy.key_concurrency and state.running >= policy.key_concurrency:
            return False
        if policy.key_rate:
            if state.bucket is None:
                state.bucket = TokenBucket.full(policy.key_rate, policy.key_burst, now)
            if not state.bucket.ready(now):
                return False
        return True

    def released(self, task: T) -> None:
        """A task of this queue stopped running (finished, or given back)."""
        self.running -= 1
        key = task.fairness
        if key is not None and self.limited:
            self.keys[key].running -= 1

    def prune_keys(self, now: float) -> int:
        """Forget fairness keys with nothing queued or running and a full bucket."""
        idle = [
            key
            for key, state in self.keys.items()
            if not state.queued
            and not state.running
            and (state.bucket is None or state.bucket.is_full(now))
        ]
        for key in idle:
            del self.keys[key]
        if self.bucket is not None and self.bucket.is_full(now) and not self.depth:
            self.bucket = None
        return len(idle)

    def next_start(self, now: float) -> float | None:
        """
        When a task held back only by a rate limit may start (C{None}: none
        is waiting for a token).
        """
        if self.paused or not self.depth or not (self.policy.rate or self.policy.key_rate):
            return None
        times = []
        if self.bucket is not None and not self.bucket.ready(now):
            times.append(self.bucket.next_token(now))
        for state in self.keys.values():
            if state.queued and state.bucket is not None and not state.bucket.ready(now):
                times.append(state.bucket.next_token(now))
        return min(times) if times else None

    # -- set aside by type (quicx.daemon.queue.routing) ---------------------------

    def park(self, task: T) -> None:
        """Set aside C{task}, just taken (L{take}): no idle worker runs its type."""
        self.released(task)
        if task.fairness is not None and self.limited:
            self.keys[task.fairness].queued += 1  # still queued: its key stays
        self._parked_last += 1
        task.ticket = self._parked_last
        fifo = self.parking.get(task.task_type)
        if fifo is None:
            fifo = self.parking[task.task_type] = OrderedDict()
        fifo[id(task)] = task
        self.parked += 1

    def unpark(self, handles: frozenset[bytes] | None, most: int) -> None:
        """
        Put back up to C{most} tasks set aside, of the types in C{handles}
        (C{None}: any), the oldest set aside first, at the head of their
        priority: the next L{take} finds them first.
        """
        if handles is not None and handles.isdisjoint(self.parking):
            return  # none of its types is set aside: the common case, kept cheap
        chosen: list[T] = []
        for task_type, fifo in self.parking.items():
            if handles is None or task_type in handles:
                chosen.extend(islice(fifo.values(), most))
        chosen.sort(key=_ticket)
        del chosen[most:]
        for task in chosen:
            fifo = self.parking[task.task_type]
            del fifo[id(task)]
            if not fifo:
                del self.parking[task.task_type]
        for task in reversed(chosen):
            self._unpark_one(task)
            self.push(task, at_head=True)

    def _unpark_one(self, task: T) -> None:
        self.parked -= 1
        if task.fairness is not None and self.limited:
            self.keys[task.fairness].queued -= 1

    def is_parked(self, task: T) -> bool:
        """Whether C{task} (queued here) is set aside by type."""
        fifo = self.parking.get(task.task_type)
        return fifo is not None and fifo.get(id(task)) is task

    # -- looking -----------------------------------------------------------------

    def tasks(self) -> Iterator[T]:
        """Every queued task in dispatch order (ignoring limits), then those set aside."""
        for priority in reversed(self.order):
            yield from self.levels[priority].tasks()
        if self.parked:
            yield from sorted((t for f in self.parking.values() for t in f.values()), key=_ticket)

    def ahead(self, task: T) -> tuple[int, int]:
        """
        How many queued tasks go before C{task} (queued here), in dispatch
        order (ignoring limits), and how many of them have a higher priority.
        O(log n) in the tasks, plus the priorities and fairness keys.
        """
        priority = task.priority
        levels = self.levels
        higher = sum(levels[p].size for p in self.order if p > priority)
        return higher + levels[priority].ahead(task), higher

    def by_priority(self) -> dict[str, int]:
        return {str(p): self.levels[p].size for p in reversed(self.order)}

    def oldest(self) -> float | None:
        """When the longest-waiting task was queued."""
        times = [
            fifo[0].enqueued_at
            for level in self.levels.values()
            for fifo in level.fifos.values()
            if fifo
        ]
        return min(times) if times else None

    def drain_rate(self, now: float) -> float:
        """Tasks finished per second over the last L{RATE_WINDOW} seconds."""
        finished = self.finished
        while finished and finished[0] < now - RATE_WINDOW:
            finished.popleft()
        if not finished:
            return 0.0
        return len(finished) / max(1.0, min(RATE_WINDOW, now - finished[0]))

    def describe(self, now: float) -> Queue:
        """This queue now, as the status document and QUEUES show it."""
        oldest = self.oldest()
        return Queue(
            name=self.name,
            depth=self.depth + self.parked,
            paused=self.paused,
            workers=self.subscribers,
            idle_workers=len(self.idle),
            running=self.running,
            delayed=self.delayed,
            dead=self.dead,
            priorities=self.by_priority(),
            oldest_age=None if oldest is None else round(max(0.0, now - oldest), 3),
            declared=self.declared,
            drain_rate=round(self.drain_rate(now), 3),
            promoted=0 if self.aging is None else self.aging.promoted,
        )
