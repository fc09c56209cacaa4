"""
A delivery's lease, from the worker's side.

A version-2 daemon gives each delivery a fencing token and a lease: the
worker may hold the task that long before it is taken back and queued
again.  TOUCH, quoting the token, sets the lease to run out so many seconds
from now.  A L{Lease} sends it when the handler asks (L{Lease.extend_soon},
from any thread) or, with L{Lease.keep_alive}, every half lease while the
handler runs, and never after the task's outcome.  The handler's progress
reports on its delivery go the same way (L{Lease.progress_soon}), and its
checkpoints, which wait for the daemon's answer (L{Lease.checkpoint_soon}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.internet.threads import blockingCallFromThread
from twisted.python.threadable import isInIOThread

from quicx.clients.checkpoints import Saves
from quicx.clients.context import MAX_TOUCH as MAX_TOUCH
from quicx.clients.context import touch_seconds
from quicx.protocol import outcomes
from quicx.protocol.errors import QuicxError


class Lease:
    """
    The lease of one delivery, while its handler runs.

    @ivar seconds: the lease the delivery came with (0: no limit).
    @ivar deadline: when it runs out, by the reactor's clock, as far as this
        worker knows (C{None}: no limit, or not known).
    @ivar ended: the outcome was reported; nothing more is sent.
    @ivar reports: whether the daemon takes progress reports.
    """

    def __init__(
        self,
        reactor: Any,
        send: Callable[[bytes], None],
        task_id: int,
        token: int,
        lease_ms: int,
        reports: bool = True,
        saves: Saves | None = None,
    ) -> None:
        self._reactor = reactor
        self._send = send
        self.task_id = task_id
        self.token = token
        self.seconds = lease_ms / 1000
        self.deadline: float | None = reactor.seconds() + self.seconds if lease_ms else None
        self.ended = False
        self.reports = reports
        self._saves = saves or Saves(None)
        self._renewal: LoopingCall | None = None

    def extend(self, seconds: float) -> None:
        """
        (On the reactor thread.)  TOUCH: the lease runs out C{seconds} from
        now (rounded up to whole seconds), unless the outcome was reported.

        @raise ValueError: C{seconds} is out of range.
        """
        whole = touch_seconds(seconds)
        if self.ended:
            return
        self._send(outcomes.encode_touch(self.task_id, self.token, whole))
        self.deadline = self._reactor.seconds() + whole

    def extend_soon(self, seconds: float) -> None:
        """
        L{extend}, from any thread (a handler's): checked here, sent by the
        reactor thread.

        @raise ValueError: C{seconds} is out of range.
        """
        touch_seconds(seconds)
        self._reactor.callFromThread(self.extend, seconds)

    def progress_soon(self, fraction: int, message: str) -> None:
        """
        PROGRESS: C{fraction} ten-thousandths done, and C{message}; from any
        thread, sent by the reactor thread unless the outcome was reported
        first (or the daemon takes no progress reports).
        """
        if self.reports:
            frame = outcomes.encode_progress(self.task_id, self.token, fraction, message)
            self._reactor.callFromThread(self._send_unless_ended, frame)

    def checkpoint_soon(self, state: object) -> Deferred[bool] | None:
        """
        CHECKPOINT C{state}: from a thread (a handler's in the thread pool),
        sent by the reactor thread, and returns once the daemon holds it
        durably; on the reactor thread, sent now, and returns a Deferred
        that fires then.  Refused, it raises (or the Deferred fails with)
        the daemon's error (see L{quicx.clients.checkpoints.Saves.frame} for
        what is refused before it is sent).
        """
        if isInIOThread():
            return self._checkpoint(state)
        # Waits for the Deferred's value, or raises its error (typed as the value).
        blockingCallFromThread(
            self._reactor, cast(Callable[[object], bool], self._checkpoint), state
        )
        return None

    def _checkpoint(self, state: object) -> Deferred[bool]:
        """Send the CHECKPOINT: a Deferred of C{True} once it is kept."""
        if self.ended:
            raise QuicxError(f"task {self.task_id}: no checkpoint after its outcome")
        answer: Deferred[bool] = Deferred()

        def answered(error: Exception | None) -> None:
            if error is None:
                answer.callback(True)
            else:
                answer.errback(error)

        self._send(self._saves.frame(self.task_id, self.token, state, answered))
        return answer

    def _send_unless_ended(self, frame: bytes) -> None:
        if not self.ended:
            self._send(frame)

    def keep_alive(self) -> None:
        """
        Every half lease until L{end}, extend the lease by its length unless
        it has that much left (a longer L{extend} stands).  Without a lease,
        nothing.
        """
        if not self.seconds:
            return
        self._renewal = LoopingCall(self._renew)
        self._renewal.clock = self._reactor
        self._renewal.start(self.seconds / 2, now=False)

    def _renew(self) -> None:
        if self.deadline is None or self.deadline - self._reactor.seconds() <= self.seconds:
            self.extend(self.seconds)

    def end(self) -> None:
        """The outcome is reported: stop extending."""
        self.ended = True
        if self._renewal is not None and self._renewal.running:
            self._renewal.stop()
