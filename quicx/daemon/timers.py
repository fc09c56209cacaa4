"""
Heartbeats: keeping idle connections alive and dropping dead peers.

Every C{interval / 4} seconds the L{HeartbeatService} looks at each session:
one silent for C{interval} seconds is sent a HEARTBEAT (again every
C{interval} while it stays silent), and one silent for C{timeout} seconds is
disconnected -- its task, if it holds one, goes back to the queue.  That is
how a worker cut off without a FIN (a network cut, a frozen host) is found.

A producer still owed an outcome is never dropped for silence: it may be
blocked waiting for it, and dropping it would lose the outcome.  A worker
holding a task is dropped like any peer -- Quicx's worker runner answers
heartbeats while its handlers run -- unless C{spare_busy_workers} is set, for
workers like the reference one that cannot answer until their handler
returns; those are then only found when TCP reports the connection lost, or
by the task timeout.

L{TaskTimeoutService} enforces the optional task timeout (like beanstalkd's
TTR): a task a worker holds for longer is taken back and queued again at the
tail, and the worker stays busy until it reports that task (the late outcome
is ignored).
"""

from __future__ import annotations

from twisted.application.service import Service
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from quicx.daemon.core import QueueService
from quicx.protocol.wire import HEARTBEAT_FRAME


class HeartbeatService(Service):
    """
    Sends HEARTBEAT to silent peers and drops those silent past the timeout.

    @ivar interval: seconds of silence before a HEARTBEAT; 0 disables.
    @ivar timeout: seconds of silence before the peer is dropped.
    """

    log = Logger(namespace="quicx.daemon.timers")

    def __init__(
        self,
        queue: QueueService,
        interval: float,
        timeout: float,
        clock: IReactorTime,
        spare_busy_workers: bool = False,
    ) -> None:
        self.queue = queue
        self.spare_busy_workers = spare_busy_workers
        self.interval = interval
        self.timeout = timeout
        self.clock = clock
        self._loop: LoopingCall | None = None

    def startService(self) -> None:
        super().startService()
        if self.interval > 0:
            self._loop = LoopingCall(self.check)
            self._loop.clock = self.clock
            self._loop.start(self.interval / 4, now=False)

    def stopService(self) -> None:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()

    def check(self) -> None:
        """One pass over every session."""
        now = self.clock.seconds()
        for session in list(self.queue.sessions.values()):
            silent = now - session.last_received
            if (
                silent >= self.timeout
                and not self.queue.awaits_outcome(session)
                and not (self.spare_busy_workers and session.tasks)
            ):
                self.log.info(
                    "dropping {peer}: silent for {silent:.1f} s",
                    peer=session.peer.peer_name,
                    silent=silent,
                )
                session.peer.disconnect()
            elif silent >= self.interval and now - session.heartbeat_sent >= self.interval:
                session.heartbeat_sent = now
                session.peer.sendFrame(HEARTBEAT_FRAME)


class TaskTimeoutService(Service):
    """Requeues tasks held past the queue's C{task_timeout} (0: never)."""

    def __init__(self, queue: QueueService, clock: IReactorTime) -> None:
        self.queue = queue
        self.clock = clock
        self._loop: LoopingCall | None = None

    def startService(self) -> None:
        super().startService()
        timeout = self.queue.task_timeout
        if timeout > 0:
            self._loop = LoopingCall(self.queue.expire_overdue)
            self._loop.clock = self.clock
            # A task is taken back at most a quarter of the timeout (or 1 s) late.
            self._loop.start(min(1.0, timeout / 4), now=False)

    def stopService(self) -> None:
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
