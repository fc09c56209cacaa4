"""
The plain path (L{FastPath}) against the general path it shortens: the same
traffic, SUBMITs, DONEs and ACKs among other steps, through each of two
kernels alike, gives the same frames to every peer, the same journal
records, events, counters and tallies, and the same errors.
"""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock

from quicx.daemon.journal.records import encode_deadline
from quicx.daemon.journal.writer import _submit_record
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.fastpath import FastPath
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.protocol import taskflow
from quicx.protocol.session import ProtocolViolation
from quicx.protocol.start_options import Expires
from quicx.protocol.taskflow import DEFAULT_OPTIONS, ResultKind
from tests.fakes import (
    FakeJournal,
    FakePeer,
    make_queue,
    producer_of,
    small_pool,
    v2_producer_of,
    v2_worker_of,
    worker_of,
)

QUEUES = ("deep", "kept", "limited", "expiring")
LIMITS = QueueLimits(
    declared={
        "deep": QueuePolicy(max_depth=1),
        "kept": QueuePolicy(keep_results=True),
        "limited": QueuePolicy(key_concurrency=1),
        "expiring": QueuePolicy(expires=30.0),
    },
    max_queues=4 + len(QUEUES),
    max_delay=100.0,
    max_delayed=2,
)

TIMINGS: dict[str | None, dict[str, Any]] = {
    None: {},
    "delay": {"delay_ms": 5000},
    "no delay": {"delay_ms": 0},
    "too far": {"delay_ms": 200_000},  # past max_delay: refused
    "expires": {"expires": Expires(1000)},
    "expired": {"expires": Expires(0)},  # refused: its deadline is now
    "at": {"expires": Expires(1_000_600, True)},  # at 1000.6 s
    "both": {"delay_ms": 500, "expires": Expires(60_000)},
    "after due": {"delay_ms": 5000, "expires": Expires(2000)},  # refused
}
"""A version-2 SUBMIT's delay and deadline to start (SubmitOptions.timed), by name."""


class RecordingJournal(FakeJournal):
    """A fake journal that keeps each SUBMIT's records as the real one writes them."""

    def __init__(self, waits: bool) -> None:
        super().__init__(waits)
        self.records: list[bytes] = []

    def record_submit(self, task: Any, payload: bytes) -> bool:
        record = _submit_record(task, payload)
        if task.deadline:
            record += encode_deadline(task.task_id, task.deadline)
        self.records.append(record)
        return super().record_submit(task, payload)


class Events:
    """Where the kernel records lifecycle events: a list."""

    def __init__(self) -> None:
        self.recorded: list[tuple[Any, ...]] = []

    def record(self, *fields: Any, **named: Any) -> None:
        self.recorded.append((*fields, *sorted(named.items())))


class World:
    """A kernel with 2 producers and 2 workers (one each of each version), driven one way."""

    def __init__(self, fast: bool, waits: bool) -> None:
        self.clock = Clock()
        self.clock.advance(1000.0004)  # (a time the millisecond rounds)
        self.journal = RecordingJournal(waits)
        self.kernel: QueueService = make_queue(
            self.clock, self.journal, pool=small_pool(12), limits=LIMITS
        )
        self.events = Events()
        self.kernel.events = self.events
        self.admission = Admission(self.kernel)
        self.fast = FastPath(self.kernel, self.admission) if fast else None
        self.producers = [producer_of(self.kernel, "p1"), v2_producer_of(self.kernel, "p2")]
        self.workers = [
            worker_of(self.kernel, 2, "w1"),
            v2_worker_of(self.kernel, 3, ("default", *QUEUES), "w2"),
        ]

    def submit(
        self, producer: int, queue: str | None, priority: int | None, timing: str | None = None
    ) -> None:
        peer = self.producers[producer]
        if not peer.session.connected:
            return  # (a connection that left sends nothing)
        options = (
            DEFAULT_OPTIONS
            if peer.session.version == 1
            else taskflow.SubmitOptions(queue=queue, priority=priority, **TIMINGS[timing])
        )
        if self.fast is None:
            self.admission.submit(peer.session, b"t", b"x" * 10, options)
        else:
            self.fast.submit(peer.session, b"t", b"x" * 10, options, self.clock.seconds())

    def keyed(self, key: int) -> None:
        """
        A SUBMIT with an idempotency key (C{key} 2: its outcome kept a
        minute instead): the general path's in both.
        """
        session = self.producers[1].session
        if session.connected:
            options = (
                taskflow.SubmitOptions(result_ttl=60)
                if key == 2
                else taskflow.SubmitOptions(key=b"k%d" % key)
            )
            self.admission.submit(session, b"t", b"y", options)

    def report(self, worker: int, pick: int, right_token: bool, result: int = 0) -> None:
        """A DONE, or an ACK with a C{result} of that many bytes (0: none)."""
        session = self.workers[worker].session
        held = sorted(session.tasks) or [12345]
        task_id = held[pick % len(held)]
        task = session.tasks.get(task_id)
        token, given = None, None
        if session.version == 2:
            token = (task.token if task is not None else 0) + (not right_token)
            given = taskflow.Result(ResultKind.BYTES, b"r" * result) if result else None
        if self.fast is not None:
            self.fast.done(session, task_id, token, self.clock.seconds(), given)
        elif token is None:
            self.kernel.done(session, task_id)
        else:
            self.kernel.ack(session, task_id, token, given)

    def wait(self, task_id: int) -> None:
        """The version-2 producer AWAITs C{task_id}, up to 30 s."""
        session = self.producers[1].session
        if session.connected:
            self.kernel.await_outcome(session, task_id, 30_000)

    def leave(self, producer: int) -> None:
        peer = self.producers[producer]
        if peer.session.connected:
            peer.disconnect()

    def state(self) -> tuple[Any, ...]:
        kernel = self.kernel
        peers: list[FakePeer] = [*self.producers, *self.workers]
        total = kernel.telemetry.total()
        return (
            [peer.take() for peer in peers],
            list(self.journal.outcomes),
            self.journal.records[:],
            (kernel.delays.count, kernel.expiry.deadlines.count),
            [task.task_id for task in self.journal.waiting],
            self.events.recorded[:],
            kernel.counters(total),
            (total.wait.counts, total.wait.total, total.run.counts, total.run.total),
            sorted(kernel.queues),
            [(q.depth, q.running, q.pending, list(q.finished)) for q in kernel.queues.values()],
            [p.session.outstanding for p in self.producers],
            [sorted(w.session.tasks) for w in self.workers],
            kernel.pool.bytes_used,
        )


def apply(world: World, step: tuple[Any, ...]) -> object:
    """One step of traffic; the error it raised, if any."""
    kind, *arguments = step
    try:
        if kind == "sync":
            world.journal.sync()
        elif kind == "break":
            world.journal.broken = "the disk is gone" if arguments[0] else ""
        elif kind == "tick":
            world.clock.advance(arguments[0])
        else:
            getattr(world, kind)(*arguments)
    except (Refused, ProtocolViolation) as e:
        return type(e), str(e)
    return None


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("submit"),
            st.integers(0, 1),
            st.sampled_from([None, "default", "new", *QUEUES, "deep", "deep"]),
            st.sampled_from([None, 0, 9]),
            st.sampled_from(list(TIMINGS)),
        ),
        st.tuples(
            st.just("report"),
            st.integers(0, 1),
            st.integers(0, 5),
            st.booleans(),
            st.sampled_from([0, 0, 8, 100]),  # (64 at most: the pool's largest block)
        ),
        st.tuples(st.just("sync")),
        st.tuples(st.just("keyed"), st.integers(0, 2)),
        st.tuples(st.just("break"), st.booleans()),
        st.tuples(st.just("tick"), st.sampled_from([0.001, 0.5, 40.0])),
        st.tuples(st.just("leave"), st.integers(0, 1)),
        st.tuples(st.just("wait"), st.integers(1, 8)),
    ),
    max_size=40,
)


FILL = [("submit", 1, "kept", None)] * 3
"""The version-2 worker's 3 credits taken: what follows waits in its queue."""


def done_by_both(*picks: int) -> list[tuple[Any, ...]]:
    return [("report", worker, pick, True) for worker in (0, 1) for pick in picks]


@settings(max_examples=200, deadline=None)
@given(steps, st.booleans())
# Each way off the plain path, at least once whatever the draw.
@example([*FILL, ("submit", 1, "deep", 5), ("submit", 1, "deep", None)], False)
@example([*FILL, ("submit", 1, "expiring", None), ("tick", 40.0), *done_by_both(0)], False)
@example([("submit", 1, None, None), ("wait", 1), *done_by_both(0)], False)
@example([("submit", 1, "limited", None), *done_by_both(0)], False)
@example([("submit", 1, "kept", None), *done_by_both(0)], False)
@example([("submit", 1, "new", None), *done_by_both(0)], False)
@example([("submit", 0, None, None), ("leave", 0), *done_by_both(0, 0)], False)
@example([("submit", 1, "kept", None), ("report", 1, 0, False)], False)
@example([("submit", 1, None, None), ("report", 1, 0, True, 8)], False)
@example([("submit", 1, "kept", None), ("report", 1, 0, True, 8)], False)
@example([("submit", 1, None, None), ("report", 1, 0, True, 100)], False)
@example([("keyed", 1), *done_by_both(0), ("keyed", 1)], False)
@example([("keyed", 2), *done_by_both(0)], False)
@example([("break", True), ("submit", 0, None, None)], False)
@example([("submit", 1, None, None, "delay"), ("tick", 40.0), *done_by_both(0)], False)
@example([*FILL, *[("submit", 1, "kept", None, t) for t in TIMINGS], ("tick", 0.5)], True)
@example([*FILL, *[("submit", 1, None, 9, t) for t in TIMINGS], ("tick", 40.0)], False)
@example([("submit", 0, None, None), ("report", 0, 0, True), ("report", 0, 0, True)], True)
def test_the_plain_path_does_what_the_general_path_does(
    traffic: list[tuple[Any, ...]], waits: bool
) -> None:
    general, fast = World(False, waits), World(True, waits)
    assert general.state() == fast.state()
    for step in traffic:
        assert apply(general, step) == apply(fast, step), step
        assert general.state() == fast.state(), step


def test_a_plain_task_takes_the_plain_path() -> None:
    """(The comparison above is not of the general path with itself.)"""
    world = World(True, waits=False)
    assert world.fast is not None
    calls: list[str] = []
    world.admission.submit = lambda *a: calls.append("submit")  # type: ignore[method-assign]
    world.kernel.done = lambda *a: calls.append("done")  # type: ignore[method-assign]
    for producer in (0, 1):
        world.submit(producer, None, None)
    held = [sorted(worker.session.tasks) for worker in world.workers]
    assert sorted(held[0] + held[1]) == [1, 2]
    # A delay and a deadline: plain too (held to both), and a deadline alone
    # (handed to the version-2 worker at once: started in time).
    world.submit(1, None, None, "both")
    world.submit(1, None, None, "expires")
    assert (world.kernel.delays.count, world.kernel.expiry.deadlines.count) == (1, 1)
    assert len(world.workers[1].session.tasks) == 2
    for worker, ids in enumerate(held):
        for _ in ids:
            world.report(worker, 0, True)
    assert calls == []
    assert sorted(world.journal.outcomes) == [(1, "done"), (2, "done")]
