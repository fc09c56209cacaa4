"""
Named queues in the queue core, in-process on a task.Clock: priorities,
subscriptions, limits on queues, fairness keys and their limits, and how
version-1 clients share the default queue.
"""

from __future__ import annotations

import pytest
from attrs import define
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.protocol import taskflow, wire
from tests.fakes import (
    fire_to,
    make_queue,
    producer_of,
    submit_to,
    v2_producer_of,
    v2_worker_of,
    worker_of,
)


def submitted(peer: object) -> list[int]:
    return [m.task_id for m in peer.take() if isinstance(m, taskflow.Ok)]  # type: ignore[attr-defined]


def tasks_of(peer: object) -> list[taskflow.Task]:
    return [m for m in peer.take() if isinstance(m, taskflow.Task)]  # type: ignore[attr-defined]


def test_higher_priority_runs_first_and_fifo_within_one() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    for payload, priority in [(b"a", 1), (b"b", 5), (b"c", 1), (b"d", 9), (b"e", 5)]:
        submit_to(queue, producer.session, b"t", payload, priority=priority)
    worker = v2_worker_of(queue)
    order = []
    for _ in range(5):
        (task,) = tasks_of(worker)
        order.append(task.payload)
        queue.done(worker.session, task.task_id)
    assert order == [b"d", b"b", b"e", b"a", b"c"]


def test_a_task_carries_its_context_to_a_v2_worker() -> None:
    clock = Clock()
    clock.advance(1_800_000_000.25)
    queue = make_queue(clock)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "mail", 7, b"k1", b"tenant")
    worker = v2_worker_of(queue, queues=("mail",))
    (task,) = tasks_of(worker)
    # The token: the dispatch time in milliseconds, shifted past a counter.
    assert task == taskflow.Task(
        task.task_id,
        b"t",
        b"x",
        "mail",
        7,
        1,
        1_800_000_000_250,
        b"k1",
        b"tenant",
        token=1_800_000_000_250 << 20,
    )


def test_a_worker_serves_its_queues_in_strict_order() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"low", "b", 9)
    submit_to(queue, producer.session, b"t", b"high", "a", 0)
    worker = v2_worker_of(queue, queues=("a", "b"))
    (first,) = tasks_of(worker)
    assert first.queue == "a"  # queue order beats priority across queues
    queue.done(worker.session, first.task_id)
    (second,) = tasks_of(worker)
    assert second.queue == "b"


def test_an_idle_worker_takes_from_a_later_queue_when_the_first_is_empty() -> None:
    queue = make_queue()
    worker = v2_worker_of(queue, queues=("a", "b"))
    assert worker.take() == [wire.Wait()]
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "b")
    assert [t.queue for t in tasks_of(worker)] == ["b"]


def test_queues_are_isolated() -> None:
    queue = make_queue()
    mail = v2_worker_of(queue, queues=("mail",), name="mail")
    mail.take()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "video")
    assert mail.take() == []
    video = v2_worker_of(queue, queues=("video",), name="video")
    assert [t.queue for t in tasks_of(video)] == ["video"]


def test_v1_clients_share_the_default_queue_with_v2_clients() -> None:
    queue = make_queue()
    old_producer = producer_of(queue, "v1")
    submit_to(queue, old_producer.session, b"t", b"from-v1")
    v2_worker = v2_worker_of(queue)
    (task,) = tasks_of(v2_worker)
    assert (task.queue, task.payload, task.priority) == ("default", b"from-v1", 0)
    new_producer = v2_producer_of(queue)
    submit_to(queue, new_producer.session, b"t", b"from-v2")
    old_worker = worker_of(queue, name="v1-worker")
    assert [m for m in old_worker.take() if isinstance(m, wire.Task)] == [
        wire.Task(2, b"t", b"from-v2")
    ]


def test_the_default_queue_is_configurable() -> None:
    queue = make_queue(limits=QueueLimits(default_queue="legacy"))
    producer = producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x")
    worker = v2_worker_of(queue, queues=("legacy",))
    assert [t.queue for t in tasks_of(worker)] == ["legacy"]


def test_a_task_given_back_goes_to_the_head_of_its_priority() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"first", priority=5)
    lost = v2_worker_of(queue, name="lost")
    (held,) = tasks_of(lost)
    submit_to(queue, producer.session, b"t", b"second", priority=5)
    submit_to(queue, producer.session, b"t", b"urgent", priority=9)
    lost.disconnect()
    worker = v2_worker_of(queue, credits=3)
    assert [t.payload for t in tasks_of(worker)] == [b"urgent", b"first", b"second"]
    assert held.payload == b"first"


def test_a_queue_default_priority_applies_when_a_task_names_none() -> None:
    limits = QueueLimits(declared={"mail": QueuePolicy(priority=4)})
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "mail")
    worker = v2_worker_of(queue, queues=("mail",))
    assert [t.priority for t in tasks_of(worker)] == [4]


def test_max_depth_refuses_with_queue_full_and_loses_nothing() -> None:
    limits = QueueLimits(declared={"mail": QueuePolicy(max_depth=2)})
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", "mail")
    answers = producer.take()
    assert answers[:2] == [taskflow.Ok(1), taskflow.Ok(2)]
    assert answers[2] == wire.Error(1, "queue 'mail' is full (max_depth = 2)")
    worker = v2_worker_of(queue, credits=5, queues=("mail",))
    assert [t.task_id for t in tasks_of(worker)] == [1, 2]


def test_max_queues_refuses_a_new_queue_and_an_idle_queue_is_forgotten() -> None:
    queue = make_queue(limits=QueueLimits(max_queues=2))  # "default" is one
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "a")
    submit_to(queue, producer.session, b"t", b"x", "b")
    answers = producer.take()
    assert answers[0] == taskflow.Ok(1)
    assert answers[1].code == 1 and "max_queues = 2" in answers[1].message
    worker = v2_worker_of(queue, queues=("a",))
    (task,) = tasks_of(worker)
    queue.done(worker.session, task.task_id)
    worker.disconnect()
    assert sorted(queue.queues) == ["default"]  # "a" had nothing left: forgotten
    assert producer.take() == [taskflow.Done(1)]
    submit_to(queue, producer.session, b"t", b"x", "b")
    assert producer.take() == [taskflow.Ok(2)]


def test_a_refused_request_leaves_no_queue_behind() -> None:
    """
    Refused SUBMITs, a duplicate one, a refused READY and a refused firing
    each made their queue first, empty and never forgotten: with
    max_queues = 4, four of them and every new queue was refused for everyone.
    """
    clock = Clock()
    queue = make_queue(
        clock, limits=QueueLimits(max_queues=4, max_delay=60.0), allowed_types=frozenset({b"t"})
    )
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "kept", key=b"k")
    kept = v2_worker_of(queue, queues=("kept",))
    (task,) = tasks_of(kept)
    queue.ack(kept.session, task.task_id, task.token)
    kept.disconnect()
    assert sorted(queue.queues) == ["default"]  # "kept" had nothing left: forgotten
    producer.take()
    submit_to(queue, producer.session, b"t", b"x" * (queue.pool.max_size + 1), "new0")  # too large
    submit_to(queue, producer.session, b"t", b"x", "new1", group=99)  # no such group
    submit_to(queue, producer.session, b"nope", b"x", "new2")  # unknown type
    submit_to(queue, producer.session, b"t", b"x", "new3", delay_ms=3_600_000)  # past max_delay
    answers = producer.take()
    assert [a.code for a in answers if isinstance(a, wire.Error)] == [3, 5, 4, 2]
    # A duplicate of a task whose queue has been forgotten since: no task, no queue.
    submit_to(queue, producer.session, b"t", b"x", "kept", key=b"k")
    assert producer.take()[0] == taskflow.Ok(task.task_id, True)
    with pytest.raises(Refused, match="max_queues = 4"):
        queue.subscribe(worker.session, ("a", "b", "c", "d"))
    fire_to(
        queue,
        "tick",
        clock.seconds(),
        ScheduleSpec(name="tick", cron="* * * * *", task_type=b"nope", queue="cron"),
    )
    assert sorted(queue.queues) == ["default"]
    # Nothing was taken from the limit: three new queues still fit.
    for name in ("a", "b", "c"):
        submit_to(queue, producer.session, b"t", b"x", name)
    assert [type(a) for a in producer.take()] == [taskflow.Ok] * 3


def test_fairness_keys_take_turns_within_a_priority() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    for _ in range(4):
        submit_to(queue, producer.session, b"t", b"busy", fairness=b"big")
    submit_to(queue, producer.session, b"t", b"small1", fairness=b"small")
    submit_to(queue, producer.session, b"t", b"small2", fairness=b"small")
    submit_to(queue, producer.session, b"t", b"none")
    worker = v2_worker_of(queue, credits=7)
    assert [t.payload for t in tasks_of(worker)] == [
        b"busy",
        b"small1",
        b"none",
        b"busy",
        b"small2",
        b"busy",
        b"busy",
    ]


def test_key_concurrency_holds_across_every_worker() -> None:
    limits = QueueLimits(declared={"q": QueuePolicy(key_concurrency=2)})
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    for i in range(4):
        submit_to(queue, producer.session, b"t", b"a%d" % i, "q", fairness=b"A")
    submit_to(queue, producer.session, b"t", b"b0", "q", fairness=b"B")
    workers = [v2_worker_of(queue, credits=2, queues=("q",), name=f"w{i}") for i in range(3)]
    running = [t for w in workers for t in tasks_of(w)]
    assert sorted(t.payload for t in running) == [b"a0", b"a1", b"b0"]
    holder = next(w for w in workers if w.session.tasks.keys() & {running[0].task_id})
    queue.done(holder.session, running[0].task_id)
    started = [t for w in workers for t in tasks_of(w)]
    assert [t.payload for t in started] == [b"a2"]


def test_a_rate_limit_spaces_starts_and_resumes_on_the_clock() -> None:
    clock = Clock()
    clock.advance(1000)
    limits = QueueLimits(declared={"slow": QueuePolicy(rate=2.0, burst=1)})
    queue = make_queue(clock, limits=limits)
    producer = v2_producer_of(queue)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x", "slow")
    worker = v2_worker_of(queue, credits=10, queues=("slow",))
    assert len(tasks_of(worker)) == 1
    clock.advance(0.4)
    assert tasks_of(worker) == []
    clock.advance(0.1)  # the timer the queue set fires: a token is due
    assert len(tasks_of(worker)) == 1
    clock.advance(0.5)
    assert len(tasks_of(worker)) == 1


def test_a_per_key_rate_limit_lets_other_keys_through() -> None:
    clock = Clock()
    limits = QueueLimits(declared={"q": QueuePolicy(key_rate=1.0, key_burst=1)})
    queue = make_queue(clock, limits=limits)
    producer = v2_producer_of(queue)
    for key in (b"A", b"A", b"B"):
        submit_to(queue, producer.session, b"t", key, "q", fairness=key)
    worker = v2_worker_of(queue, credits=10, queues=("q",))
    assert [t.payload for t in tasks_of(worker)] == [b"A", b"B"]
    clock.advance(1.0)
    assert [t.payload for t in tasks_of(worker)] == [b"A"]


def test_too_many_fairness_keys_is_refused() -> None:
    limits = QueueLimits(max_fairness_keys=2, declared={"q": QueuePolicy(key_concurrency=1)})
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    for key in (b"a", b"b", b"a", b"c"):
        submit_to(queue, producer.session, b"t", b"x", "q", fairness=key)
    answers = producer.take()
    assert [type(a) for a in answers] == [taskflow.Ok, taskflow.Ok, taskflow.Ok, wire.Error]
    assert "max_fairness_keys = 2" in answers[3].message


def test_priority_survives_prefetch() -> None:
    """A high-priority task waits for one free credit, not behind a backlog."""
    queue = make_queue()
    producer = v2_producer_of(queue)
    for _ in range(50):
        submit_to(queue, producer.session, b"t", b"low", priority=0)
    worker = v2_worker_of(queue, credits=4)
    held = tasks_of(worker)
    assert len(held) == 4  # it holds only what it runs at once
    submit_to(queue, producer.session, b"t", b"urgent", priority=200)
    queue.done(worker.session, held[0].task_id)
    assert [t.payload for t in tasks_of(worker)] == [b"urgent"]


@pytest.mark.parametrize("credits", [1, 3])
def test_subscribing_again_replaces_the_queues(credits: int) -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=credits, queues=("a",))
    worker.take()
    queue.subscribe(worker.session, ("b",))
    queue.ready(worker.session, credits)
    worker.take()
    submit_to(queue, producer.session, b"t", b"x", "a")
    assert tasks_of(worker) == []
    submit_to(queue, producer.session, b"t", b"y", "b")
    assert [t.payload for t in tasks_of(worker)] == [b"y"]
    assert queue.queues["a"].subscribers == 0 and queue.queues["b"].subscribers == 1


# -- a task's place in its queue (INSPECT's "ahead") ----------------------------------------


@define(eq=False)
class Item:
    """A queued thing, as L{NamedQueue} reads it."""

    priority: int
    fairness: bytes | None
    enqueued_at: float = 0.0
    ready_at: float = 0.0
    ticket: int = 0
    task_type: bytes = b"t"
    task_id: int = 0
    name: int = 0

    @property
    def extras(self) -> Item:
        """(A task keeps its fairness key in its extras: an item, in itself.)"""
        return self


operations = st.lists(
    st.tuples(
        st.sampled_from(["push", "push", "push", "head", "take", "remove"]),
        st.integers(0, 2),  # the priority
        st.sampled_from([None, None, b"a", b"b", b"c"]),  # the fairness key
        st.integers(0, 1000),  # which task, for a removal
    ),
    max_size=120,
)


@given(operations)
def test_a_tasks_place_is_counted_without_walking_the_queue(steps) -> None:
    """
    NamedQueue.ahead agrees with a walk of the queue in dispatch order, after
    any pushes at the tail and the head, takes and removals from the middle,
    with priorities and fairness keys.
    """
    queue: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(), False)
    queued: list[Item] = []
    for op, priority, key, which in steps:
        if op in ("push", "head"):
            item = Item(priority, key)
            queue.push(item, at_head=op == "head")
            queued.append(item)
        elif op == "take" and queue.depth:
            taken = queue.take(0.0)
            assert taken is not None
            queued.remove(taken)
        elif op == "remove" and queued:
            item = queued.pop(which % len(queued))
            queue.remove(item)
        order = list(queue.tasks())
        for position, item in enumerate(order):
            higher = sum(other.priority > item.priority for other in order[:position])
            assert queue.ahead(item) == (position, higher)


# -- tickets: a fresh task's id is its ticket ----------------------------------------------


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["new", "new", "new", "again", "head", "take", "remove"]),
            st.integers(0, 2),  # the priority
            st.sampled_from([None, None, None, b"a", b"b"]),  # the fairness key
            st.integers(0, 1000),  # which task, for a removal or a task queued again
            st.integers(1, 40),  # how far the ids jump (other queues' tasks between)
        ),
        max_size=150,
    ),
    st.sampled_from([0.0, 5.0]),  # aging off, on
)
def test_tickets_taken_from_ids_keep_the_order_of_counted_ones(steps, aging: float) -> None:
    """
    A task queued at a level's tail takes its id as its ticket when the id
    is past the level's last (no int of its own), else the last plus one:
    every FIFO stays sorted by ticket, and the queue deals, counts places
    (C{ahead}), removes and ages exactly as with tickets counted from 0 (the
    reference: the same items, all with id 0, in a twin queue).  Fresh ids
    count up with gaps; tasks taken are queued again (older ids) at the tail
    or the head.
    """
    ours: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=aging), False)
    reference: NamedQueue[Item, object] = NamedQueue("q", QueuePolicy(aging=aging), False)
    twins: dict[int, tuple[Item, Item]] = {}
    queued: list[int] = []
    out: list[int] = []
    last_id = 10**6  # (ids past the small ints CPython shares)
    for now, (op, priority, key, which, jump) in enumerate(steps, 1):
        if op == "new":
            last_id += jump
            pair = (
                Item(priority, key, ready_at=now, task_id=last_id, name=last_id),
                Item(priority, key, ready_at=now, name=last_id),
            )
            twins[last_id] = pair
        elif op in ("again", "head") and out:
            pair = twins[out.pop(which % len(out))]
        else:
            pair = None
        if pair is not None:
            level = ours.levels.get(priority)
            past = op == "new" and last_id > (0 if level is None else level.tail)
            for queue, item in zip((ours, reference), pair, strict=True):
                item.ready_at = now
                queue.push(item, at_head=op == "head")
            queued.append(pair[0].name)
            assert (pair[0].ticket is pair[0].task_id) == past  # no int of its own
        elif op == "take" and queued:
            taken = [queue.take(now) for queue in (ours, reference)]
            assert taken[0] is not None and taken[1] is not None
            assert taken[0].name == taken[1].name
            queued.remove(taken[0].name)
            out.append(taken[0].name)
        elif op == "remove" and queued:
            name = queued.pop(which % len(queued))
            for queue, item in zip((ours, reference), twins[name], strict=True):
                queue.remove(item)
        order = [item.name for item in ours.tasks()]
        assert order == [item.name for item in reference.tasks()]
        for name in order:
            assert ours.ahead(twins[name][0]) == reference.ahead(twins[name][1])
        for level in ours.levels.values():
            for fifo in level.fifos.values():
                tickets = [item.ticket for item in fifo]
                assert tickets == sorted(set(tickets))
