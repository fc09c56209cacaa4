"""
How a worker splits its capacity among a cluster's daemons.

How a worker with several daemons (a cluster: see L{split_addresses}) splits
its capacity among them, so that it holds no more tasks with k daemons than
with one.

The capacity is what one daemon would get: C{concurrency * credits}, or
C{concurrency * AUTO_MAX} when each connection chooses its own credits (then
a connection's share is the most it may choose).  It is split among the
daemons counted now -- those the worker is connected to, or has not yet
found gone -- and each daemon's share among its C{concurrency} connections.
Nothing here does I/O: the worker runners (Twisted's and asyncio's) keep
their daemons' connections in L{Shares}, which tells each connection its
credits (L{slot_credits}) whenever a daemon comes or goes; a connection
whose credits changed sends a READY with the new count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from attrs import define, field


def split(total: int, parts: int) -> tuple[int, ...]:
    """
    C{total} in C{parts} whole shares, as even as they go: the first
    C{total % parts} one more than the others.
    """
    whole, left = divmod(total, parts)
    return tuple(whole + (part < left) for part in range(parts))


def slot_credits(
    capacity: int, concurrency: int, live: Sequence[bool]
) -> tuple[tuple[int, ...], ...]:
    """
    Each connection's credits, by daemon: C{capacity} split among the daemons
    counted (C{live}, in the worker's address order; the first of them get
    the remainder), and each one's share split among its C{concurrency}
    connections -- at least 1 each, as a READY asks for 1 at least.  A
    daemon not counted gets nothing (an empty tuple).

    The credits of a daemon's connections add up to its share, and those of
    all to C{capacity}, unless C{capacity} is less than C{concurrency} times
    the daemons counted: then some connections hold the 1 they cannot go
    under.
    """
    shares = iter(split(capacity, sum(live) or 1))
    return tuple(
        tuple(max(1, credits) for credits in split(next(shares), concurrency)) if counted else ()
        for counted in live
    )


class Allotted(Protocol):
    """A worker connection, told its share of the capacity."""

    def allot(self, credits: int) -> None: ...


S = TypeVar("S", bound=Allotted)


@define(eq=False)
class Member(Generic[S]):
    """
    One of the worker's daemons (one, or each of a cluster's).

    @ivar address: where it is (normalized: L{split_addresses}).
    @ivar slots: its connections open and answered now, by their place (0 to
        C{concurrency - 1}).
    @ivar reached: whether a connection to it has opened and been answered.
    @ivar counted: whether it has a share of the worker's capacity: from the
        start, and again whenever a connection to it opens and is answered
        (its HELLO), until it has none left open and one closes, fails to
        open or goes unanswered.
    """

    address: str
    slots: dict[int, S] = field(factory=dict)
    counted: bool = True
    reached: bool = False


@define
class Shares(Generic[S]):
    """
    A worker's daemons and how its capacity is shared among their
    connections (L{slot_credits}), as connections come and go; the worker
    runners (Twisted's and asyncio's) do the I/O and the logging.
    """

    members: Sequence[Member[S]]
    capacity: int
    concurrency: int

    def connected(self, member: Member[S], place: int, slot: S) -> tuple[str | None, bool]:
        """
        C{slot}, C{member}'s connection at C{place}, opened and was answered;
        every open slot is told its credits.

        @return: what to log (C{"connected to"}, C{"reconnected to"}, or
            C{None}: nothing new), and whether C{member} came back (counted anew).
        """
        member.slots[place] = slot
        came = not member.counted
        member.counted = True
        said = None
        if came or not member.reached:
            said = "reconnected to" if member.reached else "connected to"
            member.reached = True
        self.share_out()
        return said, came

    def lost(
        self,
        member: Member[S],
        place: int | None = None,
        slot: S | None = None,
        stopping: bool = False,
    ) -> bool:
        """
        C{member}'s C{slot} closed (or a connection failed to open or to be
        answered): whether C{member} lost its share (it has no connection
        left, and the worker is not C{stopping}), which the others then take.
        """
        if place is not None and member.slots.get(place) is slot:
            del member.slots[place]
        if member.counted and not member.slots and not stopping:
            member.counted = False
            self.share_out()
            return True
        return False

    def share_out(self) -> None:
        """Tell every open slot its credits now."""
        table = slot_credits(self.capacity, self.concurrency, [m.counted for m in self.members])
        for member, credits in zip(self.members, table, strict=True):
            for place, slot in member.slots.items():
                slot.allot(credits[place])

    def summary(self) -> str | None:
        """With several daemons: which have a share, for a log line (C{None}: one daemon)."""
        if len(self.members) < 2:
            return None
        counted = [m.address for m in self.members if m.counted]
        return (
            f"{len(counted)} of {len(self.members)} daemons have a share of this worker's"
            f" capacity ({self.capacity}): {', '.join(counted) or 'none'}"
        )
