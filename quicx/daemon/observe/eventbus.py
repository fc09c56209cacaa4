"""
The lifecycle events' one way out of the core: to the events files and live subscribers.

The lifecycle events' one way out of the core: a buffer, handed at each
flush to the events files (L{EventLog}, when C{[events] directory} is set)
and to the live subscribers (L{Subscribers}: connections that sent WATCH).

The core records an event only while C{queue.events} is set, and the bus
sets it only while it has somewhere to send events: with no files and no
subscriber, recording costs one attribute test.  Recording is one tuple
appended to a list.  The buffer is flushed every second, every 0.1 s while
a subscriber watches (so the view is live), and at once past 20,000 events.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime

from quicx.daemon.observe.events import Event, EventLog
from quicx.daemon.observe.subscribers import Subscribers
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Session
from quicx.daemon.queue.policy import SubscriberLimits
from quicx.net.twisted_types import MultiService
from quicx.protocol.monitor import Watch

FLUSH_EVERY = 1.0
"""Seconds between two flushes with no subscriber: the events files' pace."""
LIVE_FLUSH_EVERY = 0.1
"""Seconds between two flushes while a subscriber watches."""
FLUSH_AT = 20_000
"""Flush sooner once this many events are waiting."""


class EventBus(MultiService):
    """
    The daemon's lifecycle events (handed to the queue: see C{QueueService.plug}); its
    L{EventLog}, if any, is its child service.

    @ivar log: the events files, or C{None}.
    @ivar live: the live subscribers.
    @ivar autoscale: takes each flush's events (the autoscaling signal's
        windows), or C{None}.
    """

    def __init__(
        self,
        queue: QueueService,
        scheduler: IReactorTime,
        log: EventLog | None = None,
        limits: SubscriberLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        self.queue = queue
        self.scheduler = scheduler
        self.clock = clock
        self.log = log
        self.live = Subscribers(limits or SubscriberLimits())
        self._buffer: list[Event] = []
        self._timer: IDelayedCall | None = None
        self._pace = 0.0
        self.autoscale: Callable[[list[Event]], None] | None = None
        if log is not None:
            log.setServiceParent(self)
        self._attach()

    @property
    def dropped(self) -> int:
        """Events not sent to a live subscriber because it read too slowly, since start."""
        return self.live.dropped

    @property
    def limits(self) -> SubscriberLimits:
        return self.live.limits

    def record(
        self,
        kind: str,
        task_id: int | None,
        task_type: bytes,
        size: int,
        producer: int | None,
        worker: int | None,
        attempt: int,
        extra: Any = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Note one event (cheap: a tuple appended to a list)."""
        buffer = self._buffer
        buffer.append(
            (
                self.clock(),
                kind,
                task_id,
                task_type,
                size,
                producer,
                worker,
                attempt,
                extra,
                queue,
                priority,
            )
        )
        if len(buffer) >= FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        """Hand every event recorded so far to the files and the subscribers."""
        if not self._buffer:
            return
        events, self._buffer = self._buffer, []
        if self.log is not None:
            self.log.take(events)
        if self.live.count:
            self.live.take(events)
        if self.autoscale is not None:
            self.autoscale(events)

    # -- subscribers ----------------------------------------------------------------

    def watch(self, session: Session, watch: Watch) -> dict[str, Any]:
        """
        Start, replace or (C{watch.stop}) stop C{session}'s subscription.
        Events recorded before it go by the filter before it (the buffer is
        flushed first).

        @return: the answer (INFO's document).
        @raise Refused: (queue full) a new subscriber past C{max_subscribers}.
        """
        self.flush()
        if watch.stop:
            self.live.forget(session)
            answer: dict[str, Any] = {"watching": None}
        else:
            answer = {"watching": self.live.watch(session, watch)}
        self._attach()
        return answer

    def session_closed(self, session: Session) -> None:
        """(A kernel hook.) C{session} closed: it is no subscriber any more."""
        if self.live.forget(session):
            self._attach()

    def output_drained(self, session: Session) -> None:
        """(A kernel hook.) It gets the events held for it."""
        self.live.caught_up(session)

    # -- attached or not --------------------------------------------------------------

    def feed(self, autoscale: Callable[[list[Event]], None]) -> None:
        """Hand every flush's events to C{autoscale} too (they are recorded from now)."""
        self.autoscale = autoscale
        self._attach()

    def _attach(self) -> None:
        """
        Be C{queue.events} while events have somewhere to go, flushed at
        the pace the consumers need; else record nothing.
        """
        if self.log is None and not self.live.count and self.autoscale is None:
            self.queue.events = None
            self._buffer = []
            self._stop_timer()
            return
        self.queue.events = self
        if self.running and (self._timer is None or self._pace != self._interval):
            self._stop_timer()
            self._arm()

    @property
    def _interval(self) -> float:
        return LIVE_FLUSH_EVERY if self.live.count else FLUSH_EVERY

    def _arm(self) -> None:
        self._pace = self._interval
        self._timer = self.scheduler.callLater(self._pace, self._tick)

    def _tick(self) -> None:
        self.flush()
        self._arm()

    def _stop_timer(self) -> None:
        if self._timer is not None and self._timer.active():
            self._timer.cancel()
        self._timer = None

    def startService(self) -> None:
        super().startService()
        self._attach()

    def stopService(self) -> Deferred[None]:
        """Hand on the last events (those of tasks dropped at stop), then stop the files."""
        self._stop_timer()
        self.flush()
        stopped: Deferred[None] = super().stopService()
        return stopped
