"""
The daemon's one way to run something every so often (L{TimerService}).

The daemon's one way to run something every so often: a Twisted
L{TimerService} on the daemon's clock (the reactor, or a
L{twisted.internet.task.Clock} in tests).
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.application.internet import TimerService
from twisted.internet.interfaces import IReactorTime


def every(step: float, call: Callable[[], object], clock: IReactorTime) -> TimerService:
    """
    A service that calls C{call} every C{step} seconds of C{clock} while it
    runs (first when it starts).  A call that raises is logged and the
    timer stops, as L{TimerService} does.
    """
    timer = TimerService(step, call)
    timer.clock = clock
    return timer
