"""
The queue: the one owner of the daemon's state.

L{QueueService} holds the PMAD pool, the FIFO of queued tasks, the idle
workers, the task each worker holds, and the counters.  It speaks in frames
(built with L{quicx.protocol.wire}) to L{IPeer}s but knows nothing of sockets: the
server protocol feeds it decoded messages and it answers through the peer.

Each connection is a L{Session}, created and owned here; the protocol only
holds a reference to pass back in.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator

from attrs import define, frozen
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from quicx.daemon import pmad
from quicx.daemon.events import EventLog
from quicx.daemon.journal.interface import IJournal, IJournalOwner, NullJournal
from quicx.daemon.journal.records import Recovery
from quicx.daemon.logsummary import LogSummary
from quicx.net.twisted_types import Service
from quicx.protocol import session as protocol
from quicx.protocol import wire
from quicx.protocol.session import IPeer, ProtocolViolation, Role
from quicx.protocol.wire import ErrorCode


@define(eq=False)
class Task:
    """
    A live task: queued, or held by a worker.

    The payload is not here: it lives in PMAD block C{block}.

    @ivar producer: the session that submitted it, told of the outcome;
        C{None} for a task recovered from the journal.
    @ivar attempts: how many times it has been handed to a worker.
    @ivar dispatched_at: when it was last handed to a worker.
    @ivar holder: the worker holding its current delivery, if any.
    @ivar finished: its outcome is decided (a task taken back at its timeout
        can still be in the queue, or at another worker, when the first
        outcome arrives; those copies are then skipped).
    @ivar reply: the answer to its SUBMIT (OK or ERROR) once decided, while
        it waits in its producer's L{Session.replies}.
    """

    task_id: int
    task_type: bytes
    block: int
    size: int
    producer: Session | None
    attempts: int = 0
    dispatched_at: float = 0.0
    holder: Session | None = None
    finished: bool = False
    reply: bytes | None = None


Session = protocol.Session[Task]
"""A connection, holding these tasks."""


@frozen
class Counters:
    """Totals since start, for the status view."""

    submitted: int
    completed: int
    failed: int
    rejected: int
    requeued: int
    timed_out: int
    given_up: int
    late_outcomes: int


@implementer(IJournalOwner)
class QueueService(Service):
    """
    The task queue.

    @ivar pool: the allocator every payload lives in.
    @ivar allowed_types: task types a SUBMIT may name (C{None}: any).
    @ivar journal: where accepted tasks and outcomes are recorded (a
        L{NullJournal} when nothing is kept).
    @ivar sessions: the open connections by session id.
    """

    # A Logger as a class attribute is named after the class:
    # [quicx.daemon.core.QueueService#info] in the log.
    log = Logger()

    def __init__(
        self,
        pool: pmad.Pmad,
        allowed_types: frozenset[bytes] | None = None,
        clock: Callable[[], float] = time.time,
        journal: IJournal | None = None,
        task_timeout: float = 0.0,
        max_attempts: int = 0,
        events: EventLog | None = None,
        failures: LogSummary | None = None,
    ) -> None:
        self.pool = pool
        self.allowed_types = allowed_types
        self.clock = clock
        self.journal: IJournal = journal if journal is not None else NullJournal()
        self.task_timeout = task_timeout
        self.max_attempts = max_attempts
        self.events = events
        self.failures = failures or LogSummary(self.log)
        self.draining = False
        self._drained: Deferred[None] | None = None
        self._drain_timer: IDelayedCall | None = None
        self.journal.bind(self)
        self.sessions: dict[int, Session] = {}
        self.started_at = clock()
        # Tasks in the order they arrive; with a journal, only once durable.
        self._queue: deque[Task] = deque()
        self._idle: OrderedDict[int, Session] = OrderedDict()
        self._live: dict[int, Task] = {}
        self._workers = 0
        self._last_task_id = 0
        self._last_session_id = 0
        self._submitted = 0
        self._completed = 0
        self._failed = 0
        self._rejected = 0
        self._requeued = 0
        self._timed_out = 0
        self._given_up = 0
        self._late_outcomes = 0
        # Finished tasks still in the queue (see Task.finished).
        self._stale = 0

    # -- sessions -----------------------------------------------------------

    def open_session(self, peer: IPeer) -> Session:
        self._last_session_id += 1
        session = Session(self._last_session_id, peer, self.clock())
        self.sessions[session.session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        """Forget a connection; tasks it held go back to the queue's head, in order."""
        session.connected = False
        self.sessions.pop(session.session_id, None)
        self._idle.pop(session.session_id, None)
        if session.role is Role.WORKER:
            self._workers -= 1
        session.replies.clear()
        if session.tasks or session.overdue:
            held, session.tasks = session.tasks, {}
            # Its late copies are forgotten: each task is queued, held by
            # another worker, or finished.
            session.overdue = {}
            cause = f"worker {session.peer.peer_name} disconnected"
            for task in reversed(held.values()):
                task.holder = None
                self._requeue(task, "its worker disconnected", cause)
            self._dispatch()
        if self._drained is not None:
            self._check_drained()

    def claim_role(self, session: Session, role: Role) -> None:
        """
        Give a new connection its role, or check it has C{role} already.

        @raise ProtocolViolation: the connection has another role.
        """
        if session.claim(role) and role is Role.WORKER:
            self._workers += 1

    # -- producers ------------------------------------------------------------

    def submit(self, session: Session, task_type: bytes, payload: bytes) -> None:
        """
        Accept a task and answer OK, or answer the ERROR that says why not.

        With a journal that syncs each record, the OK (and the task's place in
        the queue) waits until the record is on disk; see L{accepted}.
        """
        if self.allowed_types is not None and task_type not in self.allowed_types:
            self._reject(
                session,
                ErrorCode.UNKNOWN_TASK_TYPE,
                f"unknown task type: {task_type.decode('utf-8', 'replace')}",
                task_type,
                len(payload),
            )
            return
        if self.draining:
            self._reject(
                session,
                ErrorCode.QUEUE_FULL,
                "the daemon is shutting down",
                task_type,
                len(payload),
            )
            return
        journal = self.journal
        if journal.broken:
            self._reject(
                session,
                ErrorCode.QUEUE_FULL,
                f"journal unavailable: {journal.broken}",
                task_type,
                len(payload),
            )
            return
        pool = self.pool
        try:
            # An empty payload still takes the smallest block: every live task
            # holds a block, so the pool bounds how many tasks there are.
            block = pool.store(payload)
        except pmad.AllocationTooLarge as e:
            self._reject(session, ErrorCode.PAYLOAD_TOO_LARGE, str(e), task_type, len(payload))
            return
        except pmad.PoolExhausted as e:
            self._reject(session, ErrorCode.QUEUE_FULL, f"queue full: {e}", task_type, len(payload))
            return
        task = Task(self._next_task_id(), task_type, block, len(payload), session)
        self._live[task.task_id] = task
        session.outstanding += 1
        if journal.record_submit(task, payload):
            self._accept(task)
        else:
            # Its answer, and every answer after it, waits for the journal.
            session.wait_for(task)

    def _accept(self, task: Task) -> None:
        """Answer OK for C{task} and queue it."""
        self._submitted += 1
        if self.events is not None:
            self._event("submitted", task)
        producer = task.producer
        if producer is not None and producer.connected:
            # producer.reply(), inlined: the submit path's one hot call.
            if producer.replies:
                producer.replies.append(wire.encode_ok(task.task_id))
            else:
                producer.peer.sendFrame(wire.encode_ok(task.task_id))
        self._queue.append(task)
        if self._idle:
            self._dispatch()

    def accepted(self, tasks: list[Task]) -> None:
        """(The journal.) These waiting tasks' records are durable."""
        producers: dict[Session, None] = {}
        for task in tasks:
            self._submitted += 1
            if self.events is not None:
                self._event("submitted", task)
            task.reply = wire.encode_ok(task.task_id)
            producer = task.producer
            assert producer is not None  # only submitted tasks wait for the journal
            producers[producer] = None
            self._queue.append(task)
        # Every answer of the batch decided first, then each producer's sent once.
        for producer in producers:
            producer.send_decided()
        if self._idle:
            self._dispatch()

    def refused(self, tasks: list[Task], reason: str, in_doubt: bool) -> None:
        """
        (The journal.) These waiting tasks' records could not be written.

        Their producers hear ERROR: nothing of them is left in the journal,
        so they never run.  When the journal could not even be cut back
        (C{in_doubt}), a record may survive and run after a restart: then
        their producers are disconnected unanswered, which tells them the
        outcome is unknown, rather than told a lie.
        """
        for task in tasks:
            del self._live[task.task_id]
            self.pool.free(task.block)
            producer = task.producer
            assert producer is not None
            producer.outstanding -= 1
            if not producer.connected:
                continue
            if in_doubt:
                producer.peer.disconnect()
                continue
            message = f"journal write failed: {reason}"
            self._count_rejection(
                producer, ErrorCode.QUEUE_FULL, message, task.task_type, task.size
            )
            task.reply = wire.encode_error(ErrorCode.QUEUE_FULL, message)
            producer.send_decided()

    def snapshot(self) -> Iterator[tuple[int, bytes, bytes]]:
        """(The journal.) The live tasks, oldest first."""
        read = self.pool.read
        return ((t.task_id, t.task_type, read(t.block)) for t in self._live.values())

    def restore(self, recovery: Recovery) -> None:
        """
        Queue the tasks a journal kept, in their order and with their ids.

        @raise pmad.PmadError: they do not fit this pool.
        """
        for recovered in recovery.tasks:
            payload = recovered.payload
            block = self.pool.store(payload)
            task = Task(recovered.task_id, recovered.task_type, block, len(payload), None)
            self._live[task.task_id] = task
            self._queue.append(task)
        self._last_task_id = recovery.last_task_id

    def _reject(
        self, session: Session, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        self._count_rejection(session, code, reason, task_type, size)
        session.reply(wire.encode_error(code, reason))

    def _count_rejection(
        self, session: Session, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        self._rejected += 1
        if self.events is not None:
            self.events.record(
                "rejected", None, task_type, size, session.session_id, None, 0, (int(code), reason)
            )

    def _event(
        self,
        kind: str,
        task: Task,
        worker: Session | None = None,
        extra: object = None,
        attempt: int | None = None,
    ) -> None:
        """
        Record one step of C{task}'s life (the caller checks C{self.events});
        C{attempt}: of the delivery it concerns, if not the latest.
        """
        producer = task.producer
        self.events.record(  # type: ignore[union-attr]
            kind,
            task.task_id,
            task.task_type,
            task.size,
            producer.session_id if producer is not None else None,
            worker.session_id if worker is not None else None,
            task.attempts if attempt is None else attempt,
            extra,
        )

    def _next_task_id(self) -> int:
        # Ids increase and wrap after 2**32 - 1, skipping ids still live.
        task_id = self._last_task_id
        while True:
            task_id = task_id + 1 if task_id < wire.MAX_TASK_ID else 1
            if task_id not in self._live:
                self._last_task_id = task_id
                return task_id

    # -- workers ----------------------------------------------------------------

    def ready(self, session: Session, credits: int = 1) -> None:
        """
        A worker asks for work, and may hold up to C{credits} tasks from now
        on: TASKs if tasks are queued for it, else WAIT.
        """
        session.credits = credits
        if session.free_credits <= 0:
            # Already holding all it may: not an error, and no more tasks.
            self._idle.pop(session.session_id, None)
            return
        self._idle[session.session_id] = session
        held = len(session.tasks)
        if self._queue:
            self._dispatch()
        # Nothing for it: none queued, or only tasks it still runs a late copy of.
        if len(session.tasks) == held:
            session.peer.sendFrame(wire.WAIT_FRAME)

    def done(self, session: Session, task_id: int) -> None:
        finished = self._finish(session, task_id, failed=False)
        if finished is not None:
            task, attempt = finished
            self._completed += 1
            if self.events is not None:
                self._event("done", task, session, None, attempt)
            producer = task.producer
            if producer is not None and producer.connected:
                producer.peer.sendFrame(wire.encode_done(task_id))
        self._become_idle(session)

    def failed(self, session: Session, task_id: int, reason: str) -> None:
        finished = self._finish(session, task_id, failed=True)
        if finished is not None:
            task, attempt = finished
            self._failed += 1
            if self.events is not None:
                self._event("failed", task, session, reason, attempt)
            # The protocol page has the daemon log every FAILED reason: each
            # distinct one is, in the summary (or one by one: see LogSummary).
            self.failures.note(
                "failed",
                task.task_type,
                reason,
                "task {task_id} ({task_type}) failed on {worker}: {reason}",
                task_id=task_id,
                task_type=task.task_type.decode("utf-8", "replace"),
                worker=session.peer.peer_name,
                reason=reason,
            )
            producer = task.producer
            if producer is not None and producer.connected:
                producer.peer.sendFrame(wire.encode_failed(task_id, reason))
        self._become_idle(session)

    def _finish(self, session: Session, task_id: int, failed: bool) -> tuple[Task, int] | None:
        """
        Take back the task C{session} reports, journal its end, free its block.

        The first outcome of a task wins, from whichever of its deliveries:
        a worker that reports a task taken back at its timeout still
        finishes it, if nobody has yet.

        @return: the task and the attempt number of the delivery that
            reported it; C{None} for an outcome that came too late (the task
            was finished already): ignored and counted.
        """
        task = session.tasks.pop(task_id, None)
        if task is not None:
            attempt = task.attempts
        else:
            late = self._late_delivery(session, task_id)
            if late is None:
                return None
            task, attempt = late
        task.finished = True
        task.holder = None
        if task.producer is not None:
            task.producer.outstanding -= 1
        del self._live[task_id]
        self.journal.record_outcome(task, failed)
        # Free before the producer hears of the outcome: the protocol promises
        # the slot is back in PMAD by then.
        self.pool.free(task.block)
        return task, attempt

    def _late_delivery(self, session: Session, task_id: int) -> tuple[Task, int] | None:
        """
        An outcome for a delivery C{session} no longer holds: the task if it
        is still to be finished (its other copies are then forgotten), else
        C{None}.

        @raise ProtocolViolation: C{session} was never given C{task_id}.
        """
        late = session.overdue.pop(task_id, None)
        if late is None:
            if session.role is not Role.WORKER:
                raise ProtocolViolation(
                    f"a {session.role.value} connection reported task {task_id};"
                    " only the worker holding a task may"
                )
            raise ProtocolViolation(
                f"task {task_id} is not held by this worker ({_held(session.tasks)})"
            )
        task = late[0]
        if task.finished:
            self._late_outcomes += 1
            self.failures.note(
                "reported late",
                task.task_type,
                "the task was finished before",
                "outcome of task {task_id} from {worker} ignored: it was finished before",
                task_id=task_id,
                worker=session.peer.peer_name,
            )
            return None
        holder = task.holder
        if holder is not None:
            # Another worker runs it now: its outcome will come too late.
            del holder.tasks[task_id]
            holder.overdue[task_id] = (task, task.attempts)
        else:
            self._stale += 1  # still queued: dispatch skips it
        self.failures.note(
            "finished after a timeout",
            task.task_type,
            "its worker reported it after it was taken back",
            "task {task_id} finished by {worker} after it was taken back",
            task_id=task_id,
            worker=session.peer.peer_name,
        )
        return late

    def _become_idle(self, session: Session) -> None:
        # After DONE/FAILED a worker has a free credit without a new READY
        # (unless a READY has since lowered its credits below what it held).
        if session.free_credits > 0:
            self._idle[session.session_id] = session
            if self._queue:
                self._dispatch()
                return
        if self._drained is not None:
            self._check_drained()

    def _dispatch(self) -> None:
        """
        Hand queued tasks to workers with free credits, oldest first on both
        sides; a worker with credits left goes to the back of the line, so
        tasks are dealt round-robin.  A task never goes to a worker that
        still holds a late copy of it.
        """
        queue, idle, pool = self._queue, self._idle, self.pool
        # Only the task timeout reads dispatched_at: no clock read without it.
        now = self.clock() if self.task_timeout and queue and idle else 0.0
        set_aside: list[Task] = []
        while queue and idle:
            task = queue.popleft()
            if task.finished:
                self._stale -= 1
                continue
            worker_id, worker = idle.popitem(last=False)
            if worker.overdue and task.task_id in worker.overdue:
                other = _first_without(idle, task.task_id)
                idle[worker_id] = worker
                idle.move_to_end(worker_id, last=False)
                if other is None:
                    set_aside.append(task)
                    continue
                worker_id, worker = other.session_id, idle.pop(other.session_id)
            task.attempts += 1
            task.dispatched_at = now
            task.holder = worker
            worker.tasks[task.task_id] = task
            if worker.credits > 1 and worker.free_credits > 0:
                idle[worker_id] = worker
            worker.peer.sendFrame(
                wire.encode_task(task.task_id, task.task_type, pool.read(task.block))
            )
            if self.events is not None:
                self._event("dispatched", task, worker)
        if set_aside:
            queue.extendleft(reversed(set_aside))

    def expire_overdue(self) -> None:
        """
        Take back every task held longer than the task timeout and queue it
        again, at the tail.  The worker keeps the credit until it reports
        the task; if it does before anyone else, its outcome still counts.
        """
        timeout = self.task_timeout
        deadline = self.clock() - timeout
        for session in list(self.sessions.values()):
            overdue = [t for t in session.tasks.values() if t.dispatched_at <= deadline]
            for task in overdue:
                del session.tasks[task.task_id]
                session.overdue[task.task_id] = (task, task.attempts)
                task.holder = None
                self._timed_out += 1
                # At the tail: a task that keeps running too long must not
                # take every worker from the tasks queued behind it.
                self._requeue(
                    task,
                    "held past the task timeout",
                    f"held for more than {timeout:g} s by {session.peer.peer_name}"
                    f" (attempt {task.attempts})",
                    at_head=False,
                )
        self._dispatch()
        self._check_drained()

    def drain(self, timeout: float, clock: IReactorTime) -> Deferred[None]:
        """
        Stop taking tasks; fire once nothing is queued or running, or after
        C{timeout} seconds, whichever is first.
        """
        self.draining = True
        self._drained = Deferred()
        self._drain_timer = clock.callLater(timeout, self.stop_draining)
        drained = self._drained
        self._check_drained()
        return drained

    def _check_drained(self) -> None:
        # Done when nothing is left, or when no worker is left to do it (the
        # listeners are closed, so none will come).
        if (
            self._drained is not None
            and not self.tasks_running
            and (not self.queued or not self._workers)
        ):
            self.stop_draining()

    def stop_draining(self) -> None:
        """Fire the drain's Deferred now, whatever is left."""
        drained, self._drained = self._drained, None
        if drained is not None:
            if self._drain_timer is not None and self._drain_timer.active():
                self._drain_timer.cancel()
            drained.callback(None)

    def awaits_outcome(self, session: Session) -> bool:
        """Whether C{session} is a producer still owed an outcome."""
        return session.outstanding > 0

    def _requeue(self, task: Task, why: str, cause: str, at_head: bool = True) -> None:
        """
        Queue C{task} again (C{why} in short, C{cause} in full) -- or, once
        it has been delivered C{max_attempts} times, fail it: a task that
        kills or outlasts every worker must not come back forever.  Only a
        task queued again counts (and is recorded) as requeued.
        """
        if self.max_attempts and task.attempts >= self.max_attempts:
            self._give_up(task, f"given up after {task.attempts} attempts; last: {cause}")
            return
        if self.events is not None:
            self._event("requeued", task, None, cause)
        if at_head:
            self._queue.appendleft(task)
        else:
            self._queue.append(task)
        self._requeued += 1
        self.failures.note(
            "requeued",
            task.task_type,
            why,
            "task {task_id} requeued: {cause}",
            task_id=task.task_id,
            cause=cause,
        )

    def _give_up(self, task: Task, reason: str) -> None:
        """Fail a task no worker holds: its producer hears FAILED with C{reason}."""
        task.finished = True
        del self._live[task.task_id]
        self.journal.record_outcome(task, True)
        self.pool.free(task.block)
        self._failed += 1
        self._given_up += 1
        if self.events is not None:
            self._event("failed", task, None, reason)
        self.failures.note(
            "given up",
            task.task_type,
            "delivered max_attempts times",
            "task {task_id} failed: {reason}",
            task_id=task.task_id,
            reason=reason,
        )
        producer = task.producer
        if producer is not None:
            producer.outstanding -= 1
            if producer.connected:
                producer.peer.sendFrame(wire.encode_failed(task.task_id, reason))

    # -- everyone -----------------------------------------------------------------

    def stats(self) -> wire.StatsResponse:
        return wire.StatsResponse(
            queue_depth=self.queued,
            workers_total=self._workers,
            workers_idle=len(self._idle),
            pmad_bytes_used=self.pool.bytes_used,
            pmad_bytes_total=self.pool.bytes_total,
        )

    def counters(self) -> Counters:
        return Counters(
            self._submitted,
            self._completed,
            self._failed,
            self._rejected,
            self._requeued,
            self._timed_out,
            self._given_up,
            self._late_outcomes,
        )

    @property
    def queued(self) -> int:
        """Tasks waiting for a worker (not those finished while queued)."""
        return len(self._queue) - self._stale

    @property
    def tasks_running(self) -> int:
        """Tasks held by workers right now."""
        return sum(len(session.tasks) for session in self.sessions.values())

    def stopService(self) -> None:
        super().stopService()
        self.failures.flush()
        live = len(self._live)
        queued, running = self.queued, self.tasks_running
        if not live:
            self.log.info("stopping with no live tasks")
        elif self.journal.path is not None:
            self.log.info(
                "stopping with {queued} queued and {running} running tasks;"
                " the journal {path} keeps them",
                queued=queued,
                running=running,
                path=self.journal.path,
            )
        else:
            if self.events is not None:
                for task in self._live.values():
                    self._event("dropped", task, None, "daemon stopped without a journal")
            self.log.warn(
                "stopping with {queued} queued and {running} running tasks;"
                " without a journal they are dropped",
                queued=queued,
                running=running,
            )


def _first_without(idle: OrderedDict[int, Session], task_id: int) -> Session | None:
    """The first idle worker holding no late copy of C{task_id}."""
    for session in idle.values():
        if task_id not in session.overdue:
            return session
    return None


def _held(tasks: dict[int, Task]) -> str:
    """What a worker holds, for an error message."""
    if not tasks:
        return "no task"
    ids = list(tasks)
    shown = ", ".join(str(task_id) for task_id in ids[:5])
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return f"task{'s' if len(ids) > 1 else ''} {shown}{more}"
