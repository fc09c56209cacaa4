"""
How the worker runner adapts to its handlers: where they run, how many tasks it holds.

How the worker runner adapts to its handlers, when the user leaves it to:
where a plain function runs (L{Placement}), and how many tasks a connection
asks to hold (L{AutoCredits}).  Both learn from how long handlers take;
neither does any I/O, so both are tested with made-up durations.

A handed-off call costs a thread pool's queue and a thread wake-up (tens of
microseconds, and two context switches), far more than a no-op handler.  A
connection that holds one task at a time waits a whole round trip to the
daemon between tasks, also far more than a short handler.  Short handlers
therefore run on the reactor, several held at once; long ones run in a
thread, one per connection, so the reactor keeps answering heartbeats and
extending leases while they work.
"""

from __future__ import annotations

from attrs import define, field

SHORT = 0.001
"""A call this long (seconds) or shorter is short enough to run on the reactor."""

TOO_LONG = 0.01
"""A call on the reactor longer than this sends its handler back to the threads."""

PROBATION = 16
"""Short calls in a row, in a thread, before a handler first runs on the reactor."""

MAX_PROBATION = 4096
"""Each demotion doubles the probation, up to this many calls."""

SMOOTHING = 0.125
"""The weight of the newest duration in a running mean (as TCP's SRTT)."""


@define
class Placement:
    """
    Where one handler's calls run: in a thread at first, on the reactor once
    L{PROBATION} calls in a row were L{SHORT}, and back in a thread (with a
    doubled probation) after a call on the reactor that took more than
    L{TOO_LONG}, or when its running mean of calls there passes L{SHORT}.

    @ivar inline: whether the next call runs on the reactor.
    @ivar demotions: how many times it was sent back to the threads.
    """

    inline: bool = False
    demotions: int = 0
    _probation: int = PROBATION
    _short_in_a_row: int = 0
    _mean: float = 0.0

    def ran(self, seconds: float, inline: bool) -> None:
        """A call took C{seconds}, on the reactor or (C{inline} false) in a thread."""
        if not inline:
            if not self.inline:
                self._short_in_a_row = self._short_in_a_row + 1 if seconds <= SHORT else 0
                if self._short_in_a_row >= self._probation:
                    self.inline = True
                    self._mean = seconds
            return
        self._mean += SMOOTHING * (seconds - self._mean)
        if self.inline and (seconds > TOO_LONG or self._mean > SHORT):
            self.inline = False
            self.demotions += 1
            self._short_in_a_row = 0
            self._probation = min(self._probation * 2, MAX_PROBATION)


AUTO_MAX = 256
"""The most tasks a connection asks to hold when it chooses its own credits."""

BUDGET = 0.002
"""Seconds of work a connection holds at most, by its handlers' running mean:
held tasks run one after another, so this bounds how long a task that
arrived with them waits behind them."""


@define
class AutoCredits:
    """
    The credits of a connection whose user gave none: 1 at first; doubled
    whenever a read fills every credit (the daemon had more to send) while
    its handlers are short, up to what they run in L{BUDGET} seconds (and in
    half a lease), at most C{maximum}; cut to that when they get longer.  A
    task run in a thread, or as a coroutine, holds its connection's only
    credit.

    @ivar credits: what the connection asks for now.
    """

    maximum: int = AUTO_MAX
    credits: int = 1
    _mean: float = field(default=0.0)
    _threaded: bool = False

    def ran(self, seconds: float, inline: bool) -> None:
        """
        One of the connection's tasks ran: on the reactor (C{inline}) in
        C{seconds}, or else in a thread or as a coroutine, however long.
        """
        self._threaded = not inline
        if inline:
            self._mean += SMOOTHING * (seconds - self._mean) if self._mean else seconds

    def target(self, lease: float | None) -> int:
        """What the handlers' pace allows (C{lease}: the deliveries' lease in seconds)."""
        if self._threaded:
            return 1
        budget = BUDGET if lease is None else min(BUDGET, lease / 2)
        if self._mean * self.maximum <= budget:
            return self.maximum
        return max(1, int(budget / self._mean + 1e-9))

    def after_read(self, received: int, lease: float | None, running: int = 0) -> int | None:
        """
        A read brought C{received} TASKs and their handlers have run or
        started, and C{running} of the connection's tasks still run (in
        threads or as coroutines, whose times are not known yet): the new
        credit count to ask for, or C{None} to keep it.
        """
        target, credits = 1 if running else self.target(lease), self.credits
        # A quarter of slack each way, so that a mean that wavers around a
        # boundary does not send a READY on every read.
        if 4 * target < 3 * credits:
            wanted = target
        elif received >= credits and 4 * target >= 5 * credits:
            wanted = min(credits * 2, target)
        else:
            return None
        self.credits = wanted
        return wanted
