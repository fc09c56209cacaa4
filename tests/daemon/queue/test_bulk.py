"""
Bulk actions in the queue kernel, in-process on a task.Clock: each action,
the filter, the dry run, the bounded turns and the refusals.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet.task import Clock

from quicx.daemon.queue.bulk import BulkActions, BulkSettings
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits, QueuePolicy
from quicx.daemon.queue.queues import Level
from quicx.protocol import admin, taskflow, wire
from quicx.protocol.bulk import Bulk, BulkAction, BulkFilter, BulkState, request
from quicx.protocol.codec import ErrorCode
from quicx.protocol.taskflow import Backoff, BackoffKind
from tests.fakes import (
    EMPTY_POOL_BYTES,
    FakeJournal,
    checked_states,
    make_queue,
    submit_to,
    v2_producer_of,
    v2_worker_of,
)

START = 1_700_000_000.0


class Turns(Clock):
    """
    The event loop's turns, one at a time: L{step} runs the calls due now,
    not those they schedule (a task.Clock's C{advance(0)} runs those too).
    """

    def step(self) -> int:
        due = [call for call in self.calls if call.getTime() <= self.seconds()]
        for call in due:
            self.calls.remove(call)
            call.called = True
            call.func(*call.args, **call.kw)
        return len(due)


class Kit:
    """A kernel on a clock, its journal, a producer, and its bulk actions."""

    def __init__(self, batch: int = 1000, **limits: Any) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.journal = FakeJournal(waits=False)
        self.queue: QueueService = make_queue(
            self.clock, self.journal, limits=QueueLimits(**limits)
        )
        self.producer = v2_producer_of(self.queue)
        # A turn's time budget far beyond any test's: its batch bounds it.
        self.turns = Turns()
        self.bulk = BulkActions(
            self.queue, BulkSettings(batch=batch, turn_time=60.0), turns=self.turns
        )

    def submit(self, task_type: bytes = b"t", **options: Any) -> int:
        submit_to(self.queue, self.producer.session, task_type, b"payload", **options)
        ok = self.producer.take()[-1]  # after any RETRYING notice
        assert isinstance(ok, taskflow.Ok | wire.Ok)
        return ok.task_id

    def run(self, action: str, dry_run: bool = False, **where: Any) -> dict[str, Any]:
        """Start a bulk action and turn the clock until it answers."""
        answers: list[dict[str, Any]] = []
        self.bulk.run(request(action, dry_run, **where)).addCallback(answers.append)
        for _ in range(10_000):
            if answers:
                return answers[0]
            self.turns.step()
        raise AssertionError("the bulk action never ended")

    def kill(self, task_id: int, reason: str = "boom") -> None:
        """Make queued task C{task_id} dead: a worker takes it and fails it for good."""
        worker = v2_worker_of(self.queue, queues=(self.queue._live[task_id].queue,), name=reason)
        (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
        assert task.task_id == task_id
        self.queue.nack(worker.session, task_id, task.token, reason, True)
        worker.disconnect()
        self.producer.take()


RETRIES = QueuePolicy(retries=3, backoff=Backoff(BackoffKind.FIXED, 60_000, 60_000, 0))


def test_a_dry_run_counts_and_samples_and_changes_nothing() -> None:
    kit = Kit()
    ids = [kit.submit(queue="mail") for _ in range(15)]
    kit.submit(queue="other")
    answer = kit.run("cancel", dry_run=True, queue="mail")
    assert answer["matched"] == 15 and answer["acted"] == 0 and answer["dry_run"]
    assert answer["sample"] == ids[:10]
    assert kit.queue.queues["mail"].depth == 15
    assert kit.journal.outcomes == [] and kit.producer.take() == []


def test_cancel_by_queue_and_type_tells_each_producer_and_journals_each() -> None:
    kit = Kit()
    wanted = [kit.submit(b"email", queue="mail") for _ in range(3)]
    kit.submit(b"sms", queue="mail")
    kit.submit(b"email", queue="other")
    with checked_states():
        answer = kit.run("cancel", queue="mail", task_type=b"email")
    assert (answer["matched"], answer["acted"], answer["skipped"]) == (3, 3, 0)
    assert kit.producer.take() == [admin.Cancelled(i) for i in wanted]
    assert kit.journal.outcomes == [(i, "cancelled") for i in wanted]
    assert kit.queue.queues["mail"].depth == 1 and kit.queue.queues["other"].depth == 1


def test_cancel_reaches_tasks_waiting_for_their_parents_and_their_children_hear_it() -> None:
    kit = Kit()
    parent = kit.submit(queue="first")
    waiting = kit.submit(queue="then", after=(parent,))
    grandchild = kit.submit(queue="last", after=(waiting,))
    assert kit.queue.task(waiting).state.name == "WAITING"
    with checked_states():
        answer = kit.run("cancel", states=["waiting"], queue="then")
    assert (answer["matched"], answer["acted"]) == (1, 1)
    assert admin.Cancelled(waiting) in kit.producer.take()
    assert kit.journal.outcomes[0] == (waiting, "cancelled")
    # Its own child follows its policy (fail, by default); the parent stays queued.
    assert (grandchild, "failed") in kit.journal.outcomes
    assert kit.queue.queues["first"].depth == 1


def test_a_running_task_is_never_touched() -> None:
    kit = Kit()
    running = kit.submit()
    worker = v2_worker_of(kit.queue)
    assert worker.task_ids() == [running]
    queued = kit.submit()
    answer = kit.run("purge")
    assert (answer["matched"], answer["acted"]) == (1, 1)
    assert kit.journal.outcomes == [(queued, "cancelled")]
    assert kit.queue.task(running).holder is worker.session


def test_the_action_runs_a_batch_a_turn_and_the_daemon_serves_others_between() -> None:
    kit = Kit(batch=2)
    ids = [kit.submit() for _ in range(5)]
    answers: list[dict[str, Any]] = []
    kit.bulk.run(request("cancel")).addCallback(answers.append)
    assert kit.journal.outcomes == []  # nothing in the turn that started it
    kit.turns.step()
    assert kit.journal.outcomes == [(ids[0], "cancelled"), (ids[1], "cancelled")]
    # Between two turns another producer is answered, and its task (newer
    # than the action) is not the action's.
    other = v2_producer_of(kit.queue, "other")
    submit_to(kit.queue, other.session, b"t", b"late")
    assert other.take() == [taskflow.Ok(6)]
    kit.turns.step()
    assert answers == []
    kit.turns.step()
    (answer,) = answers
    assert (answer["acted"], answer["turns"], answer["examined"]) == (5, 3, 5)
    assert kit.queue.queues["default"].depth == 1


def test_retry_replays_dead_tasks_and_runs_backoffs_now_but_not_a_delayed_submit() -> None:
    kit = Kit(defaults=RETRIES)
    dead = kit.submit()
    kit.kill(dead)
    backing_off = kit.submit()
    worker = v2_worker_of(kit.queue)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    kit.queue.nack(worker.session, backing_off, task.token, "again", False)
    worker.disconnect()
    delayed = kit.submit(delay_ms=60_000)
    kit.producer.take()
    kit.journal.changes.clear()
    with checked_states():
        answer = kit.run("retry")
    assert (answer["matched"], answer["acted"]) == (2, 2)
    assert ("replay", dead) in kit.journal.changes and ("retry", backing_off) in kit.journal.changes
    worker = v2_worker_of(kit.queue, credits=5)
    assert sorted(worker.task_ids()) == [dead, backing_off]
    assert kit.queue.task(delayed).due == START + 60


def test_replay_by_failure_reason_substring() -> None:
    kit = Kit(defaults=RETRIES)
    timeouts = []
    for reason in ("upstream timeout after 30 s", "bad input", "timeout: no answer"):
        task_id = kit.submit()
        kit.kill(task_id, reason)
        timeouts += [task_id] if "timeout" in reason else []
    answer = kit.run("replay", reason="timeout")
    assert (answer["matched"], answer["acted"]) == (2, 2)
    assert kit.queue.dead_tasks(None, 10)["total"] == 1
    assert kit.queue.queues["default"].depth == 2


def test_purge_deletes_queued_delayed_and_dead_and_frees_their_blocks() -> None:
    kit = Kit(defaults=RETRIES)
    kit.kill(kit.submit())
    kit.submit(delay_ms=5_000)
    kit.submit()
    answer = kit.run("purge")
    assert answer["acted"] == 3
    assert kit.queue.pool.bytes_used == EMPTY_POOL_BYTES
    assert kit.queue.delays.count == 0 and kit.queue.dead_tasks(None, 10)["total"] == 0


def test_a_filter_by_state_key_prefix_and_age() -> None:
    kit = Kit()
    old = kit.submit(key=b"order-1")
    kit.clock.advance(600)
    kit.submit(key=b"order-2", delay_ms=60_000)
    kit.submit(key=b"invoice-3")
    kit.submit()
    assert kit.run("cancel", dry_run=True, key_prefix="order-")["matched"] == 2
    assert kit.run("cancel", dry_run=True, key_prefix="order-", states=["delayed"])["matched"] == 1
    assert kit.run("cancel", dry_run=True, older_than="5m")["sample"] == [old]
    assert kit.run("cancel", dry_run=True, newer_than="5m")["matched"] == 3
    assert kit.run("cancel", dry_run=True, older_than=1, newer_than=3600)["matched"] == 1


def test_move_keeps_ids_order_and_counts_and_is_journaled() -> None:
    kit = Kit(defaults=RETRIES)
    dead = kit.submit(queue="a")
    kit.kill(dead)
    queued = [kit.submit(queue="a", key=f"k{i}".encode()) for i in range(3)]
    delayed = kit.submit(queue="a", delay_ms=5_000)
    kit.journal.changes.clear()
    with checked_states():
        answer = kit.run("move", queue="a", to="b")
    assert (answer["acted"], answer["to"]) == (5, "b")
    assert sorted(kit.journal.changes) == sorted(("moved", i) for i in [*queued, delayed, dead])
    b = kit.queue.queues["b"]
    assert (b.depth, b.delayed, b.dead) == (3, 1, 1)
    assert "a" not in kit.queue.queues  # nothing left: forgotten
    worker = v2_worker_of(kit.queue, credits=5, queues=("b",))
    assert worker.task_ids() == queued
    # Its key now answers in its new queue.
    submit_to(kit.queue, kit.producer.session, b"t", b"again", queue="b", key=b"k0")
    (ok,) = kit.producer.take()
    assert ok.task_id == queued[0]


def test_a_moved_task_keeps_its_retries_not_its_new_queues() -> None:
    """
    A task reads its queue's retries unless it has its own: one moved from
    a queue with retries to one without keeps the retries it was submitted
    with, and still has no extras of its own for them.
    """
    kit = Kit(declared={"a": RETRIES})
    plain, own = kit.submit(queue="a"), kit.submit(queue="a", retries=1)
    tasks = [kit.queue._live[i] for i in (plain, own)]
    assert [t.retries for t in tasks] == [3, 1] and tasks[0].extras is None
    assert kit.run("move", queue="a", to="b")["acted"] == 2
    assert [(t.queue, t.retries) for t in tasks] == [("b", 3), ("b", 1)]
    assert kit.queue.queues["b"].policy.retries == 0


def test_a_move_leaves_a_task_whose_key_a_live_task_holds_there() -> None:
    kit = Kit()
    kit.submit(queue="a", key=b"same")
    kit.submit(queue="b", key=b"same")
    moved = kit.submit(queue="a")
    answer = kit.run("move", queue="a", to="b")
    assert (answer["matched"], answer["acted"], answer["skipped"]) == (2, 1, 1)
    assert kit.queue.task(moved).queue == "b"


def test_as_many_actions_as_max_running_and_no_more() -> None:
    kit = Kit()
    kit.bulk = BulkActions(kit.queue, BulkSettings(max_running=1), turns=kit.turns)
    kit.submit()
    kit.bulk.run(request("cancel", True))
    with pytest.raises(Refused) as caught:
        kit.bulk.run(request("cancel", True))
    assert caught.value.code is ErrorCode.BUSY
    kit.turns.step()
    kit.bulk.run(request("cancel", True))  # the first is over


def test_stopping_ends_every_action_where_it_is() -> None:
    kit = Kit(batch=1)
    for _ in range(3):
        kit.submit()
    answers: list[dict[str, Any]] = []
    kit.bulk.run(request("cancel")).addCallback(answers.append)
    kit.turns.step()
    kit.bulk.stop()
    (answer,) = answers
    assert answer["stopped"] and answer["acted"] == 1 and kit.bulk.running == []
    assert kit.turns.step() == 0


def test_the_dry_run_api_for_the_dashboard() -> None:
    kit = Kit()
    kit.submit(queue="mail")
    answers: list[dict[str, Any]] = []
    kit.bulk.dry_run(BulkAction.PURGE, BulkFilter(queue="mail")).addCallback(answers.append)
    kit.turns.step()
    assert answers[0]["matched"] == 1 and kit.queue.queues["mail"].depth == 1


@pytest.mark.parametrize(
    ("made", "message"),
    [
        (Bulk(BulkAction.CANCEL, BulkFilter(states=BulkState.DEAD)), "does not act on dead"),
        (Bulk(BulkAction.REPLAY, BulkFilter(states=BulkState.QUEUED)), "does not act on queued"),
        (Bulk(BulkAction.MOVE), "target queue"),
        (
            Bulk(BulkAction.MOVE, BulkFilter(states=BulkState.WAITING), target="b"),
            "does not act on waiting",
        ),
        (Bulk(BulkAction.CANCEL, target="b"), "target queue"),
        (Bulk(BulkAction.MOVE, BulkFilter(queue="b"), target="b"), "in it already"),
    ],
)
def test_requests_that_make_no_sense_are_refused(made: Bulk, message: str) -> None:
    from quicx.protocol.bulk import encode_bulk

    with pytest.raises(ValueError, match=message):
        encode_bulk(made)


# -- the queue's removal by ticket --------------------------------------------------------


class _Queued:
    def __init__(self, name: int, fairness: bytes | None) -> None:
        self.name = name
        self.priority = 0
        self.fairness = fairness
        self.enqueued_at = 0.0
        self.ready_at = 0.0
        self.ticket = 0
        self.task_type = b"t"
        self.task_id = name

    @property
    def extras(self) -> _Queued:
        """(A task keeps its fairness key in its extras: this, in itself.)"""
        return self


@given(
    st.lists(st.tuples(st.booleans(), st.sampled_from([None, b"a", b"b"])), max_size=60),
    st.data(),
)
def test_removing_by_ticket_keeps_every_other_task_in_its_order(
    pushes: list[tuple[bool, bytes | None]], data: st.DataObject
) -> None:
    level: Level[_Queued] = Level()
    tasks = [_Queued(i, key) for i, (_, key) in enumerate(pushes)]
    for task, (at_head, _) in zip(tasks, pushes, strict=True):
        level.push(task, at_head)
    before = {key: list(fifo) for key, fifo in level.fifos.items()}
    doomed = data.draw(st.lists(st.sampled_from(tasks), unique=True) if tasks else st.just([]))
    for task in doomed:
        level.remove(task)
    for key, fifo in before.items():
        left = [t for t in fifo if t not in doomed]
        assert list(level.fifos.get(key, ())) == left
    assert level.size == len(tasks) - len(doomed)


def test_a_producer_left_does_not_stop_a_cancel() -> None:
    kit = Kit()
    kit.submit()
    kit.producer.disconnect()
    assert kit.run("cancel")["acted"] == 1
