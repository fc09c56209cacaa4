"""
A SUBMIT's admission: what a task passes before the kernel takes it.

L{Admission} answers a producer's SUBMIT (its options one
L{taskflow.SubmitOptions}, as the client made them and the codec decoded
them) and a schedule's firing: it checks the type, the queue, the delay, the
idempotency key, the group and the fairness keys, stores the payload in the
pool, makes the L{Task} (which keeps what the kernel needs of the options),
and hands it down to the kernel, which it sees as L{IKernel} (its
C{admit}).  The kernel does not know it: the server and the
schedules call it.
"""

from __future__ import annotations

from typing import Protocol

from quicx.daemon.journal.interface import KeyEntry
from quicx.daemon.queue import pmad
from quicx.daemon.queue.extras import DueOnly, Extras
from quicx.daemon.queue.groups import Group
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import Duplicate, Refused, Session, Task
from quicx.daemon.queue.queues import NamedQueue
from quicx.daemon.queue.state import DELAYED, HELD, QUEUED, WAITING
from quicx.daemon.queue.tell import tell_kept, tell_outcome
from quicx.protocol.codec import ErrorCode
from quicx.protocol.start_options import DebounceMode
from quicx.protocol.taskflow import DEFAULT_OPTIONS, SubmitOptions


class ScheduledTask(Protocol):
    """What a schedule submits."""

    @property
    def task_type(self) -> bytes: ...

    @property
    def payload(self) -> bytes: ...

    @property
    def queue(self) -> str | None: ...

    @property
    def priority(self) -> int | None: ...


class Admission:
    """The SUBMITs and schedule firings into C{kernel}."""

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel

    def submit(
        self,
        session: Session,
        task_type: bytes,
        payload: bytes,
        options: SubmitOptions = DEFAULT_OPTIONS,
    ) -> None:
        """
        Accept a task and answer OK, or answer the ERROR that says why not. Its C{options}:
        a delay or a time to run at delays it; its retries and backoff are its own, instead of
        its queue's; C{progress}: its producer hears its PROGRESS reports; C{result_ttl}: keep
        its outcome this many seconds (0: C{[results] ttl}); C{group}: it joins that group.

        With a journal that syncs each record, the OK (and the task's place in
        the queue) waits until the record is on disk; see C{QueueService.accepted}.
        """
        kernel = self.kernel
        # The common SUBMIT's checks are inlined: this is the hot path.  A
        # SUBMIT without options (every version-1 one), or with a queue and a
        # priority alone, reads no other.
        plain = options.routing_only
        try:
            name = options.queue
            queue = kernel.default_queue if name is None else kernel.queue_named(name)
            if (
                kernel.allowed_types is not None
                or kernel.draining
                or kernel.journal.broken
                or queue.max_depth
            ):
                self._check_submit(queue, task_type)
            now = kernel.clock()
            if plain:
                due, joined, deadline = 0.0, None, 0.0
            else:
                chosen = self._options(session, queue, options, now, task_type, payload)
                if chosen is None:
                    return  # answered: a duplicate
                due, joined, deadline = chosen
            try:
                # An empty payload still takes the smallest block: every live task
                # holds a block, so the pool bounds how many tasks there are.
                block = kernel.pool.store(payload)
            except pmad.PmadError:
                block = self._store(payload)
        except Refused as e:
            kernel.reject(session, e, task_type, len(payload))
            return
        if name is not None:
            # Kept from now on, if it was new: no refusal before left it behind.
            queue = kernel.queues.setdefault(queue.name, queue)
        priority = options.priority
        task = Task(
            kernel.next_task_id(),
            queue.types.get(task_type, task_type),
            block,
            len(payload),
            session,
            queue,
            queue.priority if priority is None else priority,
            now,
            tally=queue.tallies.get(task_type) or kernel.tally_of(queue, task_type),
            ready_at=now,
        )
        if not plain:
            self._apply(task, options, due, joined, deadline)
        elif queue.policy.expires:  # (its queue's default: the one rule is Expiry.deadline's)
            task.deadline = kernel.expiry.deadline(queue, None, 0.0, now)
        if session.identity is not None:
            task.owner = session.identity
        session.outstanding += 1
        kernel.admit(task, payload)
        extras = task.extras
        if extras is not None and extras.deadline:
            self._watch(task)

    def _watch(self, task: Task) -> None:
        """
        Hold C{task}, just admitted with a deadline, to it: if it waits (it
        was not handed to a worker at once, or waits for its parents; one not
        yet accepted is held once it is, see
        L{quicx.daemon.queue.journal_side.accepted}).
        """
        if task.state is QUEUED or task.state is DELAYED or task.state is WAITING:
            self.kernel.expiry.watch(task)
        elif task.state is HELD:
            assert task.extras is not None  # (where its deadline is)
            task.extras.deadline = 0.0  # it started in time

    def _options(
        self,
        session: Session,
        queue: NamedQueue[Task, Session],
        options: SubmitOptions,
        now: float,
        task_type: bytes = b"",
        payload: bytes = b"",
    ) -> tuple[float, Group | None, float] | None:
        """
        What C{options} make of a SUBMIT into C{queue}: its due time (0.0:
        now), the group it joins and its deadline to start (0.0: none);
        C{None} when its key names a task already submitted (then
        C{session} is answered: see L{_duplicate}), or a debounced one it
        folds into (L{quicx.daemon.queue.debounce}).

        @raise Refused: an option cannot be taken.
        """
        delayed = options.delay_ms is not None or options.run_at_ms is not None
        due = self._due(options, now) if delayed else 0.0
        key = options.key
        if key is not None:
            found = self.kernel.keys.find(queue.name, key, now)
            debounce = options.debounce
            if debounce is not None:
                if self.kernel.debouncing.fold(
                    session, found, task_type, payload, debounce, self._store
                ):
                    return None  # folded in, and answered
                if debounce.mode is not DebounceMode.DROP:
                    found = None  # its task started: a new one
                due = self._debounce_due(debounce.window_ms, now)
            if found is not None:
                self._duplicate(session, found)
                return None
        group = options.group
        joined = None if group is None else self.kernel.outcomes.group_to_join(group)
        if options.fairness is not None:
            self._check_fairness(queue, options.fairness)
        waits = options.after is not None or options.after_group is not None
        if waits:
            self.kernel.dependencies.check(options)
        deadline = 0.0
        # A queue's default counts from when a task is due: one that waits for
        # others is due only once they finish, so only its own deadline holds it.
        if options.expires is not None or (queue.policy.expires and not waits):
            deadline = self.kernel.expiry.deadline(queue, options.expires, due, now)
        return due, joined, deadline

    def _debounce_due(self, window_ms: int, now: float) -> float:
        """When a new debounced task runs: once its window passes. @raise Refused: too far."""
        due = round(now + window_ms / 1000, 3)
        refusal = self._check_delay(due, now)
        if refusal is not None:
            raise refusal
        return due

    def _apply(
        self, task: Task, options: SubmitOptions, due: float, joined: Group | None, deadline: float
    ) -> None:
        """
        The options beyond a queue and a priority, on C{task} (read only when
        given: the hot path): its keys, due time, retries, backoff, progress,
        trace; its outcome kept C{result_ttl} seconds; it joins C{joined}.
        """
        key, fairness, backoff, trace = (
            options.key,
            options.fairness,
            options.backoff,
            options.trace,
        )
        progress = options.progress
        none = key is None and fairness is None and backoff is None and trace is None
        if progress or deadline or not none:
            # Its rare fields, set at once (a plain task has none: see Extras).
            task.extras = Extras(
                key,
                fairness,
                None,
                backoff,
                forward_progress=progress,
                trace=trace,
                deadline=deadline,
                due=due,
            )
        elif due:
            task.extras = DueOnly(due=due)  # (its one rare field: see DueOnly)
        if options.retries is not None:  # (kept in its extras when not its queue's)
            task.retries = options.retries
        if options.result_ttl is not None:
            kept = self.kernel.limits.results
            task.keep_for = min(options.result_ttl or kept.ttl, kept.max_ttl)
        if joined is not None:
            task.group = joined.group_id
            self.kernel.groups.join(joined)
        if options.after is not None or options.after_group is not None:
            self.kernel.dependencies.attach(task, options)

    def _due(self, options: SubmitOptions, now: float) -> float:
        """
        When a task of C{options}, delayed, runs (0.0: now).

        @raise Refused: it may not be delayed until then.
        """
        delay_ms, run_at_ms = options.delay_ms, options.run_at_ms
        due = now + delay_ms / 1000 if delay_ms is not None else run_at_ms / 1000  # type: ignore[operator]
        refusal = self._check_delay(due, now)
        if refusal is not None:
            raise refusal
        # Kept to the millisecond, as the wire and the journal carry it.
        return round(due, 3) if due > now else 0.0

    def _check_delay(self, due: float, now: float) -> Refused | None:
        """Why a task delayed until C{due} cannot be taken now, if it cannot."""
        limits = self.kernel.limits
        if due - now > limits.max_delay:
            return Refused(
                ErrorCode.INVALID_MESSAGE,
                f"a task may be delayed at most {limits.max_delay:g} s (max_delay),"
                f" not {due - now:.0f} s",
            )
        if due > now and self.kernel.delays.count >= limits.max_delayed:
            return Refused(
                ErrorCode.QUEUE_FULL,
                f"too many delayed tasks (max_delayed = {limits.max_delayed})",
                log_id="limit.delayed",
            )
        return None

    def _check_submit(self, queue: NamedQueue[Task, Session], task_type: bytes) -> None:
        """@raise Refused: a SUBMIT of C{task_type} into C{queue} cannot be taken now."""
        kernel = self.kernel
        if kernel.allowed_types is not None and task_type not in kernel.allowed_types:
            raise Refused(
                ErrorCode.UNKNOWN_TASK_TYPE,
                f"unknown task type: {task_type.decode('utf-8', 'replace')}",
            )
        if kernel.draining:
            raise Refused(ErrorCode.QUEUE_FULL, "the daemon is shutting down")
        if kernel.journal.broken:
            raise Refused(ErrorCode.QUEUE_FULL, f"journal unavailable: {kernel.journal.broken}")
        depth = queue.policy.max_depth
        if depth and queue.depth + queue.parked >= depth:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"queue {queue.name!r} is full (max_depth = {depth})",
                log_id="limit.queue_depth",
            )

    def _check_fairness(self, queue: NamedQueue[Task, Session], fairness: bytes) -> None:
        """@raise Refused: C{fairness} would be one fairness key too many."""
        kernel = self.kernel
        limit = kernel.limits.max_fairness_keys
        if queue.limited and fairness not in queue.keys and kernel.fairness_keys >= limit:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many fairness keys (max_fairness_keys = {limit})",
                log_id="limit.fairness_keys",
            )

    def _store(self, payload: bytes) -> int:
        """
        A pool block holding C{payload}; when the pool is full, kept outcomes
        are evicted (the oldest whose block can hold it) to make room.

        @raise Refused: it is larger than any block, or there is no room even so.
        """
        pool, kept = self.kernel.pool, self.kernel.kept
        while True:
            try:
                return pool.store(payload)
            except pmad.AllocationTooLarge as e:
                raise Refused(ErrorCode.PAYLOAD_TOO_LARGE, str(e)) from None
            except pmad.PoolExhausted as e:
                if not kept.make_room(len(payload) or 1):
                    raise Refused(
                        ErrorCode.QUEUE_FULL, f"queue full: {e}", log_id="limit.pool"
                    ) from None

    def _duplicate(self, session: Session, found: Task | KeyEntry) -> None:
        """Answer a SUBMIT whose key names C{found}: its id, and its outcome if it has one."""
        kernel = self.kernel
        kernel.duplicates += 1
        if isinstance(found, KeyEntry):
            session.reply(session.speaker.duplicate_ok(found.task_id))
            kept = kernel.kept.get(found.task_id)
            if kept is not None:
                tell_kept(session, *kept)
                return
            # The reason a failure gave is not kept with its key.
            reason = f"{found.outcome} (an earlier submission of this key)"
            tell_outcome(session, found.task_id, found.outcome, reason)
            return
        task = found
        producer = task.producer
        if producer is None or not producer.connected:
            # Its producer is gone (a reconnecting client): this one hears the outcome.
            task.producer = session
            session.outstanding += 1
        if task.accepted:
            session.reply(session.speaker.duplicate_ok(task.task_id))
        else:
            waiting = Duplicate(session)
            kernel.duplicates_waiting.setdefault(task.task_id, []).append(waiting)
            session.wait_for(waiting)

    # -- schedules ----------------------------------------------------------------------

    def fire(self, name: str, fire_time: float, spec: ScheduledTask) -> None:
        """
        (The schedules.) Submit schedule C{name}'s task for C{fire_time},
        with the idempotency key C{schedule:NAME:FIRE_MS}: a firing already
        submitted (before a restart) is not submitted again.  A firing the
        queue cannot take is logged and counted, never skipped silently.
        """
        kernel = self.kernel
        key = f"schedule:{name}:{int(fire_time * 1000)}".encode()
        try:
            queue = kernel.queue_named(spec.queue or None)
            self._check_submit(queue, spec.task_type)
            now = kernel.clock()
            if kernel.keys.find(queue.name, key, now) is not None:
                return
            block = self._store(spec.payload)
        except Refused as e:
            reason = str(e)
            kernel.note_rejection(None, ErrorCode.QUEUE_FULL, reason, spec.task_type, 0)
            kernel.log.warn(
                "schedule {name}: the firing for {when} was refused: {reason}",
                log_id="schedule.refused",
                name=name,
                when=fire_time,
                reason=reason,
            )
            return
        queue = kernel.queues.setdefault(queue.name, queue)
        task = Task(
            kernel.next_task_id(),
            spec.task_type,
            block,
            len(spec.payload),
            None,
            queue,
            queue.priority if spec.priority is None else spec.priority,
            now,
            tally=kernel.tally_of(queue, spec.task_type),
            ready_at=now,
        )
        task.key = key
        if queue.policy.expires:
            task.deadline = now + queue.policy.expires
        kernel.admit(task, spec.payload)
        if task.deadline:
            self._watch(task)
        kernel.journal.record_fired(name, fire_time)
