"""
Deliveries' leases: the task timeouts, TOUCH, taking back overdue tasks, fenced and late reports.

L{Leases} moves tasks through the kernel it is handed (L{IKernel}) and
never imports it.
"""

from __future__ import annotations

from typing import NoReturn

from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DEAD, DELAYED, FINISHED, HELD, move
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.session import ProtocolViolation, Role


class Leases:
    """
    @ivar timed_out: deliveries taken back at their timeout, since start.
    @ivar stale: stale reports refused, since start.
    @ivar late: outcomes ignored since start, their task finished before.
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        self.timed_out = 0
        self.stale = 0
        self.late = 0

    def timeout_of(self, task: Task) -> float:
        """The task timeout of C{task}'s queue (0: none)."""
        timeout = task.home.policy.timeout
        return self.kernel.task_timeout if timeout is None else timeout

    @property
    def shortest_timeout(self) -> float:
        """The shortest task timeout of any queue (0: no queue has one)."""
        timeouts = [self.kernel.task_timeout] + [
            p.timeout for p in self.kernel.limits.declared.values() if p.timeout is not None
        ]
        return min((t for t in timeouts if t > 0), default=0.0)

    def touch(self, session: Session, task_id: int, token: int, seconds: int) -> None:
        """
        Extend the lease of delivery C{token} to C{seconds} from now (at
        most C{max_lease}); a queue without a timeout has no lease to extend.

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        task = self.delivery(session, task_id, token, "TOUCH")
        if self.timeout_of(task):
            kernel = self.kernel
            task.lease_until = kernel.clock() + min(float(seconds), kernel.limits.max_lease)

    def expire_overdue(self) -> None:
        """
        Take back every task held longer than its queue's task timeout and
        queue it again, at the tail.  The worker keeps the credit until it
        reports the task; if it does before anyone else, its outcome still
        counts.
        """
        kernel = self.kernel
        now = kernel.clock()
        touched: dict[NamedQueue[Task, Session], None] = {}
        for session in list(kernel.sessions.values()):
            overdue = [
                task
                for task in session.tasks.values()
                if (timeout := self.timeout_of(task))
                and (task.lease_until or task.dispatched_at + timeout) <= now
            ]
            for task in overdue:
                del session.tasks[task.task_id]
                session.overdue[task.task_id] = (task, task.attempts)
                task.holder = None
                self.timed_out += 1
                touched[task.home] = None
                # At the tail: a task that keeps running too long must not
                # take every worker from the tasks queued behind it.
                kernel._requeue(
                    task,
                    "held past the task timeout",
                    f"held for more than {now - task.dispatched_at:.3g} s by"
                    f" {session.peer.peer_name} (attempt {task.attempts})",
                    at_head=False,
                    worker=session.peer.peer_name,
                )
        for queue in touched:
            kernel.dispatcher.serve_queue(queue)

    def delivery(self, session: Session, task_id: int, token: int, what: str) -> Task:
        """
        The task of C{session}'s current delivery C{token} of C{task_id},
        for a TOUCH or PROGRESS (C{what}).

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            if task is None and task_id not in session.overdue:
                raise not_held(session, task_id)
            self.refuse_stale(session, task_id, token, what)
        return task

    def ack(
        self, session: Session, task_id: int, token: int, result: taskflow.Result | None = None
    ) -> None:
        """
        A version-2 worker's ACK of delivery C{token}, with the task's C{result}.

        @raise Refused: (payload too large) the result is longer than
            L{max_result}: nothing is applied, the worker still holds the
            task; (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        limit = self.kernel.max_result
        if result is not None and len(result.data) > limit:
            raise Refused(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"task {task_id}: a result of {len(result.data)} bytes exceeds the limit of"
                f" {limit} bytes ([results] max_size, or the largest [allocator] class);"
                " the ACK is not applied",
            )
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            self.stale_report(session, task_id, token)
        self.kernel.done(session, task_id, result)

    def nack(
        self, session: Session, task_id: int, token: int, reason: str, permanent: bool
    ) -> None:
        """A version-2 worker's NACK of delivery C{token} (see L{ack})."""
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            self.stale_report(session, task_id, token)
        self.kernel.failed(session, task_id, reason, permanent)

    def late_delivery(self, session: Session, task_id: int) -> tuple[Task, int] | None:
        """
        An outcome for a delivery C{session} no longer holds: the task if it
        is still to be finished (its other copies are then forgotten), else
        C{None}.

        @raise ProtocolViolation: C{session} was never given C{task_id}.
        """
        kernel = self.kernel
        late = session.overdue.pop(task_id, None)
        if late is None:
            raise not_held(session, task_id)
        task = late[0]
        if task.state is FINISHED:
            self.late += 1
            kernel.failures.note(
                "reported late",
                task.task_type,
                "the task was finished before",
                "outcome of task {task_id} from {worker} ignored: it was finished before",
                log_id="task.late",
                task_id=task_id,
                worker=session.peer.peer_name,
            )
            return None
        if task.state is HELD:
            # Another worker runs it now: its outcome will come too late.
            holder = task.holder
            assert holder is not None
            del holder.tasks[task_id]
            holder.overdue[task_id] = (task, task.attempts)
            task.home.released(task)
        else:
            if task.state is DELAYED:
                kernel._undelay(task)  # waiting to run again: it need not
            elif task.state is DEAD:
                kernel.graveyard.unbury(task)
            else:
                task.home.remove(task)  # queued again: it need not run now
            move(task, HELD)  # by the late delivery, whose outcome counts
        kernel.failures.note(
            "finished after a timeout",
            task.task_type,
            "its worker reported it after it was taken back",
            "task {task_id} finished by {worker} after it was taken back",
            log_id="task.finished_late",
            task_id=task_id,
            worker=session.peer.peer_name,
        )
        return late

    def stale_report(self, session: Session, task_id: int, token: int) -> NoReturn:
        """
        Refuse an ACK or NACK that does not quote C{session}'s current
        delivery of C{task_id}; a delivery taken back from it gives back its credit.

        @raise Refused: (stale) always, unless:
        @raise ProtocolViolation: C{session} holds no delivery of C{task_id}.
        """
        if session.overdue.pop(task_id, None) is not None:
            self.kernel._become_idle(session)
        elif task_id not in session.tasks:
            raise not_held(session, task_id)
        self.refuse_stale(session, task_id, token, "outcome")

    def refuse_stale(
        self, session: Session, task_id: int, token: int, what: str, why: str = ""
    ) -> NoReturn:
        """
        Count and log a stale C{what}; C{why} it is stale, if not the usual
        reason. @raise Refused: (stale) always.
        """
        self.stale += 1
        self.kernel.failures.note(
            "stale",
            b"",
            f"a stale {what} was refused",
            "stale {what} for task {task_id} (token {token}) from {worker} refused",
            log_id="task.stale",
            what=what,
            task_id=task_id,
            token=token,
            worker=session.peer.peer_name,
        )
        raise Refused(
            ErrorCode.STALE,
            f"task {task_id}: delivery {token} is not its current one ("
            + (why or "its lease ran out and it was taken back, or it is finished")
            + f"); the {what} is not applied",
        )


def not_held(session: Session, task_id: int) -> ProtocolViolation:
    """Why C{session} may not report C{task_id}: it is no worker, or holds no such task."""
    if session.role is not Role.WORKER:
        return ProtocolViolation(
            f"a {session.role.value} connection reported task {task_id};"
            " only the worker holding a task may"
        )
    return ProtocolViolation(f"task {task_id} is not held by this worker ({_held(session.tasks)})")


def _held(tasks: dict[int, Task]) -> str:
    """What a worker holds, for an error message."""
    if not tasks:
        return "no task"
    ids = list(tasks)
    shown = ", ".join(str(task_id) for task_id in ids[:5])
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"task{'s' if len(ids) > 1 else ''} {shown}{more}"
