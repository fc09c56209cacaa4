"""
Debounce: a keyed SUBMIT folds into the task its key names while that task waits to start.

A SUBMIT with a debounce (L{start_options.Debounce}: a mode and a window W)
needs an idempotency key.  Its task waits W before it may start.  While a
task of the key waits (submitted, delayed, queued, or waiting for its
parents: not started), a new SUBMIT of the key folds into it, as its mode
says (a task waiting for its parents keeps them):
  - C{drop}: answered as a duplicate (today's idempotency key); the task
    stays as it was;
  - C{replace}: its payload replaces the task's, which keeps its place
    (its due time, or its place in its queue);
  - C{extend}: its payload replaces the task's, whose window starts again:
    it runs once the key has been quiet for W (but at most C{[queues]
    max_delay} after its first SUBMIT, so that a key submitted forever
    still runs).
The folded SUBMIT is answered OK with the task's id, flagged a duplicate
(once the journal holds the new payload, with C{fsync = always}).  Once the
task has started (or finished), C{drop} answers as a plain key does, and
C{replace} and C{extend} make a new task (queued after the running one:
the newest payload always runs).  A folded payload is journaled as a
REPLACE record: a restart keeps the newest payload, never both.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.python.failure import Failure

from quicx.daemon.journal.interface import KeyEntry
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Duplicate, Refused, Session, Task
from quicx.daemon.queue.state import DELAYED, PENDING, QUEUED, WAITING, move
from quicx.protocol.codec import ErrorCode
from quicx.protocol.start_options import Debounce, DebounceMode

_WAITING = frozenset({PENDING, QUEUED, DELAYED, WAITING})


class Debouncing:
    """The debounced SUBMITs into C{kernel}."""

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel

    def fold(
        self,
        session: Session,
        found: Task | KeyEntry | None,
        task_type: bytes,
        payload: bytes,
        debounce: Debounce,
        store: Callable[[bytes], int],
    ) -> bool:
        """
        A debounced SUBMIT whose key names C{found}: whether it folded into
        it, and is answered.  It does not for C{drop} (the caller answers
        it as a duplicate of C{found}, if any), nor when no task of the key
        waits to start (the caller makes a new task).

        @param store: stores a payload in the pool, making room if it can.
        @raise Refused: the payload does not fit; the key names a task of
            another type.
        """
        mode = debounce.mode
        waiting = isinstance(found, Task) and found.state in _WAITING
        if not waiting:
            return False
        assert isinstance(found, Task)
        task = found
        if task.task_type != task_type:
            raise Refused(
                ErrorCode.CONFLICT,
                f"the key names task {task.task_id}, of type"
                f" {task.task_type.decode('utf-8', 'replace')}, not"
                f" {task_type.decode('utf-8', 'replace')}",
            )
        for debounced in self.kernel.hooks.debounced:
            debounced(task, mode.name.lower())
        if mode is DebounceMode.DROP:
            return False
        self._replace(task, payload, store)
        if mode is DebounceMode.EXTEND:
            self._extend(task, debounce.window_ms / 1000)
        self.kernel.journal.record_replace(task, payload)
        self._answer(session, task)
        return True

    def _replace(self, task: Task, payload: bytes, store: Callable[[bytes], int]) -> None:
        """C{payload} is C{task}'s from now on."""
        pool = self.kernel.pool
        block = store(payload)
        pool.free(task.block)
        task.block, task.size = block, len(payload)

    def _extend(self, task: Task, window: float) -> None:
        """C{task}'s window starts again (up to C{max_delay} after its SUBMIT)."""
        kernel = self.kernel
        now = kernel.clock()
        due = round(min(now + window, task.enqueued_at + kernel.limits.max_delay), 3)
        if task.state is PENDING or task.state is WAITING:
            task.due = due  # delayed when it is accepted, or its parents finish
        elif task.state is DELAYED:
            kernel._undelay(task)
            kernel._delay(task, due)
        else:
            task.home.remove(task)
            move(task, DELAYED)
            kernel._delay(task, due)

    def _answer(self, session: Session, task: Task) -> None:
        """
        Answer the folded SUBMIT: OK, a duplicate of C{task}, once the journal
        holds its payload; its session hears the outcome if the task's producer is gone.
        """
        kernel = self.kernel
        kernel.duplicates += 1
        producer = task.producer
        if producer is None or not producer.connected:
            task.producer = session
            session.outstanding += 1
        if not task.accepted:
            # Answered with the task's own SUBMIT (see Admission._duplicate).
            waiting = Duplicate(session)
            kernel.duplicates_waiting.setdefault(task.task_id, []).append(waiting)
            session.wait_for(waiting)
            return
        durable = kernel.journal.durable()
        if durable is None:
            session.reply(session.speaker.duplicate_ok(task.task_id))
            return
        waiting = Duplicate(session)
        session.wait_for(waiting)

        def decided(result: object) -> None:
            if isinstance(result, Failure):
                waiting.reply = session.speaker.error(
                    ErrorCode.QUEUE_FULL,
                    f"journal write failed ({result.getErrorMessage()}): a restart may undo it",
                )
            else:
                waiting.reply = session.speaker.duplicate_ok(task.task_id)
            session.send_decided()

        durable.addBoth(decided)
