"""
The plain task's path: a SUBMIT without options, and its DONE or ACK, each in one call.

A plain SUBMIT (version 1's, or version 2's with a queue and a priority at
most, and perhaps a delay and a deadline to start) into a queue that
exists, with nothing to check (no allowed types, no depth limit, no default
deadline, not draining, the journal whole), and a DONE or ACK of a task
nobody else waits on (no key, checkpoint or group, no kept result, no
AWAIT, a producer still connected, a queue without key limits) take the
same steps as the general path (L{Admission.submit} and L{QueueService.admit};
L{QueueService.done}, C{_take_back} and C{_end}) in one straight-line
function each: a task costs some forty Python calls, and these take away a
quarter of them.  Anything else goes the general path,
which stays the reference (tests/daemon/queue/test_fastpath.py runs the
same traffic both ways and compares every frame, record and count).

Both take the time of the read the frame came in (C{now}, one clock call a
read, not three a task): the tasks of one read share one C{float}.
"""

from __future__ import annotations

from quicx.daemon.queue import pmad
from quicx.daemon.queue.admission import Admission
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.dispatch import note_outcome
from quicx.daemon.queue.extras import DueOnly, Extras
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DELAYED, FINISHED, QUEUED
from quicx.protocol import taskflow
from quicx.protocol.codec import MAX_TASK_ID
from quicx.protocol.taskflow import SubmitOptions

_NOT_TIMED = (0.0, 0.0)
"""The due time and the deadline of a task without either: now, none."""


class FastPath:
    """The plain SUBMIT and DONE of C{kernel}; the rest goes to C{admission} and C{kernel}."""

    def __init__(self, kernel: QueueService, admission: Admission) -> None:
        self.kernel = kernel
        self.admission = admission

    def submit(
        self, session: Session, task_type: bytes, payload: bytes, options: SubmitOptions, now: float
    ) -> None:
        """
        A producer's SUBMIT of C{options} L{SubmitOptions.routing_only} or
        C{timed} (a delay, a deadline), read at C{now}: L{Admission.submit}.
        """
        kernel = self.kernel
        name = options.queue
        queue = kernel.default_queue if name is None else kernel.queues.get(name)
        if (
            queue is None  # new: kept once a task is, if it may be
            or queue.max_depth
            or queue.policy.expires
            or kernel.allowed_types is not None
            or kernel.draining
            or kernel.journal.broken
            or session.identity is not None  # (its tasks have an owner)
        ):
            timed = None  # the general path
        else:
            timed = self._timed(queue, options, now) if options.timed else _NOT_TIMED
        if timed is None or queue is None:  # (queue: None already; for the checker)
            self.admission.submit(session, task_type, payload, options)
            return
        due, deadline = timed
        try:
            block = kernel.pool.store(payload)
        except pmad.PmadError:  # too large, or room to be made: said or done there
            self.admission.submit(session, task_type, payload, options)
            return
        live = kernel._live
        task_id = kernel._last_task_id + 1  # next_task_id(), for the common case
        if task_id > MAX_TASK_ID or task_id in live:
            task_id = kernel.next_task_id()
        else:
            kernel._last_task_id = task_id
        tally = queue.tallies.get(task_type) or kernel.tally_of(queue, task_type)
        priority = options.priority
        task = Task(
            task_id,
            queue.types.get(task_type, task_type),
            block,
            len(payload),
            session,
            queue,
            queue.priority if priority is None else priority,
            now,
            tally=tally,
            ready_at=now,
        )
        if deadline:  # its rare fields, set at once, as Admission sets them
            task.extras = Extras(deadline=deadline, due=due)
        elif due:
            task.extras = DueOnly(due=due)
        session.outstanding += 1
        # QueueService.admit(), for a task without keys or parents.
        live[task_id] = task
        if not kernel.journal.record_submit(task, payload):
            queue.pending += 1
            session.wait_for(task)  # its answer, and every answer after it, waits
            return
        task.state = DELAYED if due else QUEUED
        tally.submitted += 1
        for accepted in kernel._on_accepted:
            accepted(task)
        if session.connected:
            ok = session.speaker.ok(task_id)
            if session.replies:
                session.replies.append(ok)
            else:
                session.peer.sendFrame(ok)
        if due:
            kernel._delay(task, due)
        elif not (queue.idle and kernel.dispatcher.hand_new(task, queue)):
            queue.push(task)  # (no fairness key: no new key to count)
            if queue.idle:
                kernel.dispatcher.serve_queue(queue)
        if deadline:
            self.admission._watch(task)

    def _timed(
        self, queue: NamedQueue[Task, Session], options: SubmitOptions, now: float
    ) -> tuple[float, float] | None:
        """
        The due time (0.0: now) and the deadline to start (0.0: none) of a
        task of C{options} (L{SubmitOptions.timed}) submitted C{now} into
        C{queue}, from L{Admission}'s C{_due} and
        L{quicx.daemon.queue.expiry.Expiry.deadline}; C{None} where either
        refuses it (the general path says why).
        """
        try:
            due = 0.0 if options.delay_ms is None else self.admission._due(options, now)
            return due, self.kernel.expiry.deadline(queue, options.expires, due, now)
        except Refused:
            return None

    def done(
        self,
        session: Session,
        task_id: int,
        token: int | None,
        now: float,
        result: taskflow.Result | None = None,
    ) -> None:
        """
        A worker's DONE (C{token} C{None}) or ACK of delivery C{token}, with
        its C{result} if it gave one, read at C{now}: L{QueueService.done}.
        """
        kernel = self.kernel
        task = session.tasks.get(task_id)
        if (
            task is None  # late, or not held: said there
            or (token is not None and task.token != token)
            or kernel.waits.count
            or (result is not None and len(result.data) > kernel.max_result)
        ):
            self._general(session, task_id, token, result)
            return
        home, producer, extras = task.home, task.producer, task.extras
        if (
            home.limited
            or home.policy.keep_results
            or producer is None
            or not producer.connected
            or (
                # Its rare fields that its end reads (a deadline, a trace: none).
                extras is not None
                and (
                    extras.key is not None
                    or extras.checkpoint is not None
                    or extras.keep_for
                    or extras.watched
                    or extras.group
                )
            )
        ):
            self._general(session, task_id, token, result)
            return
        # _take_back()
        del session.tasks[task_id]
        dispatched_at = task.dispatched_at
        task.tally.ran(dispatched_at - task.ready_at, now - dispatched_at)
        home.running -= 1
        task.holder = None
        producer.outstanding -= 1
        # _end()
        task.state = FINISHED
        del kernel._live[task_id]
        failed_on = kernel.dispatcher.failed_on
        if failed_on:
            failed_on.pop(task_id, None)
        if kernel.progress.entries:
            kernel.progress.finished(task_id)
        kernel.journal.record_outcome(task, "done")
        # Free before the producer hears of the outcome: the protocol promises
        # the slot is back in PMAD by then.
        kernel.pool.free(task.block)
        home.finished.append(now)
        if not (home.subscribers or home.depth or home.running or home.declared):
            kernel._forget_if_idle(home)
        # done()'s announcement and answer (nothing to settle: see there)
        task.tally.done += 1
        for done in kernel._on_done:
            done(task, session, task.attempts)
        speaker = producer.speaker
        producer.peer.sendFrame(
            speaker.done(task_id) if result is None else speaker.done_with(task_id, result)
        )
        if session.failed_in_row:
            note_outcome(kernel.limits.dispatch, session, False, 0.0)
        if session.connected:
            kernel.dispatcher.serve_worker(session, now)
        if kernel.drainage.waiting is not None:
            kernel.drainage.check()

    def _general(
        self, session: Session, task_id: int, token: int | None, result: taskflow.Result | None
    ) -> None:
        if token is None:
            self.kernel.done(session, task_id)
        else:
            self.kernel.ack(session, task_id, token, result)
