"""
Checkpoints in the queue core on a L{task.Clock}: the latest state of a
running task is kept, journaled and carried by its next delivery (a retry, a
redelivery after its worker left or its lease ran out, a replay, a restart),
fenced like an outcome, bounded in size and in memory, and freed when the
task finishes.
"""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport

from quicx.daemon.journal.interface import SavedState
from quicx.daemon.journal.records import RecoveredTask, Recovery
from quicx.daemon.queue import introspect
from quicx.daemon.queue.checkpoints import CheckpointSettings
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.server import QuicxServerFactory
from quicx.protocol import checkpoints, registry, taskflow, wire
from quicx.protocol.checkpoints import Checkpointed
from quicx.protocol.codec import ErrorCode
from quicx.protocol.frames import FrameParser
from quicx.protocol.session import ProtocolViolation
from quicx.protocol.taskflow import Backoff, BackoffKind, Result
from tests.fakes import (
    FakeJournal,
    FakePeer,
    make_queue,
    submit_to,
    v2_producer_of,
    v2_worker_of,
    worker_of,
)

START = 1_800_000_000.0
NO_WAIT = Backoff(BackoffKind.FIXED, 0, 0, 0)


def started(
    max_size: int = 64, max_memory: int = 1000, task_timeout: float = 0.0
) -> tuple[Clock, QueueService, FakeJournal]:
    clock = Clock()
    clock.advance(START)
    journal = FakeJournal(waits=False)
    queue = make_queue(clock, journal, task_timeout=task_timeout)
    queue.checkpoints.settings = CheckpointSettings(max_size, max_memory)
    return clock, queue, journal


def running(queue: QueueService, retries: int = 0) -> tuple[FakePeer, FakePeer, taskflow.Task]:
    """A producer, a worker, and the task the producer submitted, held by the worker."""
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue)
    submit_to(queue, producer.session, b"t", b"x", retries=retries or None, backoff=NO_WAIT)
    (task,) = tasks(worker)
    return producer, worker, task


def tasks(peer: FakePeer) -> list[Any]:
    """The TASKs C{peer} got since the last call."""
    return [m for m in peer.take() if isinstance(m, taskflow.Task | wire.Task)]


def save(queue: QueueService, worker: FakePeer, task: taskflow.Task, state: object) -> None:
    queue.checkpoints.save(worker.session, task.task_id, task.token, Result.of(state))


def test_a_retry_carries_the_last_checkpoint_and_only_the_last() -> None:
    clock, queue, journal = started()
    _, worker, task = running(queue, retries=2)
    assert task.checkpoint is None
    save(queue, worker, task, {"cursor": 10})
    save(queue, worker, task, {"cursor": 20})
    queue.nack(worker.session, task.task_id, task.token, "boom", False)
    clock.advance(0)
    (retried,) = tasks(worker)
    assert retried.attempt == 2
    assert retried.checkpoint == Result.of({"cursor": 20})
    assert retried.checkpoint.value() == {"cursor": 20}
    assert [(i, s.state.value()) for i, s in journal.checkpoints] == [
        (task.task_id, {"cursor": 10}),
        (task.task_id, {"cursor": 20}),
    ]
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (1, len(b'{"cursor":20}'))


def test_a_redelivery_after_the_worker_left_carries_it() -> None:
    _, queue, _ = started()
    _, worker, task = running(queue)
    save(queue, worker, task, b"\x00\x01raw")
    worker.disconnect()
    other = v2_worker_of(queue, name="other")
    (again,) = tasks(other)
    assert (again.task_id, again.checkpoint) == (task.task_id, Result.of(b"\x00\x01raw"))


def test_a_lease_run_out_redelivers_it_and_the_old_delivery_is_stale() -> None:
    clock, queue, _ = started(task_timeout=10)
    _, worker, task = running(queue)
    save(queue, worker, task, "step 1")
    clock.advance(11)
    queue.expire_overdue()
    other = v2_worker_of(queue, name="other")
    (again,) = tasks(other)
    assert again.checkpoint == Result.of("step 1")
    stale_before = queue.leases.stale
    with pytest.raises(Refused) as refused:
        save(queue, worker, task, "step 2 from the first delivery")
    assert refused.value.code == ErrorCode.STALE
    assert queue.leases.stale == stale_before + 1
    save(queue, other, again, "step 2")
    assert queue.task(task.task_id).checkpoint is not None
    assert queue.task(task.task_id).checkpoint.state == Result.of("step 2")  # type: ignore[union-attr]


def test_finishing_frees_it_and_a_task_that_never_checkpoints_has_none() -> None:
    _, queue, _ = started()
    _, worker, task = running(queue)
    save(queue, worker, task, "x" * 40)
    assert introspect.inspect(queue, task.task_id)["checkpoint"] == {"size": 40, "at": START}
    queue.ack(worker.session, task.task_id, task.token)
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (0, 0)
    producer = v2_producer_of(queue, "second")
    submit_to(queue, producer.session, b"t", b"y")
    (plain,) = tasks(worker)
    assert plain.checkpoint is None
    assert "checkpoint" not in introspect.inspect(queue, plain.task_id)


def test_a_cancelled_task_frees_it() -> None:
    _, queue, _ = started()
    producer, worker, task = running(queue)
    save(queue, worker, task, "x" * 10)
    worker.disconnect()  # queued again, with its checkpoint
    queue.cancel(producer.session, task.task_id)
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (0, 0)


def test_the_largest_state_is_taken_and_one_byte_more_is_refused() -> None:
    _, queue, _ = started(max_size=64)
    _, worker, task = running(queue)
    save(queue, worker, task, b"x" * 64)
    with pytest.raises(Refused) as refused:
        save(queue, worker, task, b"x" * 65)
    assert refused.value.code == ErrorCode.PAYLOAD_TOO_LARGE
    assert "[checkpoints] max_size (64)" in str(refused.value)
    assert queue.task(task.task_id).checkpoint.state.data == b"x" * 64  # type: ignore[union-attr]


def test_memory_is_bounded_in_all_and_the_last_checkpoint_stands() -> None:
    _, queue, _ = started(max_size=64, max_memory=100)
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=3)
    for _ in range(3):
        submit_to(queue, producer.session, b"t", b"x")
    first, second, third = tasks(worker)
    save(queue, worker, first, b"a" * 60)
    save(queue, worker, second, b"b" * 40)  # 100 bytes: at the bound, taken
    with pytest.raises(Refused) as refused:
        save(queue, worker, third, b"c")
    assert refused.value.code == ErrorCode.QUEUE_FULL
    assert "[checkpoints] max_memory = 100 bytes, 100 held by 2 tasks" in str(refused.value)
    with pytest.raises(Refused):
        save(queue, worker, second, b"b" * 41)  # growing past it: refused too
    assert queue.task(second.task_id).checkpoint.state.data == b"b" * 40  # type: ignore[union-attr]
    save(queue, worker, first, b"a" * 59)  # shrinking is always taken
    save(queue, worker, third, b"c")
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (3, 100)
    queue.ack(worker.session, first.task_id, first.token)
    assert (queue.checkpoints.held, queue.checkpoints.bytes) == (2, 41)


def test_a_task_this_worker_does_not_hold_is_a_protocol_violation() -> None:
    _, queue, _ = started()
    task = running(queue)[2]
    stranger = v2_worker_of(queue, name="stranger")
    with pytest.raises(ProtocolViolation):
        save(queue, stranger, task, "mine")
    assert queue.task(task.task_id).checkpoint is None


def test_a_dead_task_keeps_it_and_its_replay_resumes_from_it() -> None:
    clock, queue, _ = started()
    _, worker, task = running(queue, retries=1)
    save(queue, worker, task, {"page": 3})
    queue.nack(worker.session, task.task_id, task.token, "failed once", False)
    clock.advance(0)
    (retried,) = tasks(worker)
    queue.nack(worker.session, task.task_id, retried.token, "failed again", False)
    assert queue.task(task.task_id).dead is not None
    assert queue.checkpoints.held == 1
    queue.replay(task.task_id, None)
    clock.advance(0)
    (replayed,) = tasks(worker)
    assert replayed.checkpoint == Result.of({"page": 3})


def test_a_version_1_delivery_carries_none_and_keeps_it() -> None:
    _, queue, _ = started()
    _, worker, task = running(queue)
    save(queue, worker, task, "half")
    worker.disconnect()
    old = worker_of(queue, name="v1")
    (delivered,) = tasks(old)
    assert delivered.task_id == task.task_id
    assert queue.task(task.task_id).checkpoint is not None


def test_the_snapshot_keeps_it_and_a_restore_hands_it_back_counted() -> None:
    _, queue, _ = started()
    _, worker, task = running(queue)
    save(queue, worker, task, {"i": 1})
    assert [(i, s.state) for i, s in queue.snapshot().checkpoints] == [
        (task.task_id, Result.of({"i": 1}))
    ]
    _, restarted, _ = started()
    saved = SavedState(Result.of({"i": 7}), START - 5)
    restarted.restore(Recovery((RecoveredTask(9, b"t", b"x", checkpoint=saved),), 9, 0, 0, 1))
    assert (restarted.checkpoints.held, restarted.checkpoints.bytes) == (1, len(b'{"i":7}'))
    worker = v2_worker_of(restarted)
    (delivered,) = tasks(worker)
    assert (delivered.task_id, delivered.checkpoint) == (9, Result.of({"i": 7}))
    assert introspect.inspect(restarted, 9)["checkpoint"] == {"size": 7, "at": START - 5}


def test_the_answer_waits_for_the_journal_and_says_when_it_failed() -> None:
    """Through the server: kept is answered once its record is durable; a failed write says so."""
    clock, queue, journal = started()
    journal.syncing = []  # fsync = always: each record is durable when its Deferred fires
    server = QuicxServerFactory(queue, clock).buildProtocol(None)
    assert server is not None
    transport = StringTransport()
    server.makeConnection(transport)
    parser = FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)

    def written() -> list[Any]:
        clock.advance(0)  # the output batcher's flush
        frames = parser.feed(transport.value())
        transport.clear()
        return [registry.decode(f.message_type, f.payload) for f in frames]  # type: ignore[union-attr]

    server.dataReceived(taskflow.encode_ready(1))
    submit_to(queue, v2_producer_of(queue).session, b"t", b"x")
    (task,) = [m for m in written() if isinstance(m, taskflow.Task)]
    server.dataReceived(checkpoints.encode_checkpoint(task.task_id, task.token, Result.of(1)))
    assert written() == []  # not yet durable
    journal.syncing[-1].callback(None)
    assert written() == [Checkpointed(task.task_id, task.token, 0)]
    server.dataReceived(checkpoints.encode_checkpoint(task.task_id, task.token, Result.of(2)))
    journal.syncing[-1].errback(OSError("No space left on device"))
    ((task_id, token, code, reason),) = written()
    assert (task_id, token, code) == (task.task_id, task.token, ErrorCode.QUEUE_FULL)
    assert reason == "kept, but not journaled (No space left on device): a restart may undo it"
