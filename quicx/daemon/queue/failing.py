"""
Failed attempts: retried after a backoff, requeued, given up, or failed for good.

L{Failing} moves tasks through the kernel it is handed (L{IKernel}) and
never imports it.
"""

from __future__ import annotations

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Session, Task
from quicx.daemon.queue.retries import retry_wait
from quicx.daemon.queue.state import DELAYED, QUEUED, move
from quicx.daemon.queue.tell import tell_outcome
from quicx.protocol.outcomes import OutcomeState


class Failing:
    """
    @ivar given_up: tasks failed after C{max_attempts} deliveries, since start.
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        self.given_up = 0

    def failure(
        self,
        task: Task,
        reason: str,
        worker: str,
        permanent: bool,
        attempt: int,
        session: Session | None = None,
    ) -> None:
        """
        A failed attempt of C{task}, which no worker holds now: retry it
        after its backoff, or fail it for good (into the dead-letter set
        when it had retries).
        """
        task.failures += 1
        if not permanent and task.failures <= task.retries:
            now = self.kernel.clock()
            backoff = task.backoff or task.home.policy.backoff
            due = round(now + retry_wait(backoff, task.failures, self.kernel.random), 3)
            task.due = due
            self.kernel.journal.record_retry(task)
            move(task, DELAYED)
            if session is not None and self.kernel.dispatcher.lifo:
                self.kernel.dispatcher.failed_on[task.task_id] = session.session_id
            self.kernel._delay(task, due)
            for retrying in self.kernel.hooks.retrying:
                retrying(task, session, reason, attempt)
            producer = task.producer
            if producer is not None and producer.connected and producer.speaker.hears_lifecycle:
                producer.peer.sendFrame(
                    producer.speaker.retrying(task.task_id, attempt, int(due * 1000), reason)
                )
            return
        self.fail_for_good(task, reason, worker, session, attempt, dead_letter=True)

    def fail_for_good(
        self,
        task: Task,
        reason: str,
        worker: str,
        session: Session | None,
        attempt: int | None,
        dead_letter: bool,
    ) -> None:
        """
        End C{task}, which no worker holds, as failed -- into the dead-letter
        set if C{dead_letter} and it had retries -- and tell its producer,
        once, FAILED with C{reason}.
        """
        kernel = self.kernel
        dead = bool(dead_letter and task.retries and kernel.graveyard.letters.max_count)
        # Announced as it is decided (the events keep this order).
        for failed in kernel.hooks.buried if dead else kernel.hooks.failed:
            failed(task, session, reason, attempt)
        producer = task.producer
        if dead:
            kernel.graveyard.bury(task, reason, worker)
        else:
            kernel._end(task, "failed")
        if producer is not None:
            producer.outstanding -= 1
            tell_outcome(producer, task.task_id, "failed", reason)
        state = OutcomeState.DEAD if dead else OutcomeState.FAILED
        for settled in kernel.hooks.settled:
            settled(task, state, None, reason)
        if dead:
            task.producer = None  # it has heard its outcome: a replay's goes to nobody

    def requeue(
        self,
        task: Task,
        why: str,
        cause: str,
        at_head: bool = True,
        worker: str = "",
        lost: bool = True,
    ) -> None:
        """
        Queue C{task} again (C{why} in short, C{cause} in full) -- or, once
        it has been delivered C{max_attempts} times, fail it: a task that
        kills or outlasts every worker must not come back forever.  Only a
        task queued again counts (and is recorded) as requeued.  With
        C{count_lost}, a task C{lost} (its worker left, or was too slow; not
        one an operator terminated) is a failed attempt instead (see L{_failure}).
        """
        task.home.released(task)
        if lost and self.kernel.limits.count_lost:
            self.failure(task, cause, worker, False, task.attempts)
            return
        if self.kernel.max_attempts and task.attempts >= self.kernel.max_attempts:
            self.give_up(task, f"given up after {task.attempts} attempts; last: {cause}")
            return
        for requeued in self.kernel.hooks.requeued:
            requeued(task, cause)
        self.kernel.journal.record_attempts(task)
        task.ready_at = self.kernel.clock()
        move(task, QUEUED)
        task.home.push(task, at_head)
        self.kernel.failures.note(
            "requeued",
            task.task_type,
            why,
            "task {task_id} requeued: {cause}",
            log_id="task.requeued",
            task_id=task.task_id,
            cause=cause,
        )

    def give_up(self, task: Task, reason: str) -> None:
        """Fail a task no worker holds: its producer hears FAILED with C{reason}."""
        self.given_up += 1
        self.kernel.failures.note(
            "given up",
            task.task_type,
            "delivered max_attempts times",
            "task {task_id} failed: {reason}",
            log_id="task.given_up",
            task_id=task.task_id,
            reason=reason,
        )
        self.fail_for_good(task, reason, "", None, None, dead_letter=False)
