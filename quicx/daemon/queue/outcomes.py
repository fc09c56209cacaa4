"""
Decided outcomes: the kept ones, the AWAITs and group WAITs for them, the groups they count in.

It hears the kernel's hooks (see L{quicx.daemon.queue.hooks.Subscribers}):
each task's outcome (L{Outcomes.settled}), each SUBMIT withdrawn, each
session closed; admission has a SUBMIT join a group; it answers the requests about outcomes
and groups (AWAIT, OPEN/CLOSE/WAIT of a group) itself.  It reads the live
tasks and the sessions, and never calls the kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from quicx.daemon.journal.interface import IJournal
from quicx.daemon.observe.logsummary import LogSummary
from quicx.daemon.queue import pmad
from quicx.daemon.queue.groups import Group, Groups
from quicx.daemon.queue.model import Refused, Session, Task
from quicx.daemon.queue.policy import QueueLimits
from quicx.daemon.queue.results import KeptOutcomes
from quicx.daemon.queue.waits import Target, Wait, Waits
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import GroupPhase, OutcomeState


class Outcomes:
    """
    The kept outcomes (L{kept}), the waits (L{waits}) and the groups (L{groups}).

    @ivar live: the kernel's live tasks by id (read only).
    @ivar sessions: the kernel's open connections by id (read only).
    """

    def __init__(
        self,
        pool: pmad.Pmad,
        journal: IJournal,
        limits: QueueLimits,
        scheduler: IReactorTime,
        clock: Callable[[], float],
        live: dict[int, Task],
        sessions: dict[int, Session],
        failures: LogSummary,
        log: Logger,
    ) -> None:
        self.limits = limits
        self.live = live
        self.sessions = sessions
        self.failures = failures
        self.log = log
        self.kept = KeptOutcomes(
            pool, journal, limits.results, scheduler, clock, self._result_evicted
        )
        self.groups = Groups(limits.groups, journal, scheduler, clock, self._group_idle_closed)
        self.waits: Waits[Session] = Waits(limits.results, scheduler, clock, self._wait_ended)
        # Told of each group that finishes (the dependencies: its callbacks).
        self.finished_listeners: list[Callable[[Group], None]] = []

    def stop(self) -> None:
        """Cancel the timers."""
        self.kept.stop()
        self.groups.stop()
        self.waits.stop()

    def session_closed(self, session: Session) -> None:
        """(A kernel hook.) C{session}'s waits end."""
        if self.waits.count:
            self.waits.drop(session)

    def withdrawn(self, task: Task) -> None:
        """
        (A kernel hook.) C{task}'s SUBMIT is refused after all: it leaves its
        group; its waits hear I{unknown}.
        """
        if task.group:
            self.leave_group(task)
        if self.waits.count:
            self.answer_waits(task.task_id, OutcomeState.UNKNOWN)

    def settled(
        self,
        task: Task,
        state: OutcomeState,
        result: taskflow.Result | None = None,
        reason: str = "",
    ) -> None:
        """
        (A kernel hook.) C{task}'s outcome is decided (its producer has heard it): keep it if
        it should be kept, send it to every wait for it, count it in its
        group (whose GROUP_STATE then follows the outcome).
        """
        ttl, automatic = self._keep_for(task)
        if ttl or self.waits.count:
            task_id = task.task_id
            if result is None:
                kind, data = 0, reason.encode("utf-8")
            else:
                kind, data = result.kind, result.data
            if ttl:
                self.kept.keep(task_id, state, kind, data, ttl, automatic)
            if self.waits.count:
                self.answer_waits(task_id, state, result, b"" if result is not None else data)
        if task.group:
            self.leave_group(task, state)

    def _keep_for(self, task: Task) -> tuple[float, bool]:
        """
        Seconds C{task}'s outcome is kept (0: it is not), and whether nobody
        asked (it is kept for a producer that is gone, and evicted first).
        """
        if task.keep_for:
            return task.keep_for, False
        policy = task.home.policy
        limits = self.limits.results
        if policy.keep_results:
            return min(policy.result_ttl or limits.ttl, limits.max_ttl), False
        producer = task.producer
        if producer is None:
            # Back from the journal: its producer may come back for it.
            claimable = task.recovered and self.limits.outcomes_claimable
        else:
            # A version-2 producer cut off learns its outcomes when it
            # reconnects; a version-1 one never could: nothing is kept.
            claimable = producer.speaker.claims_outcomes and not producer.connected
        if claimable:
            return min(limits.ttl, limits.max_ttl), True
        return 0.0, False

    def answer_waits(
        self,
        task_id: int,
        state: OutcomeState,
        result: taskflow.Result | None = None,
        reason: bytes = b"",
    ) -> None:
        """End the waits for C{task_id} with its OUTCOME (not an answer: sent at once)."""
        for session in self.waits.pop(Target.TASK, task_id):
            session.peer.sendFrame(session.speaker.outcome(task_id, state, result, reason))

    def _result_evicted(self, task_id: int, why: str) -> None:
        """(The kept outcomes.) One was evicted before its time."""
        self.failures.note(
            "result evicted",
            b"",
            why,
            "the kept outcome of task {task_id} was {why}",
            log_id="limit.results",
            task_id=task_id,
            why=why,
        )

    def await_outcome(self, session: Session, task_id: int, timeout_ms: int) -> None:
        """
        Answer C{session} OUTCOME for C{task_id}: at once when it is known
        (or C{timeout_ms} is 0), else when the task finishes or the timeout
        passes (then I{pending}).

        @raise Refused: (queue full) a wait would pass a waiter limit.
        """
        task = self.live.get(task_id)
        if task is None:
            session.reply(self.kept.outcome(task_id))
        elif task.dead is not None:
            session.reply(
                session.speaker.outcome(task_id, OutcomeState.DEAD, None, task.dead.reason)
            )
        elif timeout_ms:
            self._wait(session, Target.TASK, task_id, timeout_ms)
        else:
            session.reply(session.speaker.outcome(task_id, OutcomeState.PENDING, None, b""))

    def _wait(self, session: Session, target: Target, target_id: int, timeout_ms: int) -> None:
        """@raise Refused: (queue full) one more wait would pass a waiter limit."""
        refusal = self.waits.refusal(session)
        if refusal is not None:
            raise Refused(ErrorCode.QUEUE_FULL, refusal, log_id="limit.waiters")
        self.waits.add(session, target, target_id, timeout_ms / 1000)

    def _wait_ended(self, wait: Wait[Session]) -> None:
        """(The waits.) A wait reached its timeout: answered with the state now."""
        if wait.target is Target.TASK:
            frame = wait.session.speaker.outcome(wait.target_id, OutcomeState.PENDING, None, b"")
        else:
            frame = self.groups.state_frame(wait.target_id)
        wait.session.peer.sendFrame(frame)

    def open_group(self, session: Session) -> dict[str, Any]:
        """
        Open a group, told to C{session} when it finishes.

        @raise Refused: (queue full) C{max_groups} are open.
        """
        group = self.groups.open(session.session_id)
        if group is None:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many groups (max_groups = {self.groups.max_groups}), none finished",
                log_id="limit.groups",
            )
        return group.describe()

    def close_group(self, group_id: int) -> dict[str, Any]:
        """
        Close a group to new members (it finishes now if every member has).

        @raise Refused: (not found) no such group.
        """
        group = self.groups.get(group_id)
        if group is None:
            raise Refused(ErrorCode.NOT_FOUND, f"no group {group_id} (or it was forgotten)")
        if self.groups.close(group):
            self._group_finished(group)
        return group.describe()

    def await_group(self, session: Session, group_id: int, timeout_ms: int) -> None:
        """
        Answer C{session} GROUP_STATE for C{group_id}: at once when it is
        finished or unknown (or C{timeout_ms} is 0), else when it finishes or
        the timeout passes.

        @raise Refused: (queue full) a wait would pass a waiter limit.
        """
        group = self.groups.get(group_id)
        if group is None or group.phase is GroupPhase.FINISHED or not timeout_ms:
            session.reply(self.groups.state_frame(group_id))
        else:
            self._wait(session, Target.GROUP, group_id, timeout_ms)

    def group_to_join(self, group_id: int) -> Group:
        """
        The group a SUBMIT joins.

        @raise Refused: (not found) no such group; (conflict) it is closed.
        """
        group = self.groups.get(group_id)
        if group is None:
            raise Refused(ErrorCode.NOT_FOUND, f"no group {group_id} (or it was forgotten)")
        if group.phase is not GroupPhase.OPEN:
            raise Refused(ErrorCode.CONFLICT, f"group {group_id} is closed: no new members")
        return group

    def leave_group(self, task: Task, state: OutcomeState | None = None) -> None:
        """
        C{task} leaves its group: it finished as C{state}, or (C{None}) its
        SUBMIT was refused after all.
        """
        group = self.groups.get(task.group)
        task.group = 0
        if group is None:
            return
        finished = self.groups.leave(group) if state is None else self.groups.count(group, state)
        if finished:
            self._group_finished(group)

    def _group_idle_closed(self, group: Group, finished: bool) -> None:
        """(The groups.) A group took no member for C{[groups] idle_close}: it is closed."""
        self.log.info(
            "group {group} closed by the daemon: no task joined it for {idle:g} s"
            " ({members} members, {pending} still to finish)",
            log_id="group.idle_closed",
            group=group.group_id,
            idle=self.groups.idle_close,
            members=group.members,
            pending=group.pending,
        )
        if finished:
            self._group_finished(group)

    def _group_finished(self, group: Group) -> None:
        """GROUP_STATE, once, to the group's opener (if connected) and every wait for it."""
        for listener in self.finished_listeners:
            listener(group)
        state = group.state()
        waiting = self.waits.pop(Target.GROUP, group.group_id)
        opener = self.sessions.get(group.opener)
        if opener is not None and opener not in waiting:
            waiting.append(opener)
        for session in waiting:
            session.peer.sendFrame(session.speaker.group_state(state))
