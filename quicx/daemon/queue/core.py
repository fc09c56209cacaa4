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

import random
import time
from collections.abc import Callable
from typing import Any, NoReturn, Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from quicx.daemon.journal.interface import (
    DeadInfo,
    IJournal,
    IJournalOwner,
    KeyEntry,
    NullJournal,
    Snapshot,
)
from quicx.daemon.journal.records import Recovery
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.observe.telemetry import Tally, Telemetry
from quicx.daemon.queue import pmad
from quicx.daemon.queue.deadletters import DeadLetters
from quicx.daemon.queue.dedup import KeyTable
from quicx.daemon.queue.delays import Delays
from quicx.daemon.queue.dispatch import note_outcome
from quicx.daemon.queue.dispatcher import Dispatcher
from quicx.daemon.queue.hooks import IEvents, record
from quicx.daemon.queue.model import Counters, Duplicate, Refused, Session, Task
from quicx.daemon.queue.outcomes import Outcomes
from quicx.daemon.queue.policy import ProgressSettings, QueueLimits
from quicx.daemon.queue.progress import ProgressBook, Report
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.results import KeptOutcome
from quicx.daemon.queue.retries import retry_wait
from quicx.daemon.queue.speaker import Speaker
from quicx.net.twisted_types import Service
from quicx.protocol import codec, outcomes, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState
from quicx.protocol.session import IPeer, ProtocolViolation, Role


class IScheduleBook(Protocol):
    """The schedules, as the queue's journal snapshot reads them."""

    def last_fires(self) -> list[tuple[str, float]]:
        """Each schedule's last fire time."""

    def definitions(self) -> list[tuple[str, bytes]]:
        """The run-time schedules' SCHEDULE payloads, by name."""


class ISharedData(Protocol):
    """The shared data, as the queue sees it."""

    def versions(self) -> list[tuple[str, int, bytes]]:
        """Each name's current version and data (for the journal's snapshot)."""

    def unfollow(self, session: Session) -> None:
        """Forget a connection that closed."""

    def caught_up(self, session: Session) -> None:
        """C{session}'s output drained: send it the newest of what it missed."""


@implementer(IJournalOwner)
class QueueService(Service):
    """
    The task queue.

    @ivar pool: the allocator every payload lives in.
    @ivar allowed_types: task types a SUBMIT may name (C{None}: any).
    @ivar journal: where accepted tasks and outcomes are recorded (a
        L{NullJournal} when nothing is kept).
    @ivar limits: the queues' policies and the limits on queues and keys.
    @ivar sessions: the open connections by session id.
    @ivar queues: the named queues by name.
    @ivar progress: the tasks' progress reports.
    @ivar events: where lifecycle events are recorded, while they have
        somewhere to go (files, or a live subscriber): the daemon's event
        bus, or C{None}.
    @ivar event_bus: the event bus, once one is made for this queue.
    @ivar shared: the shared data, once a L{quicx.daemon.queue.shared.SharedData}
        is made for this queue.
    @ivar kept: the kept outcomes of finished tasks.
    @ivar groups: the groups of tasks.
    @ivar waits: the AWAITs and group WAITs waiting.
    @ivar max_result: the longest result an ACK may carry: C{[results]
        max_size}, or the pool's largest block if that is smaller.
    """

    # A Logger as a class attribute is named after the class:
    # [quicx.daemon.queue.core.QueueService#info] in the log.
    log = Logger()

    def __init__(  # noqa: PLR0913
        self,
        pool: pmad.Pmad,
        allowed_types: frozenset[bytes] | None = None,
        clock: Callable[[], float] = time.time,
        journal: IJournal | None = None,
        task_timeout: float = 0.0,
        max_attempts: int = 0,
        failures: LogSummary | None = None,
        limits: QueueLimits | None = None,
        scheduler: IReactorTime | None = None,
        progress: ProgressSettings | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self.pool = pool
        self.telemetry = telemetry or Telemetry()
        self.allowed_types = allowed_types
        self.clock = clock
        self.journal: IJournal = journal if journal is not None else NullJournal()
        self.task_timeout = task_timeout
        self.max_attempts = max_attempts
        self._events: IEvents | None = None
        self.event_bus: IEvents | None = None
        self.failures = failures or LogSummary(self.log)
        self.limits = limits = limits or QueueLimits()
        if scheduler is None:
            from twisted.internet import reactor as scheduler
        self._scheduler: IReactorTime = scheduler  # type: ignore[assignment]
        self.draining = False
        self._drained: Deferred[None] | None = None
        self._drain_timer: IDelayedCall | None = None
        self.journal.bind(self)
        self.sessions: dict[int, Session] = {}
        self.started_at = clock()
        self.queues: dict[str, NamedQueue[Task, Session]] = {}
        for name in limits.declared:
            self._queue(name)
        self.default_queue = self._queue(limits.default_queue)
        self.keys: KeyTable[Task] = KeyTable(limits.dedup_window, limits.max_dedup_keys)
        self._fairness_keys = 0
        self._live: dict[int, Task] = {}
        self._workers = 0
        self._last_task_id = 0
        self._last_session_id = 0
        self._timed_out = 0
        self._given_up = 0
        self._late_outcomes = 0
        self._duplicates = 0
        self._dead_dropped = 0
        self._stale = 0
        self._dead_timer: IDelayedCall | None = None
        self.schedules: IScheduleBook | None = None
        self.shared: ISharedData | None = None
        self.progress: ProgressBook[Task] = ProgressBook(
            self._scheduler, clock, progress or ProgressSettings(), self._progress_out
        )
        self.random: Callable[[], float] = random.random
        self.dispatcher = Dispatcher(
            pool, self.queues, clock, self._scheduler, self.timeout_of, limits.dispatch.lifo
        )
        self.delays: Delays[Task] = Delays(scheduler, clock, self._delays_due)  # type: ignore[arg-type]
        self.dead_letters: DeadLetters[Task] = DeadLetters(
            limits.dead_max_count, limits.dead_max_age
        )
        self._duplicates_waiting: dict[int, list[Duplicate]] = {}  # by the task they wait on
        self.outcomes = outcomes = Outcomes(
            pool,
            self.journal,
            limits,
            self._scheduler,
            clock,
            self._live,
            self.sessions,
            self.failures,
            self.log,
        )
        self.kept, self.groups, self.waits = outcomes.kept, outcomes.groups, outcomes.waits
        self.await_outcome, self.await_group = outcomes.await_outcome, outcomes.await_group
        self.open_group, self.close_group = outcomes.open_group, outcomes.close_group
        self.max_result = min(limits.results.max_size, pool.max_size)

    @property
    def events(self) -> IEvents | None:
        """
        Where lifecycle events are recorded, while they have somewhere to go
        (the event bus sets it then): the kernel records events only then.
        """
        return self._events

    @events.setter
    def events(self, events: IEvents | None) -> None:
        self._events = self.dispatcher.events = events

    # -- queues -------------------------------------------------------------

    def _queue(self, name: str) -> NamedQueue[Task, Session]:
        """
        The queue called C{name}, created on first use.

        @raise Refused: creating it would pass C{max_queues}.
        """
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = self._new_queue(name)
        return queue

    def _new_queue(self, name: str, more: int = 0) -> NamedQueue[Task, Session]:
        """
        A new queue called C{name}, not kept in C{queues} yet: a request
        keeps it there once it is taken, so that one refused leaves none.

        @raise Refused: keeping it, and C{more} new queues besides, would
            pass C{max_queues}.
        """
        if len(self.queues) + more >= self.limits.max_queues:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many queues (max_queues = {self.limits.max_queues}); {name!r} is new",
                log_id="limit.queues",
            )
        return NamedQueue(name, self.limits.policy(name), name in self.limits.declared)

    def _tally(self, queue: NamedQueue[Task, Session], task_type: bytes) -> Tally:
        """The tally of C{task_type} in C{queue}, cached in the queue (up to max_types)."""
        tally = self.telemetry.tally(queue.name, task_type)
        if len(queue.tallies) < self.telemetry.max_types:
            queue.tallies[task_type] = tally
        return tally

    def _forget_if_idle(self, queue: NamedQueue[Task, Session]) -> None:
        """Forget an undeclared queue nothing refers to any more (so queues stay bounded)."""
        if queue.keys:
            self._fairness_keys -= queue.prune_keys(self.clock())
        if (
            queue.forgettable
            and queue is not self.default_queue
            # Not forgotten already (a queue of that name may exist anew).
            and self.queues.get(queue.name) is queue
        ):
            del self.queues[queue.name]

    def find_queue(self, name: str) -> NamedQueue[Task, Session]:
        """@raise Refused: (not found) there is no queue C{name}."""
        queue = self.queues.get(name)
        if queue is None:
            raise Refused(ErrorCode.NOT_FOUND, f"no queue named {name!r}")
        return queue

    # -- sessions -----------------------------------------------------------

    def open_session(self, peer: IPeer, speaker: Speaker) -> Session:
        """A new connection, spoken to by C{speaker} (until its first frame chooses another)."""
        self._last_session_id += 1
        session = Session(self._last_session_id, peer, self.clock(), speaker=speaker)
        self.sessions[session.session_id] = session
        return session

    def close_session(self, session: Session) -> None:
        """Forget a connection; tasks it held go back to the head of their queues, in order."""
        session.connected = False
        self.sessions.pop(session.session_id, None)
        if self.waits.count:
            self.waits.drop(session)
        if session.role is Role.WORKER:
            self._workers -= 1
            self._unsubscribe(session)
            if self.shared is not None:
                self.shared.unfollow(session)
        if self.events is not None:
            self.events.forget(session)
        session.replies.clear()
        if session.tasks or session.overdue:
            held, session.tasks = session.tasks, {}
            # Its late copies are forgotten: each task is queued, held by
            # another worker, or finished.
            session.overdue = {}
            cause = f"worker {session.peer.peer_name} disconnected"
            for task in reversed(held.values()):
                task.holder = None
                self._requeue(task, "its worker disconnected", cause, worker=session.peer.peer_name)
            for queue in {task.home: None for task in held.values()}:
                self.dispatcher.serve_queue(queue)
        if self._drained is not None:
            self._check_drained()

    def claim_role(self, session: Session, role: Role) -> None:
        """
        Give a new connection its role, or check it has C{role} already.

        @raise ProtocolViolation: the connection has another role.
        """
        if session.claim(role) and role is Role.WORKER:
            self._workers += 1
            self._subscribe(session, (self.default_queue,))

    def subscribe(self, session: Session, names: tuple[str, ...]) -> None:
        """
        Make worker C{session} serve these queues, in order.

        @raise Refused: a queue would pass C{max_queues}.
        """
        new = [name for name in dict.fromkeys(names) if name not in self.queues]
        # All made before any is kept: a READY refused leaves no queue behind.
        self.queues.update({name: self._new_queue(name, more) for more, name in enumerate(new)})
        queues = tuple(self.queues[name] for name in names)
        old = session.subscriptions
        self._subscribe(session, queues)
        for queue in old:
            self._forget_if_idle(queue)

    def _subscribe(self, session: Session, queues: tuple[NamedQueue[Task, Session], ...]) -> None:
        self._unsubscribe(session)
        session.subscriptions = queues
        for queue in queues:
            queue.subscribers += 1

    def _unsubscribe(self, session: Session) -> None:
        for queue in session.subscriptions:
            queue.subscribers -= 1
            queue.idle.pop(session.session_id, None)
            if not session.connected:
                self._forget_if_idle(queue)
        session.subscriptions = ()
        session.waiting = False

    # -- producers ------------------------------------------------------------

    def queue_named(self, name: str | None) -> NamedQueue[Task, Session]:
        """
        The queue a SUBMIT names (C{None}: the default queue); a new one is
        not kept until a task is (see L{_new_queue}).

        @raise Refused: it is new, and would pass C{max_queues}.
        """
        if name is None:
            return self.default_queue
        return self.queues.get(name) or self._new_queue(name)

    def tally_of(self, queue: NamedQueue[Task, Session], task_type: bytes) -> Tally:
        """What a task of C{task_type} in C{queue} counts in."""
        return queue.tallies.get(task_type) or self._tally(queue, task_type)

    def admit(self, task: Task, payload: bytes) -> bool:
        """
        (The admission, L{quicx.daemon.queue.admission}.)  Take C{task}, whose
        SUBMIT passed its checks: it is live from now on, and recorded.

        @return: whether it may be answered OK and queued now (L{accept}); if
            not, the journal says when its record is durable (L{accepted}).
        """
        self._live[task.task_id] = task
        if task.key is not None:
            self.keys.add(task.home.name, task.key, task)
        if self.journal.record_submit(task, payload):
            return True
        task.home.pending += 1
        return False

    def accept(self, task: Task) -> None:
        """Answer OK for C{task} and queue it."""
        task.accepted = True
        task.tally.submitted += 1
        if self.events is not None:
            record(self.events, "submitted", task, None, _due_ms(task.due))
        producer = task.producer
        if producer is not None and producer.connected:
            # producer.reply(), inlined: the submit path's one hot call.
            ok = producer.speaker.ok(task.task_id, False)
            if producer.replies:
                producer.replies.append(ok)
            else:
                producer.peer.sendFrame(ok)
        queue = task.home
        if task.due:
            self._delay(task, task.due)
            return
        if queue.idle and self.dispatcher.hand_new(task, queue):
            return
        if queue.push(task):
            self._fairness_keys += 1
        if queue.idle:
            self.dispatcher.serve_queue(queue)

    def accepted(self, tasks: list[Task]) -> None:
        """(The journal.) These waiting tasks' records are durable."""
        producers: dict[Session, None] = {}
        queues: dict[NamedQueue[Task, Session], None] = {}
        for task in tasks:
            task.accepted = True
            task.tally.submitted += 1
            task.home.pending -= 1
            if self.events is not None:
                record(self.events, "submitted", task, None, _due_ms(task.due))
            producer = task.producer
            if producer is not None:  # None: a schedule's task
                task.reply = producer.speaker.ok(task.task_id, False)
                producers[producer] = None
            for waiting in self._duplicates_waiting.pop(task.task_id, ()):
                waiting.reply = waiting.session.speaker.ok(task.task_id, True)
                producers[waiting.session] = None
            if task.due:
                self._delay(task, task.due)
                continue
            if task.home.push(task):
                self._fairness_keys += 1
            queues[task.home] = None
        # Every answer of the batch decided first, then each producer's sent once.
        for producer in producers:
            producer.send_decided()
        for queue in queues:
            if queue.idle:
                self.dispatcher.serve_queue(queue)

    def refused(self, tasks: list[Task], reason: str, in_doubt: bool) -> None:
        """
        (The journal.) These waiting tasks' records could not be written.

        Their producers hear ERROR: nothing of them is left in the journal,
        so they never run.  When the journal could not even be cut back
        (C{in_doubt}), a record may survive and run after a restart: then
        their producers are disconnected unanswered, which tells them the
        outcome is unknown, rather than told a lie.
        """
        message = f"journal write failed: {reason}"
        for task in tasks:
            del self._live[task.task_id]
            task.home.pending -= 1
            self._forget_if_idle(task.home)
            if task.group:
                self.outcomes.leave_group(task)
            if self.waits.count:
                self.outcomes.answer_waits(task.task_id, OutcomeState.UNKNOWN)
            if task.key is not None:
                self.keys.drop(task.queue, task.key)
            self.pool.free(task.block)
            waiting: list[Session | Duplicate] = [task.producer] if task.producer else []
            waiting += self._duplicates_waiting.pop(task.task_id, [])
            for request in waiting:
                session = request if isinstance(request, Session) else request.session
                session.outstanding -= isinstance(request, Session)
                if not session.connected:
                    continue
                if in_doubt:
                    session.peer.disconnect()
                    continue
                self._count_rejection(
                    session, ErrorCode.QUEUE_FULL, message, task.task_type, task.size
                )
                error = session.speaker.error(ErrorCode.QUEUE_FULL, message)
                if isinstance(request, Duplicate):
                    request.reply = error
                else:
                    task.reply = error
                session.send_decided()

    def snapshot(self) -> Snapshot:
        """
        (The journal.) The live tasks oldest first, the paused queues, the
        remembered keys, the schedules' state, the shared data, the kept
        outcomes and the groups.
        """
        read = self.pool.read
        schedules = self.schedules
        return Snapshot(
            [(task, read(task.block)) for task in self._live.values()],
            [queue.name for queue in self.queues.values() if queue.paused],
            list(self.keys.entries()),
            [] if schedules is None else schedules.last_fires(),
            [] if schedules is None else schedules.definitions(),
            [] if self.shared is None else self.shared.versions(),
            list(self.kept.entries()),
            self.kept.forgotten_ids(),
            list(self.groups.entries()),
            self.kept.evicted_ids(),
        )

    def restore(self, recovery: Recovery) -> None:
        """
        Queue the tasks a journal kept, in their order and with their ids and
        queues; pause the queues it paused; remember its keys; keep its kept
        outcomes and groups.  A task's producer is gone: its outcome is kept
        (as one nobody asked for) where version 2 is spoken.

        @raise pmad.PmadError: they do not fit this pool.
        @raise Refused: they need more queues than C{max_queues}.
        """
        now = self.clock()
        dead: list[Task] = []
        self.groups.restore(recovery.groups, recovery.last_group_id)
        for name in recovery.paused:
            self._queue(name).paused = True
        for recovered in recovery.tasks:
            payload = recovered.payload
            block = self.pool.store(payload)
            queue = self.default_queue if recovered.queue is None else self._queue(recovered.queue)
            key, fairness = recovered.key, recovered.fairness
            task = Task(
                recovered.task_id,
                recovered.task_type,
                block,
                len(payload),
                None,
                queue,
                queue.policy.priority if recovered.priority is None else recovered.priority,
                now if recovered.enqueued_at is None else recovered.enqueued_at,
                key,
                fairness,
                accepted=True,
                retries=recovered.retries,
                failures=recovered.failures,
                attempts=recovered.attempts,
                backoff=None
                if recovered.backoff is None
                else taskflow.Backoff._make(recovered.backoff),
                dead=recovered.dead,
                keep_for=recovered.keep_for,
                recovered=True,
                group=recovered.group if self.groups.get(recovered.group) else 0,
                tally=self._tally(queue, recovered.task_type),
                ready_at=now,
            )
            self._live[task.task_id] = task
            if self.events is not None:
                # The reports join it to its submit (in the run before).
                record(self.events, "recovered", task, None, _due_ms(recovered.due))
            if key is not None:
                self.keys.add(queue.name, key, task)
            if task.dead is not None:
                dead.append(task)
            elif recovered.due:
                # Due while the daemon was down: queued at once, in due order.
                self._delay(task, recovered.due)
            elif queue.push(task):
                self._fairness_keys += 1
        dead.sort(key=lambda task: task.dead.died_at if task.dead else 0.0)
        for task in dead:
            task.home.dead += 1
            for old in self.dead_letters.add(task):
                self._drop_dead(old, "pushed out of the dead-letter set (max_count)")
        self._arm_dead_expiry()
        self.keys.restore(recovery.keys, now)
        self._last_task_id = recovery.last_task_id
        # After the tasks: a task's payload comes before a kept result.
        self.kept.restore(recovery.kept, recovery.forgotten, recovery.evicted)

    def reject(self, session: Session, refusal: Refused, task_type: bytes, size: int) -> None:
        reason = str(refusal)
        self._count_rejection(session, refusal.code, reason, task_type, size)
        self.limit_hit(session.peer.peer_name, refusal)
        session.reply(session.speaker.error(refusal.code, reason))

    def limit_hit(self, peer: str, refusal: Refused) -> None:
        """
        Log C{refusal} of C{peer}'s request if it is a limit hit: at once the
        first time, then summarised (see L{LogSummary.limit}).
        """
        if refusal.log_id is not None:
            self.failures.limit(
                "refused {peer}: {reason}", log_id=refusal.log_id, peer=peer, reason=str(refusal)
            )

    def _count_rejection(
        self, session: Session | None, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        self.telemetry.rejected[code.name.lower()] += 1
        if self.events is not None:
            producer = None if session is None else session.session_id
            self.events.record(
                "rejected", None, task_type, size, producer, None, 0, (int(code), reason)
            )

    def next_task_id(self) -> int:
        # Ids increase and wrap after 2**32 - 1, skipping ids still live.
        task_id = self._last_task_id
        while True:
            task_id = task_id + 1 if task_id < codec.MAX_TASK_ID else 1
            if task_id not in self._live:
                self._last_task_id = task_id
                return task_id

    # -- cancel, pause, purge ---------------------------------------------------------

    def cancel(self, session: Session, task_id: int) -> dict[str, Any]:
        """
        Cancel a queued task: its producer hears CANCELLED.

        @raise Refused: (not found) no such live task; (forbidden) not
            C{session}'s to cancel; (conflict) a worker is running it.
        """
        task = self._live.get(task_id)
        if task is None or not task.accepted:
            raise Refused(ErrorCode.NOT_FOUND, f"no queued or running task {task_id}")
        if not (
            session.admin
            or task.producer is session
            or (session.identity is not None and task.owner == session.identity)
        ):
            raise Refused(
                ErrorCode.FORBIDDEN,
                f"task {task_id} was submitted by another client;"
                " cancelling it needs the admin role",
            )
        if task.holder is not None:
            raise Refused(
                ErrorCode.CONFLICT,
                f"task {task_id} is running on {task.holder.peer.peer_name};"
                " a running task is not interrupted",
            )
        if task.dead is not None:
            raise Refused(
                ErrorCode.CONFLICT,
                f"task {task_id} is dead: replay it or purge the dead-letter set",
            )
        if task.due:
            self._undelay(task)
        else:
            task.home.remove(task)
        self._cancel(task, f"cancelled by {session.peer.peer_name}")
        self._forget_if_idle(task.home)
        return {"id": task_id, "state": "cancelled", "queue": task.home.name}

    def _cancel(self, task: Task, why: str) -> None:
        """Finish a task taken off its queue as cancelled."""
        task.tally.cancelled += 1
        self._end(task, "cancelled")
        if self.events is not None:
            record(self.events, "cancelled", task, None, why)
        producer = task.producer
        if producer is not None:
            producer.outstanding -= 1
            self._tell_outcome(producer, task.task_id, "cancelled", "")
        self.outcomes.settle(task, OutcomeState.CANCELLED, None, why)

    def _tell_outcome(
        self,
        session: Session,
        task_id: int,
        outcome: str,
        reason: str,
        result: taskflow.Result | None = None,
    ) -> None:
        """
        Send C{session} a task's outcome in its version (a version-1 peer
        hears a cancel as FAILED C{cancelled}, and no result); C{reason}: a
        failure's, verbatim.
        """
        if not session.connected:
            return
        speaker = session.speaker
        if outcome == "done":
            frame = speaker.done(task_id, result)
        elif outcome == "cancelled":
            frame = speaker.cancelled(task_id)
        else:
            frame = speaker.failed(task_id, reason)
        session.peer.sendFrame(frame)

    def _tell_kept(self, session: Session, kept: KeptOutcome, data: bytes) -> None:
        """Send C{session} a kept outcome as its task's producer would have heard it."""
        state = kept.state
        if state == OutcomeState.DONE:
            result = taskflow.Result(taskflow.ResultKind(kept.kind), data) if kept.kind else None
            self._tell_outcome(session, kept.task_id, "done", "", result)
        elif state == OutcomeState.CANCELLED:
            self._tell_outcome(session, kept.task_id, "cancelled", "")
        else:
            self._tell_outcome(session, kept.task_id, "failed", data.decode("utf-8", "replace"))

    def set_paused(self, name: str, paused: bool) -> dict[str, Any]:
        """
        Pause (creating the queue) or resume a queue; journaled.

        @raise Refused: (not found) resuming a queue that does not exist;
            (queue full) pausing a new queue past C{max_queues}.
        """
        queue = self._queue(name) if paused else self.find_queue(name)
        if queue.paused != paused:
            queue.paused = paused
            self.journal.record_pause(name, paused)
            if paused:
                self.log.info("queue {queue} paused", log_id="queue.paused", queue=name)
            else:
                self.log.info("queue {queue} resumed", log_id="queue.resumed", queue=name)
                self.dispatcher.serve_queue(queue)
                self._forget_if_idle(queue)
        return {"queue": name, "paused": paused}

    def purge(self, name: str) -> dict[str, Any]:
        """Cancel every queued task of a queue. @raise Refused: (not found) no such queue."""
        queue = self.find_queue(name)
        tasks = list(queue.tasks())
        for task in tasks:
            queue.remove(task)
            self._cancel(task, "its queue was purged")
        if queue.delayed:
            delayed = [task for task in self.delays if task.home is queue]
            for task in delayed:
                self._undelay(task)
                self._cancel(task, "its queue was purged")
            tasks += delayed
        self._forget_if_idle(queue)
        if tasks:
            self.log.info(
                "queue {queue} purged: {count} tasks",
                log_id="queue.purged",
                queue=name,
                count=len(tasks),
            )
        return {"queue": name, "purged": len(tasks)}

    # -- workers ----------------------------------------------------------------

    def ready(self, session: Session, credits: int = 1) -> None:
        """
        A worker asks for work, and may hold up to C{credits} tasks from now
        on: TASKs if tasks are queued for it, else WAIT.
        """
        session.credits = credits
        if session.free_credits <= 0:
            # Already holding all it may: not an error, and no more tasks.
            self.dispatcher.unidle(session)
            return
        held = len(session.tasks)
        self.dispatcher.serve_worker(session)
        # Nothing for it: none queued, or only tasks it still runs a late copy of.
        if len(session.tasks) == held:
            session.peer.sendFrame(session.speaker.wait)

    def done(self, session: Session, task_id: int, result: taskflow.Result | None = None) -> None:
        """A worker's DONE (or ACK), with the task's C{result} if it gave one."""
        finished = self._finish(session, task_id, "done")
        if finished is not None:
            task, attempt = finished
            task.tally.done += 1
            if self.events is not None:
                record(self.events, "done", task, session, None, attempt)
            producer = task.producer
            if producer is not None and producer.connected:
                producer.peer.sendFrame(producer.speaker.done(task_id, result))
            # The common case, nothing to keep, count or answer, in one test.
            if (
                task.keep_for
                or task.group
                or self.waits.count
                or task.home.policy.keep_results
                or (producer is None or not producer.connected)
            ):
                self.outcomes.settle(task, OutcomeState.DONE, result)
        if session.failed_in_row:
            note_outcome(self.limits.dispatch, session, False, 0.0)
        self._become_idle(session)

    def failed(self, session: Session, task_id: int, reason: str, permanent: bool = False) -> None:
        """
        A worker's FAILED (or NACK): the task is retried if it may be, else
        it fails for good.
        """
        taken = self._take_back(session, task_id)
        if taken is not None:
            task, attempt = taken
            # The protocol page has the daemon log every FAILED reason: each
            # distinct one is, in the summary (or one by one: see LogSummary).
            self.failures.note(
                "failed",
                task.task_type,
                reason,
                "task {task_id} ({task_type}) failed on {worker}: {reason}",
                log_id="task.failed",
                task_id=task_id,
                task_type=task.task_type.decode("utf-8", "replace"),
                worker=session.peer.peer_name,
                reason=reason,
            )
            self._failure(task, reason, session.peer.peer_name, permanent, attempt, session)
        note_outcome(self.limits.dispatch, session, True, self.clock())
        self._become_idle(session)

    # -- version-2 workers: fenced outcomes and leases -------------------------------

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
        if result is not None and len(result.data) > self.max_result:
            raise Refused(
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"task {task_id}: a result of {len(result.data)} bytes exceeds the limit of"
                f" {self.max_result} bytes ([results] max_size, or the largest [allocator] class);"
                " the ACK is not applied",
            )
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            self._stale_report(session, task_id, token)
        self.done(session, task_id, result)

    def nack(
        self, session: Session, task_id: int, token: int, reason: str, permanent: bool
    ) -> None:
        """A version-2 worker's NACK of delivery C{token} (see L{ack})."""
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            self._stale_report(session, task_id, token)
        self.failed(session, task_id, reason, permanent)

    def touch(self, session: Session, task_id: int, token: int, seconds: int) -> None:
        """
        Extend the lease of delivery C{token} to C{seconds} from now (at
        most C{max_lease}); a queue without a timeout has no lease to extend.

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        task = self._delivery(session, task_id, token, "TOUCH")
        if self.timeout_of(task):
            task.lease_until = self.clock() + min(float(seconds), self.limits.max_lease)

    def report_progress(
        self, session: Session, task_id: int, token: int, fraction: int, message: str
    ) -> None:
        """
        A worker's PROGRESS for delivery C{token}: the task's last report,
        sent on to its producer (if it asked) and the events log, at most
        one per C{[progress] interval}.

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}, or
            the message is longer than C{max_message}.
        """
        task = self._delivery(session, task_id, token, "PROGRESS")
        limit = self.progress.settings.max_message
        size = len(message.encode("utf-8"))
        if size > limit:
            raise ProtocolViolation(
                f"PROGRESS message of {size} bytes exceeds [progress] max_message ({limit})"
            )
        self.progress.report(
            task, token, fraction, message, task.forward_progress or self.events is not None
        )

    def _progress_out(self, task: Task, report: Report) -> None:
        """(The progress book.) A report of C{task}'s goes out."""
        if self.events is not None:
            record(
                self.events,
                "progress",
                task,
                task.holder,
                (report.fraction / outcomes.MAX_FRACTION, report.message),
            )
        producer = task.producer
        if (
            task.forward_progress
            and producer is not None
            and producer.connected
            and producer.speaker.hears_lifecycle
        ):
            frame = producer.speaker.progress(
                task.task_id, report.token, report.fraction, report.message
            )
            if producer.paused:
                # Its output is backed up: keep the latest of each task, not a backlog.
                if producer.held_progress.pop(task.task_id, None) is not None:
                    self.progress.coalesced += 1
                producer.held_progress[task.task_id] = frame
            else:
                producer.peer.sendFrame(frame)

    def output_drained(self, session: Session) -> None:
        """
        C{session}'s output drained: it gets the progress held meanwhile
        (of tasks not yet finished: an outcome supersedes it), the newest
        shared data it missed, and the lifecycle events held for it.
        """
        if session.held_progress:
            held, session.held_progress = session.held_progress, {}
            for task_id, frame in held.items():
                task = self._live.get(task_id)
                if task is not None and task.dead is None:
                    session.peer.sendFrame(frame)
        if self.shared is not None:
            self.shared.caught_up(session)
        if self.events is not None:
            self.events.caught_up(session)

    def _delivery(self, session: Session, task_id: int, token: int, what: str) -> Task:
        """
        The task of C{session}'s current delivery C{token} of C{task_id},
        for a TOUCH or PROGRESS (C{what}).

        @raise Refused: (stale) the delivery is not the task's current one.
        @raise ProtocolViolation: C{session} was never sent C{task_id}.
        """
        task = session.tasks.get(task_id)
        if task is None or task.token != token:
            if task is None and task_id not in session.overdue:
                raise _not_held(session, task_id)
            self._refuse_stale(session, task_id, token, what)
        return task

    def _stale_report(self, session: Session, task_id: int, token: int) -> NoReturn:
        """
        Refuse an ACK or NACK that does not quote C{session}'s current
        delivery of C{task_id}; a delivery taken back from it gives back its credit.

        @raise Refused: (stale) always, unless:
        @raise ProtocolViolation: C{session} holds no delivery of C{task_id}.
        """
        if session.overdue.pop(task_id, None) is not None:
            self._become_idle(session)
        elif task_id not in session.tasks:
            raise _not_held(session, task_id)
        self._refuse_stale(session, task_id, token, "outcome")

    def _refuse_stale(self, session: Session, task_id: int, token: int, what: str) -> NoReturn:
        """Count and log a stale C{what}. @raise Refused: (stale) always."""
        self._stale += 1
        self.failures.note(
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
            f"task {task_id}: delivery {token} is not its current one (its lease ran out and"
            f" it was taken back, or it is finished); the {what} is not applied",
        )

    # -- delays, retries and dead letters ------------------------------------------

    def _delay(self, task: Task, due: float) -> None:
        task.home.delayed += 1
        self.delays.add(task, due)

    def _undelay(self, task: Task) -> None:
        task.home.delayed -= 1
        self.delays.remove(task)

    def _delays_due(self, tasks: list[Task]) -> None:
        """(The delays.) These tasks' time has come: queue them, in due order."""
        queues: dict[NamedQueue[Task, Session], None] = {}
        now = self.clock()
        for task in tasks:
            task.ready_at = now
            queue = task.home
            queue.delayed -= 1
            if queue.push(task):
                self._fairness_keys += 1
            queues[queue] = None
        for queue in queues:
            if queue.idle:
                self.dispatcher.serve_queue(queue)

    def _failure(
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
            now = self.clock()
            backoff = task.backoff or task.home.policy.backoff
            due = round(now + retry_wait(backoff, task.failures, self.random), 3)
            task.due = due
            self.journal.record_retry(task)
            task.tally.retried += 1
            if session is not None and self.dispatcher.lifo:
                self.dispatcher.failed_on[task.task_id] = session.session_id
            self._delay(task, due)
            if self.events is not None:
                record(self.events, "retrying", task, session, reason, attempt)
            producer = task.producer
            if producer is not None and producer.connected and producer.speaker.hears_lifecycle:
                producer.peer.sendFrame(
                    producer.speaker.retrying(task.task_id, attempt, int(due * 1000), reason)
                )
            return
        self._fail_for_good(task, reason, worker, session, attempt, dead_letter=True)

    def _fail_for_good(
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
        if self.events is not None:
            record(self.events, "failed", task, session, reason, attempt)
        producer = task.producer
        dead = bool(dead_letter and task.retries and self.dead_letters.max_count)
        if dead:
            task.tally.dead += 1
            self._bury(task, reason, worker)
        else:
            task.tally.failed += 1
            self._end(task, "failed")
        if producer is not None:
            producer.outstanding -= 1
            self._tell_outcome(producer, task.task_id, "failed", reason)
        self.outcomes.settle(task, OutcomeState.DEAD if dead else OutcomeState.FAILED, None, reason)
        if dead:
            task.producer = None  # it has heard its outcome: a replay's goes to nobody

    def _bury(self, task: Task, reason: str, worker: str) -> None:
        """Move C{task} to the dead-letter set, dropping the oldest past its bounds."""
        self.progress.finished(task.task_id)
        now = self.clock()
        task.dead = DeadInfo(now, reason, worker)
        self.journal.record_dead(task)
        task.home.dead += 1
        if self.events is not None:
            record(self.events, "dead", task, None, reason)
        for old in self.dead_letters.add(task):
            self._drop_dead(old, "pushed out of the dead-letter set (max_count)")
        self._arm_dead_expiry()

    def _unbury(self, task: Task) -> None:
        self.dead_letters.remove(task)
        task.home.dead -= 1
        task.dead = None

    def _drop_dead(self, task: Task, why: str) -> None:
        """Finish a dead task for good: it leaves the journal and the pool."""
        self._unbury(task)
        self._dead_dropped += 1
        self._end(task, "failed")
        self.failures.note(
            "dead task dropped",
            task.task_type,
            why,
            "dead task {task_id} dropped: {why}",
            log_id="task.dead_dropped",
            task_id=task.task_id,
            why=why,
        )
        self._forget_if_idle(task.home)

    def _arm_dead_expiry(self) -> None:
        timer = self._dead_timer
        letters = self.dead_letters
        oldest = letters.oldest()
        if not letters.max_age or oldest is None or (timer is not None and timer.active()):
            return
        assert oldest.dead is not None
        wait = max(0.0, oldest.dead.died_at + letters.max_age - self.clock())
        self._dead_timer = self._scheduler.callLater(wait, self._expire_dead)

    def _expire_dead(self) -> None:
        self._dead_timer = None
        for task in self.dead_letters.expired(self.clock()):
            self._drop_dead(task, "older than max_age")
        self._arm_dead_expiry()

    def dead_tasks(self, queue: str | None, limit: int) -> dict[str, Any]:
        """The dead tasks of C{queue} (C{None}: of every queue), oldest first."""
        tasks = list(self.dead_letters.of(queue))
        return {"total": len(tasks), "tasks": [self.describe_dead(t) for t in tasks[:limit]]}

    @staticmethod
    def describe_dead(task: Task) -> dict[str, Any]:
        dead = task.dead
        assert dead is not None
        return {
            "id": task.task_id,
            "queue": task.queue,
            "type": task.task_type.decode("utf-8", "replace"),
            "size": task.size,
            "priority": task.priority,
            "failures": task.failures,
            "reason": dead.reason,
            "worker": dead.worker,
            "died_at": round(dead.died_at, 3),
        }

    def replay(self, task_id: int, queue: str | None) -> dict[str, Any]:
        """
        Put dead task C{task_id} (or, with 0, every dead task of C{queue})
        back in its queue, its failures reset.

        @raise Refused: (not found) C{task_id} is not a dead task.
        """
        if task_id:
            task = self.dead_letters.get(task_id)
            if task is None:
                raise Refused(ErrorCode.NOT_FOUND, f"task {task_id} is not in a dead-letter set")
            tasks = [task]
        else:
            tasks = list(self.dead_letters.of(queue))
        queues: dict[NamedQueue[Task, Session], None] = {}
        limits = self.limits.results
        now = self.clock()
        for task in tasks:
            self._unbury(task)
            task.failures = 0
            task.ready_at = now
            if task.task_id in self.kept and not task.keep_for:
                # Its death was kept: its next outcome replaces it.
                task.keep_for = min(limits.ttl, limits.max_ttl)
            self.journal.record_replay(task)
            if self.events is not None:
                record(self.events, "replayed", task, None, None)
            if task.home.push(task):
                self._fairness_keys += 1
            queues[task.home] = None
        for home in queues:
            self.dispatcher.serve_queue(home)
        return {"replayed": [task.task_id for task in tasks]}

    def purge_dead(self, queue: str | None) -> dict[str, Any]:
        """Drop the dead tasks of C{queue} (C{None}: of every queue)."""
        tasks = list(self.dead_letters.of(queue))
        for task in tasks:
            self._drop_dead(task, "purged")
        return {"purged": len(tasks)}

    def _take_back(self, session: Session, task_id: int) -> tuple[Task, int] | None:
        """
        Take back the task C{session} reports, from its worker and its queue.

        The first outcome of a task wins, from whichever of its deliveries:
        a worker that reports a task taken back at its timeout still
        finishes it, if nobody has yet.

        @return: the task and the attempt number of the delivery that
            reported it; C{None} for an outcome that came too late (the task
            was finished already): ignored and counted.
        """
        task = session.tasks.pop(task_id, None)
        if task is not None:
            task.tally.ran(task.dispatched_at - task.ready_at, self.clock() - task.dispatched_at)
            attempt = task.attempts
            home = task.home
            if home.limited:
                home.released(task)
            else:
                home.running -= 1  # home.released(task), inlined
        else:
            late = self._late_delivery(session, task_id)
            if late is None:
                return None
            task, attempt = late
        task.holder = None
        return task, attempt

    def _finish(self, session: Session, task_id: int, outcome: str) -> tuple[Task, int] | None:
        """Take back the task C{session} reports (see L{_take_back}) and end it."""
        taken = self._take_back(session, task_id)
        if taken is not None:
            task = taken[0]
            if task.producer is not None:
                task.producer.outstanding -= 1
            self._end(task, outcome)
        return taken

    def _end(self, task: Task, outcome: str) -> None:
        """Forget a finished task: journal it, free its block (before anyone hears of it)."""
        task.finished = True
        del self._live[task.task_id]
        failed_on = self.dispatcher.failed_on
        if failed_on:
            failed_on.pop(task.task_id, None)
        self.progress.finished(task.task_id)
        self.journal.record_outcome(task, outcome)
        # Free before the producer hears of the outcome: the protocol promises
        # the slot is back in PMAD by then.
        self.pool.free(task.block)
        queue = task.home
        now = self.clock()
        queue.finished.append(now)  # for its drain rate
        if task.key is not None:
            self.keys.finish(
                KeyEntry(queue.name, task.key, task.task_id, task.enqueued_at, outcome), now
            )
        if queue.limited:
            # A key limit may have let go of a task.
            self.dispatcher.serve_queue(queue)
            self._forget_if_idle(queue)
        elif not (queue.subscribers or queue.depth or queue.running or queue.declared):
            self._forget_if_idle(queue)

    def _late_delivery(self, session: Session, task_id: int) -> tuple[Task, int] | None:
        """
        An outcome for a delivery C{session} no longer holds: the task if it
        is still to be finished (its other copies are then forgotten), else
        C{None}.

        @raise ProtocolViolation: C{session} was never given C{task_id}.
        """
        late = session.overdue.pop(task_id, None)
        if late is None:
            raise _not_held(session, task_id)
        task = late[0]
        if task.finished:
            self._late_outcomes += 1
            self.failures.note(
                "reported late",
                task.task_type,
                "the task was finished before",
                "outcome of task {task_id} from {worker} ignored: it was finished before",
                log_id="task.late",
                task_id=task_id,
                worker=session.peer.peer_name,
            )
            return None
        holder = task.holder
        if holder is not None:
            # Another worker runs it now: its outcome will come too late.
            del holder.tasks[task_id]
            holder.overdue[task_id] = (task, task.attempts)
            task.home.released(task)
        elif task.due:
            self._undelay(task)  # waiting to run again: it need not
        elif task.dead is not None:
            self._unbury(task)
        else:
            task.home.remove(task)  # queued again: it need not run now
        self.failures.note(
            "finished after a timeout",
            task.task_type,
            "its worker reported it after it was taken back",
            "task {task_id} finished by {worker} after it was taken back",
            log_id="task.finished_late",
            task_id=task_id,
            worker=session.peer.peer_name,
        )
        return late

    def _become_idle(self, session: Session) -> None:
        # After DONE/FAILED a worker has a free credit without a new READY
        # (unless a READY has since lowered its credits below what it held).
        if session.connected:
            self.dispatcher.serve_worker(session)
        if self._drained is not None:
            self._check_drained()

    def expire_overdue(self) -> None:
        """
        Take back every task held longer than its queue's task timeout and
        queue it again, at the tail.  The worker keeps the credit until it
        reports the task; if it does before anyone else, its outcome still
        counts.
        """
        now = self.clock()
        touched: dict[NamedQueue[Task, Session], None] = {}
        for session in list(self.sessions.values()):
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
                self._timed_out += 1
                touched[task.home] = None
                # At the tail: a task that keeps running too long must not
                # take every worker from the tasks queued behind it.
                self._requeue(
                    task,
                    "held past the task timeout",
                    f"held for more than {now - task.dispatched_at:.3g} s by"
                    f" {session.peer.peer_name} (attempt {task.attempts})",
                    at_head=False,
                    worker=session.peer.peer_name,
                )
        for queue in touched:
            self.dispatcher.serve_queue(queue)
        self._check_drained()

    def timeout_of(self, task: Task) -> float:
        """The task timeout of C{task}'s queue (0: none)."""
        timeout = task.home.policy.timeout
        return self.task_timeout if timeout is None else timeout

    @property
    def shortest_timeout(self) -> float:
        """The shortest task timeout of any queue (0: no queue has one)."""
        timeouts = [self.task_timeout] + [
            p.timeout for p in self.limits.declared.values() if p.timeout is not None
        ]
        return min((t for t in timeouts if t > 0), default=0.0)

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
        # listeners are closed, so none will come): a queue no worker serves,
        # or a paused one, is not waited for.
        if (
            self._drained is not None
            and not self.tasks_running
            and not any(q.depth and q.subscribers and not q.paused for q in self.queues.values())
        ):
            self.stop_draining()

    def stop_draining(self) -> None:
        """Fire the drain's Deferred now, whatever is left."""
        drained, self._drained = self._drained, None
        if drained is not None:
            if self._drain_timer is not None and self._drain_timer.active():
                self._drain_timer.cancel()
            drained.callback(None)
        self.dispatcher.stop()

    def awaits_outcome(self, session: Session) -> bool:
        """Whether C{session} is a producer still owed an outcome, or waits for one."""
        return session.outstanding > 0 or self.waits.holds(session)

    def _requeue(
        self, task: Task, why: str, cause: str, at_head: bool = True, worker: str = ""
    ) -> None:
        """
        Queue C{task} again (C{why} in short, C{cause} in full) -- or, once
        it has been delivered C{max_attempts} times, fail it: a task that
        kills or outlasts every worker must not come back forever.  Only a
        task queued again counts (and is recorded) as requeued.  With
        C{count_lost}, it is a failed attempt instead (see L{_failure}).
        """
        task.home.released(task)
        if self.limits.count_lost:
            self._failure(task, cause, worker, False, task.attempts)
            return
        if self.max_attempts and task.attempts >= self.max_attempts:
            self._give_up(task, f"given up after {task.attempts} attempts; last: {cause}")
            return
        if self.events is not None:
            record(self.events, "requeued", task, None, cause)
        self.journal.record_attempts(task)
        task.ready_at = self.clock()
        task.home.push(task, at_head)
        task.tally.requeued += 1
        self.failures.note(
            "requeued",
            task.task_type,
            why,
            "task {task_id} requeued: {cause}",
            log_id="task.requeued",
            task_id=task.task_id,
            cause=cause,
        )

    def _give_up(self, task: Task, reason: str) -> None:
        """Fail a task no worker holds: its producer hears FAILED with C{reason}."""
        self._given_up += 1
        self.failures.note(
            "given up",
            task.task_type,
            "delivered max_attempts times",
            "task {task_id} failed: {reason}",
            log_id="task.given_up",
            task_id=task.task_id,
            reason=reason,
        )
        self._fail_for_good(task, reason, "", None, None, dead_letter=False)

    # -- everyone -----------------------------------------------------------------

    def stats(self) -> wire.StatsResponse:
        idle = {sid for queue in self.queues.values() for sid in queue.idle}
        return wire.StatsResponse(
            queue_depth=self.queued,
            workers_total=self._workers,
            workers_idle=len(idle),
            pmad_bytes_used=self.pool.bytes_used,
            pmad_bytes_total=self.pool.bytes_total,
        )

    def counters(self, total: Tally | None = None) -> Counters:
        """
        The totals since start; the task counts are the tallies' (their
        L{Telemetry.total}: pass it if you have it).
        """
        if total is None:
            total = self.telemetry.total()
        return Counters(
            total.submitted,
            total.done,
            total.failed + total.dead,
            sum(self.telemetry.rejected.values()),
            total.requeued,
            self._timed_out,
            self._given_up,
            self._late_outcomes,
            total.cancelled,
            self._duplicates,
            total.retried,
            total.dead,
            self._dead_dropped,
            self._stale,
            self.delays.count,
            self.kept.kept,
            self.kept.evicted,
            self.kept.expired,
        )

    def task(self, task_id: int) -> Task:
        """A live, accepted task. @raise Refused: (not found) there is none."""
        task = self._live.get(task_id)
        if task is None or not task.accepted:
            raise Refused(ErrorCode.NOT_FOUND, f"no queued or running task {task_id}")
        return task

    @property
    def queued(self) -> int:
        """Tasks waiting for a worker."""
        return sum(queue.depth for queue in self.queues.values())

    @property
    def tasks_running(self) -> int:
        """Tasks held by workers right now."""
        return sum(len(session.tasks) for session in self.sessions.values())

    def stopService(self) -> None:
        super().stopService()
        self.failures.flush()
        self.dispatcher.stop()
        if self._dead_timer is not None and self._dead_timer.active():
            self._dead_timer.cancel()
        self.delays.stop()
        self.progress.stop()
        self.outcomes.stop()
        live = len(self._live)
        queued, running = self.queued, self.tasks_running
        if not live:
            self.log.info(
                "stopping with no live tasks", log_id="daemon.stopped", queued=0, running=0
            )
        elif self.journal.path is not None:
            self.log.info(
                "stopping with {queued} queued and {running} running tasks;"
                " the journal {path} keeps them",
                log_id="daemon.stopped",
                queued=queued,
                running=running,
                path=self.journal.path,
            )
        else:
            if self.events is not None:
                for task in self._live.values():
                    record(self.events, "dropped", task, None, "daemon stopped without a journal")
            self.log.warn(
                "stopping with {queued} queued, {delayed} delayed and {running} running tasks;"
                " without a journal they are dropped",
                log_id="daemon.stopped",
                queued=queued,
                delayed=self.delays.count,
                running=running,
            )


def _not_held(session: Session, task_id: int) -> ProtocolViolation:
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


def _due_ms(due: float) -> int | None:
    """A delayed task's due time as its events give it (epoch ms), or C{None}: not delayed."""
    return round(due * 1000) if due else None
