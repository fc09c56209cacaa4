"""
Live lifecycle events as the clients hand them out: sans-I/O, shared by the
blocking client and the Twisted client.

Each event is a dict, the JSON of its line (the schema of the daemon's
events files: C{t}, C{event}, C{task}, C{type}, C{queue}...).  When the
daemon dropped events because this client read too slowly, the item
C{{"event": "missed", "count": N}} comes first, in their place.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from typing import Any

from quicx.clients.address import as_bytes
from quicx.protocol import monitor

MISSED = "missed"
"""The C{event} of the item that counts the events dropped before the next."""
DEFAULT_KEEP = 100_000
"""Events a blocking client keeps that have come and not been handed out."""

STOP_FRAME = monitor.encode_watch(stop=True)


def encode_watch(
    queues: Iterable[str] = (), types: Iterable[str | bytes] = (), kinds: Iterable[str] = ()
) -> bytes:
    """
    WATCH for C{queues}, task C{types} and event C{kinds} (each empty: any).

    @raise ValueError: more than 32 of one, one twice, a bad queue name, an
        empty type, or a kind that is not one of L{monitor.EVENT_KINDS}.
    """
    return monitor.encode_watch(tuple(queues), tuple(map(as_bytes, types)), tuple(kinds))


def missed(count: int) -> dict[str, Any]:
    return {"event": MISSED, "count": count}


def items(message: monitor.Events) -> list[dict[str, Any]]:
    """An EVENTS frame's items: what it missed, if anything, then its events."""
    found = [missed(message.missed)] if message.missed else []
    found += _parsed(message.lines)
    return found


def _parsed(lines: tuple[str, ...]) -> list[Any]:
    """
    The JSON of each of C{lines}, parsed as one array: several times faster
    than line by line (the daemon sends thousands at a time).  Lines that do
    not make one item each are parsed one by one, which says which is bad.
    """
    try:
        found: list[Any] = json.loads(f"[{','.join(lines)}]")
    except ValueError:
        found = []
    if len(found) != len(lines):
        found = [json.loads(line) for line in lines]
    return found


class EventFeed:
    """
    What a blocking client has read of its live events and not yet handed
    out: at most C{keep} items (older ones are dropped, and said missed),
    and only while it watches.
    """

    def __init__(self, keep: int = DEFAULT_KEEP) -> None:
        self.keep = keep
        self.watching = False
        self._items: deque[dict[str, Any]] = deque()
        self._lost = 0

    def arrived(self, message: monitor.Events) -> None:
        if not self.watching:
            return  # the tail of a watch that stopped
        self._items += items(message)
        while len(self._items) > self.keep:
            dropped = self._items.popleft()
            self._lost += dropped["count"] if dropped["event"] == MISSED else 1

    def __len__(self) -> int:
        """How many items are waiting to be handed out."""
        return len(self._items) + bool(self._lost)

    def next(self) -> dict[str, Any] | None:
        """The next item, or C{None} for now."""
        if self._lost:
            lost, self._lost = self._lost, 0
            return missed(lost)
        return self._items.popleft() if self._items else None

    def stop(self) -> None:
        self.watching = False
        self._items.clear()
        self._lost = 0
