"""
Bulk actions: cancel, retry, replay, purge or move every task that matches a filter.

L{BulkActions.run} takes a L{quicx.protocol.bulk.Bulk} request (or its dry
run, which only counts) and goes over the live tasks as they were when it
started, a bounded number per turn of the event loop (C{[bulk] batch}
tasks, and no longer than C{[bulk] turn_time}): a million matches never
hold the daemon, whose other connections are served between turns.  Each
task is re-checked when it is reached (a task finished or changed meanwhile
is passed over) and acted on through the kernel's own operations (a
cancel, a replay, a dead task's drop, a retry's record), each journaled on
its own: a crash in the middle leaves every task acted on or not, never
lost or doubled.  A move (the one new change) is journaled as a MOVED
record per task.  The returned C{Deferred} fires with the counts once the
action's records are durable.

L{BulkActions} sees the kernel as L{IKernel} and never imports it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from attrs import define, field, frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.manage import Manage
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DEAD, DELAYED, QUEUED, WAITING
from quicx.protocol.bulk import ACTS_ON, SAMPLE, Bulk, BulkAction, BulkFilter, BulkState
from quicx.protocol.codec import ErrorCode

_BITS = {
    QUEUED: int(BulkState.QUEUED),
    DELAYED: int(BulkState.DELAYED),
    DEAD: int(BulkState.DEAD),
    WAITING: int(BulkState.WAITING),
}


@frozen
class BulkSettings:
    """
    The C{[bulk]} settings.

    @ivar batch: the most tasks one bulk action looks at in one turn of the
        event loop.
    @ivar turn_time: the longest one action's turn runs, in seconds (it
        ends at the first task past it).
    @ivar max_running: bulk actions running at once (more are refused).
    """

    batch: int = 1000
    turn_time: float = 0.002
    max_running: int = 4


@define(eq=False)
class Run:
    """
    One bulk action under way.

    @ivar ids: the ids of the live tasks when it started, in the order they
        were submitted: its cursor's candidates (ids, not the tasks, so that
        the copy is cheap and a task that finishes meanwhile is let go).
    @ivar index: how far along C{ids} it is.
    @ivar states: the states it acts on, as L{BulkState} bits.
    @ivar target: a move's queue.
    @ivar matched: tasks that matched when reached; C{acted}: those acted
        on; C{skipped}: matched but left (a move into a queue at its
        C{max_depth}, or one whose live task holds the same key).
    @ivar longest_turn: the longest of its turns, in seconds.
    """

    request: Bulk
    ids: list[int]
    states: int
    target: NamedQueue[Task, Session] | None
    done: Deferred[dict[str, Any]] = field(factory=Deferred)
    index: int = 0
    matched: int = 0
    acted: int = 0
    skipped: int = 0
    turns: int = 0
    longest_turn: float = 0.0
    sample: list[int] = field(factory=list)
    call: IDelayedCall | None = None

    def summary(self) -> dict[str, Any]:
        request = self.request
        answer: dict[str, Any] = {
            "action": request.action.name.lower(),
            "dry_run": request.dry_run,
            "examined": self.index,
            "matched": self.matched,
            "acted": self.acted,
            "skipped": self.skipped,
            "sample": self.sample,
            "turns": self.turns,
            "longest_turn_ms": round(self.longest_turn * 1000, 3),
        }
        if request.target is not None:
            answer["to"] = request.target
        return answer


class BulkActions:
    """
    The daemon's bulk actions (at most C{settings.max_running} at once).

    @ivar running: the actions under way.
    """

    def __init__(
        self,
        kernel: IKernel,
        settings: BulkSettings | None = None,
        timer: Callable[[], float] = time.perf_counter,
        turns: IReactorTime | None = None,
    ) -> None:
        """
        @param timer: what a turn's time is measured with.
        @param turns: what schedules the turns (the kernel's scheduler).
        """
        self.kernel = kernel
        self.settings = settings or BulkSettings()
        self._timer = timer
        self._turns = turns or kernel.scheduler
        self._manage = Manage(kernel)
        self.running: list[Run] = []

    def dry_run(self, action: BulkAction, where: BulkFilter) -> Deferred[dict[str, Any]]:
        """How many tasks C{action} would act on (and a few of their ids), changing nothing."""
        return self.run(Bulk(action, where, dry_run=True))

    def run(self, request: Bulk) -> Deferred[dict[str, Any]]:
        """
        Start C{request}; its counts once it is over (and journaled).

        @raise Refused: (busy) as many actions run as C{max_running}
            allows; (queue full) a move's new target queue would pass
            C{max_queues}.
        """
        kernel, settings = self.kernel, self.settings
        if len(self.running) >= settings.max_running:
            raise Refused(
                ErrorCode.BUSY,
                f"{len(self.running)} bulk actions are running ([bulk] max_running ="
                f" {settings.max_running}): try again once one ends",
                log_id="limit.bulk",
            )
        target = None
        if request.target is not None and not request.dry_run:
            target = kernel._queue(request.target)
        elif request.target is not None:
            target = kernel.queues.get(request.target)
        states = int(request.filter.states or ACTS_ON[request.action])
        # A dead-only action looks at the dead-letter set alone.
        ids = kernel.graveyard.letters.ids() if states == BulkState.DEAD else list(kernel._live)
        run = Run(request, ids, states, target)
        self.running.append(run)
        run.call = self._turns.callLater(0, self._turn, run)
        return run.done

    def stop(self) -> None:
        """The daemon stops: every action ends where it is (its answer says how far it got)."""
        for run in list(self.running):
            if run.call is not None and run.call.active():
                run.call.cancel()
            self._finish(run, stopped=True)

    # -- turns -----------------------------------------------------------------------

    def _turn(self, run: Run) -> None:
        run.call = None
        kernel, settings, timer = self.kernel, self.settings, self._timer
        started = timer()
        deadline = started + settings.turn_time
        now = kernel.clock()
        ids, index, live = run.ids, run.index, kernel._live
        end = min(len(ids), index + settings.batch)
        touched: dict[NamedQueue[Task, Session], None] = {}
        if run.target is not None and not run.request.dry_run:
            # An empty queue nobody serves is forgotten between turns (and may be made anew).
            run.target = kernel.queues.setdefault(run.target.name, run.target)
        while index < end:
            task = live.get(ids[index])
            index += 1
            if task is not None and self._matches(run, task, now):
                run.matched += 1
                if len(run.sample) < SAMPLE:
                    run.sample.append(task.task_id)
                if not run.request.dry_run:
                    home = task.home
                    if self._act(run, task, now):
                        run.acted += 1
                        touched[home] = touched[task.home] = None
                    else:
                        run.skipped += 1
            if timer() >= deadline:
                break
        run.index = index
        for queue in touched:  # once a turn, not once a task
            kernel.dispatcher.serve_queue(queue)
            kernel._forget_if_idle(queue)
        run.turns += 1
        run.longest_turn = max(run.longest_turn, timer() - started)
        if index < len(ids):
            run.call = self._turns.callLater(0, self._turn, run)
        else:
            self._finish(run)

    def _matches(self, run: Run, task: Task, now: float) -> bool:
        bit = _BITS.get(task.state, 0)
        if not run.states & bit:
            return False
        where = run.request.filter
        if where.queue is not None and task.home.name != where.queue:
            return False
        if where.task_type is not None and task.task_type != where.task_type:
            return False
        if where.key_prefix is not None and (
            task.key is None or not task.key.startswith(where.key_prefix)
        ):
            return False
        age = now - task.enqueued_at
        if (where.older_than and age < where.older_than) or (
            where.newer_than and age >= where.newer_than
        ):
            return False
        if where.reason is not None and (task.dead is None or where.reason not in task.dead.reason):
            return False
        action = run.request.action
        if action is BulkAction.RETRY and task.state is DELAYED and not task.failures:
            return False  # a delayed SUBMIT, not a retry
        return not (action is BulkAction.MOVE and task.home.name == run.request.target)

    def _act(self, run: Run, task: Task, now: float) -> bool:
        """Do C{run}'s action to C{task} (which matches); whether it was done."""
        action, kernel = run.request.action, self.kernel
        if action is BulkAction.MOVE:
            assert run.target is not None
            return self._move(task, run.target)
        if task.state is DEAD:
            if action is BulkAction.PURGE:
                kernel.graveyard.drop(task, "purged by a bulk action")
            else:  # retry, replay
                kernel.graveyard.replay(task.task_id, None)
            return True
        if action is BulkAction.RETRY:  # waiting out a retry's backoff: run now
            kernel._undelay(task)
            task.ready_at = now
            kernel.journal.record_retry(task)
            kernel._push(task)
            return True
        why = "cancelled" if action is BulkAction.CANCEL else "purged"
        self._manage.withdraw(task, f"{why} by a bulk action")
        return True

    def _move(self, task: Task, target: NamedQueue[Task, Session]) -> bool:
        """Move C{task} into C{target}, keeping its id, place in time and state; journaled."""
        kernel, old = self.kernel, task.home
        if task.state is QUEUED and target.max_depth and target.depth >= target.max_depth:
            return False
        key = task.key
        if key is not None and kernel.keys.live.get((target.name, key)) is not None:
            return False
        if task.state is QUEUED:
            old.remove(task)
        elif task.state is DELAYED:
            old.delayed -= 1
            target.delayed += 1
        else:
            old.dead -= 1
            target.dead += 1
        retries = task.retries
        task.home = target
        task.retries = retries  # its own, not its new queue's
        task.tally = kernel.tally_of(target, task.task_type)
        if key is not None:
            kernel.keys.drop(old.name, key)
            kernel.keys.add(target.name, key, task)
        kernel.journal.record_move(task, old.name)
        for moved in kernel.hooks.moved:
            moved(task, old.name)
        if task.state is QUEUED and target.push(task):
            kernel.fairness_keys += 1
        return True

    def _finish(self, run: Run, stopped: bool = False) -> None:
        self.running.remove(run)
        kernel = self.kernel
        if run.target is not None:
            kernel._forget_if_idle(run.target)
        summary = run.summary()
        if stopped:
            summary["stopped"] = True
        if not run.request.dry_run:
            kernel.log.info(
                "bulk {action}: {acted} of {matched} matching tasks acted on",
                log_id="bulk.done",
                action=summary["action"],
                acted=run.acted,
                matched=run.matched,
            )
        durable = kernel.journal.durable()
        if durable is None:
            run.done.callback(summary)
        else:
            durable.addCallback(lambda _: summary).chainDeferred(run.done)
