"""
A delivery's lease, from the worker's side.

A version-2 daemon gives each delivery a fencing token and a lease: the
worker may hold the task that long before it is taken back and queued
again.  TOUCH, quoting the token, sets the lease to run out so many seconds
from now.  A L{Lease} sends it when the handler asks (L{Lease.extend_soon},
from any thread) or, with L{Lease.keep_alive}, every half lease while the
handler runs, and never after the task's outcome.  The handler's progress
reports on its delivery go the same way (L{Lease.progress_soon}).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.task import LoopingCall

from quicx.clients.context import MAX_TOUCH as MAX_TOUCH
from quicx.clients.context import touch_seconds
from quicx.protocol import outcomes


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
    ) -> None:
        self._reactor = reactor
        self._send = send
        self.task_id = task_id
        self.token = token
        self.seconds = lease_ms / 1000
        self.deadline: float | None = reactor.seconds() + self.seconds if lease_ms else None
        self.ended = False
        self.reports = reports
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
