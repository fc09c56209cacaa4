"""
Busy polling: before the reactor sleeps in C{epoll_wait}, it polls its
sockets without blocking for a short while.

Waking a sleeping process costs far more than handling a frame where idle
CPUs halt at once, as on virtual machines without guest halt-polling.  On
this project's 2-vCPU machine a wake-up across CPUs takes about 40 µs, and a
task's round trip (producer → daemon → worker → daemon → producer) crosses
four of them.  A process that keeps polling for C{spin} seconds after its
last event is still awake when the next frame of a conversation arrives.
It is the application's version of the kernel's haltpoll and of
C{SO_BUSY_POLL}: it spends CPU for latency, at most C{spin} seconds after
each event, so an idle process spends none.  The daemon and C{quicx worker}
spin L{DEFAULT_SPIN} unless configured (C{[server] busy_poll},
C{quicx worker --busy-poll}; 0 turns it off).

Each spin is bounded, and yields the CPU between polls, so a process woken
on the same CPU runs first and an idle daemon stops spinning C{spin} seconds
after its last event.
"""

from __future__ import annotations

import os
import select
import time
from typing import Any

from quicx.net.private import epoll_of, replace_epoll

DEFAULT_SPIN = 0.0001
"""100 µs: the best of 50, 100, 200 and 300 µs measured (docs/performance.md)."""


class SpinningPoller:
    """
    An C{epoll} object whose blocking C{poll} first polls without blocking
    for up to C{spin} seconds.  Everything else is the wrapped object's.
    """

    def __init__(self, poller: select.epoll, spin: float) -> None:
        self._poller = poller
        self.spin = spin

    def __getattr__(self, name: str) -> Any:
        return getattr(self._poller, name)

    def poll(self, timeout: float = -1, maxevents: int = -1) -> list[tuple[int, int]]:
        poll = self._poller.poll
        events: list[tuple[int, int]] = poll(0, maxevents)
        if events or timeout == 0:
            return events
        clock = time.perf_counter
        started = clock()
        deadline = started + (self.spin if timeout < 0 else min(self.spin, timeout))
        while clock() < deadline:
            os.sched_yield()
            events = poll(0, maxevents)
            if events:
                return events
        if timeout > 0:
            timeout = max(0.0, timeout - (clock() - started))
        return poll(timeout, maxevents)


def enable_busy_poll(reactor: Any, spin: float) -> None:
    """
    Make C{reactor} spin for C{spin} seconds before each sleep.

    @raise ValueError: the reactor does not poll with epoll (busy polling
        needs Twisted's default reactor on Linux).
    """
    poller = epoll_of(reactor)
    if isinstance(poller, SpinningPoller):
        poller.spin = spin
    elif not isinstance(poller, select.epoll):
        raise ValueError(f"busy polling needs the epoll reactor, not {type(reactor).__name__}")
    else:
        # Wrapping the reactor's epoll object is the whole change.
        replace_epoll(reactor, SpinningPoller(poller, spin))
