"""
Heartbeats: keeping idle connections alive and dropping dead peers.

Every C{interval / 4} seconds L{Heartbeats} looks at each session:
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

L{task_timeout_timer} enforces the optional task timeout (like beanstalkd's
TTR): a task a worker holds for longer is taken back and queued again at the
tail, and the worker keeps that credit until it reports the task; the first
outcome from any of its deliveries finishes it, and later ones are ignored.
"""

from __future__ import annotations

from twisted.application.internet import TimerService
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from quicx.daemon.periodic import every
from quicx.daemon.queue.core import QueueService
from quicx.protocol import link
from quicx.protocol.wire import HEARTBEAT_FRAME


class Heartbeats:
    """
    Sends HEARTBEAT to silent peers and drops those silent past the timeout;
    L{check} runs every C{interval / 4} seconds (see L{heartbeat_timer}).

    @ivar interval: seconds of silence before a HEARTBEAT.
    @ivar timeout: seconds of silence before the peer is dropped.
    """

    log = Logger()

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
                    log_id="connection.silent",
                    peer=session.peer.peer_name,
                    silent=silent,
                )
                session.peer.disconnect()
            elif silent >= self.interval and now - session.heartbeat_sent >= self.interval:
                session.heartbeat_sent = now
                session.peer.sendFrame(
                    HEARTBEAT_FRAME if session.version == 1 else link.HEARTBEAT_FRAME
                )


def heartbeat_timer(heartbeats: Heartbeats) -> TimerService | None:
    """The timer that runs C{heartbeats}, or C{None} when the interval is 0 (off)."""
    if heartbeats.interval <= 0:
        return None
    return every(heartbeats.interval / 4, heartbeats.check, heartbeats.clock)


def task_timeout_timer(queue: QueueService, clock: IReactorTime) -> TimerService | None:
    """
    The timer that takes back tasks held past their queue's task timeout, or
    C{None} when no queue has one.  A task is taken back at most a quarter of
    the timeout (or 1 s) late.
    """
    timeout = queue.shortest_timeout
    if timeout <= 0:
        return None
    return every(min(1.0, timeout / 4), queue.expire_overdue, clock)
