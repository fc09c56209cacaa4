"""
The starvation bound (L{quicx.daemon.queue.aging}), in the queue core,
in-process on a task.Clock: a worker that finishes a task every C{STEP}
seconds, a producer that keeps the top priority saturated (with a heavy
fairness key), and any stream of lower-priority tasks besides.
"""

from __future__ import annotations

from attrs import define, field
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from quicx.daemon.queue.aging import MAX_ENTRIES
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Task
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.queues import NamedQueue
from quicx.protocol import taskflow
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of

STEP = 1.0
"""Seconds between two dispatches: the worker finishes a task each step."""
TOP = 9
"""The saturating priority; the others are lower."""
NEVER = 1000
"""Steps after which a lower task that has not started never will."""

arrival = st.one_of(
    st.tuples(st.integers(0, 1), st.none()),  # priorities without fairness keys
    st.tuples(st.integers(2, 3), st.sampled_from([None, b"a", b"b", b"c"])),
)
"""A lower-priority task: its priority (below TOP) and fairness key."""
tops = st.lists(st.sampled_from([None, b"heavy", b"heavy", b"heavy", b"x"]), max_size=3)
"""The top-priority tasks submitted in one step: mostly of one heavy key."""


@define
class Run:
    """A kernel with aging C{w}, one worker with one credit, one producer."""

    w: float
    clock: Clock = field(factory=Clock)
    kernel: QueueService = field(init=False)
    producer: FakePeer = field(init=False)
    worker: FakePeer = field(init=False)
    ready: dict[int, float] = field(factory=dict)
    priority: dict[int, int] = field(factory=dict)
    started: dict[int, float] = field(factory=dict)
    dealt: list[int] = field(factory=list)
    promoted: int = 0

    def __attrs_post_init__(self) -> None:
        self.clock.advance(1000.0)
        self.kernel = make_queue(self.clock, limits=QueueLimits(defaults=QueuePolicy(aging=self.w)))
        self.producer = v2_producer_of(self.kernel)
        self.worker = v2_worker_of(self.kernel)

    def submit(self, priority: int, key: bytes | None) -> int:
        submit_to(self.kernel, self.producer.session, b"t", b"x", priority=priority, fairness=key)
        (ok,) = [m for m in self.producer.take() if isinstance(m, taskflow.Ok)]
        self.ready[ok.task_id] = self.clock.seconds()
        self.priority[ok.task_id] = priority
        self.note(self.worker.task_ids())  # an idle worker takes it at once
        return int(ok.task_id)

    def note(self, dealt: list[int]) -> None:
        for task_id in dealt:
            self.started[task_id] = self.clock.seconds()
            self.dealt.append(task_id)

    def expected(self) -> Task | None:
        """
        The rule, from the queue's own dispatch orders: the oldest head of the
        priorities below the highest queued that became ready C{w} ago or
        more; else the first in strict order.
        """
        queue = self.kernel.queues["default"]
        if not queue.depth:
            return None
        now = self.clock.seconds()
        heads = [next(queue.levels[p].tasks()) for p in queue.order[:-1]]
        overdue = [h for h in heads if self.w and h.ready_at <= now - self.w]
        if overdue:
            self.promoted += 1
            return min(overdue, key=lambda h: (h.ready_at, h.priority))
        return next(queue.tasks())

    def step(self) -> None:
        """The worker finishes its task (if it has one) after STEP seconds and is dealt the next."""
        self.clock.advance(STEP)
        if not self.worker.session.tasks:
            return  # idle: nothing is queued
        (held,) = self.worker.session.tasks
        expected = self.expected()
        self.kernel.done(self.worker.session, held)
        dealt = self.worker.task_ids()
        assert dealt == ([] if expected is None else [expected.task_id])
        self.note(dealt)

    def waits(self) -> dict[int, float]:
        """Each lower-priority task's wait, from ready to dealt."""
        return {t: self.started[t] - self.ready[t] for t in self.started if self.priority[t] < TOP}

    def saturate(self, keys: list[bytes | None], lull: bool = False) -> None:
        """Top-priority tasks; at least one queued, but in a C{lull}."""
        queue = self.kernel.queues["default"]
        for key in keys:
            self.submit(TOP, key)
        if TOP not in queue.order and not lull:
            self.submit(TOP, b"heavy")


@settings(max_examples=60, deadline=None)
@given(
    w=st.sampled_from([2.0, 3.0, 7.5]),
    stream=st.lists(st.tuples(st.integers(0, 3), arrival, tops), min_size=1, max_size=30),
)
def test_a_trickle_of_lower_priorities_starts_within_w_under_a_saturating_top(
    w: float, stream: list[tuple[int, tuple[int, bytes | None], list[bytes | None]]]
) -> None:
    """
    Lower-priority tasks, each arriving after the one before it started
    (the documented precondition: nothing of lower priority overdue ahead of
    it): each is dealt within W (plus the wait for the next free credit) of
    being submitted, however many top-priority tasks keep coming; every
    dispatch follows the rule.
    """
    run = Run(w)
    for gap, (priority, key), top_keys in stream:
        for _ in range(gap):
            run.saturate(top_keys)
            run.step()
        run.saturate(top_keys)
        low = run.submit(priority, key)
        for _ in range(NEVER):
            if low in run.started:
                break
            run.saturate(top_keys)
            run.step()
    waits = run.waits()
    assert len(waits) == len(stream)
    assert max(waits.values()) <= w + STEP
    assert run.kernel.queues["default"].describe(run.clock.seconds()).promoted == run.promoted


@settings(max_examples=80, deadline=None)
@given(
    w=st.sampled_from([0.0, 2.0, 5.0]),
    stream=st.lists(
        st.tuples(st.lists(arrival, max_size=3), tops, st.booleans()), min_size=1, max_size=40
    ),
)
def test_any_stream_is_dealt_by_the_rule_and_an_overdue_backlog_oldest_first(
    w: float, stream: list[tuple[list[tuple[int, bytes | None]], list[bytes | None], bool]]
) -> None:
    """
    Bursts of lower-priority tasks, with and without fairness keys, beside a
    top priority saturating but in lulls (when a lower priority is the
    highest queued, until a top task displaces it): every dispatch follows
    the rule (with W = 0: the strict order, as without aging); once a lower
    task without a fairness key has waited W, no task is dealt before it but
    lower-priority tasks that became ready no later than it (so it starts by
    the k+1-th dispatch, k the older lower tasks still queued).
    """
    run = Run(w)
    for arrivals, top_keys, lull in stream:
        run.saturate(top_keys, lull)
        for priority, key in arrivals:
            run.submit(priority, key)
        run.step()
    queue = run.kernel.queues["default"]
    assert queue.describe(run.clock.seconds()).promoted == run.promoted
    if not w:
        assert queue.aging is None
        return
    for _ in range(NEVER):
        if all(t in run.started for t in run.ready if run.priority[t] < TOP):
            break
        run.saturate([])
        run.step()
    keyless = {t for t in run.ready if run.priority[t] < 2}  # FIFO priorities
    for task_id in keyless:
        deadline, started = run.ready[task_id] + w, run.started[task_id]
        for other in run.dealt:
            if deadline <= run.started[other] < started:
                assert run.priority[other] < TOP
                assert run.ready[other] <= run.ready[task_id]


@define(eq=False)
class Item:
    """A queued thing, as L{NamedQueue} reads it."""

    name: str
    priority: int
    ready_at: float
    fairness: bytes | None = None
    enqueued_at: float = 0.0
    ticket: int = 0
    task_type: bytes = b"t"
    task_id: int = 0

    @property
    def extras(self) -> Item:
        """(A task keeps its fairness key in its extras: an item, in itself.)"""
        return self


def test_the_highest_priority_queued_is_never_promoted() -> None:
    """
    Once the top empties, the priority below it is the highest: its head is
    dealt by priority, and an overdue head below it goes first (it is not
    promoted over it, however old it is).
    """
    queue: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=5.0), False)
    for item in (Item("old", 3, 0.0), Item("low", 1, 1.0), Item("top", 9, 0.0)):
        queue.push(item)
    taken = [queue.take(now) for now in (2.0, 10.0, 10.0)]
    assert [item.name for item in taken if item] == ["top", "low", "old"]
    assert queue.aging is not None and queue.aging.promoted == 1


def test_a_priority_displaced_from_the_top_again_is_still_promoted() -> None:
    """
    A priority that was the highest queued (its head then left unpromoted)
    and is displaced again by a higher one keeps its bound: its old head is
    promoted over the new top.
    """
    queue: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=5.0), False)
    for item in (Item("top", 9, 0.0), Item("old", 3, 0.0), Item("low", 1, 0.5)):
        queue.push(item)
    taken = [queue.take(1.0), queue.take(10.0)]  # then "old" is the highest queued
    queue.push(Item("top again", 9, 10.0))
    taken.append(queue.take(11.0))
    assert [item.name for item in taken if item] == ["top", "low", "old"]


def test_in_a_queue_with_key_limits_an_overdue_head_held_by_its_key_waits_for_it() -> None:
    """
    With key limits: an overdue head goes first when its key may start;
    one whose key is at key_concurrency does not hold the others back.
    """
    policy = QueuePolicy(aging=5.0, key_concurrency=1)
    queue: NamedQueue[Item, object] = NamedQueue("q", policy, False)
    items = [
        Item("top x", 9, 0.0, b"x"),
        Item("top y", 9, 0.0, b"y"),
        Item("low z", 1, 0.0, b"z"),
        Item("held x", 2, 0.0, b"x"),
    ]
    for item in items:
        queue.push(item)
    taken = [queue.take(1.0), queue.take(10.0), queue.take(10.0)]
    assert [item.name for item in taken if item] == ["top x", "low z", "top y"]
    assert queue.aging is not None and queue.aging.promoted == 1


def test_the_heap_of_heads_stays_bounded() -> None:
    """
    Heads that keep changing (tasks put back at the head of a lower
    priority, each ready earlier) leave stale entries: past MAX_ENTRIES the
    heap is rebuilt, one entry per lower priority, and the rule still holds.
    """
    queue: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=5.0), False)
    queue.push(Item("top", 9, 100.0))
    queue.push(Item("other", 2, 50.0))
    for n in range(3 * MAX_ENTRIES):
        queue.push(Item(f"back {n}", 1, 50.0 - n / MAX_ENTRIES), at_head=True)
        assert queue.aging is not None and len(queue.aging.heads) <= MAX_ENTRIES
    oldest = queue.take(60.0)
    assert oldest is not None and oldest.name == f"back {3 * MAX_ENTRIES - 1}"


def test_with_aging_0_there_is_no_aging_state() -> None:
    queue: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=0.0), False)
    assert queue.aging is None
