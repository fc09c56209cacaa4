"""
Kept outcomes: what became of finished tasks, for AWAIT to answer later.

A task's outcome is kept when its SUBMIT or its queue asks (I{requested}),
or when its version-2 producer is gone by the time it finishes
(I{automatic}: the queue core decides).  Each kept outcome holds its data
(the result, or the reason) in one block of the pool, and is forgotten
C{ttl} seconds after its task finished: one timer is armed at a time, for
the earliest (a L{Delays} of outcomes).

The store is bounded by C{max_count} outcomes and C{max_memory} bytes of
pool; past either, and when the pool has no room for a new task's payload,
outcomes are evicted: the oldest automatic ones first, then the oldest
requested ones (an automatic one never evicts a requested one).  The ids
of outcomes forgotten (by TTL or eviction) are remembered, as many as
C{max_count}, with why when they were evicted, so that AWAIT can tell
I{forgotten} from I{unknown} and say I{evicted}.  Every change is journaled:
a kept outcome as a RESULT record, a forgotten one as a RESULT of state
I{forgotten}.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal

from attrs import define, frozen
from twisted.internet.interfaces import IReactorTime

from quicx.daemon.journal.interface import IJournal, KeptEntry
from quicx.daemon.queue import pmad
from quicx.daemon.queue.delays import Delays
from quicx.protocol import taskflow
from quicx.protocol.outcomes import OutcomeState, encode_outcome


@frozen
class Share:
    """A number of bytes, or (with C{percent}) a share of the pool."""

    size: int = 0
    percent: Decimal | None = None

    def of(self, total: int) -> int:
        """The bytes this is of a pool of C{total} bytes."""
        if self.percent is None:
            return self.size
        return int(total * self.percent / 100)


@frozen
class ResultLimits:
    """
    The C{[results]} settings.

    @ivar max_size: the longest result an ACK may carry (bytes); a result
        must also fit one block of the pool.
    @ivar ttl: seconds an outcome is kept when nothing says how long.
    @ivar max_ttl: the longest any outcome is kept.
    @ivar max_count: the most outcomes kept at once (and ids of forgotten
        ones remembered).
    @ivar max_memory: the most pool memory kept outcomes take.
    @ivar max_waiters: the most AWAITs and group WAITs waiting at once.
    @ivar max_waiters_per_connection: ... on one connection.
    @ivar max_wait: the longest one wait lasts (seconds).
    """

    max_size: int = 64 << 10
    ttl: float = 3600.0
    max_ttl: float = 7 * 86400.0
    max_count: int = 100_000
    max_memory: Share = Share(percent=Decimal(25))
    max_waiters: int = 10_000
    max_waiters_per_connection: int = 1000
    max_wait: float = 3600.0


@define(eq=False)
class KeptOutcome:
    """
    One kept outcome; its data is in pool block C{block}.

    @ivar kind: the result's kind; 0: the data is a reason (or no result).
    @ivar capacity: the bytes its block could hold (what evicting it frees).
    @ivar cost: the pool bytes its block takes, header included.
    @ivar automatic: nobody asked for it (its producer was gone).
    @ivar due: when it is forgotten (Unix seconds).
    """

    task_id: int
    state: OutcomeState
    kind: int
    block: int
    size: int
    capacity: int
    cost: int
    automatic: bool
    due: float = 0.0


class KeptOutcomes:
    """
    The kept outcomes, oldest first: the automatic ones, then the requested.

    @ivar memory: the pool bytes they take.
    @ivar kept: outcomes kept since start.
    @ivar evicted: outcomes forgotten before their time (bounds, or a full pool).
    @ivar expired: outcomes forgotten at their time.
    """

    def __init__(
        self,
        pool: pmad.Pmad,
        journal: IJournal,
        limits: ResultLimits,
        scheduler: IReactorTime,
        clock: Callable[[], float],
        evicted: Callable[[int, str], None],
    ) -> None:
        """
        @param evicted: told of each outcome evicted before its time, and why.
        """
        self.pool = pool
        self.journal = journal
        self.max_count = limits.max_count
        self.max_memory = limits.max_memory.of(pool.pool_size)
        self._clock = clock
        self._on_evicted = evicted
        # The kept outcomes by class, oldest first: each evicted before the next.
        self._automatic: dict[int, KeptOutcome] = {}
        self._requested: dict[int, KeptOutcome] = {}
        # How many kept outcomes have blocks of each capacity (a few classes).
        self._capacities: Counter[int] = Counter()
        # Why each forgotten one was evicted ("": its TTL ran out).
        self._forgotten: dict[int, str] = {}
        self._timer: Delays[KeptOutcome] = Delays(scheduler, clock, self._expire)
        self.memory = 0
        self.kept = 0
        self.evicted = 0
        self.expired = 0

    def __len__(self) -> int:
        return len(self._automatic) + len(self._requested)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._requested or task_id in self._automatic

    def _find(self, task_id: int) -> KeptOutcome | None:
        """Task C{task_id}'s kept outcome, of either class."""
        return self._requested.get(task_id) or self._automatic.get(task_id)

    def get(self, task_id: int) -> tuple[KeptOutcome, bytes] | None:
        """Task C{task_id}'s kept outcome and its data, if it is kept."""
        outcome = self._find(task_id)
        if outcome is None:
            return None
        return outcome, self.pool.read(outcome.block)

    def forgot(self, task_id: int) -> bool:
        """Whether task C{task_id}'s outcome was kept and is forgotten (expired, evicted)."""
        return task_id in self._forgotten

    def eviction(self, task_id: int) -> str:
        """Why task C{task_id}'s forgotten outcome was evicted (C{""}: it expired, or unknown)."""
        return self._forgotten.get(task_id, "")

    def outcome(self, task_id: int) -> bytes:
        """
        The OUTCOME of a task that is not live: kept, forgotten (expired,
        with why when it was evicted), or unknown.
        """
        found = self.get(task_id)
        if found is None:
            if self.forgot(task_id):
                return encode_outcome(task_id, OutcomeState.FORGOTTEN, None, self.eviction(task_id))
            return encode_outcome(task_id, OutcomeState.UNKNOWN)
        kept, data = found
        if kept.kind:
            result = taskflow.Result(taskflow.ResultKind(kept.kind), data)
            return encode_outcome(task_id, kept.state, result)
        return encode_outcome(task_id, kept.state, None, data)

    def keep(
        self,
        task_id: int,
        state: OutcomeState,
        kind: int,
        data: bytes,
        ttl: float,
        automatic: bool = False,
    ) -> None:
        """
        Keep a task's outcome for C{ttl} seconds from now, replacing any
        kept before; the oldest outcomes go when the bounds are passed (this
        one too, when it alone passes them or finds no room in the pool).
        An C{automatic} one (nobody asked) evicts only automatic ones.
        """
        if not self.max_count:
            return
        if len(data) > self.pool.max_size:
            # A reason may be longer than a block (a result never is): cut
            # to whole characters, before it is journaled.
            data = data[: self.pool.max_size].decode("utf-8", "ignore").encode("utf-8")
        entry = KeptEntry(task_id, state, kind, self._clock() + ttl, data, automatic)
        self.kept += 1
        if self._add(entry):
            self.journal.record_result(entry)
        self._trim()

    def _add(self, entry: KeptEntry) -> bool:
        """Hold C{entry} in the pool (evicting for room); C{False} if it found none."""
        task_id = entry.task_id
        old = self._find(task_id)
        if old is not None:
            self._timer.remove(old)
            self._drop(old)
        data = entry.data
        block = self._store(data, entry.automatic)
        if block is None:
            why = "evicted at once: no room in the pool"
            self.evicted += 1
            self._forget(task_id, 0, why)
            self._on_evicted(task_id, why)
            return False
        capacity = self.pool.capacity(block)
        outcome = KeptOutcome(
            task_id,
            OutcomeState(entry.state),
            entry.kind,
            block,
            len(data),
            capacity,
            capacity + pmad.BLOCK_HEADER_SIZE,
            entry.automatic,
        )
        (self._automatic if entry.automatic else self._requested)[task_id] = outcome
        self._capacities[capacity] += 1
        self._forgotten.pop(task_id, None)
        self.memory += outcome.cost
        self._timer.add(outcome, entry.expires_at)
        return True

    def _store(self, data: bytes, automatic: bool) -> int | None:
        """A block holding C{data}, evicting for it if the pool is full; C{None}: no room."""
        while True:
            try:
                return self.pool.store(data)
            except pmad.PoolExhausted:
                if not self.make_room(len(data), automatic):
                    return None

    def make_room(self, size: int, automatic_only: bool = False) -> bool:
        """
        Evict the oldest kept outcome whose block can hold C{size} bytes
        (an automatic one first; with C{automatic_only}, only those), so
        that the pool has room for them; C{False} if none can (known without
        a look at each: a full pool may refuse every SUBMIT).
        """
        if not any(count for capacity, count in self._capacities.items() if capacity >= size):
            return False
        classes = (self._automatic,) if automatic_only else (self._automatic, self._requested)
        for outcomes in classes:
            for outcome in outcomes.values():
                if outcome.capacity >= size:
                    self._evict(outcome, "evicted: the pool is full")
                    return True
        return False

    def _trim(self) -> None:
        """Evict the oldest outcomes, automatic ones first, while the bounds are passed."""
        while self and (len(self) > self.max_count or self.memory > self.max_memory):
            oldest = next(iter((self._automatic or self._requested).values()))
            why = "max_count" if len(self) > self.max_count else "max_memory"
            self._evict(oldest, f"evicted: past [results] {why}")

    def _evict(self, outcome: KeptOutcome, why: str) -> None:
        self.evicted += 1
        self._timer.remove(outcome)
        self._drop(outcome)
        self._forget(outcome.task_id, outcome.size, why)
        self._on_evicted(outcome.task_id, why)

    def _expire(self, outcomes: list[KeptOutcome]) -> None:
        """(The timer.) These outcomes' time has come."""
        for outcome in outcomes:
            self.expired += 1
            self._drop(outcome)
            self._forget(outcome.task_id, outcome.size)

    def _drop(self, outcome: KeptOutcome) -> None:
        """Let go of an outcome's block (the caller took it off the timer)."""
        del (self._automatic if outcome.automatic else self._requested)[outcome.task_id]
        self._capacities[outcome.capacity] -= 1
        self.memory -= outcome.cost
        self.pool.free(outcome.block)

    def _forget(self, task_id: int, size: int, why: str = "") -> None:
        """
        Remember C{task_id} as forgotten, and C{why} it was evicted (C{""}:
        it expired); the oldest such ids go past C{max_count}.
        """
        self.journal.record_forgotten(task_id, size, bool(why))
        forgotten = self._forgotten
        forgotten.pop(task_id, None)
        forgotten[task_id] = why
        while len(forgotten) > self.max_count:
            del forgotten[next(iter(forgotten))]

    def entries(self) -> Iterator[KeptEntry]:
        """
        The kept outcomes, each class oldest first, with their data (for a
        journal snapshot).
        """
        read = self.pool.read
        for outcomes in (self._automatic, self._requested):
            for outcome in outcomes.values():
                yield KeptEntry(
                    outcome.task_id,
                    outcome.state,
                    outcome.kind,
                    outcome.due,
                    read(outcome.block),
                    outcome.automatic,
                )

    def forgotten_ids(self) -> list[int]:
        return list(self._forgotten)

    def evicted_ids(self) -> frozenset[int]:
        """The forgotten ids whose outcomes were evicted (not expired)."""
        return frozenset(task_id for task_id, why in self._forgotten.items() if why)

    def restore(
        self,
        kept: tuple[KeptEntry, ...],
        forgotten: tuple[int, ...],
        evicted: frozenset[int] = frozenset(),
    ) -> None:
        """
        Take back what a journal kept: outcomes whose time has passed are
        forgotten (counted as expired); the bounds are enforced.  Those of
        C{forgotten} in C{evicted} were evicted (why is not journaled).
        """
        for task_id in forgotten:
            self._forgotten[task_id] = "evicted" if task_id in evicted else ""
        now = self._clock()
        for entry in kept:
            if entry.expires_at <= now:
                self.expired += 1
                self._forget(entry.task_id, len(entry.data))
            else:
                self._add(entry)
        while len(self._forgotten) > self.max_count:
            del self._forgotten[next(iter(self._forgotten))]
        self._trim()

    def stop(self) -> None:
        self._timer.stop()
