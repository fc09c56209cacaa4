"""
The choice among idle workers (L{quicx.daemon.queue.dispatch}), on its own: whom
a task is offered, and when a worker counts as failing.
"""

from __future__ import annotations

import pytest
from attrs import define, field

from quicx.daemon.queue.dispatch import DispatchSettings, Order, note_outcome, offer


@define
class Worker:
    session_id: int
    failing_until: float = 0.0
    failed_in_row: int = 0
    overdue: dict[int, object] = field(factory=dict)
    handles: frozenset[bytes] | None = None


def idle(*workers: Worker) -> dict[int, Worker]:
    return {worker.session_id: worker for worker in workers}


def test_the_first_idle_worker_is_offered_the_task() -> None:
    first, second = Worker(2), Worker(1)
    assert offer(idle(first, second), now=5.0, task_id=7) is first


def test_a_failing_worker_is_passed_over_while_another_may_take_the_task() -> None:
    failing, other = Worker(1, failing_until=6.0), Worker(2)
    assert offer(idle(failing, other), now=5.0) is other
    # Failing until 6.0: from then on it is not.
    assert offer(idle(failing, other), now=6.0) is failing
    # No other worker: it gets the task all the same.
    assert offer(idle(failing), now=5.0) is failing


def test_a_task_is_offered_first_to_a_worker_it_did_not_fail_on() -> None:
    failed_on, other = Worker(1), Worker(2)
    assert offer(idle(failed_on, other), now=0.0, task_id=7, avoid=1) is other
    assert offer(idle(failed_on), now=0.0, task_id=7, avoid=1) is failed_on


def test_a_failing_worker_is_passed_over_for_the_one_the_task_failed_on() -> None:
    workers = idle(Worker(1, failing_until=9.0), Worker(2), Worker(3, failing_until=9.0))
    assert offer(workers, now=0.0, task_id=7, avoid=2) is workers[2]


def test_when_every_worker_is_failing_the_first_is_offered_the_task() -> None:
    workers = idle(Worker(1, failing_until=9.0), Worker(2, failing_until=9.0))
    assert offer(workers, now=0.0, task_id=7, avoid=2) is workers[1]
    assert offer(workers, now=0.0, task_id=7) is workers[1]


def test_a_task_is_offered_only_to_a_worker_that_runs_its_type() -> None:
    mail, pictures, every = (
        Worker(1, handles=frozenset({b"mail"})),
        Worker(2, handles=frozenset({b"resize", b"crop"})),
        Worker(3),
    )
    assert offer(idle(mail, pictures, every), now=0.0, task_type=b"crop") is pictures
    assert offer(idle(mail, pictures, every), now=0.0, task_type=b"mail") is mail
    # A worker that announced nothing runs every type.
    assert offer(idle(mail, pictures, every), now=0.0, task_type=b"other") is every
    assert offer(idle(mail, pictures), now=0.0, task_type=b"other") is None
    # Failing or not, a worker of another type is never the fallback.
    failing_mail = Worker(4, failing_until=9.0, handles=frozenset({b"mail"}))
    assert offer(idle(failing_mail, pictures), now=0.0, task_type=b"mail") is failing_mail


def test_a_task_never_goes_to_a_worker_running_a_late_copy_of_it() -> None:
    late = Worker(1, overdue={7: object()})
    failing = Worker(2, failing_until=9.0)
    assert offer(idle(late, failing), now=0.0, task_id=7) is failing
    assert offer(idle(late), now=0.0, task_id=7) is None
    assert offer(idle(late), now=0.0, task_id=8) is late


def test_a_worker_is_failing_after_failing_streak_failures_in_a_row() -> None:
    settings = DispatchSettings(failing_streak=3, failing_window=10.0)
    worker = Worker(1)
    note_outcome(settings, worker, True, 1.0)
    note_outcome(settings, worker, True, 2.0)
    assert (worker.failed_in_row, worker.failing_until) == (2, 0.0)
    note_outcome(settings, worker, True, 3.0)
    assert worker.failing_until == 13.0
    # Each further failure starts the window again.
    note_outcome(settings, worker, True, 4.0)
    assert (worker.failed_in_row, worker.failing_until) == (4, 14.0)
    # A success ends the streak.
    note_outcome(settings, worker, False, 5.0)
    assert (worker.failed_in_row, worker.failing_until) == (0, 0.0)


@pytest.mark.parametrize(
    "settings",
    [
        DispatchSettings(failing_streak=0),
        DispatchSettings(failing_window=0),
        DispatchSettings(Order.FIFO),
    ],
)
def test_the_guard_is_off_with_a_zero_setting_or_fifo(settings: DispatchSettings) -> None:
    worker = Worker(1)
    for now in range(10):
        note_outcome(settings, worker, True, float(now))
    assert (worker.failed_in_row, worker.failing_until) == (10, 0.0)
