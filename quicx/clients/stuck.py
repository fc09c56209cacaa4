"""
A watch that logs a handler call stuck on the reactor, once.

A watch over the handler calls the worker runner moved to the reactor: one
that has run for L{STUCK_AFTER} seconds is logged as an error, once.

While such a call runs, nothing else in the worker process does: no other
task, no heartbeat, no lease extension.  A call that waits for the reactor
itself (Twisted's C{blockingCallFromThread}, crochet's C{wait_for}) never
returns there, since the reactor is what it waits for: the worker hangs
for good, and this line is the only sign of why.  The watch runs on a
thread of its own, as it must when the reactor is stuck.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from twisted.logger import Logger

STUCK_AFTER = 10.0
"""Seconds a call on the reactor may run before it is logged as stuck."""


class StuckWatch:
    """
    Told when a call on the reactor begins and ends (on the reactor); checks
    it from its own thread while started.
    """

    log = Logger()

    def __init__(
        self, after: float = STUCK_AFTER, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.after = after
        self._clock = clock
        self._call: tuple[float, bytes] | None = None
        self._told: tuple[float, bytes] | None = None
        self._stop: threading.Event | None = None

    def begin(self, task_type: bytes) -> None:
        """A call for a task of C{task_type} starts on the reactor."""
        self._call = (self._clock(), task_type)

    def end(self) -> None:
        """It has returned."""
        self._call = None

    def check(self) -> bool:
        """Log the call running now if it is stuck and was not logged yet; whether it was."""
        call = self._call
        if call is None or call is self._told or self._clock() - call[0] < self.after:
            return False
        self._told = call
        self.log.error(
            "a handler for {task_type} has run on the reactor for {seconds:g} s: no other"
            " task, heartbeat or lease extension runs meanwhile. If it waits for the reactor"
            " (blockingCallFromThread, crochet's wait_for) it never returns there: register"
            " it with thread=True",
            task_type=call[1].decode("utf-8", "replace"),
            seconds=self.after,
        )
        return True

    def start(self) -> None:
        """Check twice per L{after}, on a thread of its own, until L{stop}."""
        self.stop()
        stop = self._stop = threading.Event()

        def watch() -> None:
            while not stop.wait(self.after / 2):
                self.check()

        threading.Thread(target=watch, name="quicx-stuck-watch", daemon=True).start()

    def stop(self) -> None:
        if self._stop is not None:
            self._stop.set()
            self._stop = None
