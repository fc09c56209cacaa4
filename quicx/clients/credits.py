"""
A worker connection's credits: what its READYs ask for, by its share and its handlers' pace.

Both worker runners' connections (Twisted's L{quicx.clients.slot} and
asyncio's L{quicx.aio.slot}) ask for credits the same way: the worker's
given count, or else one chosen by their handlers' pace
(L{quicx.clients.adaptive.AutoCredits}), never more than the worker's share
for the connection (L{quicx.clients.shares}); and 1, in version 1's
extension spelling, where the daemon may not know credits.  L{Credited}
holds that part of a connection: the runners do the I/O.
"""

from __future__ import annotations

from quicx.clients.adaptive import AutoCredits
from quicx.protocol import codec, taskflow, wire


class Credited:
    """
    The credits of a worker connection (mixed into each runner's).

    @ivar credits: what it asks for now.
    @ivar auto: their choice by its handlers' pace (C{None}: given, or refused).
    """

    credits: int
    auto: AutoCredits | None
    version: int
    stopping: bool
    _asked: bool  # READY was sent
    _refused_credits: bool  # the daemon refused credits: 1 for good
    _received: int  # TASKs in the read being handled
    _lease_seconds: float | None  # the last delivery's lease

    def _write(self, frame: bytes) -> None:
        raise NotImplementedError

    def _in_hand(self) -> int:
        """The tasks it holds whose handlers still run."""
        raise NotImplementedError

    def _choose_credits(self, given: int | None) -> None:
        """At the start: C{given} credits, or (C{None}) chosen by the pace."""
        self.credits = given or 1
        self.auto = AutoCredits() if given is None else None
        self._asked = self._refused_credits = False
        self._received = 0
        self._lease_seconds = None

    def _ready_frame(self, queues: tuple[str, ...]) -> bytes:
        """The READY to send now (for C{queues} in version 2)."""
        self._asked = True
        if self.version == codec.VERSION:
            return taskflow.encode_ready(self.credits, queues)
        if self.auto is not None:
            # Credits of 1, spelt out: a daemon without the extension says so
            # now, before this connection asks for more.
            return wire.frame(wire.MessageType.READY, wire.CREDITS.pack(1))
        return wire.encode_ready(self.credits)

    def _credits_refused(self) -> bool:
        """
        An ERROR INVALID_MESSAGE came before any task: whether it refuses
        READY's credits (then the connection takes 1 for good, and should
        send READY again).
        """
        if self.credits > 1 or self.auto is not None:
            self.credits, self.auto, self._refused_credits = 1, None, True
            return True
        return False

    def _pace(self, replies: list[bytes]) -> None:
        """
        After a read that brought tasks: ask for more or fewer, if the pace
        says so, before the read's outcomes (the daemon would refill the old
        credits on each outcome before it reads a READY that follows them).
        """
        assert self.auto is not None
        credits = self.auto.after_read(self._received, self._lease_seconds, self._in_hand())
        if credits is not None:
            self.credits = credits
            spoken = taskflow if self.version == codec.VERSION else wire
            replies.insert(0, spoken.encode_ready(credits))

    def allot(self, credits: int) -> None:
        """
        The worker's share of its capacity for this connection is now
        C{credits} (see L{quicx.clients.shares}): with credits given, ask for
        that many; with credits chosen, choose no more.  A READY that
        changes the count goes at once if READY was sent, else it is the
        first READY's.  A connection whose daemon refused credits keeps 1.
        """
        if self.auto is not None:
            self.auto.maximum = credits
            if self.auto.credits <= credits:
                return
            self.auto.credits = credits
        elif self._refused_credits or credits == self.credits:
            return
        self.credits = credits
        if self._asked and not self.stopping:
            spoken = taskflow if self.version == codec.VERSION else wire
            self._write(spoken.encode_ready(credits))
