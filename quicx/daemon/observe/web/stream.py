"""
The live updates: C{/api/stream}, server-sent events, one a second.

Each message is built once (by the API: the newest sample and the
overview), whoever listens, and written to every open stream.  The streams
are bounded
(C{[web] max_streams}; the API answers one more 503), and none buffers without
bound: a stream is its HTTP transport's push producer, and while the
transport says its buffer is full (it does not drain: the browser reads too
slowly, or is gone without a word) the stream's messages are dropped and
counted, not queued.  The browser's C{EventSource} reconnects by itself after
a drop of the connection, and the next message carries all that changed.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.internet.interfaces import IPushProducer
from twisted.python.failure import Failure
from twisted.web.server import Request
from zope.interface import implementer

RETRY_MS = 2000
"""How long a browser waits before it reconnects a dropped stream."""


def event(document: dict[str, Any]) -> bytes:
    """One server-sent event whose data is C{document} as JSON (one line)."""
    return b"data: " + json.dumps(document, separators=(",", ":")).encode() + b"\n\n"


@implementer(IPushProducer)
class Stream:
    """One open stream: writes what it is given unless its transport is full."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.paused = False

    def send(self, message: bytes) -> bool:
        """Write C{message}; C{False} (it is dropped) while the transport is full."""
        if self.paused:
            return False
        self.request.write(message)
        return True

    def pauseProducing(self) -> None:
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False

    def stopProducing(self) -> None:
        self.paused = True


class Streams:
    """
    The open streams, at most C{limit}; L{publish} sends a message to all.

    @ivar dropped: messages dropped for full transports, all streams together.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: list[Stream] = []
        self.dropped = 0

    @property
    def full(self) -> bool:
        """C{limit} streams are open: no more now."""
        return len(self.open) >= self.limit

    def start(self, request: Request, first: bytes) -> None:
        """Answer C{request} with a stream that begins with C{first}."""
        request.setHeader(b"content-type", b"text/event-stream; charset=utf-8")
        request.setHeader(b"cache-control", b"no-store")
        stream = Stream(request)
        self.open.append(stream)
        request.registerProducer(stream, True)
        request.notifyFinish().addBoth(self._closed, stream)
        stream.send(b"retry: %d\n\n" % RETRY_MS + first)

    def _closed(self, result: Failure | None, stream: Stream) -> None:
        self.open.remove(stream)

    def publish(self, message: bytes) -> None:
        """Send every open stream C{message}."""
        for stream in self.open:
            if not stream.send(message):
                self.dropped += 1
