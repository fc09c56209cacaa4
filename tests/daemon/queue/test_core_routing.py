"""
Routing by task type in the queue core (L{quicx.daemon.queue.routing}): a
worker that announced its types is dealt only those; a task no idle worker
runs is set aside, so it blocks nothing behind it; INSPECT and the status
say which tasks no connected worker runs.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from quicx.daemon.queue import introspect, routing
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.workers import workers_of
from quicx.protocol import wire, workers
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation, Role
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of


def typed_worker(
    queue: QueueService, types: tuple[bytes, ...] | None, credits: int = 1, name: str = "worker"
) -> FakePeer:
    """A version-2 worker that announced C{types} (C{None}: every type), then sent READY."""
    peer = FakePeer(queue, name, version=2)
    message = workers.Announce(None if types is None else frozenset(types), name)
    workers_of(queue).announce(peer.session, message, 1024)
    queue.claim_role(peer.session, Role.WORKER)
    queue.ready(peer.session, credits)
    return peer


def submit(queue: QueueService, producer: FakePeer, *types: bytes) -> None:
    for task_type in types:
        submit_to(queue, producer.session, task_type, b"payload")


def types_received(peer: FakePeer) -> list[bytes]:
    return [m.task_type for m in peer.take() if hasattr(m, "task_type")]


def test_each_worker_is_dealt_only_the_types_it_runs() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    mail = typed_worker(queue, (b"mail",), credits=10, name="mail")
    pictures = typed_worker(queue, (b"resize", b"crop"), credits=10, name="pictures")
    submit(queue, producer, b"mail", b"resize", b"mail", b"crop", b"resize")
    assert types_received(mail) == [b"mail", b"mail"]
    assert types_received(pictures) == [b"resize", b"crop", b"resize"]


def test_a_task_nobody_runs_does_not_block_the_tasks_behind_it() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    submit(queue, producer, b"pdf", b"pdf", b"mail")  # queued before any worker
    mail = typed_worker(queue, (b"mail",), credits=2, name="mail")
    assert types_received(mail) == [b"mail"]
    default = queue.queues["default"]
    assert default.depth == 0 and default.parked == 2
    assert queue.queued == 2
    assert routing.unroutable(queue.sessions.values(), queue.queues.values()) == {
        "default": {"pdf": 2}
    }
    # QUEUES counts them as queued.
    assert introspect.queues(queue)[0]["depth"] == 2
    # Tasks submitted later are not held up either.
    submit(queue, producer, b"pdf", b"mail")
    assert types_received(mail) == [b"mail"]
    # INSPECT says why the pdf tasks wait.
    answer = introspect.inspect(queue, 1)
    assert "no connected worker handles type pdf" in [why["text"] for why in answer["why"]]
    assert answer["ahead"] == 0
    # PEEK still lists them, in the order they were set aside.
    assert [t["id"] for t in introspect.peek(queue, "default", 10)] == [1, 2, 4]


def test_a_worker_of_the_type_takes_the_tasks_set_aside_oldest_first() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    mail = typed_worker(queue, (b"mail",), credits=5, name="mail")
    submit(queue, producer, b"pdf", b"mail", b"pdf", b"pdf")
    assert types_received(mail) == [b"mail"]
    pdf = typed_worker(queue, (b"pdf",), credits=2, name="pdf")
    assert pdf.task_ids() == [1, 3]
    assert queue.queues["default"].parked == 1
    # Its outcome frees a credit: the last one set aside comes next.
    queue.done(pdf.session, 1)
    assert pdf.task_ids() == [4]
    assert queue.queued == 0
    assert routing.unroutable(queue.sessions.values(), queue.queues.values()) == {}


def test_a_worker_that_announces_nothing_runs_what_others_set_aside() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    mail = typed_worker(queue, (b"mail",), credits=5, name="mail")
    submit(queue, producer, b"pdf", b"pdf")
    assert types_received(mail) == []
    every = v2_worker_of(queue, credits=5, name="every")
    assert every.task_ids() == [1, 2]


def test_busy_workers_of_a_type_get_its_tasks_in_order_when_they_free_up() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    pdf = typed_worker(queue, (b"pdf",), credits=1, name="pdf")
    mail = typed_worker(queue, (b"mail",), credits=5, name="mail")
    submit(queue, producer, b"pdf", b"pdf", b"mail", b"pdf", b"mail")
    assert pdf.task_ids() == [1]
    assert mail.task_ids() == [3, 5]
    answer = introspect.inspect(queue, 2)
    assert "the workers that handle type pdf are busy" in [w["text"] for w in answer["why"]]
    for held, following in ((1, [2]), (2, [4])):
        queue.done(pdf.session, held)
        assert pdf.task_ids() == following
    assert queue.queued == 0


def test_a_task_set_aside_can_be_cancelled_and_purged() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    typed_worker(queue, (b"mail",), name="mail")
    submit(queue, producer, b"pdf", b"pdf", b"pdf")
    assert queue.queues["default"].parked == 3
    queue.cancel(producer.session, 2)
    assert queue.queues["default"].parked == 2
    queue.purge("default")
    assert queue.queued == 0 and queue.queues["default"].parked == 0


def test_fairness_keys_under_limits_survive_being_set_aside() -> None:
    limits = QueueLimits(defaults=QueuePolicy(key_concurrency=1))
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    mail = typed_worker(queue, (b"mail",), credits=5, name="mail")
    for task_type in (b"pdf", b"mail", b"pdf"):
        submit_to(queue, producer.session, task_type, b"x", fairness=b"tenant")
    assert mail.task_ids() == [2]
    queue.done(mail.session, 2)
    queue._forget_if_idle(queue.queues["default"])  # prunes idle keys: not these
    assert queue.queues["default"].keys[b"tenant"].queued == 2
    pdf = typed_worker(queue, (b"pdf",), credits=5, name="pdf")
    # One at a time: the key's concurrency holds across the types.
    assert pdf.task_ids() == [1]
    queue.done(pdf.session, 1)
    assert pdf.task_ids() == [3]
    queue.done(pdf.session, 3)
    assert queue.queued == 0 and b"tenant" not in queue.queues["default"].keys


def test_announce_comes_once_before_ready_within_its_limit() -> None:
    queue = make_queue()
    steering = workers_of(queue)
    ready = v2_worker_of(queue)
    with pytest.raises(ProtocolViolation, match="before the connection's first READY"):
        steering.announce(ready.session, workers.Announce(frozenset({b"a"})), 10)
    fresh = FakePeer(queue, "fresh", version=2)
    steering.announce(fresh.session, workers.Announce(None, "w"), 10)
    with pytest.raises(ProtocolViolation, match="once"):
        steering.announce(fresh.session, workers.Announce(None, "w"), 10)
    many = FakePeer(queue, "many", version=2)
    with pytest.raises(ProtocolViolation, match=r"3 task types, more than max_worker_types \(2\)"):
        steering.announce(many.session, workers.Announce(frozenset({b"a", b"b", b"c"})), 2)
    assert many.session.handles is None and many.session.card is None


def test_a_worker_that_leaves_makes_its_types_unroutable() -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    pdf = typed_worker(queue, (b"pdf",), credits=1, name="pdf")
    mail = typed_worker(queue, (b"mail",), credits=1, name="mail")
    submit(queue, producer, b"pdf", b"pdf", b"mail")
    assert pdf.task_ids() == [1] and mail.task_ids() == [3]
    assert routing.unroutable(queue.sessions.values(), queue.queues.values()) == {}
    pdf.disconnect()  # task 1 is queued again; task 2 was set aside
    # INSPECT sees at once that no worker runs it; the status's count, once
    # the dispatcher meets it (here, as the mail worker frees its credit).
    answer = introspect.inspect(queue, 1)
    assert "no connected worker handles type pdf" in [why["text"] for why in answer["why"]]
    assert routing.unroutable(queue.sessions.values(), queue.queues.values()) == {
        "default": {"pdf": 1}
    }
    queue.done(mail.session, 3)
    assert routing.unroutable(queue.sessions.values(), queue.queues.values()) == {
        "default": {"pdf": 2}
    }
    with pytest.raises(Refused) as refused:
        workers_of(queue).quiet(pdf.session.session_id)
    assert refused.value.code is ErrorCode.NOT_FOUND


@settings(max_examples=60, deadline=None)
@given(
    tasks=st.lists(st.sampled_from([b"a", b"b", b"c"]), max_size=30),
    kinds=st.lists(
        st.tuples(
            st.none() | st.frozensets(st.sampled_from([b"a", b"b", b"c"]), min_size=1),
            st.integers(1, 3),
        ),
        min_size=1,
        max_size=4,
    ),
    order=st.randoms(use_true_random=False),
)
def test_every_task_runs_once_on_a_worker_of_its_type(
    tasks: list[bytes], kinds: list[tuple[frozenset[bytes] | None, int]], order: object
) -> None:
    queue = make_queue()
    producer = v2_producer_of(queue)
    peers = [
        typed_worker(queue, None if t is None else tuple(sorted(t)), c, f"w{n}")
        for n, (t, c) in enumerate(kinds)
    ]
    submit(queue, producer, *tasks)
    ran: dict[int, bytes] = {}
    served = set().union(*(t or {b"a", b"b", b"c"} for t, _ in kinds))
    for _ in range(len(tasks) + 1):
        for peer in peers:
            for message in peer.take():
                if hasattr(message, "task_type"):
                    assert peer.session.handles is None or message.task_type in peer.session.handles
                    assert message.task_id not in ran
                    ran[message.task_id] = message.task_type
        for peer in order.sample(peers, len(peers)):  # type: ignore[attr-defined]
            for task_id in list(peer.session.tasks):
                queue.done(peer.session, task_id)
    expected = {n + 1 for n, t in enumerate(tasks) if t in served}
    assert set(ran) == expected
    assert queue.queued == len(tasks) - len(expected)


def test_tasks_set_aside_count_against_max_depth() -> None:
    limits = QueueLimits(defaults=QueuePolicy(max_depth=2))
    queue = make_queue(limits=limits)
    producer = v2_producer_of(queue)
    typed_worker(queue, (b"mail",), name="mail")
    submit(queue, producer, b"pdf", b"pdf", b"pdf")
    assert queue.queues["default"].parked == 2
    errors = [m.code for m in producer.take() if isinstance(m, wire.Error)]
    assert errors == [ErrorCode.QUEUE_FULL]
