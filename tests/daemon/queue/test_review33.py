"""
Issue 33's parts against each other (an adversarial review): what one
part's state does to another's promise.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue import pmad
from quicx.daemon.queue.checkpoints import CheckpointSettings
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import DependencyLimits, QueueLimits
from quicx.protocol import taskflow
from quicx.protocol.checkpoints import MAX_CHECKPOINT, context_size
from quicx.protocol.codec import ErrorCode
from quicx.protocol.parents import MAX_CONTEXT, MAX_PARENTS
from quicx.protocol.taskflow import MAX_TASK_CONTEXT, Backoff, BackoffKind, Result
from tests.fakes import make_queue, submit_to, v2_producer_of, v2_worker_of

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
