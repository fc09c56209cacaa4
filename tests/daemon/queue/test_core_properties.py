"""
The queue core's invariants under any interleaving of events (hypothesis):
producers submit (some too large, some past a full pool) and leave; the
journal syncs or fails; workers with any credits ask, finish, fail, time out
and leave.  Producers and workers speak version 1 or 2: tasks go to three
queues at two priorities, workers subscribe to any of them in any order,
and an admin pauses, resumes, purges and cancels.  After every step:

  - a task is held by at most one worker, never sent twice to a worker still
    running a copy, and a worker is never sent more than its credits;
  - STATS equals the sum of the states: queue depth, workers, idle workers,
    the pool's bytes;
  - every accepted task is live (queued or held) or has reached exactly one
    outcome (done, failed or cancelled), told once to its producer after its
    OK; the counters agree, and
    a producer is owed an outcome (spared by heartbeats) exactly while it has
    tasks live;
  - once everything is finished, the pool is back to empty, but for the
    kept outcomes of the tasks whose producer left.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from twisted.internet.task import Clock

from quicx.daemon.queue import pmad
from quicx.daemon.queue.model import Refused
from quicx.protocol import admin, codec, taskflow, wire
from quicx.protocol.session import Role
from tests.fakes import BLOCK, FakeJournal, FakePeer, make_queue, small_pool, submit_to

BLOCKS = 8
QUEUES = ("default", "a", "b")
STRIDE = pmad.BLOCK_HEADER_SIZE + BLOCK


class ProducerModel:
    """What one producer was told."""

    def __init__(self, peer: FakePeer) -> None:
        self.peer = peer
        self.accepted: set[int] = set()
        self.outcomes: Counter[int] = Counter()


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.journal = FakeJournal()
        self.queue = make_queue(
            self.clock,
            journal=self.journal,
            pool=small_pool(BLOCKS),
            task_timeout=5.0,
            max_attempts=3,
        )
        self.empty_pool = self.queue.pool.bytes_used
        self.producers: list[ProducerModel] = []
        # Accepted tasks whose producer left before their outcome, and the
        # tasks it left waiting for the journal (accepted later, or refused).
        self.orphans: set[int] = set()
        self.orphans_waiting: set[int] = set()
        self.outcomes_of_those_who_left = 0
        self.workers: list[FakePeer] = []
        self.credits: dict[FakePeer, int] = {}
        self.running: dict[FakePeer, set[int]] = {}
        self.held_before: dict[FakePeer, int] = {}
        self.names = 0
        self.admin = FakePeer(self.queue, "admin", version=2)
        self.admin.session.admin = True

    @initialize(journal_waits=st.booleans(), credits=st.integers(1, 4))
    def start(self, journal_waits: bool, credits: int) -> None:
        """
        A journal that syncs each SUBMIT, or one that acknowledges at once;
        a producer and a worker to begin with.
        """
        self.journal.waits = journal_waits
        self.add_producer()
        self.add_worker(credits)

    def _name(self) -> str:
        self.names += 1
        return f"peer{self.names}"

    # -- producers -------------------------------------------------------------------

    @precondition(lambda self: len(self.producers) < 3)
    @rule(version=st.sampled_from([1, 2]))
    def add_producer(self, version: int = 1) -> None:
        peer = FakePeer(self.queue, self._name(), version)
        self.queue.claim_role(peer.session, Role.PRODUCER)
        self.producers.append(ProducerModel(peer))

    @precondition(lambda self: self.producers)
    @rule(
        data=st.data(),
        payloads=st.lists(st.binary(max_size=BLOCK + 8), min_size=1, max_size=4),
        queue=st.sampled_from(QUEUES),
        priority=st.sampled_from([0, 5]),
    )
    def submit(self, data: st.DataObject, payloads: list[bytes], queue: str, priority: int) -> None:
        producer = data.draw(st.sampled_from(self.producers))
        session = producer.peer.session
        for payload in payloads:
            if session.version == 1:
                submit_to(self.queue, session, b"t", payload)
            else:
                submit_to(self.queue, session, b"t", payload, queue, priority)

    # -- the admin -----------------------------------------------------------------------

    @rule(queue=st.sampled_from(QUEUES), paused=st.booleans())
    def pause_or_resume(self, queue: str, paused: bool) -> None:
        self._collect()
        try:
            self.queue.set_paused(queue, paused)
        except Refused:
            assert not paused and queue not in self.queue.queues
        self._collect()

    @rule(queue=st.sampled_from(QUEUES))
    def purge(self, queue: str) -> None:
        self._collect()
        try:
            self.queue.purge(queue)
        except Refused:
            assert queue not in self.queue.queues

    @precondition(lambda self: self.queue.queued)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        self._collect()
        queued = [t.task_id for t, _ in self.queue.snapshot().tasks if t.accepted and not t.holder]
        if queued:
            self.queue.cancel(self.admin.session, data.draw(st.sampled_from(queued)))

    @precondition(lambda self: self.producers)
    @rule(data=st.data())
    def producer_leaves(self, data: st.DataObject) -> None:
        producer = data.draw(st.sampled_from(self.producers))
        session = producer.peer.session
        self.orphans_waiting |= {t.task_id for t in self.journal.waiting if t.producer is session}
        producer.peer.disconnect()
        self._forget_producers_gone()

    def _forget_producers_gone(self) -> None:
        for producer in [p for p in self.producers if not p.peer.session.connected]:
            self._collect()
            self.producers.remove(producer)
            self.orphans |= producer.accepted - producer.outcomes.keys()
            self.outcomes_of_those_who_left += len(producer.outcomes)

    @precondition(lambda self: self.journal.waiting)
    @rule()
    def journal_syncs(self) -> None:
        self.journal.sync()
        self.orphans |= self.orphans_waiting
        self.orphans_waiting.clear()

    @precondition(lambda self: self.journal.waiting)
    @rule(in_doubt=st.booleans())
    def journal_fails(self, in_doubt: bool) -> None:
        self.journal.fail(in_doubt)
        self.orphans_waiting.clear()
        self._forget_producers_gone()

    # -- workers ---------------------------------------------------------------------

    @precondition(lambda self: len(self.workers) < 4)
    @rule(
        credits=st.integers(1, 4),
        queues=st.none() | st.lists(st.sampled_from(QUEUES), min_size=1, max_size=3, unique=True),
    )
    def add_worker(self, credits: int, queues: list[str] | None = None) -> None:
        """A worker: version 1 (no queues), or version 2 subscribed to C{queues} in order."""
        self._collect()
        peer = FakePeer(self.queue, self._name(), 1 if queues is None else 2)
        self.workers.append(peer)
        self.running[peer], self.held_before[peer] = set(), 0
        self.queue.claim_role(peer.session, Role.WORKER)
        if queues:
            self.queue.subscribe(peer.session, tuple(queues))
        self._ready(peer, credits)

    def _ready(self, worker: FakePeer, credits: int) -> None:
        may_take = credits - len(self.running[worker]) > 0
        self.credits[worker] = credits
        self.queue.ready(worker.session, credits)
        answers = worker.take()
        self._received(worker, answers)
        if may_take:
            assert answers, "a READY from a worker with a free credit went unanswered"
            tasks = all(isinstance(m, wire.Task | taskflow.Task) for m in answers)
            assert tasks or answers == [wire.Wait()]
        else:
            assert answers == [], "a READY from a worker holding all it may is not answered"

    @precondition(lambda self: self.workers)
    @rule(data=st.data(), credits=st.integers(1, 4))
    def worker_ready(self, data: st.DataObject, credits: int) -> None:
        self._collect()
        self._ready(data.draw(st.sampled_from(self.workers)), credits)

    @precondition(lambda self: any(self.running.values()))
    @rule(data=st.data(), failed=st.booleans())
    def worker_reports(self, data: st.DataObject, failed: bool) -> None:
        self._collect()
        worker = data.draw(st.sampled_from([w for w in self.workers if self.running[w]]))
        task_id = data.draw(st.sampled_from(sorted(self.running[worker])))
        self.running[worker].discard(task_id)
        if failed:
            self.queue.failed(worker.session, task_id, "no")
        else:
            self.queue.done(worker.session, task_id)

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def worker_leaves(self, data: st.DataObject) -> None:
        self._worker_leaves(data.draw(st.sampled_from(self.workers)))

    def _worker_leaves(self, worker: FakePeer) -> None:
        self._collect()
        self.workers.remove(worker)
        del self.running[worker], self.credits[worker], self.held_before[worker]
        worker.disconnect()

    @rule(seconds=st.sampled_from([1.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.queue.expire_overdue()

    @rule()
    def everything_finishes(self) -> None:
        """Sync, resume, and let one big worker and the others finish every task."""
        self.journal_syncs()
        for queue in QUEUES:
            if queue in self.queue.queues:
                self.queue.set_paused(queue, False)
        if len(self.workers) == 4:
            self._worker_leaves(self.workers[0])
        self.add_worker(credits=codec.MAX_CREDITS, queues=list(QUEUES))
        for _ in range(10):
            self._collect()
            for worker in self.workers:
                for task_id in sorted(self.running[worker]):
                    self.running[worker].discard(task_id)
                    self.queue.done(worker.session, task_id)
            if not (self.queue.queued or self.queue.tasks_running):
                break
        self._collect()
        assert list(self.queue.snapshot().tasks) == [], "a task never finished"
        assert self.queue.pool.bytes_used == self.empty_pool + self.queue.kept.memory
        for producer in self.producers:
            assert producer.outcomes.keys() == producer.accepted

    # -- what the peers were sent --------------------------------------------------------

    def _received(self, worker: FakePeer, messages: list[wire.Message]) -> None:
        for message in messages:
            if isinstance(message, wire.Task | taskflow.Task):
                assert message.task_id not in self.running[worker], "sent twice to one worker"
                self.running[worker].add(message.task_id)

    def _collect(self) -> None:
        for worker in self.workers:
            self._received(worker, worker.take())
        for producer in self.producers:
            for message in producer.peer.take():
                if isinstance(message, wire.Ok | taskflow.Ok):
                    assert message.task_id not in producer.accepted
                    producer.accepted.add(message.task_id)
                elif isinstance(message, wire.Done | taskflow.Done | wire.Failed | admin.Cancelled):
                    assert message.task_id in producer.accepted, "an outcome before its OK"
                    producer.outcomes[message.task_id] += 1

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def workers_hold_what_they_were_sent(self) -> None:
        self._collect()
        held = [task_id for w in self.workers for task_id in w.session.tasks]
        assert len(held) == len(set(held)), "a task is held by two workers at once"
        for worker in self.workers:
            session = worker.session
            assert session.tasks.keys() | session.overdue.keys() == self.running[worker]
            assert not session.tasks.keys() & session.overdue.keys()
            running = len(self.running[worker])
            assert running <= max(self.credits[worker], self.held_before[worker]), (
                "a worker was sent more than its credits"
            )
            self.held_before[worker] = running

    @invariant()
    def stats_are_the_sum_of_the_states(self) -> None:
        self._collect()
        queue = self.queue
        stats = queue.stats()
        live = [task.task_id for task, _ in queue.snapshot().tasks]
        waiting = [t.task_id for t in self.journal.waiting]
        held = sum(len(w.session.tasks) for w in self.workers)
        assert stats.queue_depth == len(live) - len(waiting) - held
        assert stats.workers_total == len(self.workers)
        idle = [w for w in self.workers if self.credits[w] > len(self.running[w])]
        assert stats.workers_idle == len(idle)
        kept = len(queue.kept)
        assert stats.pmad_bytes_used == self.empty_pool + (len(live) + kept) * STRIDE
        assert stats.pmad_bytes_total == queue.pool.pool_size

    @invariant()
    def every_accepted_task_is_live_or_has_one_outcome(self) -> None:
        self._collect()
        live = {task.task_id for task, _ in self.queue.snapshot().tasks}
        finished = 0
        for producer in self.producers:
            assert all(count == 1 for count in producer.outcomes.values()), "two outcomes"
            assert producer.accepted - producer.outcomes.keys() <= live, "a task was lost"
            assert not producer.outcomes.keys() & live, "a finished task is still live"
            session = producer.peer.session
            owed = len(producer.accepted - producer.outcomes.keys()) + len(
                [t for t in self.journal.waiting if t.producer is session]
            )
            assert session.outstanding == owed
            assert self.queue.awaits_outcome(session) is (owed > 0)
            finished += len(producer.outcomes)
        finished += len(self.orphans - live) + self.outcomes_of_those_who_left
        counters = self.queue.counters()
        assert counters.completed + counters.failed + counters.cancelled == finished
        accepted = sum(len(p.accepted) for p in self.producers)
        assert counters.submitted == accepted + len(self.orphans) + (
            self.outcomes_of_those_who_left
        )


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=200, stateful_step_count=50, deadline=None)
