"""
A task's states: the table (L{quicx.daemon.queue.state}) is whole, and the
kernel walks every move in it, and none outside it (the moves of every
C{test_core_*} test are checked too: see C{tests/conftest.py}).
"""

from __future__ import annotations

from twisted.internet.task import Clock

from quicx.daemon.journal.interface import DeadInfo
from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.state import FINISHED, PENDING, TRANSITIONS, TaskState
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.fakes import (
    FakeJournal,
    checked_states,
    make_queue,
    producer_of,
    submit_to,
    worker_of,
)

FIXED_1S = Backoff(BackoffKind.FIXED, 1000, 1000, 0)


def test_the_table_names_every_state_and_every_state_can_finish() -> None:
    assert set(TRANSITIONS) == set(TaskState)
    assert not TRANSITIONS[FINISHED]
    assert all(PENDING not in targets for targets in TRANSITIONS.values())
    for state in TaskState:
        seen, todo = {state}, [state]
        while todo:
            for target in TRANSITIONS[todo.pop()]:
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        assert FINISHED in seen, state


def queue_on(clock: Clock, **kwargs: object) -> QueueService:
    return make_queue(clock, task_timeout=10.0, limits=QueueLimits(), **kwargs)  # type: ignore[arg-type]


def walk_queued_held_done_and_cancels(clock: Clock) -> None:
    queue = queue_on(clock)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"1")  # PENDING -> QUEUED
    submit_to(queue, producer.session, b"t", b"2", delay_ms=5000)  # PENDING -> DELAYED
    submit_to(queue, producer.session, b"t", b"3")
    queue.cancel(producer.session, 2)  # DELAYED -> FINISHED
    queue.cancel(producer.session, 3)  # QUEUED -> FINISHED
    worker = worker_of(queue)  # QUEUED -> HELD
    queue.done(worker.session, 1)  # HELD -> FINISHED
    queue.ready(worker.session)
    submit_to(queue, producer.session, b"t", b"4")  # PENDING -> QUEUED -> HELD (an idle worker)
    submit_to(queue, producer.session, b"t", b"5", delay_ms=1000)
    clock.advance(2)  # DELAYED -> QUEUED
    worker.disconnect()  # HELD -> QUEUED


def walk_retries_dead_letters_and_replay(clock: Clock) -> None:
    queue = queue_on(clock)
    producer = producer_of(queue)
    worker = worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", retries=1, backoff=FIXED_1S)
    queue.failed(worker.session, 1, "boom")  # HELD -> DELAYED
    clock.advance(2)
    queue.failed(worker.session, 1, "boom")  # HELD -> DEAD
    queue.replay(1, None)  # DEAD -> QUEUED
    queue.failed(worker.session, 1, "boom")
    clock.advance(2)
    queue.failed(worker.session, 1, "boom")
    assert queue.purge_dead(None) == {"purged": 1}  # DEAD -> FINISHED


def walk_late_outcomes(clock: Clock) -> None:
    """An earlier delivery's outcome takes the task back from wherever it is."""
    queue = queue_on(clock)
    producer = producer_of(queue)
    for task_id, second_says in enumerate(("requeued", "retry", "dead"), start=1):
        slow = worker_of(queue, name=f"slow{task_id}")
        submit_to(queue, producer.session, b"t", b"x", retries=1, backoff=FIXED_1S)
        clock.advance(11)
        queue.expire_overdue()  # HELD -> QUEUED
        if second_says != "requeued":
            fast = worker_of(queue, name=f"fast{task_id}")
            queue.failed(fast.session, task_id, "boom")  # HELD -> DELAYED
            if second_says == "dead":
                clock.advance(2)
                queue.ready(fast.session)
                queue.failed(fast.session, task_id, "boom")  # HELD -> DEAD
            fast.disconnect()
        queue.done(slow.session, task_id)  # QUEUED/DELAYED/DEAD -> HELD -> FINISHED
        slow.disconnect()


def walk_a_recovered_dead_task(clock: Clock) -> None:
    queue = queue_on(clock, journal=FakeJournal(waits=False))
    died = DeadInfo(clock.seconds(), "boom", "w")
    queue.restore(Recovery((RecoveredTask(7, b"t", b"x", dead=died),), 7, 0, 0, 0))


def walk_waiting_tasks(clock: Clock) -> None:
    """Tasks that wait for a parent: released, released to their time, cancelled."""
    queue = queue_on(clock)
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"1")
    submit_to(queue, producer.session, b"t", b"2", after=(1,))  # PENDING -> WAITING
    submit_to(queue, producer.session, b"t", b"3", after=(1,), delay_ms=5000)
    submit_to(queue, producer.session, b"t", b"4", after=(1,))
    queue.cancel(producer.session, 4)  # WAITING -> FINISHED
    worker = worker_of(queue)
    queue.done(worker.session, 1)  # WAITING -> QUEUED (2), WAITING -> DELAYED (3)


def walk_debounce_and_expiry(clock: Clock) -> None:
    """An extend delays a queued task again; expiry into the dead letters."""
    limits = QueueLimits(defaults=QueuePolicy(expired_dead=True))
    queue = make_queue(clock, task_timeout=10.0, limits=limits)
    producer = producer_of(queue)
    extend = Debounce(DebounceMode.EXTEND, 1000)
    submit_to(queue, producer.session, b"t", b"1", key=b"k", debounce=extend)
    clock.advance(2)
    submit_to(queue, producer.session, b"t", b"2", key=b"k", debounce=extend)  # QUEUED -> DELAYED
    submit_to(queue, producer.session, b"t", b"3", key=b"j", debounce=extend, expires=Expires(1500))
    clock.advance(0.9)
    submit_to(queue, producer.session, b"t", b"4", key=b"j", debounce=extend)
    clock.advance(0.6)  # its deadline, while delayed: DELAYED -> DEAD
    submit_to(queue, producer.session, b"t", b"5", expires=Expires(1000))
    clock.advance(1)  # QUEUED -> DEAD


def test_the_kernel_walks_every_move_of_the_table_and_no_other() -> None:
    clock = Clock()
    clock.advance(1_800_000_000)
    with checked_states() as checker:
        walk_queued_held_done_and_cancels(clock)
        walk_retries_dead_letters_and_replay(clock)
        walk_late_outcomes(clock)
        walk_a_recovered_dead_task(clock)
        walk_waiting_tasks(clock)
        walk_debounce_and_expiry(clock)
    table = {(old, new) for old, targets in TRANSITIONS.items() for new in targets}
    assert checker.moves == table, sorted(
        (old.name, new.name) for old, new in table ^ checker.moves
    )
