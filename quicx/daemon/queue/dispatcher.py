"""
The dispatcher: hands queued tasks to idle workers, the one copy of the delivery path.

It keeps the workers waiting on each queue (L{NamedQueue.idle}) in the
order L{quicx.daemon.queue.dispatch} chooses from, deals tasks round-robin,
fences each version-2 delivery with a token, and arms the one timer that
serves the rate-limited queues again when a token is due.  The kernel calls
it when a task becomes ready (L{hand_new}, L{serve_queue}) or a worker has a
free credit (L{serve_worker}).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Protocol

from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.queue import pmad
from quicx.daemon.queue.dispatch import offer
from quicx.daemon.queue.hooks import WorkerHook
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import HELD

EPOCH_SHIFT = 40
"""
With replication on, a delivery's token is C{(epoch << EPOCH_SHIFT) |
counter}: the epoch of the primary that handed it out, then a counter
(2**40 deliveries an epoch), so that a token another primary handed out
is recognised as stale whatever its counter.  A token is 64 bits: an
epoch past 2**24 (the lease store's revision: it may grow that far) is
kept modulo 2**24 (L{token_epoch}).
"""
EPOCH_BITS = 64 - EPOCH_SHIFT


def token_epoch(epoch: int) -> int:
    """The part of C{epoch} a token carries (its low L{EPOCH_BITS} bits)."""
    return epoch & ((1 << EPOCH_BITS) - 1)


class Deadlines(Protocol):
    """
    The tasks' deadlines to start, as the dispatcher checks them
    (L{quicx.daemon.queue.expiry.Expiry}).

    @ivar lapsed: the tasks found past their deadline this turn.
    """

    lapsed: list[Task]

    def lapse(self, task: Task, now: float) -> bool:
        """C{task}, with a deadline, taken to start C{now}: whether it is past it."""

    def expire_lapsed(self) -> None:
        """At the dispatcher's turn's end: expire the L{lapsed} tasks."""


class _NoDeadlines:
    lapsed: list[Task] = []

    def lapse(self, task: Task, now: float) -> bool:
        return False

    def expire_lapsed(self) -> None:
        pass


_NO_DEADLINES = _NoDeadlines()


class Dispatcher:
    """
    Deliveries to the idle workers of C{queues}.

    @ivar lifo: the worker idle last is offered the next task first.
    @ivar failed_on: the worker each retried task last failed on, by task
        id (lifo only): another is offered it first.  Kept out of L{Task},
        which every task pays for.
    @ivar delivered: the kernel's C{delivered} hook (see
        L{quicx.daemon.queue.hooks.Subscribers}), told of each delivery
        (the kernel keeps it in step with its own).
    @ivar epoch: the primary's epoch its tokens carry (see L{EPOCH_SHIFT});
        0 without replication: tokens are from the clock, as they were.
    """

    def __init__(
        self,
        pool: pmad.Pmad,
        queues: dict[str, NamedQueue[Task, Session]],
        clock: Callable[[], float],
        scheduler: IReactorTime,
        timeout_of: Callable[[Task], float],
        lifo: bool,
    ) -> None:
        self.pool = pool
        self.queues = queues
        self.clock = clock
        self._scheduler = scheduler
        self.timeout_of = timeout_of
        self.lifo = lifo
        self.failed_on: dict[int, int] = {}
        self.delivered: tuple[WorkerHook, ...] = ()
        self.deadlines: Deadlines = _NO_DEADLINES
        self._last_token = 0
        self.epoch = 0
        self._rate_timer: IDelayedCall | None = None

    def hand_new(self, task: Task, queue: NamedQueue[Task, Session]) -> bool:
        """
        The common case, a worker waiting on C{queue} empty when C{task} is
        accepted: straight to the first (the first that runs its type, or
        set aside when none does), unless it is failing (then
        L{serve_queue} chooses).  Whether it was handed (or set aside).
        """
        if queue.depth or queue.limited or queue.paused:
            return False
        idle = queue.idle
        worker = idle[next(iter(idle))]
        if worker.overdue or worker.failing_until > task.enqueued_at:
            return False
        queue.running += 1
        handles = worker.handles
        if handles is not None and task.task_type not in handles:
            # It does not run the type: another idle one may (see routing).
            chosen = offer(idle, task.enqueued_at, task.task_id, 0, task.task_type)
            if chosen is None:
                queue.park(task)  # no idle worker runs its type: set aside at once
                return True
            worker = chosen
        self.deliver(worker, task, queue, task.enqueued_at)
        if worker.credits - len(worker.tasks) <= 0:
            self.unidle(worker)
        else:
            idle.move_to_end(worker.session_id)
        return True

    def serve_worker(self, worker: Session, now: float = 0.0) -> None:
        """
        Send C{worker} tasks from its queues, in their order, while it has
        credits; with credits left it waits on each of its queues.  C{now}:
        the time, if the caller has it.
        """
        free = worker.credits - len(worker.tasks) - len(worker.overdue)
        if free <= 0:
            return
        if not now:
            now = self.clock()
        deliver = self.deliver
        handles = worker.handles
        for queue in worker.subscriptions:
            if queue.parked:
                # Tasks set aside for want of an idle worker of their type.
                queue.unpark(handles, free)
            while queue.depth and free > 0:
                task = queue.take(now)
                if task is None:
                    self._wait_for_tokens(queue, now)
                    break
                if worker.overdue and task.task_id in worker.overdue:
                    # It still runs a late copy: another worker must take it.
                    self.put_back(task)
                    break
                extras = task.extras
                if extras is not None and extras.deadline and self.deadlines.lapse(task, now):
                    continue
                if handles is not None and task.task_type not in handles:
                    if self._route(task, queue, now):
                        continue
                    break
                deliver(worker, task, queue, now)
                free -= 1
            if free <= 0:
                self.unidle(worker)
                if self.deadlines.lapsed:
                    self.deadlines.expire_lapsed()
                return
        session_id = worker.session_id
        if not worker.waiting:
            # Last in line (under fifo; one idle already keeps its place).
            worker.waiting = True
            for queue in worker.subscriptions:
                queue.idle[session_id] = worker
        if self.lifo:
            # It went idle last: it is offered the next task first.
            for queue in worker.subscriptions:
                queue.idle.move_to_end(session_id, False)
        if self.deadlines.lapsed:
            self.deadlines.expire_lapsed()

    def serve_queue(self, queue: NamedQueue[Task, Session]) -> None:
        """
        Hand C{queue}'s tasks to the workers waiting on it, in their order
        (see L{quicx.daemon.queue.dispatch}); a worker with credits left goes
        behind the others, so tasks are dealt round-robin.  A task never
        goes to a worker that still holds a late copy of it.
        """
        idle = queue.idle
        if not idle or not queue.depth:
            return
        now = self.clock()
        set_aside: list[Task] = []
        while idle and queue.depth:
            task = queue.take(now)
            if task is None:
                self._wait_for_tokens(queue, now)
                break
            worker = idle[next(iter(idle))]  # offer(), inlined for the common case
            handles = worker.handles
            if (
                worker.overdue
                or worker.failing_until > now
                or (task.extras is not None and task.extras.failures)  # (its failures)
                or (handles is not None and task.task_type not in handles)
            ):
                avoid = self.failed_on.get(task.task_id, 0)
                chosen = offer(idle, now, task.task_id, avoid, task.task_type)
                if chosen is None:
                    if _runs(idle, task.task_type):
                        set_aside.append(task)
                    else:
                        queue.park(task)
                    continue
                worker = chosen
            extras = task.extras
            if extras is not None and extras.deadline and self.deadlines.lapse(task, now):
                continue
            self.deliver(worker, task, queue, now)
            self._dealt(worker, idle)
        for task in reversed(set_aside):
            self.put_back(task)
        if self.deadlines.lapsed:
            self.deadlines.expire_lapsed()

    def _dealt(self, worker: Session, idle: OrderedDict[int, Session]) -> None:
        """C{worker}, idle on a queue whose C{idle} it is, was dealt a task: its place now."""
        if worker.credits - len(worker.tasks) - len(worker.overdue) <= 0:
            self.unidle(worker)
        else:
            idle.move_to_end(worker.session_id)

    def _route(self, task: Task, queue: NamedQueue[Task, Session], now: float) -> bool:
        """
        C{task}, just taken for a worker that does not run its type: to an
        idle worker that does, else set aside by type (L{NamedQueue.park}).
        Whether the worker may go on taking tasks from C{queue} (not when
        C{task} went back to its head).
        """
        idle = queue.idle
        avoid = self.failed_on.get(task.task_id, 0)
        chosen = offer(idle, now, task.task_id, avoid, task.task_type)
        if chosen is not None:
            self.deliver(chosen, task, queue, now)
            self._dealt(chosen, idle)
        elif _runs(idle, task.task_type):
            self.put_back(task)  # only workers with a late copy of it run it
            return False
        else:
            queue.park(task)
        return True

    def put_back(self, task: Task) -> None:
        """Return a task just taken off its queue to the head of its priority."""
        task.home.released(task)
        task.home.push(task, at_head=True)

    def deliver(
        self, worker: Session, task: Task, queue: NamedQueue[Task, Session], now: float
    ) -> None:
        # The caller keeps the worker's place among the idle right.
        task.attempts += 1
        task.dispatched_at = now
        task.holder = worker
        task.state = HELD  # move(), inlined: the hot path
        extras = task.extras
        if extras is not None and extras.lease_until:
            extras.lease_until = 0.0  # a TOUCH extends one delivery only
        worker.tasks[task.task_id] = task
        speaker = worker.speaker
        if speaker.fenced:
            token = self._last_token + 1 if self.epoch else int(now * 1000) << 20
            if token <= self._last_token:
                token = self._last_token + 1
            self._last_token = task.token = token
            payload = self.pool.read(task.block)
            frame = speaker.delivery(task, payload, queue.header, self.timeout_of(task))
        else:
            # Unfenced (version 1), the delivery keeps no token and has no lease.
            frame = speaker.task(task.task_id, task.task_type, self.pool.read(task.block))
        worker.peer.sendFrame(frame)
        for delivered in self.delivered:
            delivered(task, worker)

    def set_epoch(self, epoch: int) -> None:
        """Hand out the tokens of primary C{epoch} from now on (see L{EPOCH_SHIFT})."""
        self.epoch = epoch
        self._last_token = token_epoch(epoch) << EPOCH_SHIFT

    def unidle(self, worker: Session) -> None:
        if worker.waiting:
            worker.waiting = False
            session_id = worker.session_id
            for queue in worker.subscriptions:
                queue.idle.pop(session_id, None)

    def _wait_for_tokens(self, queue: NamedQueue[Task, Session], now: float) -> None:
        """A rate limit holds tasks back: serve the queues again when a token is due."""
        due = queue.next_start(now)
        if due is None:
            return
        scheduler = self._scheduler
        timer = self._rate_timer
        if timer is not None and timer.active():
            if timer.getTime() <= scheduler.seconds() + (due - now):
                return
            timer.cancel()
        self._rate_timer = scheduler.callLater(max(0.0, due - now), self._tokens_due)

    def _tokens_due(self) -> None:
        self._rate_timer = None
        for queue in list(self.queues.values()):
            if queue.idle and queue.depth:
                self.serve_queue(queue)

    def stop(self) -> None:
        """Cancel the rate limit's timer."""
        if self._rate_timer is not None and self._rate_timer.active():
            self._rate_timer.cancel()


def _runs(idle: Mapping[int, Session], task_type: bytes) -> bool:
    """Whether one of C{idle} runs C{task_type}."""
    return any(w.handles is None or task_type in w.handles for w in idle.values())
