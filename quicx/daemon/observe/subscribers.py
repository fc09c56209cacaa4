"""
Live subscribers: connections that watch lifecycle events (WATCH).

Each subscriber has a filter: queues, task types and event kinds, each
empty for any.  At each flush of the L{quicx.daemon.observe.eventbus.EventBus}, the
events that pass it go to the subscriber as EVENTS frames, NDJSON lines of
the events files' schema.

A subscriber whose output is backed up (its unsent output passed
C{max_output_buffer}, so its session is C{paused} until that drains) is not
written to: the newest C{[events] max_held} of its events are held, older
ones are dropped and counted, for it (its next EVENTS frame says how many
it missed) and for the daemon (L{Subscribers.dropped}).  When its output
drains it is sent what is held.  A slow reader so costs the daemon at most
C{max_held} events and its socket's buffer, however long it lags.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import define, field

from quicx.daemon.observe.events import Event, format_events
from quicx.daemon.queue.model import Refused, Session
from quicx.daemon.queue.policy import SubscriberLimits
from quicx.protocol import monitor
from quicx.protocol.codec import ErrorCode
from quicx.protocol.monitor import Watch


@define(eq=False)
class Subscriber:
    """
    One watching connection: its filter (C{None}: any) and what is held
    for it while its output is backed up.
    """

    session: Session
    watch: Watch
    queues: frozenset[str] | None
    types: frozenset[bytes] | None
    kinds: frozenset[str] | None
    held: list[Event] = field(factory=list)
    missed: int = 0

    @classmethod
    def of(cls, session: Session, watch: Watch) -> Subscriber:
        return cls(session, watch, _any(watch.queues), _any(watch.types), _any(watch.kinds))

    @property
    def everything(self) -> bool:
        return self.queues is None and self.types is None and self.kinds is None

    def matches(self, event: Event) -> bool:
        """Whether C{event} passes the filter (a rejected SUBMIT has no queue)."""
        return (
            (self.kinds is None or event[1] in self.kinds)
            and (self.queues is None or event[9] in self.queues)
            and (self.types is None or event[3] in self.types)
        )

    def describe(self) -> dict[str, list[str]]:
        """The filter, as WATCH's answer says it (empty lists: any)."""
        watch = self.watch
        return {
            "queues": list(watch.queues),
            "types": [t.decode("utf-8", "replace") for t in watch.types],
            "kinds": list(watch.kinds),
        }


def _any(items: tuple[Any, ...]) -> frozenset[Any] | None:
    return frozenset(items) if items else None


class Subscribers:
    """
    The live subscribers, by session id.

    @ivar dropped: events dropped for subscribers that read too slowly, since start.
    """

    def __init__(self, limits: SubscriberLimits) -> None:
        self.limits = limits
        self.dropped = 0
        self._subscribers: dict[int, Subscriber] = {}

    @property
    def count(self) -> int:
        return len(self._subscribers)

    def watch(self, session: Session, watch: Watch) -> dict[str, list[str]]:
        """
        Make C{session} a subscriber with C{watch}'s filter, or give it that
        filter (what is held for it stays).

        @return: the filter, as WATCH's answer says it.
        @raise Refused: (queue full) it is new, and there are C{max_subscribers}.
        """
        found = self._subscribers.get(session.session_id)
        if found is None and self.count >= self.limits.max_subscribers:
            raise Refused(
                ErrorCode.QUEUE_FULL,
                f"too many event subscribers ([events] max_subscribers ="
                f" {self.limits.max_subscribers})",
            )
        subscriber = Subscriber.of(session, watch)
        if found is not None:
            subscriber.held, subscriber.missed = found.held, found.missed
        self._subscribers[session.session_id] = subscriber
        return subscriber.describe()

    def forget(self, session: Session) -> bool:
        """C{session} watches no more (what was held for it is dropped); whether it did."""
        return self._subscribers.pop(session.session_id, None) is not None

    def take(self, events: list[Event]) -> None:
        """Send each subscriber the events that pass its filter, or hold them."""
        lines = format_events if self.count == 1 else _formatted_once()
        for subscriber in list(self._subscribers.values()):
            matched = (
                events if subscriber.everything else [e for e in events if subscriber.matches(e)]
            )
            if not matched:
                continue
            if subscriber.session.paused:
                self._hold(subscriber, matched)
            else:
                self._send(subscriber, matched, lines)

    def _hold(self, subscriber: Subscriber, events: list[Event]) -> None:
        held = subscriber.held
        held += events
        excess = len(held) - self.limits.max_held
        if excess > 0:
            del held[:excess]
            subscriber.missed += excess
            self.dropped += excess

    def _send(
        self, subscriber: Subscriber, events: list[Event], lines: Callable[[list[Event]], list[str]]
    ) -> None:
        if subscriber.held:
            events = subscriber.held + events
            subscriber.held = []
        # (Lines of JSON: a newline in a string is escaped.)
        frames = monitor.encode_events(lines(events), subscriber.missed, whole=True)
        subscriber.missed = 0
        subscriber.session.peer.sendFrame(frames)

    def caught_up(self, session: Session) -> None:
        """C{session}'s output drained: send it what is held, and what it missed."""
        subscriber = self._subscribers.get(session.session_id)
        if subscriber is not None and (subscriber.held or subscriber.missed):
            held, subscriber.held = subscriber.held, []
            self._send(subscriber, held, format_events)


def _formatted_once() -> Callable[[list[Event]], list[str]]:
    """C{format_events}, remembering each line: several subscribers may send one event."""
    known: dict[int, str] = {}

    def lines(events: list[Event]) -> list[str]:
        new = [event for event in events if id(event) not in known]
        known.update(zip(map(id, new), format_events(new), strict=True))
        return [known[id(event)] for event in events]

    return lines
