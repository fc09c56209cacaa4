"""
Tasks that wait for others: their parents' outcomes, or a group's end (a chord's callback).

A SUBMIT may name parent tasks (C{after}) and a group (C{after_group}): the
task is accepted (OK) and I{waiting} (L{WAITING}) until every parent has an
outcome and the group has finished; then it is due (queued, or delayed
until its time), its parents' outcomes in its context
(L{quicx.protocol.parents.Parents}) -- or, by its policy
(L{ParentPolicy.FAIL}, the default), it fails at the first parent that did
not finish done.

The cost: each waiting task holds a counter of what it still waits for;
each parent (and each group with callbacks) a dict of the tasks waiting for
it.  A parent's outcome costs O(1) per child waiting for it, a group
member's O(1) per callback of its group, and nothing is ever scanned.  A
task that names no parent costs the kernel one test at its admission
(C{task.after}) and one as it finishes (C{task.watched}).

Parents must exist when their child is submitted (so there is no cycle): a
live task (queued, delayed, running, waiting or dead), or a finished one
whose outcome is kept.  An id never seen, or finished with no outcome kept,
is refused with ERROR 0x09.

It hears the kernel's hooks (L{quicx.daemon.queue.hooks.Subscribers}:
C{settled}, C{withdrawn}) and the groups' ends; the kernel hands it each
accepted task that waits (L{Dependencies.accept}, L{Dependencies.wait}).
Journaled: the waiting task's SUBMIT record carries what it waits for (kind
23), each outcome a waiting task needs has a PARENT record (kind 24), and a
restart rebuilds the counts from them (L{Dependencies.restore}).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

from attrs import define, field

from quicx.daemon.journal.interface import ParentEntry
from quicx.daemon.queue.groups import Group
from quicx.daemon.queue.ikernel import IKernel
from quicx.daemon.queue.model import After, Refused, Task
from quicx.daemon.queue.state import DELAYED, PENDING, WAITING, move
from quicx.protocol import taskflow
from quicx.protocol.codec import ErrorCode
from quicx.protocol.outcomes import GroupPhase, OutcomeState
from quicx.protocol.parents import (
    GroupCounts,
    ParentOutcome,
    ParentPolicy,
    Parents,
    encode_parents,
    parents_in,
)

_ENTRY_COST = 10
"""The bytes one outcome takes in a TASK's context besides its data."""


@define(eq=False)
class Waiter:
    """
    A waiting task's bookkeeping.

    @ivar pending: the parents (and the group) it still waits for.
    @ivar outcomes: those of its parents (and group members) it has heard, in order.
    @ivar size: the bytes of C{outcomes} in its context.
    @ivar left_out: outcomes listed without their data, or not listed, for
        C{max_results} (which so bounds C{outcomes} too).
    @ivar failed: its first parent that finished other than done.
    @ivar group: its group's counts, once it finished.
    """

    task: Task
    pending: int = 0
    outcomes: list[ParentOutcome] = field(factory=list)
    size: int = 0
    left_out: int = 0
    failed: ParentOutcome | None = None
    group: GroupCounts | None = None

    def hear(self, outcome: ParentOutcome, limit: int, member: bool = False) -> None:
        """
        Keep C{outcome} for its context: without its data if that would pass
        C{limit}; a group C{member}'s not at all if even its entry would (a
        parent's always is: at most 63 entries of 10 bytes past it).
        """
        cost = _ENTRY_COST + len(outcome.data)
        if self.size + cost > limit:
            self.left_out += 1
            if member and self.full(limit):
                return
            outcome = ParentOutcome(outcome.task_id, outcome.state)
            cost = _ENTRY_COST
        self.size += cost
        self.outcomes.append(outcome)

    def full(self, limit: int) -> bool:
        """Whether its context has no room for one more outcome, even without data."""
        return self.size + _ENTRY_COST > limit

    def parents(self) -> bytes:
        """Its context's parents' items: a failure left out if its policy ignores failures."""
        outcomes = self.outcomes
        after = self.task.after
        if after is not None and after.policy is ParentPolicy.IGNORE:
            outcomes = [o for o in outcomes if o.state == OutcomeState.DONE]
        return encode_parents(Parents(tuple(outcomes), self.group, self.left_out))


class Dependencies:
    """
    The waiting tasks, and what each waits for.

    @ivar waiters: the waiting tasks' bookkeeping, by task id.
    @ivar children: by parent id, the waiters that wait for it.
    @ivar callbacks: by group id, the waiters that wait for it to finish.
    @ivar released: the tasks that waited and are due now (queued, delayed
        or running), until they finish: a journal snapshot keeps the
        outcomes they were handed, which a restart hands them again.
    @ivar resolved: dependency edges resolved since start (a parent's
        outcome heard by one child, or a group's end by one callback).
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        self.limits = kernel.limits.dependencies
        self.waiters: dict[int, Waiter] = {}
        self.children: dict[int, dict[int, Waiter]] = {}
        self.callbacks: dict[int, dict[int, Waiter]] = {}
        self.released: dict[int, Task] = {}
        self.resolved = 0
        self._due: deque[Waiter] = deque()
        self._releasing = False
        kernel.outcomes.finished_listeners.append(self.group_finished)

    # -- admission ------------------------------------------------------------------

    def check(self, options: taskflow.SubmitOptions) -> None:
        """
        Whether a SUBMIT with C{after} or C{after_group} may wait for what it names.

        @raise Refused: too many parents or waiting tasks; a parent or the group is unknown.
        """
        limits = self.limits
        parents = options.after or ()
        if len(parents) > limits.max_parents:
            raise Refused(
                ErrorCode.INVALID_MESSAGE,
                f"a task may wait for at most {limits.max_parents} parents (max_parents),"
                f" not {len(parents)}",
            )
        if len(self.waiters) >= limits.max_waiting:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many waiting tasks (max_waiting = {limits.max_waiting})",
                log_id="limit.waiting",
            )
        kernel = self.kernel
        for parent in parents:
            task = kernel._live.get(parent)
            if task is None and kernel.kept.get(parent) is None:
                raise Refused(
                    ErrorCode.UNKNOWN_PARENT,
                    f"parent {parent} is unknown: never submitted, or finished with no outcome"
                    " kept (keep_result)",
                )
            if task is not None and not task.accepted:
                raise Refused(ErrorCode.UNKNOWN_PARENT, f"parent {parent} is not accepted yet")
        group = options.after_group or 0
        if group and kernel.groups.get(group) is None:
            raise Refused(ErrorCode.UNKNOWN_PARENT, f"no group {group} (or it was forgotten)")

    def attach(self, task: Task, options: taskflow.SubmitOptions) -> None:
        """
        C{task}, just made of C{options} (which passed L{check}; it is not
        accepted yet), waits for what they name: a parent that has an
        outcome already is heard now (and journaled, before the task's own
        record).
        """
        policy = options.on_parent_failure
        after = task.after = After(
            options.after or (),
            ParentPolicy.FAIL if policy is None else ParentPolicy(policy),
            options.after_group or 0,
        )
        task.watched = True
        # All it waits for is counted first: none heard below releases it early.
        waiter = self.waiters[task.task_id] = Waiter(task, len(after.parents) + bool(after.group))
        task.home.waiting += 1  # its queue is kept while it waits
        kernel = self.kernel
        for parent_id in after.parents:
            parent = kernel._live.get(parent_id)
            if parent is not None and parent.dead is None:
                self.children.setdefault(parent_id, {})[task.task_id] = waiter
                parent.watched = True
                continue
            outcome = self._outcome_of(parent_id, parent)
            kernel.journal.record_parent(_entry(outcome))
            self._resolve(waiter, outcome)
        if after.group:
            group = kernel.groups.get(after.group)
            assert group is not None
            if group.phase is GroupPhase.FINISHED:
                waiter.group = _counts(group)
                waiter.pending -= 1
            else:
                self.callbacks.setdefault(after.group, {})[task.task_id] = waiter

    def _outcome_of(self, parent_id: int, parent: Task | None) -> ParentOutcome:
        """The outcome of a parent that has one: dead, kept, or (lost) unknown."""
        if parent is not None and parent.dead is not None:
            return ParentOutcome(parent_id, OutcomeState.DEAD, 0, parent.dead.reason.encode())
        found = self.kernel.kept.get(parent_id)
        if found is None:
            return ParentOutcome(parent_id, OutcomeState.UNKNOWN)
        kept, data = found
        return ParentOutcome(parent_id, kept.state, kept.kind, data)

    # -- acceptance -----------------------------------------------------------------

    def accept(self, task: Task) -> None:
        """(The kernel.) C{task}'s record is durable at once: answered OK, it waits."""
        move(task, WAITING)
        task.tally.submitted += 1
        for accepted in self.kernel.hooks.accepted:
            accepted(task)
        producer = task.producer
        if producer is not None and producer.connected:
            producer.reply(producer.speaker.ok(task.task_id))
        self.wait(task)

    def wait(self, task: Task) -> None:
        """(The kernel, the journal's side.) C{task}, accepted, is waiting: due now if it may be."""
        waiter = self.waiters[task.task_id]
        if not waiter.pending or self._fails(waiter):
            self._due.append(waiter)
            self._release_due()

    def withdrawn(self, task: Task) -> None:
        """(A kernel hook.) C{task}'s SUBMIT is refused after all: it waits no more."""
        waiter = self.waiters.pop(task.task_id, None)
        if waiter is not None:
            self._detach(waiter)

    # -- outcomes -------------------------------------------------------------------

    def settled(
        self,
        task: Task,
        state: OutcomeState,
        result: taskflow.Result | None = None,
        reason: str = "",
    ) -> None:
        """
        (A kernel hook, heard before the groups count it.)  C{task}'s
        outcome: each task waiting for it hears it, each callback of its
        group keeps it; a waiting task that ends (cancelled) waits no more.
        """
        if not (task.watched or task.group):
            return
        task_id = task.task_id
        waiter = self.waiters.pop(task_id, None)
        if waiter is not None:
            self._detach(waiter)
        elif task.parents is not None:
            self.released.pop(task_id, None)
        children = self.children.pop(task_id, None)
        callbacks = self.callbacks.get(task.group) if task.group else None
        if children or callbacks:
            if result is None:
                outcome = ParentOutcome(task_id, state, 0, reason.encode("utf-8"))
            else:
                outcome = ParentOutcome(task_id, state, result.kind, result.data)
            limit = self.limits.max_results
            # A member's outcome no callback has room for is only counted (not journaled).
            if children or any(not c.full(limit) for c in (callbacks or {}).values()):
                group = task.group if callbacks else 0
                self.kernel.journal.record_parent(_entry(outcome, group))
            for child in (children or {}).values():
                self._resolve(child, outcome)
            for callback in (callbacks or {}).values():
                callback.hear(outcome, limit, member=True)
                if outcome.state != OutcomeState.DONE and callback.failed is None:
                    callback.failed = outcome
        self._release_due()

    def group_finished(self, group: Group) -> None:
        """(The outcomes.) C{group} finished: its callbacks hear its counts."""
        callbacks = self.callbacks.pop(group.group_id, None)
        if not callbacks:
            return
        counts = _counts(group)
        for waiter in callbacks.values():
            waiter.group = counts
            waiter.pending -= 1
            self.resolved += 1
            if not waiter.pending:
                self._due.append(waiter)
        self._release_due()

    def _resolve(self, waiter: Waiter, outcome: ParentOutcome) -> None:
        """C{waiter} hears one parent's outcome: due once it heard them all (or one failed)."""
        self.resolved += 1
        waiter.pending -= 1
        waiter.hear(outcome, self.limits.max_results)
        if outcome.state != OutcomeState.DONE and waiter.failed is None:
            waiter.failed = outcome
            if self._fails(waiter):
                self._due.append(waiter)
                return
        if not waiter.pending:
            self._due.append(waiter)

    @staticmethod
    def _fails(waiter: Waiter) -> bool:
        after = waiter.task.after
        return waiter.failed is not None and after is not None and after.policy is ParentPolicy.FAIL

    def _release_due(self) -> None:
        """
        Release the waiters that are due, one after another (a release that
        fails a task may make its own children due: they join the line, so
        that a long chain never recurses).
        """
        if self._releasing:
            return
        self._releasing = True
        try:
            due = self._due
            while due:
                self._release(due.popleft())
        finally:
            self._releasing = False

    def _release(self, waiter: Waiter) -> None:
        """C{waiter}'s task is due (or fails, by its policy), unless it is not accepted yet."""
        task = waiter.task
        if task.state is PENDING or self.waiters.get(task.task_id) is not waiter:
            return  # answered later (L{wait}), or gone already
        if waiter.pending and not self._fails(waiter):
            return  # (never: each is due once it heard all it waits for)
        del self.waiters[task.task_id]
        self._detach(waiter)
        kernel = self.kernel
        failed = waiter.failed
        if failed is not None and self._fails(waiter):
            reason = f"parent {failed.task_id} {OutcomeState(failed.state).name.lower()}"
            if failed.data and not failed.kind:
                reason += f": {failed.data.decode('utf-8', 'replace')}"
            kernel.expiry.cancelled(task, reason)  # its deadline holds no longer
            kernel.failing.fail_for_good(task, reason, "", None, None, dead_letter=False)
            return
        task.parents = waiter.parents()
        if task.checkpoint is not None:  # (back from the journal)
            kernel.checkpoints.fit(task)
        self.released[task.task_id] = task
        queue = task.home  # kept while the task waited (its count of waiting ones)
        now = kernel.clock()
        if task.due > now:
            move(task, DELAYED)
            kernel._delay(task, task.due)
            return
        task.ready_at = now
        kernel._push(task)
        if queue.idle:
            kernel.dispatcher.serve_queue(queue)

    def _detach(self, waiter: Waiter) -> None:
        """C{waiter} waits for nothing any more (O(its parents))."""
        task = waiter.task
        task.home.waiting -= 1
        after = task.after
        assert after is not None
        task_id = task.task_id
        for parent in after.parents:
            children = self.children.get(parent)
            if children is not None and children.pop(task_id, None) is not None and not children:
                del self.children[parent]
        callbacks = self.callbacks.get(after.group) if after.group else None
        if callbacks is not None and callbacks.pop(task_id, None) is not None and not callbacks:
            del self.callbacks[after.group]

    # -- looking, and the journal -------------------------------------------------------

    def describe(self, task: Task) -> dict[str, Any]:
        """What a waiting task waits for, as INSPECT says it."""
        after = task.after
        assert after is not None
        task_id = task.task_id
        pending = [p for p in after.parents if task_id in self.children.get(p, ())]
        group_pending = task_id in self.callbacks.get(after.group, ())
        parts = []
        if pending:
            ids = ", ".join(map(str, pending))
            parts.append(f"parent{'s' if len(pending) > 1 else ''} {ids}")
        if group_pending:
            parts.append(f"group {after.group} to finish")
        return {
            "reason": "waiting",
            "parents": pending,
            "group": after.group if group_pending else None,
            "policy": after.policy.name.lower(),
            "text": f"it waits for {' and '.join(parts)}"
            + f" ({len(after.parents) - len(pending)} of {len(after.parents)} parents finished)"
            * bool(after.parents),
        }

    def entries(self) -> Iterator[ParentEntry]:
        """
        The outcomes the waiting tasks have heard, and those the released
        ones were handed (for a journal snapshot), each once.
        """
        seen: set[tuple[int, int]] = set()
        heard = [(w.task, w.outcomes) for w in self.waiters.values()]
        for task in self.released.values():
            carried = parents_in(task.parents or b"", 0, len(task.parents or b""))
            heard.append((task, list(carried.outcomes) if carried is not None else []))
        for task, outcomes in heard:
            after = task.after
            assert after is not None
            parents = set(after.parents)
            for outcome in outcomes:
                entry = _entry(outcome, 0 if outcome.task_id in parents else after.group)
                if (entry.task_id, entry.group) not in seen:
                    seen.add((entry.task_id, entry.group))
                    yield entry

    def restore(self, waiting: Iterable[Task], entries: Iterable[ParentEntry]) -> None:
        """
        Take back the waiting tasks a journal kept: each hears again the
        outcomes it had heard (C{entries}) and waits for the rest; those
        whose parents all finished before the crash are due now.
        """
        heard: dict[int, ParentEntry] = {}
        members: dict[int, list[ParentEntry]] = {}
        for entry in entries:
            if entry.group:
                members.setdefault(entry.group, []).append(entry)
            else:
                heard[entry.task_id] = entry
        kernel = self.kernel
        limit = self.limits.max_results
        for task in waiting:
            after = task.after
            assert after is not None
            task.watched = True
            waiter = self.waiters[task.task_id] = Waiter(
                task, len(after.parents) + bool(after.group)
            )
            task.home.waiting += 1
            for parent_id in after.parents:
                known = heard.get(parent_id)
                parent = kernel._live.get(parent_id)
                if known is not None:
                    self._resolve(waiter, _outcome(known))
                elif parent is not None and parent.dead is None:
                    self.children.setdefault(parent_id, {})[task.task_id] = waiter
                    parent.watched = True
                else:
                    self._resolve(waiter, self._outcome_of(parent_id, parent))
            if after.group:
                for entry in members.get(after.group, ()):
                    waiter.hear(_outcome(entry), limit, member=True)
                group = kernel.groups.get(after.group)
                if group is not None and group.phase is not GroupPhase.FINISHED:
                    self.callbacks.setdefault(after.group, {})[task.task_id] = waiter
                else:
                    waiter.group = _counts(group) if group else GroupCounts(after.group, 0, 0, 0, 0)
                    waiter.pending -= 1
            if not waiter.pending or self._fails(waiter):
                self._due.append(waiter)
        self._release_due()


def _counts(group: Group) -> GroupCounts:
    return GroupCounts(group.group_id, group.members, group.done, group.failed, group.cancelled)


def _entry(outcome: ParentOutcome, group: int = 0) -> ParentEntry:
    return ParentEntry(outcome.task_id, group, outcome.state, outcome.kind, outcome.data)


def _outcome(entry: ParentEntry) -> ParentOutcome:
    return ParentOutcome(entry.task_id, entry.state, entry.kind, entry.data)
