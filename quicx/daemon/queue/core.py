"""
The queue kernel: a task's lifecycle, from SUBMIT accepted to its outcome, and the daemon's state.

L{QueueService} holds the PMAD pool, the named queues, the live tasks and
the sessions, and moves each task through its states (L{state}): accepted
(L{admit}), delivered (the L{Dispatcher}), finished (L{done}, L{failed}).
It announces each step through its hooks (L{Subscribers}): the outcomes
(kept results, waits, groups), the telemetry's counts, the event bus's
recording, the progress reports and the shared data are subscribers, handed
in at construction or plugged in (L{QueueService.plug}).  Its other jobs are
handed out to collaborators that see it as L{IKernel}: the leases, the
roster of sessions, failures, dead letters, management, draining and the
journal's side.  It never branches on a protocol version: each session's
L{Speaker} spells the replies.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import implementer

from quicx.daemon.journal.interface import (
    IJournal,
    IJournalOwner,
    KeyEntry,
    NullJournal,
    Snapshot,
)
from quicx.daemon.journal.records import Recovery
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.observe.telemetry import Tally, Telemetry
from quicx.daemon.queue import journal_side, pmad
from quicx.daemon.queue.checkpoints import Checkpoints
from quicx.daemon.queue.counting import Counting
from quicx.daemon.queue.debounce import Debouncing
from quicx.daemon.queue.dedup import KeyTable
from quicx.daemon.queue.delays import Delays
from quicx.daemon.queue.dependencies import Dependencies
from quicx.daemon.queue.dispatch import note_outcome
from quicx.daemon.queue.dispatcher import Dispatcher
from quicx.daemon.queue.drain import Drain
from quicx.daemon.queue.expiry import Expiry
from quicx.daemon.queue.failing import Failing
from quicx.daemon.queue.graveyard import Graveyard
from quicx.daemon.queue.hooks import (
    IEvents,
    IScheduleBook,
    ISharedData,
    Subscribers,
)
from quicx.daemon.queue.leases import Leases
from quicx.daemon.queue.manage import Manage
from quicx.daemon.queue.model import Counters, Duplicate, Refused, Session, Task
from quicx.daemon.queue.outcomes import Outcomes
from quicx.daemon.queue.policy import ProgressSettings, QueueLimits
from quicx.daemon.queue.progress_reports import ProgressReports
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.recorder import EventRecorder
from quicx.daemon.queue.roster import Roster
from quicx.daemon.queue.state import DELAYED, FINISHED, QUEUED, move
from quicx.net.twisted_types import Service
from quicx.protocol import codec, taskflow, wire
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import OutcomeState


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
    @ivar event_bus: the event bus, once one is plugged in (see L{plug}).
    @ivar shared: the shared data, once plugged in.
    @ivar schedules: the schedule book, once plugged in.
    @ivar hooks: the plugged-in features, by the hook they hear.
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
        self.scheduler: IReactorTime = scheduler  # type: ignore[assignment]
        self.draining = False
        self.journal.bind(self)
        self.sessions: dict[int, Session] = {}
        self.started_at = clock()
        self.queues: dict[str, NamedQueue[Task, Session]] = {}
        for name in limits.declared:
            self._queue(name)
        self.default_queue = self._queue(limits.default_queue)
        self.keys: KeyTable[Task] = KeyTable(limits.dedup_window, limits.max_dedup_keys)
        self.fairness_keys = 0
        self._live: dict[int, Task] = {}
        self._last_task_id = 0
        self.duplicates = 0
        self.schedules: IScheduleBook | None = None
        self.shared: ISharedData | None = None
        self.task_history: object | None = None  # the dashboard's, while it is on
        self.random: Callable[[], float] = random.random
        self._collaborators(progress or ProgressSettings())
        self.dispatcher = Dispatcher(
            pool, self.queues, clock, self.scheduler, self.timeout_of, limits.dispatch.lifo
        )
        self.expiry, self.debouncing = Expiry(self), Debouncing(self)
        self.delays: Delays[Task] = Delays(scheduler, clock, self._delays_due)  # type: ignore[arg-type]
        self.duplicates_waiting: dict[int, list[Duplicate]] = {}  # by the task they wait on
        parts = (pool, self.journal, limits, self.scheduler, clock, self._live, self.sessions)
        self.outcomes = outcomes = Outcomes(*parts, self.failures, self.log)
        self.kept, self.groups, self.waits = outcomes.kept, outcomes.groups, outcomes.waits
        self.await_outcome, self.await_group = outcomes.await_outcome, outcomes.await_group
        self.open_group, self.close_group = outcomes.open_group, outcomes.close_group
        self.max_result = min(limits.results.max_size, pool.max_size)
        self.counting = Counting(self.telemetry)
        self.dependencies = Dependencies(self)
        self._hear()

    def _collaborators(self, progress: ProgressSettings) -> None:
        """The parts of the kernel's job it hands out; each moves tasks through L{IKernel}."""
        leases = self.leases = Leases(self)
        self.touch, self.ack, self.nack = leases.touch, leases.ack, leases.nack
        self.roster = roster = Roster(self)
        self.open_session, self.close_session = roster.open_session, roster.close_session
        self.claim_role, self.subscribe = roster.claim_role, roster.subscribe
        self.timeout_of: Callable[[Task], float] = leases.timeout_of
        self.reports = ProgressReports(self, progress, leases.delivery)
        self.checkpoints = Checkpoints(self, leases.delivery)
        self.progress, self.report_progress = self.reports.book, self.reports.report
        self.drainage = drainage = Drain(self)
        self.drain, self.stop_draining = drainage.drain, drainage.stop
        manage = self.manage = Manage(self)
        self.cancel, self.set_paused, self.purge = manage.cancel, manage.set_paused, manage.purge
        self.failing = Failing(self)
        self._requeue = self.failing.requeue
        self.graveyard = graveyard = Graveyard(self)
        self.dead_letters = graveyard.letters
        self.dead_tasks, self.replay = graveyard.dead_tasks, graveyard.replay
        self.purge_dead = graveyard.purge_dead

    def plug(
        self,
        *,
        shared: ISharedData | None = None,
        events: IEvents | None = None,
        schedules: IScheduleBook | None = None,
        history: object | None = None,
    ) -> None:
        """
        Hand the kernel the daemon's features built on it (each given
        replaces the one before): they hear its hooks (see L{Subscribers});
        the journal's snapshot reads the shared data and the schedules.
        """
        if shared is not None:
            self.shared = shared
        if events is not None:
            self.event_bus = events
        if schedules is not None:
            self.schedules = schedules
        if history is not None:
            self.task_history = history
        self._hear()

    def _hear(self) -> None:
        """Subscribe the features to the kernel's hooks (events recorded while they go on)."""
        events = self._events
        recorder = None if events is None else EventRecorder(events)
        # The dependencies first: they hear a group's member before the group counts it.
        features: tuple[object, ...] = (self.dependencies, self.outcomes, self.counting)
        features += (self.reports, self.checkpoints, self.shared, self.event_bus)
        features += (self.task_history, self.expiry)
        self.hooks = hooks = Subscribers(f for f in (*features, recorder) if f is not None)
        # The hot path's hooks, one attribute away (each is most often empty).
        self._on_accepted, self._on_done = hooks.accepted, hooks.done
        self.dispatcher.delivered = hooks.delivered

    def snapshot(self) -> Snapshot:
        """(The journal.) Everything it keeps (see L{journal_side.snapshot})."""
        return journal_side.snapshot(self)

    def restore(self, recovery: Recovery) -> None:
        """Take back what a journal kept (see L{journal_side.restore})."""
        journal_side.restore(self, recovery)

    @property
    def events(self) -> IEvents | None:
        """
        Where lifecycle events are recorded, while they have somewhere to go
        (the event bus sets it then): the kernel records events only then.
        """
        return self._events

    @events.setter
    def events(self, events: IEvents | None) -> None:
        self._events = events
        self._hear()

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
            queue.types[task_type] = task_type
        return tally

    def _forget_if_idle(self, queue: NamedQueue[Task, Session]) -> None:
        """Forget an undeclared queue nothing refers to any more (so queues stay bounded)."""
        if queue.keys:
            self.fairness_keys -= queue.prune_keys(self.clock())
        if (
            queue.forgettable
            and queue is not self.default_queue
            # Not forgotten already (a queue of that name may exist anew).
            and self.queues.get(queue.name) is queue
        ):
            del self.queues[queue.name]

    def _push(self, task: Task) -> None:
        """Queue C{task} at its queue's tail."""
        move(task, QUEUED)
        if task.home.push(task):
            self.fairness_keys += 1

    def find_queue(self, name: str) -> NamedQueue[Task, Session]:
        """@raise Refused: (not found) there is no queue C{name}."""
        queue = self.queues.get(name)
        if queue is None:
            raise Refused(ErrorCode.NOT_FOUND, f"no queue named {name!r}")
        return queue

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

    def admit(self, task: Task, payload: bytes) -> None:
        """
        (The admission, L{quicx.daemon.queue.admission}.)  Take C{task}, whose
        SUBMIT passed its checks: it is live from now on, and recorded; once
        its record is durable, it is answered OK and queued (at once, or
        when the journal says so: L{accepted}; its producer's answers wait).
        """
        self._live[task.task_id] = task
        extras = task.extras  # (its rare fields, if it has any: read once, on the hot path)
        if extras is not None and extras.key is not None:
            self.keys.add(task.home.name, extras.key, task)
        if not self.journal.record_submit(task, payload):
            task.home.pending += 1
            if task.producer is not None:
                # Its answer, and every answer after it, waits for the journal.
                task.producer.wait_for(task)
            return
        if extras is not None and extras.after is not None:  # it waits for other tasks first
            self.dependencies.accept(task)
            return
        due = 0.0 if extras is None else extras.due  # (a rare field: see Extras)
        task.state = DELAYED if due else QUEUED  # move(), inlined: the hot path
        task.tally.submitted += 1
        for accepted in self._on_accepted:
            accepted(task)
        producer = task.producer
        if producer is not None and producer.connected:
            # producer.reply(), inlined: the submit path's one hot call.
            ok = producer.speaker.ok(task.task_id)
            if producer.replies:
                producer.replies.append(ok)
            else:
                producer.peer.sendFrame(ok)
        queue = task.home
        if due:
            self._delay(task, due)
            return
        if queue.idle and self.dispatcher.hand_new(task, queue):
            return
        if queue.push(task):
            self.fairness_keys += 1
        if queue.idle:
            self.dispatcher.serve_queue(queue)

    def accepted(self, tasks: list[Task]) -> None:
        """(The journal.) These waiting tasks' records are durable (L{journal_side.accepted})."""
        journal_side.accepted(self, tasks)

    def refused(self, tasks: list[Task], reason: str, in_doubt: bool) -> None:
        """(The journal.) These waiting tasks' records could not be written (see there)."""
        journal_side.refused(self, tasks, reason, in_doubt)

    def reject(self, session: Session, refusal: Refused, task_type: bytes, size: int) -> None:
        reason = str(refusal)
        self.note_rejection(session, refusal.code, reason, task_type, size)
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

    def note_rejection(
        self, session: Session | None, code: ErrorCode, reason: str, task_type: bytes, size: int
    ) -> None:
        """Announce a refused SUBMIT (or schedule firing: C{session} C{None})."""
        for rejected in self.hooks.rejected:
            rejected(session, code, reason, task_type, size)

    def next_task_id(self) -> int:
        # Ids increase and wrap after 2**32 - 1, skipping ids still live.
        task_id = self._last_task_id
        while True:
            task_id = task_id + 1 if task_id < codec.MAX_TASK_ID else 1
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
            self.dispatcher.unidle(session)
            return
        held = len(session.tasks)
        self.dispatcher.serve_worker(session)
        # Nothing for it: none queued, or only tasks it still runs a late copy of.
        if len(session.tasks) == held:
            session.peer.sendFrame(session.speaker.wait)

    def done(self, session: Session, task_id: int, result: taskflow.Result | None = None) -> None:
        """A worker's DONE (or ACK), with the task's C{result} if it gave one."""
        taken = self._take_back(session, task_id)
        if taken is not None:
            task, attempt = taken
            if task.producer is not None:
                task.producer.outstanding -= 1
            self._end(task, "done")
            task.tally.done += 1
            for done in self._on_done:
                done(task, session, attempt)
            producer = task.producer
            if producer is not None and producer.connected:
                speaker = producer.speaker
                producer.peer.sendFrame(
                    speaker.done(task_id) if result is None else speaker.done_with(task_id, result)
                )
            # The common case, nothing to keep, count or answer, in one test.
            if (
                ((extras := task.extras) and (extras.keep_for or extras.watched or extras.group))
                or self.waits.count
                or task.home.policy.keep_results
                or (producer is None or not producer.connected)
            ):
                for settled in self.hooks.settled:
                    settled(task, OutcomeState.DONE, result, "")
        if session.failed_in_row:
            note_outcome(self.limits.dispatch, session, False, 0.0)
        if session.connected:  # self._become_idle(session), inlined: the hot path
            self.dispatcher.serve_worker(session)
        if self.drainage.waiting is not None:
            self.drainage.check()

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
            self.failing.failure(task, reason, session.peer.peer_name, permanent, attempt, session)
        note_outcome(self.limits.dispatch, session, True, self.clock())
        self._become_idle(session)

    def output_drained(self, session: Session) -> None:
        """
        C{session}'s output drained: it gets the progress held meanwhile,
        the newest shared data it missed, and the lifecycle events held for
        it (from the features that hear C{output_drained}).
        """
        for drained in self.hooks.output_drained:
            drained(session)

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
            move(task, QUEUED)
            queue = task.home
            queue.delayed -= 1
            if queue.push(task):
                self.fairness_keys += 1
            queues[queue] = None
        for queue in queues:
            if queue.idle:
                self.dispatcher.serve_queue(queue)

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
            late = self.leases.late_delivery(session, task_id)
            if late is None:
                return None
            task, attempt = late
        task.holder = None
        return task, attempt

    def _end(self, task: Task, outcome: str) -> None:
        """Forget a finished task: journal it, free its block (before anyone hears of it)."""
        task.state = FINISHED  # move(), inlined: the hot path
        del self._live[task.task_id]
        failed_on = self.dispatcher.failed_on
        if failed_on:
            failed_on.pop(task.task_id, None)
        self.progress.finished(task.task_id)
        extras = task.extras
        if extras is not None and extras.checkpoint is not None:
            self.checkpoints.finished(task)
        self.journal.record_outcome(task, outcome)
        # Free before the producer hears of the outcome: the protocol promises
        # the slot is back in PMAD by then.
        self.pool.free(task.block)
        queue = task.home
        now = self.clock()
        queue.finished.append(now)  # for its drain rate
        if extras is not None and extras.key is not None:
            self.keys.finish(
                KeyEntry(queue.name, extras.key, task.task_id, task.enqueued_at, outcome), now
            )
        if queue.limited:
            # A key limit may have let go of a task.
            self.dispatcher.serve_queue(queue)
            self._forget_if_idle(queue)
        elif not (queue.subscribers or queue.depth or queue.running or queue.declared):
            self._forget_if_idle(queue)

    def _become_idle(self, session: Session) -> None:
        # After DONE/FAILED a worker has a free credit without a new READY
        # (unless a READY has since lowered its credits below what it held).
        if session.connected:
            self.dispatcher.serve_worker(session)
        if self.drainage.waiting is not None:
            self.drainage.check()

    def check_drain(self) -> None:
        """A task or a worker left: the drain, if under way, fires once nothing is left."""
        if self.drainage.waiting is not None:
            self.drainage.check()

    def expire_overdue(self) -> None:
        """Take back every task held past its timeout (see L{Leases.expire_overdue})."""
        self.leases.expire_overdue()
        self.drainage.check()

    @property
    def shortest_timeout(self) -> float:
        """The shortest task timeout of any queue (0: no queue has one)."""
        return self.leases.shortest_timeout

    def awaits_outcome(self, session: Session) -> bool:
        """Whether C{session} is a producer still owed an outcome, or waits for one."""
        return session.outstanding > 0 or self.waits.holds(session)

    # -- everyone -----------------------------------------------------------------

    def stats(self) -> wire.StatsResponse:
        idle = {sid for queue in self.queues.values() for sid in queue.idle}
        return wire.StatsResponse(
            queue_depth=self.queued,
            workers_total=self.roster.workers,
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
            self.leases.timed_out,
            self.failing.given_up,
            self.leases.late,
            total.cancelled,
            self.duplicates,
            total.retried,
            total.dead,
            self.graveyard.dropped,
            self.leases.stale,
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
        return sum(queue.depth + queue.parked for queue in self.queues.values())

    @property
    def tasks_running(self) -> int:
        """Tasks held by workers right now."""
        return sum(len(session.tasks) for session in self.sessions.values())

    def stopService(self) -> None:
        super().stopService()
        self.failures.flush()
        self.expiry.stop()
        for part in (self.dispatcher, self.graveyard, self.delays, self.progress, self.outcomes):
            part.stop()
        journal_side.stopping(self)
