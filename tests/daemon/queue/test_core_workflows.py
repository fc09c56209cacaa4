"""
The workflows together, in the queue core on a L{task.Clock}: a waiting
task's own deadline, a debounced parent, a bulk cancel of parents, a
checkpoint across a bulk move, and priority aging with a routed worker.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.state import WAITING
from quicx.protocol import taskflow
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.parents import ParentPolicy, Parents
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import Result
from tests.daemon.queue.test_bulk import RETRIES, Kit
from tests.daemon.queue.test_core_routing import typed_worker
from tests.fakes import (
    FakePeer,
    checked_states,
    make_queue,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)

START = 1_800_000_000.0


def started(**limits: Any) -> tuple[Clock, QueueService, FakePeer]:
    clock = Clock()
    clock.advance(START)
    queue = make_queue(clock, limits=QueueLimits(**limits))
    return clock, queue, v2_producer_of(queue)


def submit(kernel: QueueService, producer: FakePeer, payload: bytes = b"x", **options: Any) -> int:
    submit_to(kernel, producer.session, b"t", payload, **options)
    ok = [m for m in producer.take() if isinstance(m, taskflow.Ok)]
    return ok[-1].task_id


def tasks(peer: FakePeer) -> list[taskflow.Task]:
    return [m for m in peer.take() if isinstance(m, taskflow.Task)]


def parents_of(task: taskflow.Task) -> Parents:
    assert task.parents is not None
    return task.parents


def outcomes_told(peer: FakePeer) -> dict[int, str]:
    """The outcomes C{peer} was told (its tasks' ids to the message's name)."""
    told = {}
    for message in peer.take():
        task_id = getattr(message, "task_id", None)
        if task_id is not None and not isinstance(message, taskflow.Ok):
            told[task_id] = type(message).__name__
    return told


def test_a_waiting_child_expires_and_its_own_children_hear_it_by_their_policy() -> None:
    clock, queue, producer = started()
    parent = submit(queue, producer, queue="nobody")
    child = submit(queue, producer, queue="work", after=(parent,), expires=Expires(1000))
    failing = submit(queue, producer, queue="work", after=(child,))
    going = submit(
        queue, producer, queue="work", after=(child,), on_parent_failure=ParentPolicy.CONTINUE
    )
    assert queue._live[child].state is WAITING
    with checked_states():
        clock.advance(1.5)
    assert child not in queue._live and failing not in queue._live
    assert queue.expiry.deadlines.count == 0 and not queue.dependencies.waiters
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = tasks(worker)
    assert task.task_id == going
    (heard,) = parents_of(task).outcomes
    assert (heard.task_id, heard.state) == (child, OutcomeState.EXPIRED)
    assert queue.telemetry.total().expired == 1
    # The parent, which never ran, still waits: its expired child is forgotten by it.
    assert parent in queue._live and parent not in queue.dependencies.children


def test_a_debounced_parent_hands_its_child_the_result_of_the_payload_that_replaced_its_own() -> (
    None
):
    clock, queue, producer = started()
    replace = Debounce(DebounceMode.REPLACE, 1000)
    parent = submit(queue, producer, b"old", key=b"k", debounce=replace, result_ttl=60)
    child = submit(queue, producer, after=(parent,), queue="after")
    assert submit(queue, producer, b"new", key=b"k", debounce=replace) == parent
    worker = v2_worker_of(queue, credits=2, queues=("default", "after"))
    clock.advance(1.5)
    (task,) = tasks(worker)
    assert (task.task_id, task.payload) == (parent, b"new")
    queue.ack(worker.session, parent, task.token, Result.of(task.payload.decode()))
    (next_task,) = tasks(worker)
    assert next_task.task_id == child
    (heard,) = parents_of(next_task).outcomes
    assert (heard.task_id, heard.state, heard.data) == (parent, OutcomeState.DONE, b"new")


def test_a_bulk_cancel_of_a_queue_resolves_the_children_of_its_tasks_by_their_policies() -> None:
    kit = Kit()
    parents = [kit.submit(queue="a", result_ttl=60) for _ in range(2)]
    children = {
        policy: kit.submit(queue="b", after=tuple(parents), on_parent_failure=policy)
        for policy in ParentPolicy
    }
    with checked_states():
        answer = kit.run("cancel", queue="a")
    assert answer["acted"] == 2
    assert children[ParentPolicy.FAIL] not in kit.queue._live
    assert not kit.queue.dependencies.waiters and not kit.queue.dependencies.children
    worker = v2_worker_of(kit.queue, credits=5, queues=("b",))
    got = {task.task_id: task for task in tasks(worker)}
    assert set(got) == {children[ParentPolicy.IGNORE], children[ParentPolicy.CONTINUE]}
    assert parents_of(got[children[ParentPolicy.IGNORE]]).outcomes == ()
    listed = parents_of(got[children[ParentPolicy.CONTINUE]]).outcomes
    assert [(o.task_id, o.state) for o in listed] == [(p, OutcomeState.CANCELLED) for p in parents]


def test_a_checkpointed_task_moved_by_a_bulk_action_keeps_its_checkpoint() -> None:
    kit = Kit(defaults=RETRIES)
    task_id = kit.submit(queue="a")
    worker = v2_worker_of(kit.queue, queues=("a",))
    (task,) = tasks(worker)
    state = Result.of({"cursor": 42})
    kit.queue.checkpoints.save(worker.session, task_id, task.token, state)
    kit.queue.nack(worker.session, task_id, task.token, "try again", False)  # delayed: a backoff
    worker.disconnect()
    with checked_states():
        answer = kit.run("move", queue="a", to="b")
    assert answer["acted"] == 1
    assert (kit.queue.checkpoints.held, kit.queue.checkpoints.bytes) == (1, len(state.data))
    kit.run("retry", queue="b")  # its backoff ends now
    moved = v2_worker_of(kit.queue, queues=("b",), name="b")
    (again,) = tasks(moved)
    assert (again.task_id, again.attempt, again.checkpoint) == (task_id, 2, state)


def test_aging_promotes_a_low_task_to_a_routed_worker_past_a_stream_of_top_ones() -> None:
    aging = 5.0
    clock, queue, producer = started(defaults=QueuePolicy(aging=aging))
    worker = typed_worker(queue, (b"t",))
    first = submit(queue, producer, priority=9)
    (running,) = tasks(worker)
    assert running.task_id == first
    low = submit(queue, producer, priority=0)
    submit_to(queue, producer.session, b"other", b"x", priority=9)  # nobody runs it: set aside
    started_at = None
    for _ in range(20):
        submit(queue, producer, priority=9)  # the top stays saturated
        clock.advance(1.0)
        queue.ack(worker.session, running.task_id, running.token, None)
        (running,) = tasks(worker)
        if running.task_id == low:
            started_at = clock.seconds()
            break
    assert started_at is not None and started_at - START <= aging + 1.0
    assert queue.queues["default"].aging is not None
    assert queue.queues["default"].aging.promoted == 1
    assert queue.queues["default"].parked == 1  # the type nobody runs, still set aside
