"""
Issue 33's parts against each other (an adversarial review): what one
part's state does to another's promise.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest
from twisted.internet.task import Clock

from quicx.clients.address import CLIENT_MAX_LENGTH
from quicx.daemon.journal.interface import ParentEntry, SavedState
from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.queue import pmad
from quicx.daemon.queue.checkpoints import CheckpointSettings
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import DependencyLimits, QueueLimits
from quicx.daemon.queue.workers import workers_of
from quicx.protocol import link, taskflow, wire, workers
from quicx.protocol.bulk import request as bulk_request
from quicx.protocol.checkpoints import MAX_CHECKPOINT, context_size
from quicx.protocol.codec import ErrorCode
from quicx.protocol.frames import Frame, FrameParser
from quicx.protocol.outcomes import Outcome, OutcomeState
from quicx.protocol.parents import MAX_CONTEXT, MAX_PARENTS, ParentPolicy
from quicx.protocol.session import Role
from quicx.protocol.start_options import Debounce, DebounceMode, Expires
from quicx.protocol.taskflow import MAX_TASK_CONTEXT, Backoff, BackoffKind, Result
from tests.daemon.queue.test_bulk import Kit as BulkKit
from tests.fakes import FakeJournal, FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of

NO_WAIT = Backoff(BackoffKind.FIXED, 0, 0, 0)


def test_a_child_with_the_most_results_keeps_a_checkpoint_only_that_fits_its_context() -> None:
    """
    Both limits at their highest: a child handed [dependencies] max_results
    of its parents' results may save a checkpoint only as large as its
    TASK's context (u16 long) still holds; a larger one is refused (it made
    every later delivery of the task raise struct.error); the largest that
    fits is delivered again with its parents' outcomes.
    """
    clock = Clock()
    queue = make_queue(
        clock,
        pool=pmad.Pmad(64 << 20, pmad.default_classes()),
        limits=QueueLimits(
            dependencies=DependencyLimits(max_parents=MAX_PARENTS, max_results=MAX_CONTEXT)
        ),
    )
    queue.checkpoints.settings = CheckpointSettings(MAX_CHECKPOINT, 1 << 20)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    parents = []
    for _ in range(MAX_PARENTS):
        submit_to(queue, producer.session, b"t", b"x", "work")
        parents.append(producer.take()[-1].task_id)
    key = b"k" * 255
    submit_to(
        queue, producer.session, b"t", b"x", "work",
        key=key, after=tuple(parents), retries=1, backoff=NO_WAIT,
    )  # fmt: skip
    child_id = producer.take()[-1].task_id
    for _ in parents:
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        queue.ack(worker.session, task.task_id, task.token, Result.of(b"r" * 1000))
        queue.ready(worker.session)
    (child,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert child.task_id == child_id and child.parents is not None
    room = MAX_TASK_CONTEXT - len(
        taskflow.task_context(key, None, 1, 0, 0, 1, None, None, queue.task(child_id).parents)
    )
    largest = max(n for n in range(MAX_CHECKPOINT + 1) if context_size(n) <= room)
    with pytest.raises(Refused) as refused:
        queue.checkpoints.save(
            worker.session, child.task_id, child.token, Result.of(b"c" * (largest + 1))
        )
    assert refused.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    state = Result(taskflow.ResultKind.BYTES, b"c" * largest)
    queue.checkpoints.save(worker.session, child.task_id, child.token, state)
    queue.nack(worker.session, child.task_id, child.token, "boom", False)
    clock.advance(0)
    queue.ready(worker.session)
    (again,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert again.task_id == child_id and again.key == key
    assert again.parents == child.parents and again.checkpoint == state


def steps(work: Callable[[], object]) -> int:
    """The Python lines C{work} runs (a count of its work that no machine's speed changes)."""
    count = 0

    def tracer(frame: FrameType, event: str, arg: object) -> Any:
        nonlocal count
        count += 1
        return tracer

    sys.settrace(tracer)
    try:
        work()
    finally:
        sys.settrace(None)
    return count


def cancel_the_newest_of(parked: int) -> int:
    """The steps of cancelling the newest of C{parked} tasks set aside by type."""
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = FakePeer(queue, "mail", version=2)
    workers_of(queue).announce(worker.session, workers.Announce(frozenset({b"mail"}), "mail"), 64)
    queue.claim_role(worker.session, Role.WORKER)
    queue.ready(worker.session, 1)
    for _ in range(parked):
        submit_to(queue, producer.session, b"pdf", b"x")
    home = queue.queues["default"]
    assert home.parked == parked
    newest = max(queue._live)
    used = steps(lambda: queue.cancel(producer.session, newest))
    assert home.parked == parked - 1
    return used


def test_cancelling_a_task_set_aside_costs_the_same_however_many_are() -> None:
    """
    A task set aside by type (no idle worker runs it) is found and taken out
    in O(1): cancelling (or expiring, purging, moving) one of 3,000 set aside
    scanned all of them twice (an identity search, then deque.remove), so
    expiring a batch of 1,000 of 100,000 held the reactor for seconds.
    """
    few, many = cancel_the_newest_of(100), cancel_the_newest_of(3000)
    assert many < few * 1.5, (few, many)


@pytest.mark.parametrize("journal_waits", [False, True])
def test_a_waiting_child_expires_at_its_deadline_as_its_parent_runs_late(
    journal_waits: bool,
) -> None:
    """
    A child that waits for its parent, with a deadline to start: the timer
    expires it at its deadline while it still waits, its producer told,
    whether its record was durable at once or later (it was held to its
    deadline only in the second case: with the first, it waited on, then
    ran late, and the deadlines' count went below zero).
    """
    clock = Clock()
    clock.advance(1_800_000_000.0)
    journal = FakeJournal(waits=journal_waits)
    queue = make_queue(clock, journal)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"parent", "work")
    if journal_waits:
        journal.sync()
    submit_to(queue, producer.session, b"t", b"child", "work", after=(1,), expires=Expires(1000))
    if journal_waits:
        journal.sync()
    assert [m.task_id for m in producer.take() if isinstance(m, taskflow.Ok)] == [1, 2]
    assert queue.expiry.deadlines.count == 1
    clock.advance(2)
    assert [(m.task_id, m.state) for m in producer.take() if isinstance(m, Outcome)] == [
        (2, OutcomeState.EXPIRED)
    ]
    assert queue.expiry.deadlines.count == 0
    worker = v2_worker_of(queue, queues=("work",))
    (parent,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, parent.task_id, parent.token)
    queue.ready(worker.session)
    assert [m for m in worker.take() if isinstance(m, taskflow.Task)] == []
    assert queue.expiry.deadlines.count == 0


def test_a_waiting_child_failed_by_its_parent_lets_go_of_its_deadline() -> None:
    """
    A child with a distant deadline that fails as its parent fails (its
    policy) no longer counts among the deadlines, and the deadlines' heap
    lets it go: it stayed there until its deadline (a day of children held).
    """
    clock = Clock()
    clock.advance(1_800_000_000.0)
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, queues=("work",))
    for _ in range(100):
        submit_to(queue, producer.session, b"t", b"parent", "work")
        parent = producer.take()[-1].task_id
        submit_to(
            queue, producer.session, b"t", b"child", "work",
            after=(parent,), expires=Expires(86_400_000),
        )  # fmt: skip
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        queue.nack(worker.session, task.task_id, task.token, "boom", True)
        queue.ready(worker.session)
    assert queue.expiry.deadlines.count == 0
    assert len(queue.expiry.deadlines._heap) < 100


@pytest.mark.parametrize("mode", [DebounceMode.REPLACE, DebounceMode.EXTEND])
def test_a_debounced_submit_folds_into_its_keys_child_that_waits_for_its_parent(
    mode: DebounceMode,
) -> None:
    """
    A child waiting for its parent has not started: a SUBMIT of its key
    with a replace (or extend) debounce folds into it (its payload replaced,
    its parents kept) instead of making a second task of the key, which ran
    beside it, the older payload too.
    """
    clock = Clock()
    clock.advance(1_800_000_000.0)
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"parent", "work")
    debounce = Debounce(mode, 1000)
    for payload in (b"old", b"new"):
        submit_to(
            queue, producer.session, b"t", payload, "work",
            key=b"k", after=(1,), debounce=debounce,
        )  # fmt: skip
    oks = [m for m in producer.take() if isinstance(m, taskflow.Ok)]
    assert [(ok.task_id, ok.duplicate) for ok in oks] == [(1, False), (2, False), (2, True)]
    worker = v2_worker_of(queue, queues=("work",), credits=2)
    (parent,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, parent.task_id, parent.token)
    clock.advance(2)
    queue.ready(worker.session, 2)
    children = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert [(t.task_id, t.payload) for t in children] == [(2, b"new")]
    assert children[0].parents is not None


def test_the_workers_answer_fits_a_clients_frame_whatever_workers_announce() -> None:
    """
    Twenty connections that announce [protocol] max_worker_types (256) types
    of 255 bytes each would make one answer 1.3 MB, past every client's frame
    limit: WORKERS answers a page within its byte budget, and the pages after
    it list every worker once.
    """
    queue = make_queue()
    steering = workers_of(queue)
    for n in range(20):
        peer = FakePeer(queue, f"w{n}", version=2)
        types = frozenset(b"%03d" % i + b"t" * 252 for i in range(256))
        steering.announce(peer.session, workers.Announce(types, f"w{n}"), 256)
        queue.claim_role(peer.session, Role.WORKER)
    parser = FrameParser(CLIENT_MAX_LENGTH, check_types=False, v2_max_length=CLIENT_MAX_LENGTH)
    seen: list[int] = []
    after: int | None = 0
    while after is not None:
        found, after = steering.page(after, workers.WORKERS_PAGE_BYTES)
        (frame,) = parser.feed(link.encode_info({"workers": found, "next": after}))
        assert isinstance(frame, Frame)
        assert 0 < len(frame.payload) <= workers.WORKERS_PAGE_BYTES + 64
        seen += [record["id"] for record in found]
    assert seen == [record["id"] for record in steering.records()] and len(seen) == 20


def test_a_terminated_workers_tasks_are_queued_again_even_where_lost_ones_count() -> None:
    """
    `quicx terminate` queues a worker's held tasks again: with
    [retries] count_lost (a task taken back from a lost worker counts as a
    failed attempt), a task with no retries left failed for good instead,
    its producer told FAILED, because the operator stopped its worker.
    """
    clock = Clock()
    queue = make_queue(clock, limits=QueueLimits(count_lost=True))
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, name="leaving")
    submit_to(queue, producer.session, b"t", b"x")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    producer.take()
    assert workers_of(queue).terminate(worker.session.session_id, 5.0) == [
        worker.session.session_id
    ]
    assert [m for m in producer.take() if not isinstance(m, taskflow.Ok)] == []
    other = v2_worker_of(queue, name="other")
    (again,) = [m for m in other.take() if isinstance(m, taskflow.Task)]
    assert (again.task_id, again.attempt) == (task.task_id, 2)


def test_a_child_that_continues_past_an_expired_parent_gets_a_task_its_worker_reads() -> None:
    """
    A parent that expires (never started before its deadline) resolves its
    child like a failure; a child that continues gets it listed in its
    TASK: as a state its worker decodes (EXPIRED, 7, made the context
    malformed to every client, which dropped the connection on each delivery).
    """
    clock = Clock()
    clock.advance(1_800_000_000.0)
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"parent", "work", expires=Expires(1000))
    submit_to(
        queue, producer.session, b"t", b"child", "work",
        after=(1,), on_parent_failure=ParentPolicy.CONTINUE,
    )  # fmt: skip
    clock.advance(2)
    worker = v2_worker_of(queue, queues=("work",))
    (child,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert child.task_id == 2 and child.parents is not None
    (outcome,) = child.parents.outcomes
    assert (outcome.task_id, outcome.state) == (1, OutcomeState.EXPIRED)


@pytest.mark.parametrize("policy", [ParentPolicy.CONTINUE, ParentPolicy.IGNORE])
def test_a_child_released_after_its_queue_was_forgotten_runs(policy: ParentPolicy) -> None:
    """
    A queue that holds only a waiting child (and a parent no worker takes)
    is forgotten once its parent is cancelled; the child, released then,
    joins the queue of that name (made again) that workers subscribe to: it
    was pushed into the forgotten queue object, live but dealt to no one.
    """
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"parent", "work")
    submit_to(queue, producer.session, b"t", b"child", "work", after=(1,), on_parent_failure=policy)
    queue.cancel(producer.session, 1)
    worker = v2_worker_of(queue, queues=("work",))
    assert [t.task_id for t in worker.take() if isinstance(t, taskflow.Task)] == [2]


def test_a_move_goes_on_into_its_target_queue_made_again_between_turns() -> None:
    """
    A move spans turns; its target queue, emptied and left by its worker
    between two of them, is forgotten: the next turn's tasks join the queue
    of that name (made again), which a worker then subscribes to, not the
    forgotten object (they were live and dealt to no one).
    """
    kit = BulkKit(batch=1)
    first, second = kit.submit(queue="a"), kit.submit(queue="a")
    answers: list[dict[str, Any]] = []
    kit.bulk.run(bulk_request("move", queue="a", to="b")).addCallback(answers.append)
    kit.turns.step()  # the first task moves
    worker = v2_worker_of(kit.queue, queues=("b",), name="one")
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert task.task_id == first
    kit.queue.ack(worker.session, task.task_id, task.token)
    worker.disconnect()  # "b" is empty and has no worker: forgotten
    while not answers:
        kit.turns.step()
    assert answers[0]["acted"] == 2
    other = v2_worker_of(kit.queue, queues=("b",), name="two")
    assert [m.task_id for m in other.take() if isinstance(m, taskflow.Task)] == [second]


def test_a_checkpoint_that_no_longer_fits_beside_its_parents_after_a_restart_is_let_go() -> None:
    """
    A child's checkpoint was kept when it fit beside its parents' outcomes;
    a restart with a larger [dependencies] max_results hands it more of
    them: its checkpoint is let go (the task restarts from its beginning)
    rather than make its TASK's u16 context overflow (struct.error on every
    delivery, the task never delivered again).
    """
    queue = make_queue(
        pool=pmad.Pmad(64 << 20, pmad.default_classes()),
        limits=QueueLimits(
            dependencies=DependencyLimits(max_parents=MAX_PARENTS, max_results=MAX_CONTEXT)
        ),
    )
    queue.checkpoints.settings = CheckpointSettings(MAX_CHECKPOINT, 1 << 20)
    parents = tuple(range(1, MAX_PARENTS + 1))
    saved = SavedState(Result.of(b"c" * MAX_CHECKPOINT), 1.0)
    child = RecoveredTask(
        100, b"t", b"x", queue="work", checkpoint=saved, after=(0, 0, parents), attempts=1
    )
    entries = tuple(ParentEntry(i, 0, 1, 1, b"r" * 950) for i in parents)
    queue.restore(Recovery((child,), 100, 0, 0, 1, parents=entries))
    worker = v2_worker_of(queue, queues=("work",))
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert task.task_id == 100 and task.parents is not None
    assert task.checkpoint is None
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (0, 0)


def test_a_queue_with_only_waiting_tasks_is_kept_and_counts_toward_max_queues() -> None:
    """
    A waiting child's queue is not forgotten while it waits (when the last
    other task there finishes): otherwise another queue could take its place
    under max_queues, and its release would make one queue more than allowed.
    """
    queue = make_queue(Clock(), limits=QueueLimits(max_queues=3))
    producer = v2_producer_of(queue)

    def submitted(name: str, **options: Any) -> Any:
        submit_to(queue, producer.session, b"t", b"", queue=name, **options)
        return producer.take()[-1]

    parent = submitted("parents").task_id
    child = submitted("children", after=(parent,)).task_id
    other = submitted("children").task_id
    worker = v2_worker_of(queue, queues=("children",))
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, other, task.token)
    worker.disconnect()
    assert "children" in queue.queues  # its waiting child keeps it
    refused = submitted("another")
    assert isinstance(refused, wire.Error) and refused.code == ErrorCode.QUEUE_FULL
    worker = v2_worker_of(queue, queues=("parents",))
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, parent, task.token)
    assert queue.task(child).state.name == "QUEUED" and len(queue.queues) == 3
