"""
Expiry (docs/protocol.md, "Version 2: debounce and expiry"): a task not
started by its deadline ends expired, by the timer or at dispatch, never
handed out late; in the queue core on a L{task.Clock}, with fakes.
"""

from __future__ import annotations

from twisted.internet.task import Clock

from quicx.daemon.queue import introspect
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.expiry import WHY
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.protocol import admin, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import Outcome, OutcomeState
from quicx.protocol.start_options import Expires
from tests.daemon.queue.test_core_results import awaited
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    make_queue,
    producer_of,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)

START = 1_800_000_000.0


def clock_at_start() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


def expiring_queue(
    clock: Clock, journal: FakeJournal | None = None, **policy: object
) -> QueueService:
    limits = QueueLimits(defaults=QueuePolicy(**policy))  # type: ignore[arg-type]
    return make_queue(clock, journal, limits=limits)


def expired(task_id: int) -> Outcome:
    return Outcome(task_id, OutcomeState.EXPIRED, None, WHY)


def test_a_task_not_started_by_its_deadline_expires_and_its_producer_hears_it() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(1500))
    assert producer.take() == [taskflow.Ok(1)]
    clock.advance(1.499)
    assert queue.queued == 1 and producer.take() == []
    clock.advance(0.001)
    assert producer.take() == [expired(1)]
    assert queue.queued == 0 and queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert journal.outcomes == [(1, "expired")]
    assert queue.telemetry.total().expired == 1
    assert awaited(queue, 1).state is OutcomeState.UNKNOWN  # not kept: nobody asked
    assert queue.expiry.deadlines.count == 0 and producer.session.outstanding == 0
    # A worker that comes now gets nothing.
    worker = v2_worker_of(queue)
    assert [m for m in worker.take() if isinstance(m, taskflow.Task)] == []


def test_a_task_past_its_deadline_is_expired_at_dispatch_not_handed_out() -> None:
    """The daemon's clock passes the deadline before the timer runs: the dispatch checks."""
    scheduler = clock_at_start()
    now = [START]
    queue = QueueService(make_queue(scheduler).pool, clock=lambda: now[0], scheduler=scheduler)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"late", expires=Expires(1000))
    submit_to(queue, producer.session, b"t", b"on time")
    producer.take()
    now[0] += 2.0  # the timer has not run
    worker = v2_worker_of(queue, credits=2)
    delivered = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert [t.payload for t in delivered] == [b"on time"]
    assert producer.take() == [expired(1)]
    assert queue.expiry.lapsed == [] and queue.default_queue.running == 1
    scheduler.advance(5)  # the timer finds nothing left to do
    assert producer.take() == [] and queue.telemetry.total().expired == 1


def test_inspect_says_when_a_waiting_task_expires() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(90_000))
    submit_to(queue, producer.session, b"t", b"y")
    assert introspect.inspect(queue, 1)["deadline"] == START + 90
    assert "deadline" not in introspect.inspect(queue, 2)


def test_a_task_started_in_time_is_not_held_to_its_deadline_again() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(1000))
    assert len([m for m in worker.take() if isinstance(m, taskflow.Task)]) == 1
    clock.advance(5)
    worker.disconnect()  # requeued, after its deadline
    other = v2_worker_of(queue, name="other")
    (again,) = [m for m in other.take() if isinstance(m, taskflow.Task)]
    assert again.task_id == 1 and producer.take() == [taskflow.Ok(1)]
    assert queue.expiry.deadlines.count == 0


def test_a_queues_default_deadline_counts_from_when_the_task_is_due() -> None:
    clock = clock_at_start()
    queue = expiring_queue(clock, expires=10.0)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"plain")
    submit_to(queue, producer.session, b"t", b"later", delay_ms=5000)
    producer.take()
    clock.advance(10)
    assert producer.take() == [expired(1)]
    clock.advance(4.999)
    assert producer.take() == []
    clock.advance(0.001)
    assert producer.take() == [expired(2)]


def test_a_version_1_producer_hears_an_expiry_as_failed() -> None:
    clock = clock_at_start()
    queue = expiring_queue(clock, expires=1.0)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    clock.advance(1)
    assert producer.take() == [wire.Ok(1), wire.Failed(1, WHY)]


def test_a_deadline_that_cannot_be_met_is_refused() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    past = Expires(int(START * 1000), at=True)
    submit_to(queue, producer.session, b"t", b"x", expires=past)
    submit_to(queue, producer.session, b"t", b"x", delay_ms=2000, expires=Expires(1000))
    refusals = producer.take()
    assert [(type(e), e.code) for e in refusals] == [(wire.Error, ErrorCode.INVALID_MESSAGE)] * 2
    assert "has passed" in refusals[0].message
    assert "comes before its due time" in refusals[1].message
    assert queue.pool.bytes_used == EMPTY_POOL_BYTES and not queue._live


def test_an_expired_task_goes_to_the_dead_letters_with_expired_dead() -> None:
    clock = clock_at_start()
    journal = FakeJournal(waits=False)
    queue = expiring_queue(clock, journal, expired_dead=True)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(1000), result_ttl=60)
    producer.take()
    clock.advance(1)
    assert producer.take() == [expired(1)]
    assert journal.changes == [("dead", 1)]
    assert queue.dead_tasks(None, 10)["tasks"][0]["reason"] == WHY
    assert awaited(queue, 1).state is OutcomeState.DEAD  # it lives on, in the dead letters
    queue.replay(1, None)
    worker = v2_worker_of(queue)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert task.payload == b"x" and queue.expiry.deadlines.count == 0


def one_turn(clock: Clock) -> None:
    """Run the calls due now, as one reactor turn would: not those they schedule."""
    due = [call for call in clock.calls if call.getTime() <= clock.seconds()]
    for call in due:
        clock.calls.remove(call)
        call.called = 1
        call.func(*call.args, **call.kw)


def test_the_timer_expires_at_most_a_batch_in_a_reactor_turn() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    for _ in range(2500):
        submit_to(queue, producer.session, b"t", b"x", expires=Expires(1000))
    producer.take()
    clock.rightNow += 1
    one_turn(clock)
    assert queue.telemetry.total().expired == 1000 and queue.queued == 1500
    one_turn(clock)
    assert queue.telemetry.total().expired == 2000
    one_turn(clock)
    assert queue.telemetry.total().expired == 2500 and queue.queued == 0
    assert len(producer.take()) == 2500


def test_the_deadlines_of_tasks_that_started_do_not_pile_up() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(3_600_000))
    for task_id in range(1, 10_001):
        # Each queued behind the one running: watched, then started in time.
        submit_to(queue, producer.session, b"t", b"x", expires=Expires(3_600_000))
        queue.done(worker.session, task_id)
    assert queue.expiry.deadlines.count == 0 and len(queue.expiry.deadlines._heap) <= 64


def test_a_cancelled_task_leaves_its_deadline() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(1000))
    queue.cancel(producer.session, 1)
    assert queue.expiry.deadlines.count == 0
    clock.advance(2)
    assert [type(m) for m in producer.take()] == [taskflow.Ok, admin.Cancelled]
    assert queue.telemetry.total().expired == 0 and queue.expiry.deadlines._heap == []


def test_an_expiry_is_an_event() -> None:
    clock = clock_at_start()
    queue = make_queue(clock)
    recorded: list[tuple[str, int | None, object]] = []

    class Events:
        def record(self, kind: str, task_id: int | None, *rest: object, **named: object) -> None:
            recorded.append((kind, task_id, rest[5] if len(rest) > 5 else None))

    queue.events = Events()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", expires=Expires(1000))
    clock.advance(1)
    assert ("expired", 1, WHY) in recorded


def test_refused_is_raised_for_a_past_deadline_by_the_expiry_itself() -> None:
    queue = make_queue(clock_at_start())
    try:
        queue.expiry.deadline(queue.default_queue, Expires(1, at=True), 0.0, START)
    except Refused as e:
        assert e.code is ErrorCode.INVALID_MESSAGE
    else:
        raise AssertionError("a deadline in 1970 was taken")
