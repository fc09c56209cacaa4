"""
The queue's rules in-process, in milliseconds: L{QueueService} with fake
peers, a fake journal and a L{task.Clock}; no reactor, no sockets.

The end-to-end suites prove the same daemon as a user runs it; these prove
the rules themselves -- reply order, task timeouts with credits, the first
outcome winning -- and, with hypothesis, the invariants under any sequence of
events.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from twisted.internet.task import Clock
from twisted.logger import Logger
from zope.interface import implementer

from quicx.daemon import pmad
from quicx.daemon.core import QueueService, Task
from quicx.daemon.journal.interface import IJournal, IJournalOwner
from quicx.daemon.logsummary import LogSummary
from quicx.protocol import wire
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.session import IPeer, Role, Session


@implementer(IPeer)
class FakePeer:
    """A connection that keeps what the queue sends it, decoded."""

    def __init__(self, queue: QueueService, name: str) -> None:
        self.queue = queue
        self.peer_name = name
        self.parser = FrameParser(1 << 20, check_types=False)
        self.received: list[wire.Message] = []
        self.session: Session = queue.open_session(self)

    def sendFrame(self, data: bytes) -> None:
        for frame in self.parser.feed(data):
            assert isinstance(frame, Frame)
            self.received.append(wire.decode(frame.message_type, frame.payload))

    def disconnect(self) -> None:
        self.queue.close_session(self.session)

    def take(self) -> list[wire.Message]:
        received, self.received = self.received, []
        return received


@implementer(IJournal)
class FakeJournal:
    """Holds each SUBMIT until the test says its record is synced, or failed."""

    broken = ""
    path = "fake"

    def __init__(self) -> None:
        self.waiting: list[Task] = []
        self.outcomes: list[tuple[int, bool]] = []

    def bind(self, owner: IJournalOwner) -> None:
        self.owner = owner

    def record_submit(self, task: Task, payload: bytes) -> bool:
        self.waiting.append(task)
        return False

    def record_outcome(self, task: Task, failed: bool) -> None:
        self.outcomes.append((task.task_id, failed))

    def sync(self) -> None:
        waiting, self.waiting = self.waiting, []
        self.owner.accepted(waiting)

    def fail(self, in_doubt: bool = False) -> None:
        waiting, self.waiting = self.waiting, []
        self.owner.refused(waiting, "No space left on device", in_doubt)


EMPTY_POOL_BYTES = pmad.Pmad(1 << 20, pmad.default_classes()).bytes_used


def make_queue(
    clock: Clock | None = None, journal: FakeJournal | None = None, **kwargs: Any
) -> QueueService:
    pool = pmad.Pmad(1 << 20, pmad.default_classes())
    return QueueService(
        pool,
        clock=(clock or Clock()).seconds,
        journal=journal,
        failures=LogSummary(Logger(), 60.0),
        **kwargs,
    )


def producer_of(queue: QueueService, name: str = "producer") -> FakePeer:
    peer = FakePeer(queue, name)
    queue.claim_role(peer.session, Role.PRODUCER)
    return peer


def worker_of(queue: QueueService, credits: int = 1, name: str = "worker") -> FakePeer:
    peer = FakePeer(queue, name)
    queue.claim_role(peer.session, Role.WORKER)
    queue.ready(peer.session, credits)
    return peer


# -- replies leave in request order -----------------------------------------------


def test_answers_queue_behind_a_submit_waiting_for_its_sync() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal, allowed_types=frozenset({b"t"}))
    producer = producer_of(queue)
    queue.submit(producer.session, b"t", b"one")
    queue.submit(producer.session, b"other", b"refused at once")
    producer.session.reply(wire.PONG_FRAME)
    queue.submit(producer.session, b"t", b"two")
    assert producer.take() == [], "nothing may overtake the first OK"
    journal.sync()
    replies = producer.take()
    assert [type(r) for r in replies] == [wire.Ok, wire.Error, wire.Pong, wire.Ok]
    assert [r.task_id for r in replies if isinstance(r, wire.Ok)] == [1, 2]
    # Nothing waits now: the next answer goes at once.
    producer.session.reply(wire.PONG_FRAME)
    assert producer.take() == [wire.Pong()]


def test_a_refused_waiting_submit_is_answered_in_its_place() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    queue.submit(producer.session, b"t", b"one")
    producer.session.reply(wire.PONG_FRAME)
    journal.fail()
    first, second = producer.take()
    assert isinstance(first, wire.Error) and first.code == wire.ErrorCode.QUEUE_FULL
    assert "journal write failed: No space left on device" in first.message
    assert second == wire.Pong()
    assert queue.stats().queue_depth == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert queue.counters().rejected == 1


def test_a_submit_in_doubt_is_not_answered_at_all() -> None:
    # The record may have survived: neither OK nor ERROR would be true.
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = producer_of(queue)
    queue.submit(producer.session, b"t", b"one")
    journal.fail(in_doubt=True)
    assert producer.take() == []
    assert not producer.session.connected
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES


# -- task timeouts with credits: per delivery, first outcome wins --------------------


class TimedOut(NamedTuple):
    clock: Clock
    queue: QueueService
    producer: FakePeer
    worker: FakePeer


def a_task_timed_out(credits: int = 1) -> TimedOut:
    """Task 1 given to C{worker}, then taken back at its timeout (10 s)."""
    clock = Clock()
    queue = make_queue(clock, task_timeout=10.0)
    producer = producer_of(queue)
    worker = worker_of(queue, credits, name="first")
    queue.submit(producer.session, b"t", b"x")
    clock.advance(11)
    queue.expire_overdue()
    return TimedOut(clock, queue, producer, worker)


def test_a_timed_out_task_is_never_sent_again_to_the_worker_that_holds_it() -> None:
    _, queue, producer, worker = a_task_timed_out(credits=4)
    received = worker.take()
    assert [type(m) for m in received] == [wire.Wait, wire.Task], "no second copy"
    assert queue.stats().queue_depth == 1
    # Its late DONE still counts: the first outcome wins.
    queue.done(worker.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    assert queue.stats().queue_depth == 0
    assert queue.counters().completed == 1 and queue.counters().timed_out == 1
    # The queued copy is skipped, and the worker's credits are all free again.
    queue.submit(producer.session, b"t", b"next")
    assert [m.task_id for m in worker.take()] == [2]  # type: ignore[union-attr]
    assert worker.session.free_credits == 3


def test_a_timed_out_task_goes_to_another_worker_and_the_first_outcome_wins() -> None:
    _, queue, producer, slow = a_task_timed_out(credits=2)
    fast = worker_of(queue, credits=2, name="fast")
    assert fast.take() == [wire.Task(1, b"t", b"x")]
    # The slow worker reports first: done; the fast one's report is late.
    queue.done(slow.session, 1)
    queue.done(fast.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]
    counters = queue.counters()
    assert (counters.completed, counters.late_outcomes) == (1, 1)
    assert slow.session.free_credits == fast.session.free_credits == 2
    assert queue.tasks_running == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES


def test_the_new_holder_finishing_first_makes_the_old_report_late() -> None:
    _, queue, producer, slow = a_task_timed_out()
    fast = worker_of(queue, name="fast")
    queue.failed(fast.session, 1, "boom")
    assert slow.session.free_credits == 0, "its credit stays taken until it reports"
    queue.done(slow.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Failed(1, "boom")]
    assert queue.counters().late_outcomes == 1
    assert slow.session.free_credits == 1


def test_an_overdue_worker_that_leaves_lets_the_task_go_elsewhere() -> None:
    _, queue, producer, first = a_task_timed_out(credits=2)
    second = worker_of(queue, credits=2, name="second")
    second.take()
    first.disconnect()
    assert queue.stats().queue_depth == 0
    assert queue.tasks_running == 1
    queue.done(second.session, 1)
    assert producer.take() == [wire.Ok(1), wire.Done(1)]


def test_a_ready_with_only_its_own_late_copy_queued_gets_wait() -> None:
    _, queue, _, worker = a_task_timed_out(credits=2)
    worker.take()
    queue.ready(worker.session, 2)
    assert worker.take() == [wire.Wait()], "a READY is always answered"


def test_a_drain_is_not_held_up_by_a_task_finished_while_queued() -> None:
    clock, queue, _, worker = a_task_timed_out(credits=2)
    queue.done(worker.session, 1)  # finished by its late copy, still in the deque
    assert queue.queued == 0 and queue.stats().queue_depth == 0
    drained = queue.drain(60, clock)
    assert drained.called, "nothing is left to wait for"


def test_a_report_for_a_task_never_given_is_a_protocol_violation() -> None:
    queue = make_queue()
    worker = worker_of(queue)
    try:
        queue.done(worker.session, 99)
    except Exception as e:
        assert "task 99 is not held by this worker (no task)" in str(e)
    else:
        raise AssertionError("accepted")


# -- invariants under any sequence of events ------------------------------------------


class QueueMachine(RuleBasedStateMachine):
    """
    Producers submit, workers with credits take, finish, fail, time out and
    leave, in any order; the queue's books must always balance.
    """

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.queue = make_queue(self.clock, task_timeout=5.0, max_attempts=3)
        self.producer = producer_of(self.queue)
        self.workers: list[FakePeer] = []
        self.given: dict[FakePeer, set[int]] = {}
        self.submitted = 0

    @rule(payload=st.binary(max_size=40))
    def submit(self, payload: bytes) -> None:
        self.queue.submit(self.producer.session, b"t", payload)
        self.submitted += 1

    @rule(credits=st.integers(1, 4))
    def add_worker(self, credits: int) -> None:
        worker = worker_of(self.queue, credits, name=f"w{len(self.workers)}")
        self.workers.append(worker)
        self.given[worker] = set()

    def _collect(self) -> None:
        for worker in self.workers:
            for message in worker.take():
                if isinstance(message, wire.Task):
                    assert message.task_id not in self.given[worker], "sent twice to one worker"
                    self.given[worker].add(message.task_id)

    @precondition(lambda self: self.workers)
    @rule(data=st.data(), failed=st.booleans())
    def report(self, data: st.DataObject, failed: bool) -> None:
        self._collect()
        worker = data.draw(st.sampled_from(self.workers))
        if not self.given[worker]:
            return
        task_id = data.draw(st.sampled_from(sorted(self.given[worker])))
        self.given[worker].discard(task_id)
        if failed:
            self.queue.failed(worker.session, task_id, "no")
        else:
            self.queue.done(worker.session, task_id)

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def worker_ready_again(self, data: st.DataObject) -> None:
        self._collect()
        worker = data.draw(st.sampled_from(self.workers))
        session = worker.session
        had_a_free_credit = session.free_credits > 0
        self.queue.ready(session, session.credits)
        answers = worker.take()
        for message in answers:
            if isinstance(message, wire.Task):
                self.given[worker].add(message.task_id)
        if had_a_free_credit:
            assert answers, "a READY from a worker with a free credit went unanswered"

    @rule(seconds=st.sampled_from([1.0, 6.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.queue.expire_overdue()

    @precondition(lambda self: self.workers)
    @rule(data=st.data())
    def worker_leaves(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(self.workers))
        self.workers.remove(worker)
        del self.given[worker]
        worker.disconnect()

    @invariant()
    def books_balance(self) -> None:
        self._collect()
        queue = self.queue
        sessions = [w.session for w in self.workers]
        held = [task_id for s in sessions for task_id in s.tasks]
        assert len(held) == len(set(held)), "a task is held by two workers at once"
        for session in sessions:
            assert not session.tasks.keys() & session.overdue.keys()
            assert len(session.tasks) + len(session.overdue) <= session.credits
        outcomes = [m for m in self.producer.received if isinstance(m, wire.Done | wire.Failed)]
        ids = [m.task_id for m in outcomes]
        assert len(ids) == len(set(ids)), "a task reached two outcomes"
        counters, stats = queue.counters(), queue.stats()
        assert counters.completed + counters.failed == len(outcomes)
        live = self.submitted - len(outcomes)
        assert stats.queue_depth + queue.tasks_running == live, "a task was lost or doubled"
        assert counters.submitted == self.submitted


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
