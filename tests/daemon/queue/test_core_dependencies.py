"""
Tasks that wait for others (L{quicx.daemon.queue.dependencies}), in the
queue core on a L{task.Clock}: a DAG of parents, the failure policies, a
group's callback, cancelling a waiting task, the bounds at their edges, and
the cost of a fan-in (a counter, never a scan).
"""

from __future__ import annotations

import json

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue import pmad
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.policy import DependencyLimits, QueueLimits
from quicx.daemon.queue.state import WAITING
from quicx.protocol import taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.parents import GroupCounts, ParentOutcome, ParentPolicy
from quicx.protocol.taskflow import Result
from tests.fakes import (
    FakeJournal,
    FakePeer,
    checked_states,
    make_queue,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)


def queue_with(clock: Clock | None = None, **limits: int) -> QueueService:
    return make_queue(
        clock,
        pool=pmad.Pmad(16 << 20, pmad.default_classes()),
        limits=QueueLimits(dependencies=DependencyLimits(**limits)),
    )


def tasks(peer: FakePeer) -> list[taskflow.Task]:
    return [m for m in peer.take() if isinstance(m, taskflow.Task)]


def errors(peer: FakePeer) -> list[wire.Error]:
    return [m for m in peer.take() if isinstance(m, wire.Error)]


def ok_id(peer: FakePeer) -> int:
    (ok,) = [m for m in peer.take() if isinstance(m, taskflow.Ok)]
    return ok.task_id


def submit(
    queue: QueueService, producer: FakePeer, queue_name: str = "work", **options: object
) -> int:
    submit_to(queue, producer.session, b"t", b"x", queue_name, **options)
    return ok_id(producer)


def finish(
    queue: QueueService, worker: FakePeer, task: taskflow.Task, value: object = None
) -> None:
    queue.ack(worker.session, task.task_id, task.token, None if value is None else Result.of(value))


def run_one(queue: QueueService, worker: FakePeer, value: object = None) -> taskflow.Task:
    queue.ready(worker.session)
    (task,) = tasks(worker)
    finish(queue, worker, task, value)
    return task


def test_a_diamond_runs_in_order_and_the_last_gets_both_results() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    a = submit(queue, producer)
    b = submit(queue, producer, after=(a,))
    c = submit(queue, producer, after=(a,))
    d = submit(queue, producer, after=(b, c))
    assert [queue.task(i).state for i in (b, c, d)] == [WAITING] * 3
    worker = v2_worker_of(queue, queues=("work",))
    (first,) = tasks(worker)
    assert first.task_id == a and first.parents is None
    finish(queue, worker, first, {"a": 1})
    queue.ready(worker.session)
    (second,) = tasks(worker)
    assert second.task_id == b
    assert second.parents is not None
    assert second.parents.outcomes == (ParentOutcome(a, OutcomeState.DONE, 3, b'{"a":1}'),)
    finish(queue, worker, second, "from b")
    assert queue.task(d).state is WAITING  # c has not run
    third = run_one(queue, worker, b"from c")
    assert third.task_id == c
    queue.ready(worker.session)
    (last,) = tasks(worker)
    assert last.task_id == d and last.parents is not None
    assert {o.task_id: o.data for o in last.parents.outcomes} == {b: b"from b", c: b"from c"}


def test_a_failed_parent_fails_its_child_and_grandchild_by_default() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    parent = submit(queue, producer)
    other = submit(queue, producer, queue_name="parked")
    child = submit(queue, producer, after=(parent, other))
    grandchild = submit(queue, producer, after=(child,))
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    queue.nack(worker.session, task.task_id, task.token, "disk full", True)
    failed = {m.task_id: m.reason for m in producer.take() if isinstance(m, wire.Failed)}
    assert failed == {
        parent: "disk full",
        child: f"parent {parent} failed: disk full",
        grandchild: f"parent {child} failed: parent {parent} failed: disk full",
    }
    # The child no longer waits for the other parent: nothing is left behind.
    assert not queue.dependencies.waiters and not queue.dependencies.children


@pytest.mark.parametrize("policy", [ParentPolicy.IGNORE, ParentPolicy.CONTINUE])
def test_a_child_that_continues_runs_with_or_without_the_failures(policy: ParentPolicy) -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    good = submit(queue, producer)
    bad = submit(queue, producer)
    child = submit(queue, producer, after=(good, bad), on_parent_failure=policy)
    worker = v2_worker_of(queue, queues=("work",))
    (first,) = tasks(worker)
    finish(queue, worker, first, "fine")
    queue.ready(worker.session)
    (second,) = tasks(worker)
    queue.nack(worker.session, second.task_id, second.token, "broken", True)
    queue.ready(worker.session)
    (last,) = tasks(worker)
    assert last.task_id == child and last.parents is not None
    listed = {o.task_id: (o.state, o.data) for o in last.parents.outcomes}
    expected = {good: (OutcomeState.DONE, b"fine")}
    if policy is ParentPolicy.CONTINUE:
        expected[bad] = (OutcomeState.FAILED, b"broken")
    assert listed == expected


def test_unknown_and_unkept_parents_are_refused_and_kept_ones_count_as_finished() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    kept = submit(queue, producer, result_ttl=60)
    plain = submit(queue, producer)
    run_one(queue, worker, "kept result")
    run_one(queue, worker)
    producer.take()
    submit_to(queue, producer.session, b"t", b"x", "work", after=(999,))
    submit_to(queue, producer.session, b"t", b"x", "work", after=(plain,))
    submit_to(queue, producer.session, b"t", b"x", "work", after_group=77)
    assert [e.code for e in errors(producer)] == [ErrorCode.UNKNOWN_PARENT] * 3
    child = submit(queue, producer, after=(kept,))
    queue.ready(worker.session)
    (task,) = tasks(worker)
    assert task.task_id == child and task.parents is not None
    assert task.parents.outcomes[0].data == b"kept result"


def test_a_dead_parent_resolves_its_child() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    parent = submit(queue, producer, retries=1)
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    queue.nack(worker.session, task.task_id, task.token, "poison", True)
    assert queue.task(parent).dead is not None
    child = submit(queue, producer, after=(parent,), on_parent_failure=ParentPolicy.CONTINUE)
    queue.ready(worker.session)
    (task,) = tasks(worker)
    assert task.task_id == child and task.parents is not None
    assert task.parents.outcomes == (ParentOutcome(parent, OutcomeState.DEAD, 0, b"poison"),)


def test_a_waiting_child_can_be_cancelled_and_its_parent_then_releases_nothing() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    parent = submit(queue, producer)
    child = submit(queue, producer, after=(parent,))
    assert queue.cancel(producer.session, child)["state"] == "cancelled"
    assert [m.task_id for m in producer.take() if isinstance(m, wire.Failed | taskflow.Done)] in (
        [],
        [child],
    )
    assert not queue.dependencies.waiters and not queue.dependencies.children
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    finish(queue, worker, task)
    queue.ready(worker.session)
    assert tasks(worker) == []


def test_a_group_callback_runs_once_with_the_groups_counts_and_results() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    members = [submit(queue, producer, group=group) for _ in range(5)]
    callback = submit(queue, producer, after_group=group, on_parent_failure=ParentPolicy.CONTINUE)
    worker = v2_worker_of(queue, queues=("work",))
    for n in range(5):
        if n:
            queue.ready(worker.session)
        (task,) = tasks(worker)
        if n == 4:
            queue.nack(worker.session, task.task_id, task.token, "no", True)
        else:
            finish(queue, worker, task, n)
    queue.ready(worker.session)
    assert tasks(worker) == []  # the group is still open
    queue.close_group(group)
    queue.ready(worker.session)
    (task,) = tasks(worker)
    assert task.task_id == callback and task.parents is not None
    assert task.parents.group == GroupCounts(group, 5, 4, 1, 0)
    assert [o.task_id for o in task.parents.outcomes] == members
    assert [json.loads(o.data) for o in task.parents.outcomes[:4]] == [0, 1, 2, 3]


def test_a_child_of_a_delayed_submit_waits_then_keeps_its_time() -> None:
    clock = Clock()
    clock.advance(1_000)
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    parent = submit(queue, producer, queue_name="parked")
    submit(queue, producer, after=(parent,), delay_ms=10_000)
    queue.cancel(producer.session, parent)
    assert tasks(worker) == []  # cancelled: fails the child (default policy)
    parent = submit(queue, producer, queue_name="parked")
    child = submit(
        queue, producer, after=(parent,), delay_ms=10_000, on_parent_failure=ParentPolicy.IGNORE
    )
    queue.cancel(producer.session, parent)
    assert tasks(worker) == []
    clock.advance(11)
    (task,) = tasks(worker)
    assert task.task_id == child and task.parents is not None and task.parents.outcomes == ()


def test_max_parents_and_max_waiting_at_their_edges() -> None:
    queue = queue_with(max_parents=3, max_waiting=2)
    producer = v2_producer_of(queue)
    parents = tuple(submit(queue, producer, queue_name="parked") for _ in range(4))
    submit_to(queue, producer.session, b"t", b"x", "work", after=parents)
    assert [e.code for e in errors(producer)] == [ErrorCode.INVALID_MESSAGE]
    first = submit(queue, producer, after=parents[:3])
    submit(queue, producer, after=parents[:1])
    submit_to(queue, producer.session, b"t", b"x", "work", after=parents[:1])
    (error,) = errors(producer)
    assert error.code == ErrorCode.QUEUE_FULL and "max_waiting = 2" in error.message
    queue.cancel(producer.session, first)
    submit(queue, producer, after=parents[:1])


def test_a_child_accepted_after_its_parent_finished_meanwhile_is_due() -> None:
    """With a journal that syncs each record, the parent may finish while the child's waits."""
    journal = FakeJournal(waits=False)
    queue = make_queue(journal=journal)
    producer = v2_producer_of(queue)
    parent = submit(queue, producer)
    journal.waits = True
    submit_to(queue, producer.session, b"t", b"x", "work", after=(parent,))
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    finish(queue, worker, task, "early")
    journal.sync()
    child = ok_id(producer)
    queue.ready(worker.session)
    (task,) = tasks(worker)
    assert task.task_id == child and task.parents is not None
    assert task.parents.outcomes[0].data == b"early"


def test_a_chain_of_5000_fails_without_recursing() -> None:
    queue = make_queue(pool=pmad.Pmad(16 << 20, pmad.default_classes()))
    producer = v2_producer_of(queue)
    ids = [submit(queue, producer)]
    for _ in range(5000):
        ids.append(submit(queue, producer, after=(ids[-1],)))
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    queue.nack(worker.session, task.task_id, task.token, "no", True)
    assert not queue.dependencies.waiters
    assert sum(isinstance(m, wire.Failed) for m in producer.take()) == 5001


def test_a_fan_in_costs_one_step_per_parent_outcome() -> None:
    """Each parent's outcome resolves exactly its children's edges: no scan of the others."""
    queue = make_queue()
    producer = v2_producer_of(queue)
    parents = [submit(queue, producer) for _ in range(30)]
    children = [submit(queue, producer, after=tuple(parents)) for _ in range(100)]
    worker = v2_worker_of(queue, queues=("work",))
    deps = queue.dependencies
    (task,) = tasks(worker)
    for n in range(30):
        before = deps.resolved
        finish(queue, worker, task)
        assert deps.resolved - before == 100
        queue.ready(worker.session)
        if n < 29:
            (task,) = tasks(worker)
    assert not deps.waiters and len(tasks(worker)) == 1 and children


def test_inspect_says_what_a_waiting_task_waits_for() -> None:
    from quicx.daemon.queue import introspect

    queue = make_queue()
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    a = submit(queue, producer)
    b = submit(queue, producer, queue_name="parked")
    child = submit(queue, producer, after=(a, b), after_group=group)
    worker = v2_worker_of(queue, queues=("work",))
    run_one(queue, worker)
    answer = introspect.inspect(queue, child)
    assert answer["state"] == "waiting"
    (why,) = answer["why"]
    assert (why["parents"], why["group"]) == ([b], group)
    text = f"it waits for parent {b} and group {group} to finish (1 of 2 parents finished)"
    assert why["text"] == text


def test_the_moves_of_a_waiting_task_are_in_the_table() -> None:
    with checked_states() as checker:
        test_a_diamond_runs_in_order_and_the_last_gets_both_results()
        test_a_child_of_a_delayed_submit_waits_then_keeps_its_time()
        test_a_child_accepted_after_its_parent_finished_meanwhile_is_due()
    assert (WAITING, WAITING) not in checker.moves


def test_a_child_of_a_finished_and_a_live_parent_waits_for_the_live_one() -> None:
    """Found by the journal's every-moment test: the first parent heard released it early."""
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    kept = submit(queue, producer, result_ttl=60)
    run_one(queue, worker, "kept")
    live = submit(queue, producer, queue_name="parked")
    child = submit(queue, producer, after=(kept, live))
    other = submit(queue, producer)
    second = submit(queue, producer, after=(other,), queue_name="parked")
    run_one(queue, worker)  # other's outcome releases second, and whatever else is due
    assert queue.task(second).state is not WAITING
    queue.ready(worker.session)
    assert tasks(worker) == [] and queue.task(child).state is WAITING


def test_a_chord_of_10000_hands_its_callback_what_max_results_allows() -> None:
    queue = queue_with(max_results=1000)
    producer = v2_producer_of(queue)
    group = queue.open_group(producer.session)["group"]
    callback = submit(queue, producer, queue_name="cb", after_group=group)
    for _ in range(10_000):
        submit_to(queue, producer.session, b"t", b"x", "work", group=group)
    producer.take()
    queue.close_group(group)
    worker = v2_worker_of(queue, credits=1000, queues=("work",))
    while True:
        running = tasks(worker)
        if not running:
            break
        for task in running:
            finish(queue, worker, task, "r")
    queue.subscribe(worker.session, ("cb",))
    queue.ready(worker.session)
    last = tasks(worker)
    assert [t.task_id for t in last] == [callback]
    parents = last[0].parents
    assert parents is not None and parents.group == GroupCounts(group, 10_000, 10_000, 0, 0)
    # Each listed outcome takes 10 bytes and its data (the text "r", 1 byte):
    # 90 fit with it, the 91st without, no more at all.
    assert [o.data for o in parents.outcomes] == [b"r"] * 90 + [b""]
    assert parents.left_out == 10_000 - 90
