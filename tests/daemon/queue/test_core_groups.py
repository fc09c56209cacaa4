"""
Groups in the queue core on a L{task.Clock}: members join with their
SUBMIT, a group finishes once closed with every member finished and says so
once (GROUP_STATE) to its opener and every wait, within its bounds.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.journal.interface import GroupEntry
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.groups import GroupLimits
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits
from quicx.daemon.queue.results import ResultLimits
from quicx.protocol import link, outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import GroupPhase, GroupState
from tests.fakes import FakeJournal, FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of


def queue_with(clock: Clock | None = None, **groups: object) -> QueueService:
    limits = QueueLimits(groups=GroupLimits(**groups))  # type: ignore[arg-type]
    return make_queue(clock, limits=limits)


def states(peer: FakePeer) -> list[GroupState]:
    return [m for m in peer.take() if isinstance(m, GroupState)]


def errors(peer: FakePeer) -> list[wire.Error]:
    return [m for m in peer.take() if isinstance(m, wire.Error)]


def test_a_group_of_10000_reports_once_with_the_right_counts() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    worker.take()
    group = queue.open_group(producer.session)["group"]
    last = None
    for n in range(10_000):
        kind = n % 10
        if kind == 0:  # cancelled while queued
            submit_to(queue, producer.session, b"t", b"x", "parked", group=group)
            queue.cancel(producer.session, queue._last_task_id)
            continue
        submit_to(queue, producer.session, b"t", b"x", "work", group=group, retries=kind == 2)
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        if n == 9_999:
            last = task  # finished after the close
        elif kind in (1, 2):  # failed; dead (it had a retry, the failure is permanent)
            queue.nack(worker.session, task.task_id, task.token, "no", True)
        else:
            queue.ack(worker.session, task.task_id, task.token)
    assert states(producer) == []
    closed = queue.close_group(group)
    assert (closed["state"], closed["members"], closed["pending"]) == ("closed", 10_000, 1)
    assert states(producer) == []
    assert last is not None
    queue.ack(worker.session, last.task_id, last.token)
    assert states(producer) == [
        GroupState(group, GroupPhase.FINISHED, 10_000, 7_000, 2_000, 1_000, 0)
    ]
    assert queue.groups.describe(group)["state"] == "finished"
    # Once: nothing more, whatever happens next.
    queue.purge_dead(None)
    assert states(producer) == []


def test_closing_a_group_whose_members_all_finished_finishes_it_at_once() -> None:
    clock = Clock()
    clock.advance(1_800_000_000)
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal=journal)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    group = queue.open_group(producer.session)["group"]
    submit_to(queue, producer.session, b"t", b"x", group=group)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token)
    assert states(producer) == []
    answer = queue.close_group(group)
    assert (answer["state"], answer["done"], answer["finished_at"]) == ("finished", 1, 1.8e9)
    assert states(producer) == [GroupState(group, GroupPhase.FINISHED, 1, 1, 0, 0, 0)]
    assert [(e.phase, e.members, e.done) for e in journal.groups] == [
        (GroupPhase.OPEN, 0, 0),
        (GroupPhase.FINISHED, 1, 1),
    ]


def test_an_empty_group_finishes_when_closed_and_a_closed_group_takes_no_member() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    assert queue.close_group(group)["state"] == "finished"
    assert states(producer) == [GroupState(group, GroupPhase.FINISHED)]
    submit_to(queue, producer.session, b"t", b"x", group=group)
    (refused,) = errors(producer)
    assert refused.code == ErrorCode.CONFLICT and f"group {group} is closed" in refused.message
    submit_to(queue, producer.session, b"t", b"x", group=group + 1)
    (unknown,) = errors(producer)
    assert unknown.code == ErrorCode.NOT_FOUND
    with pytest.raises(Refused) as closing:
        queue.close_group(group + 1)
    assert closing.value.code == ErrorCode.NOT_FOUND
    assert queue.groups.describe(group + 1)["state"] == "unknown"
    assert queue.counters().submitted == 0


def test_a_duplicate_submit_does_not_join_twice() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", key=b"order-1", group=group)
    assert producer.take() == [taskflow.Ok(1), taskflow.Ok(1, True), taskflow.Ok(1, True)]
    assert queue.groups.describe(group)["members"] == 1
    queue.close_group(group)
    # Even once the group is closed, a resubmit is a duplicate, not a refusal.
    submit_to(queue, producer.session, b"t", b"x", key=b"order-1", group=group)
    assert producer.take() == [taskflow.Ok(1, True)]
    worker = v2_worker_of(queue)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token)
    assert states(producer) == [GroupState(group, GroupPhase.FINISHED, 1, 1, 0, 0, 0)]


def test_another_connection_waits_for_a_group() -> None:
    clock = Clock()
    queue = queue_with(clock)
    producer, worker = v2_producer_of(queue), v2_worker_of(queue)
    group = queue.open_group(producer.session)["group"]
    submit_to(queue, producer.session, b"t", b"x", group=group)
    watcher = FakePeer(queue, "watcher", 2)
    queue.await_group(watcher.session, group, 0)
    assert states(watcher) == [GroupState(group, GroupPhase.OPEN, 1, pending=1)]
    queue.await_group(watcher.session, group, 5_000)
    clock.advance(5)
    assert states(watcher) == [GroupState(group, GroupPhase.OPEN, 1, pending=1)]
    queue.await_group(watcher.session, group, 60_000)
    queue.close_group(group)
    assert states(watcher) == []
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, task.task_id, task.token)
    finished = GroupState(group, GroupPhase.FINISHED, 1, 1, 0, 0, 0)
    assert states(watcher) == [finished] and states(producer) == [finished]
    # Finished, or unknown: answered at once.
    queue.await_group(watcher.session, group, 60_000)
    queue.await_group(watcher.session, 77, 60_000)
    assert states(watcher) == [finished, GroupState(77, GroupPhase.UNKNOWN)]
    assert queue.waits.count == 0


def test_an_opener_that_waits_too_hears_the_end_once() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    queue.await_group(producer.session, group, 60_000)
    queue.close_group(group)
    assert states(producer) == [GroupState(group, GroupPhase.FINISHED)]


def test_group_waits_count_against_the_waiter_limits() -> None:
    limits = QueueLimits(results=ResultLimits(max_waiters_per_connection=1))
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    first = queue.open_group(producer.session)["group"]
    second = queue.open_group(producer.session)["group"]
    watcher = FakePeer(queue, "watcher", 2)
    queue.await_group(watcher.session, first, 1000)
    with pytest.raises(Refused, match="max_waiters_per_connection = 1"):
        queue.await_group(watcher.session, second, 1000)
    submit_to(queue, producer.session, b"t", b"x")
    with pytest.raises(Refused, match="max_waiters_per_connection = 1"):
        queue.await_outcome(watcher.session, 1, 1000)


def test_max_groups_forgets_the_oldest_finished_group_or_refuses() -> None:
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal, limits=QueueLimits(groups=GroupLimits(max_groups=2)))
    producer = v2_producer_of(queue)
    first = queue.open_group(producer.session)["group"]
    second = queue.open_group(producer.session)["group"]
    with pytest.raises(Refused, match="max_groups = 2") as refused:
        queue.open_group(producer.session)
    assert refused.value.code == ErrorCode.QUEUE_FULL
    queue.close_group(first)
    third = queue.open_group(producer.session)["group"]
    assert (first, second, third) == (1, 2, 3)
    assert queue.groups.describe(first)["state"] == "unknown"
    assert journal.groups[-2] == GroupEntry(1, GroupPhase.UNKNOWN, queue.clock(), queue.clock())
    assert len(queue.groups) == 2


def test_a_finished_group_is_forgotten_after_its_ttl() -> None:
    clock = Clock()
    queue = queue_with(clock, ttl=60.0)
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    queue.close_group(group)
    clock.advance(59.9)
    assert queue.groups.describe(group)["state"] == "finished"
    clock.advance(0.1)
    assert queue.groups.describe(group)["state"] == "unknown"
    assert len(queue.groups) == 0


def test_a_member_whose_submit_the_journal_refuses_leaves_its_group() -> None:
    journal = FakeJournal()
    queue = make_queue(journal=journal)
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    submit_to(queue, producer.session, b"t", b"x", group=group)
    waiter = FakePeer(queue, "waiter", 2)
    queue.await_outcome(waiter.session, 1, 10_000)
    queue.close_group(group)
    assert queue.groups.describe(group)["members"] == 1
    journal.fail()
    assert queue.groups.describe(group)["state"] == "finished"
    assert states(producer) == [GroupState(group, GroupPhase.FINISHED)]
    assert waiter.take() == [outcomes.Outcome(1, outcomes.OutcomeState.UNKNOWN)]


@pytest.mark.parametrize("how", ["ack", "nack", "dead", "cancel"])
def test_the_last_members_outcome_comes_before_the_groups(how: str) -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    worker.take()
    group = queue.open_group(producer.session)["group"]
    submit_to(
        queue, producer.session, b"t", b"x", "parked" if how == "cancel" else "work", group=group
    )
    queue.close_group(group)
    producer.take()
    task_id = queue._last_task_id
    if how == "cancel":
        queue.cancel(producer.session, task_id)
    else:
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        if how == "ack":
            queue.ack(worker.session, task.task_id, task.token)
        else:
            queue.nack(worker.session, task.task_id, task.token, "no", how == "dead")
    kinds = [type(m).__name__ for m in producer.take() if not isinstance(m, link.Info)]
    outcome = {"ack": "Done", "nack": "Failed", "dead": "Failed", "cancel": "Cancelled"}[how]
    assert kinds == [outcome, "GroupState"]


def test_an_open_group_nobody_joins_is_closed_by_the_daemon_and_finishes() -> None:
    clock = Clock()
    clock.advance(1_800_000_000)
    queue = queue_with(clock, idle_close=60.0)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    worker.take()
    active = queue.open_group(producer.session)["group"]
    forgotten = queue.open_group(producer.session)["group"]
    submit_to(queue, producer.session, b"t", b"x", "work", group=forgotten)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    clock.advance(59)
    submit_to(queue, producer.session, b"t", b"y", "parked", group=active)  # it took one: not idle
    producer.take()
    clock.advance(1)
    assert queue.groups.describe(forgotten)["state"] == "closed"
    assert queue.groups.describe(active)["state"] == "open"
    queue.ack(worker.session, task.task_id, task.token)
    assert states(producer) == [GroupState(forgotten, GroupPhase.FINISHED, 1, 1, 0, 0, 0)]
    clock.advance(59)
    assert queue.groups.describe(active)["state"] == "closed"  # 60 s after its last member
    empty = queue.open_group(producer.session)["group"]
    clock.advance(60)  # closed with no members: finished at once, and said so
    assert states(producer) == [GroupState(empty, GroupPhase.FINISHED)]


def test_idle_close_0_leaves_open_groups_open() -> None:
    clock = Clock()
    queue = queue_with(clock, idle_close=0.0)
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    clock.advance(10 * 86_400)
    assert queue.groups.describe(group)["state"] == "open"
