"""
Draining: stop taking tasks and fire once nothing is queued or running, or at a deadline.
"""

from __future__ import annotations

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.queue.ikernel import IKernel


class Drain:
    """
    The kernel's drain.

    @ivar waiting: the drain's Deferred while it is under way.
    """

    def __init__(self, kernel: IKernel) -> None:
        self.kernel = kernel
        self.waiting: Deferred[None] | None = None
        self._timer: IDelayedCall | None = None

    def drain(self, timeout: float, clock: IReactorTime) -> Deferred[None]:
        """
        Stop taking tasks; fire once nothing is queued or running, or after
        C{timeout} seconds, whichever is first.
        """
        self.kernel.draining = True
        drained: Deferred[None] = Deferred()
        self.waiting = drained
        self._timer = clock.callLater(timeout, self.stop)
        self.check()
        return drained

    def check(self) -> None:
        # Done when nothing is left, or when no worker is left to do it (the
        # listeners are closed, so none will come): a queue no worker serves,
        # or a paused one, is not waited for.
        kernel = self.kernel
        if (
            self.waiting is not None
            and not kernel.tasks_running
            and not any(q.depth and q.subscribers and not q.paused for q in kernel.queues.values())
        ):
            self.stop()

    def stop(self) -> None:
        """Fire the drain's Deferred now, whatever is left."""
        drained, self.waiting = self.waiting, None
        if drained is not None:
            if self._timer is not None and self._timer.active():
                self._timer.cancel()
            drained.callback(None)
        self.kernel.dispatcher.stop()
