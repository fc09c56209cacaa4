"""
Groups of tasks that finish as one.

A producer opens a group (the daemon numbers it), submits tasks into it and
closes it; the group is finished once it is closed and every member has
finished (done, failed -- dead and given up included -- or cancelled).  A
finished group is remembered C{ttl} seconds, and at most C{max_groups}
groups exist: past it the oldest finished group is forgotten, and when
every group is unfinished no new one opens.  An open group that no task has
joined for C{idle_close} seconds is closed by the daemon (its producer
died before it closed it), so that it finishes.  One timer serves both.

Sans-I/O: the queue core tells the groups of members joining and finishing,
and sends GROUP_STATE when L{Groups.count} says a group finished.  Every
change of phase is journaled as a GROUP record with the group's counts; the
counts in between follow from the members' own records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from attrs import define, frozen
from twisted.internet.interfaces import IReactorTime

from quicx.daemon.journal.interface import GroupEntry, IJournal
from quicx.daemon.queue.delays import Delays
from quicx.protocol import codec, outcomes
from quicx.protocol.outcomes import GroupPhase, OutcomeState


@frozen
class GroupLimits:
    """
    The C{[groups]} settings.

    @ivar max_groups: the most groups, open or finished and remembered.
    @ivar ttl: seconds a finished group is remembered.
    @ivar idle_close: seconds an open group may go without a new member
        before the daemon closes it (0: never).
    """

    max_groups: int = 10_000
    ttl: float = 3600.0
    idle_close: float = 86_400.0


@define(eq=False)
class Group:
    """
    One group.

    @ivar opener: the session id of the connection that opened it, told
        when it finishes (0: none, as after a restart).
    @ivar due: when an open group is looked at for idleness, or a finished
        one forgotten (Unix seconds; 0: neither, while it is closed).
    @ivar joined_at: when it last took a member (or opened).
    """

    group_id: int
    opened_at: float
    opener: int = 0
    phase: GroupPhase = GroupPhase.OPEN
    members: int = 0
    done: int = 0
    failed: int = 0
    cancelled: int = 0
    finished_at: float = 0.0
    due: float = 0.0
    joined_at: float = 0.0

    @property
    def pending(self) -> int:
        """Members that have not finished."""
        return self.members - self.done - self.failed - self.cancelled

    def state(self) -> outcomes.GroupState:
        """What GROUP_STATE says of it."""
        return outcomes.GroupState(
            self.group_id,
            self.phase,
            self.members,
            self.done,
            self.failed,
            self.cancelled,
            self.pending,
        )

    def describe(self) -> dict[str, Any]:
        """The INFO that answers GROUP open, close and state."""
        return {
            "group": self.group_id,
            "state": self.phase.name.lower(),
            "members": self.members,
            "done": self.done,
            "failed": self.failed,
            "cancelled": self.cancelled,
            "pending": self.pending,
            "opened_at": round(self.opened_at, 3),
            "finished_at": round(self.finished_at, 3) if self.finished_at else None,
        }

    def entry(self) -> GroupEntry:
        return GroupEntry(
            self.group_id,
            self.phase,
            self.opened_at,
            self.finished_at,
            self.members,
            self.done,
            self.failed,
            self.cancelled,
        )


class Groups:
    """The groups, by id."""

    def __init__(
        self,
        limits: GroupLimits,
        journal: IJournal,
        scheduler: IReactorTime,
        clock: Callable[[], float],
        idle_closed: Callable[[Group, bool], None],
    ) -> None:
        """
        @param idle_closed: told of each group closed for want of new
            members, and whether that finished it.
        """
        self.max_groups = limits.max_groups
        self.ttl = limits.ttl
        self.idle_close = limits.idle_close
        self._idle_closed = idle_closed
        self.journal = journal
        self._clock = clock
        self._groups: dict[int, Group] = {}
        # The finished ones, in the order they finished: the first is forgotten first.
        self._finished: dict[int, Group] = {}
        self._last_id = 0
        self._timer: Delays[Group] = Delays(scheduler, clock, self._expire)

    def __len__(self) -> int:
        return len(self._groups)

    @property
    def unfinished(self) -> int:
        return len(self._groups) - len(self._finished)

    def get(self, group_id: int) -> Group | None:
        return self._groups.get(group_id)

    def describe(self, group_id: int) -> dict[str, Any]:
        """The INFO of group C{group_id}, or of an unknown one."""
        group = self._groups.get(group_id)
        if group is not None:
            return group.describe()
        return {
            "group": group_id,
            "state": "unknown",
            "members": 0,
            "done": 0,
            "failed": 0,
            "cancelled": 0,
            "pending": 0,
            "opened_at": None,
            "finished_at": None,
        }

    def state_frame(self, group_id: int) -> bytes:
        """The GROUP_STATE of group C{group_id} now, or of an unknown one."""
        group = self._groups.get(group_id)
        state = (
            outcomes.GroupState(group_id, GroupPhase.UNKNOWN) if group is None else group.state()
        )
        return outcomes.encode_group_state(state)

    def open(self, opener: int) -> Group | None:
        """
        A new group, opened by session C{opener}; C{None} when C{max_groups}
        are unfinished.  The oldest finished group is forgotten to make room.
        """
        if len(self._groups) >= self.max_groups:
            if not self._finished:
                return None
            self._forget(next(iter(self._finished.values())))
        group_id = self._last_id
        while True:
            group_id = group_id + 1 if group_id < codec.MAX_TASK_ID else 1
            if group_id not in self._groups:
                break
        self._last_id = group_id
        now = self._clock()
        group = self._groups[group_id] = Group(group_id, now, opener, joined_at=now)
        self.journal.record_group(group.entry())
        if self.idle_close:
            self._timer.add(group, now + self.idle_close)
        return group

    def close(self, group: Group) -> bool:
        """Take no more members into C{group}; whether that finished it."""
        if group.phase is not GroupPhase.OPEN:
            return False
        if group.due:
            self._timer.remove(group)
        group.phase = GroupPhase.CLOSED
        if not group.pending:
            self._finish(group)
            return True
        self.journal.record_group(group.entry())
        return False

    def join(self, group: Group) -> None:
        """A task joins C{group} (it is open)."""
        group.members += 1
        group.joined_at = self._clock()

    def leave(self, group: Group) -> bool:
        """A member's SUBMIT was refused after all; whether that finished C{group}."""
        group.members -= 1
        return self._check(group)

    def count(self, group: Group, state: OutcomeState) -> bool:
        """A member of C{group} finished as C{state}; whether that finished the group."""
        if state == OutcomeState.DONE:
            group.done += 1
        elif state == OutcomeState.CANCELLED:
            group.cancelled += 1
        else:
            group.failed += 1
        return self._check(group)

    def _check(self, group: Group) -> bool:
        if group.phase is GroupPhase.CLOSED and not group.pending:
            self._finish(group)
            return True
        return False

    def _finish(self, group: Group) -> None:
        group.phase = GroupPhase.FINISHED
        group.finished_at = now = self._clock()
        self._finished[group.group_id] = group
        self.journal.record_group(group.entry())
        self._timer.add(group, now + self.ttl)

    def _expire(self, groups: list[Group]) -> None:
        """
        (The timer.) These groups' time is up: a finished one is forgotten;
        an open one is closed if it took no member for C{idle_close}, else
        looked at again then.
        """
        now = self._clock()
        for group in groups:
            if group.phase is GroupPhase.FINISHED:
                self._forget(group, timed_out=True)
                continue
            idle_until = group.joined_at + self.idle_close
            if idle_until > now:
                self._timer.add(group, idle_until)
            else:
                self._idle_closed(group, self.close(group))

    def _forget(self, group: Group, timed_out: bool = False) -> None:
        if not timed_out:
            self._timer.remove(group)
        del self._groups[group.group_id]
        del self._finished[group.group_id]
        group.phase = GroupPhase.UNKNOWN
        self.journal.record_group(group.entry())

    def entries(self) -> Iterator[GroupEntry]:
        """
        Every group's state (for a journal snapshot), after a forgotten
        entry for the last id given, so that a restart numbers on from it.
        """
        if self._last_id:
            yield GroupEntry(self._last_id, GroupPhase.UNKNOWN, 0.0)
        for group in self._groups.values():
            yield group.entry()

    def restore(self, entries: tuple[GroupEntry, ...], last_id: int) -> None:
        """
        Take back the groups a journal kept: a finished one past its time is
        forgotten, a closed one whose members all finished is finished now.
        """
        now = self._clock()
        self._last_id = last_id
        ordered = sorted(entries, key=lambda entry: entry.finished_at)
        for entry in ordered:
            group = Group(
                entry.group_id,
                entry.opened_at,
                0,
                GroupPhase(entry.phase),
                entry.members,
                entry.done,
                entry.failed,
                entry.cancelled,
                entry.finished_at,
            )
            self._groups[group.group_id] = group
            if group.phase is GroupPhase.FINISHED:
                self._finished[group.group_id] = group
                if group.finished_at + self.ttl <= now:
                    self._forget(group, timed_out=True)
                else:
                    self._timer.add(group, group.finished_at + self.ttl)
            elif group.phase is GroupPhase.OPEN:
                # When it last took a member is not journaled: from now.
                group.joined_at = now
                if self.idle_close:
                    self._timer.add(group, now + self.idle_close)
            else:
                self._check(group)
        while len(self._groups) > self.max_groups and self._finished:
            self._forget(next(iter(self._finished.values())))

    def stop(self) -> None:
        self._timer.stop()
