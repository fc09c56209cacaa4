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
  - by a timer: the deadlines in a L{Delays} (a heap, one timer armed at a
    time), which expires the tasks still waiting at their deadline, at most
    C{batch} of them in a reactor turn, so that expired tasks do not sit in
    memory.
A task that starts in time loses its deadline (a retry or a requeue is not
held to it).  Its expiry is journaled once, as its outcome (a DEADLINE
record of 0); a task whose deadline passed while the daemon was down comes
back with it and expires as the daemon starts.
"""

from __future__ import annotations

from quicx.daemon.queue.delays import Delays
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

    @ivar deadlines: the waiting tasks with a deadline (their C{deadline}).
    @ivar lapsed: the tasks the dispatcher found past their deadline in its
        current turn (expired by L{expire_lapsed} at its end).
    """

    def __init__(self, kernel: IKernel, batch: int = BATCH) -> None:
        self.kernel = kernel
        kernel.dispatcher.deadlines = self
        self.lapsed: list[Task] = []
        self.deadlines: Delays[Task] = Delays(
            kernel.scheduler, kernel.clock, self._passed, batch, "deadline"
        )

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
        self.deadlines.add(task, task.deadline)

    # -- the dispatcher -----------------------------------------------------------

    def lapse(self, task: Task, now: float) -> bool:
        """
        (The dispatcher.)  C{task}, with a deadline, was just taken off its
        queue to start C{now}: whether it is past its deadline (then it goes
        back to its queue's counts and is expired at the dispatcher's turn's
        end); if not, it starts in time and its deadline no longer holds.
        """
        if task.deadline > now:
            self.deadlines.remove(task)
            return False
        self.deadlines.remove(task)
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
            self.deadlines.remove(task)

    def withdrawn(self, task: Task) -> None:
        task.deadline = 0.0

    def stop(self) -> None:
        self.deadlines.stop()

    # -- inside -------------------------------------------------------------------

    def _expire(self, task: Task) -> None:
        """
        End C{task}, which waits, taken off its queue or delays and its
        deadline, as expired: journaled, announced, its producer told; into
        its queue's dead-letter set with C{expired_dead}.
        """
        kernel = self.kernel
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

    def _passed(self, due: list[Task]) -> None:
        """The waiting tasks whose deadline passed (at most C{batch}): expired."""
        kernel = self.kernel
        ended: list[Task] = []
        for task in due:
            if task.state is QUEUED:
                task.home.remove(task)
            elif task.state is DELAYED:
                kernel._undelay(task)
            elif task.state is not WAITING:  # (a waiting task is in no queue) it started, or ended
                continue
            self._expire(task)
            ended.append(task)
        for task in ended:
            kernel._forget_if_idle(task.home)
        if ended:
            kernel.check_drain()
