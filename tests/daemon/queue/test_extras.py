"""
A task's rare fields live in one optional record (L{Extras}): a plain task
carries none, and each reads and sets as the task's own attribute.
"""

from __future__ import annotations

import sys

from attrs import fields_dict

from quicx.daemon.queue.extras import NO_EXTRAS, Extras, WithExtras
from quicx.daemon.queue.model import Task
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.protocol import taskflow
from tests.fakes import make_queue, producer_of, submit_to, v2_producer_of, v2_worker_of


def _only_task(kernel) -> Task:
    (task,) = kernel._live.values()
    return task


def test_a_plain_task_has_no_extras_and_a_small_record() -> None:
    kernel = make_queue()
    submit_to(kernel, producer_of(kernel).session, b"t", b"x")
    task = _only_task(kernel)
    assert task.extras is None
    # Every rare field reads its default.
    for name in ("key", "fairness", "owner", "deadline", "group", "after", "checkpoint"):
        assert getattr(task, name) == getattr(NO_EXTRAS, name)
    # The record (GC head included): 36 fields made it 328 bytes, 21 200,
    # 19 184; 17 (no reply kept, its due time a rare field) 168.
    assert sys.getsizeof(task) <= 168
    assert not hasattr(task, "__dict__")


def test_a_delayed_task_keeps_its_due_time_in_its_extras() -> None:
    kernel = make_queue()
    submit_to(kernel, v2_producer_of(kernel).session, b"t", b"x", delay_ms=60_000)
    task = _only_task(kernel)
    assert task.extras is not None and task.extras.due == task.due > kernel.clock()
    # Its due time alone: a record of one field (GC head included), not a whole Extras.
    assert sys.getsizeof(task.extras) <= 40
    assert (task.key, task.failures, task.retries, task.lease_until) == (None, 0, 0, 0.0)
    # Once due (taken out of the delayed set here), it reads 0 again.
    kernel.delays.remove(task)
    assert task.due == 0.0


def test_a_delayed_task_given_another_rare_field_keeps_its_due_time() -> None:
    kernel = make_queue()
    submit_to(kernel, v2_producer_of(kernel).session, b"t", b"x", delay_ms=60_000)
    task = _only_task(kernel)
    due = task.due
    task.failures = 2
    task.retries = 7
    assert isinstance(task.extras, Extras)
    assert (task.due, task.failures, task.retries) == (due, 2, 7)


def test_setting_a_default_keeps_a_task_plain() -> None:
    kernel = make_queue()
    submit_to(kernel, producer_of(kernel).session, b"t", b"x")
    task = _only_task(kernel)
    task.key, task.deadline, task.watched = None, 0.0, False
    assert task.extras is None


def test_a_rare_field_set_is_kept_in_the_extras() -> None:
    kernel = make_queue()
    submit_to(kernel, producer_of(kernel).session, b"t", b"x")
    task = _only_task(kernel)
    task.watched = True
    assert isinstance(task.extras, Extras) and task.extras.watched
    task.group = 7
    assert (task.watched, task.group, task.extras.group) == (True, 7, 7)


def test_a_submit_with_options_gives_its_task_extras() -> None:
    kernel = make_queue()
    submit_to(kernel, v2_producer_of(kernel).session, b"t", b"x", key=b"k", trace=None)
    task = _only_task(kernel)
    assert task.extras is not None and task.key == b"k"
    assert task.fairness is None and task.deadline == 0.0


def test_an_empty_key_is_a_key() -> None:
    kernel = make_queue()
    submit_to(kernel, v2_producer_of(kernel).session, b"t", b"x", key=b"")
    assert _only_task(kernel).key == b""


def test_every_rare_field_is_declared_on_the_task() -> None:
    """What mypy reads of a task's rare fields is what its extras hold."""
    assert set(WithExtras.__annotations__) == set(fields_dict(Extras))


def test_a_tasks_retries_are_its_queues_unless_its_own_and_failures_are_extras() -> None:
    """
    A task of a queue with retries keeps no retries of its own (it reads its
    queue's) nor a failure count, until it fails: then its extras hold it.
    Its own retries (its SUBMIT's) are kept in its extras.
    """
    policy = QueuePolicy(retries=2)
    kernel = make_queue(limits=QueueLimits(defaults=policy))
    producer = v2_producer_of(kernel)
    submit_to(kernel, producer.session, b"t", b"x")
    task = _only_task(kernel)
    assert (task.retries, task.failures, task.extras) == (2, 0, None)
    task.retries, task.failures = 2, 0  # its queue's, and the default: still none
    assert task.extras is None
    worker = v2_worker_of(kernel)
    (delivery,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert (delivery.failures, delivery.retries) == (0, 2)
    kernel.nack(worker.session, task.task_id, delivery.token, "boom", False)
    assert task.extras is not None and (task.failures, task.retries) == (1, 2)
    assert (task.extras.failures, task.extras.retries) == (1, None)
    submit_to(kernel, producer.session, b"t", b"x", retries=5)
    own = max(kernel._live.values(), key=lambda t: t.task_id)
    assert own.extras is not None and (own.retries, own.extras.retries) == (5, 5)


def test_a_plain_task_given_a_due_time_keeps_it_in_the_small_record() -> None:
    kernel = make_queue()
    submit_to(kernel, producer_of(kernel).session, b"t", b"x")
    task = _only_task(kernel)
    task.due = 12.5  # as a retry's backoff, or the plain path's delayed SUBMIT
    assert sys.getsizeof(task.extras) <= 40
    assert (task.due, task.key, task.deadline) == (12.5, None, 0.0)
    task.due = 0.0
    assert task.due == 0.0
