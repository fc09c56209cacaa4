"""
Deadlines to start: a task not started by its deadline ends expired, never dispatched late.

A task gets a deadline from its SUBMIT (C{expires}: from now, or at a
time) or from its queue (C{[queue NAME] expires}: from when it is due).
L{Expiry} ends it as I{expired} (L{OutcomeState.EXPIRED}; into the
dead-letter set with C{expired_dead}) two ways:
  - at dispatch: the dispatcher asks L{Expiry.lapse} of each task it takes
    that has a deadline (one comparison; a task without one costs the
    dispatcher one test of C{task.deadline}), and one past it is expired
    instead of handed out, once the dispatcher's turn is over
    (L{Expiry.expire_lapsed});
  - by a timer: a heap of deadlines with one timer armed at a time, which
    expires the tasks still waiting at their deadline, at most C{batch} of
    them in a reactor turn, so that expired tasks do not sit in memory.
A task that starts in time loses its deadline (a retry or a requeue is not
held to it).  Its expiry is journaled once, as its outcome (a DEADLINE
record of 0); a task whose deadline passed while the daemon was down comes
back with it and expires as the daemon starts.
"""

from __future__ import annotations

import heapq

from twisted.internet.interfaces import IDelayedCall

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DELAYED, QUEUED, WAITING
from quicx.daemon.queue.tell import tell_outcome
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.start_options import Expires

BATCH = 1000
"""The most tasks the timer expires in one reactor turn."""

WHY = "expired: not started before its deadline"
"""The reason an expired task's producer, waits and events are given."""


class Expiry:
    """
    The deadlines of C{kernel}'s waiting tasks.

    @ivar count: the waiting tasks with a deadline.
    @ivar lapsed: the tasks the dispatcher found past their deadline in its
        current turn (expired by L{expire_lapsed} at its end).
    """

    def __init__(self, kernel: IKernel, batch: int = BATCH) -> None:
        self.kernel = kernel
        kernel.dispatcher.deadlines = self
        self.batch = batch
        self.count = 0
        self.lapsed: list[Task] = []
        self._heap: list[tuple[float, int, Task]] = []
        self._sequence = 0
        self._timer: IDelayedCall | None = None

    # -- admission ----------------------------------------------------------------

    def deadline(
        self, queue: NamedQueue[Task, Session], expires: Expires | None, due: float, now: float
    ) -> float:
        """
        The deadline of a task submitted C{now} into C{queue}, due at C{due}
        (0: now), with its SUBMIT's C{expires} (0.0: none).

        @raise Refused: it would be past its deadline before it may start.
        """
        if expires is None:
            default = queue.policy.expires
            return (due or now) + default if default else 0.0
        ms, at = expires
        deadline = ms / 1000 if at else now + ms / 1000
        if deadline <= max(due, now):
            raise Refused(
                ErrorCode.INVALID_MESSAGE,
                "the task's deadline to start has passed"
                if deadline <= now
                else "the task's deadline to start comes before its due time",
            )
        return deadline

    def watch(self, task: Task) -> None:
        """Hold C{task}, accepted and waiting (queued or delayed), to its deadline."""
        deadline = task.deadline
        self._sequence += 1
        heapq.heappush(self._heap, (deadline, self._sequence, task))
        self.count += 1
        if self._heap[0][2] is task:
            self._arm()

    # -- the dispatcher -----------------------------------------------------------

    def lapse(self, task: Task, now: float) -> bool:
        """
        (The dispatcher.)  C{task}, with a deadline, was just taken off its
        queue to start C{now}: whether it is past its deadline (then it goes
        back to its queue's counts and is expired at the dispatcher's turn's
        end); if not, it starts in time and its deadline no longer holds.
        """
        if task.deadline > now:
            self._forget(task)
            return False
        task.home.released(task)
        self.lapsed.append(task)
        return True

    def expire_lapsed(self) -> None:
        """(The dispatcher, at its turn's end.)  Expire the tasks L{lapse} found."""
        lapsed, self.lapsed = self.lapsed, []
        for task in lapsed:
            self._expire(task)
        for task in lapsed:
            self.kernel._forget_if_idle(task.home)

    # -- the kernel's hooks -------------------------------------------------------

    def recovered(self, task: Task, due: float) -> None:
        """
        Back from the journal: held to its deadline again (expired at once
        if it passed while the daemon was down) unless it had a delivery
        that ended (it started; one cut short by the stop did not).
        """
        if not task.deadline:
            return
        if task.ended_attempts or task.dead is not None:
            task.deadline = 0.0
        else:
            self.watch(task)

    def cancelled(self, task: Task, why: str) -> None:
        if task.deadline:
            self._forget(task)

    def withdrawn(self, task: Task) -> None:
        task.deadline = 0.0

    def stop(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    # -- inside -------------------------------------------------------------------

    def _forget(self, task: Task) -> None:
        """C{task} no longer waits on its deadline (its heap entry goes stale)."""
        task.deadline = 0.0
        self.count -= 1
        if len(self._heap) > 2 * self.count + 64:
            self._heap = [entry for entry in self._heap if entry[2].deadline == entry[0]]
            heapq.heapify(self._heap)

    def _expire(self, task: Task) -> None:
        """
        End C{task}, which waits, taken off its queue or delays, as expired:
        journaled, announced, its producer told; into its queue's dead-letter
        set with C{expired_dead}.
        """
        kernel = self.kernel
        task.deadline = 0.0
        self.count -= 1
        # A task still waiting for its parents ends expired (never dead: it never ran).
        dead = task.state is not WAITING and task.home.policy.expired_dead
        dead = dead and kernel.graveyard.letters.max_count > 0
        for expired in kernel.hooks.expired:
            expired(task, WHY)
        producer = task.producer
        if dead:
            kernel.graveyard.bury(task, WHY, "")
        else:
            kernel._end(task, "expired")
        if producer is not None:
            producer.outstanding -= 1
            tell_outcome(producer, task.task_id, "expired", WHY)
        for settled in kernel.hooks.settled:
            settled(task, OutcomeState.EXPIRED, None, WHY)
        if dead:
            task.producer = None  # it has heard its outcome: a replay's goes to nobody

    def _arm(self) -> None:
        heap = self._heap
        while heap and heap[0][2].deadline != heap[0][0]:
            heapq.heappop(heap)
        if not heap:
            self.stop()
            return
        scheduler = self.kernel.scheduler
        delay = max(0.0, heap[0][0] - self.kernel.clock())
        timer = self._timer
        if timer is not None and timer.active():
            if abs(timer.getTime() - (scheduler.seconds() + delay)) < 0.0005:
                return
            timer.cancel()
        self._timer = scheduler.callLater(delay, self._fire)

    def _fire(self) -> None:
        """Expire the waiting tasks past their deadline, at most C{batch} of them."""
        self._timer = None
        kernel = self.kernel
        now = kernel.clock()
        heap = self._heap
        ended: list[Task] = []
        while heap and len(ended) < self.batch:
            deadline, _, task = heap[0]
            if task.deadline != deadline:
                heapq.heappop(heap)
                continue
            if deadline > now:
                break
            heapq.heappop(heap)
            if task.state is QUEUED:
                task.home.remove(task)
            elif task.state is DELAYED:
                kernel._undelay(task)
            elif task.state is not WAITING:  # (a waiting task is in no queue) it started, or ended
                task.deadline = 0.0
                self.count -= 1
                continue
            self._expire(task)
            ended.append(task)
        for task in ended:
            kernel._forget_if_idle(task.home)
        if ended:
            kernel.check_drain()
        self._arm()
