"""
The C{/metrics} page: C{twisted.web} on the daemon's own reactor.  A scrape
takes its snapshot on the reactor's thread, between two events, so it never
races the queue; the text is built on a thread, so that a scrape of many
(queue, type) pairs does not stop the daemon while it is (hundreds of
milliseconds at the default C{max_series}).  A scrape that comes while a
text is being built is answered with that text: however many come at once,
one snapshot is held and one text built.  The text goes out a chunk at a
time, as the scraper takes it (L{Body}): one that reads slowly, or not at
all, holds a chunk of it in the daemon, not a copy; one that leaves takes
its text with it.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site
from zope.interface import implementer

from quicx.daemon.observe.http_limits import BodylessRequest
from quicx.daemon.observe.metrics import QuicxCollector, Snapshot

PATH = b"/metrics"
AUTOSCALE = b"/autoscale"

CHUNK = 1 << 16
"""The bytes of a text written at a time (a TCP transport's own buffer size)."""


@implementer(IPushProducer)
class Body:
    """
    Writes C{text} to C{request} a L{CHUNK} at a time while its transport
    takes them (the transport pauses it when its buffer is full, and resumes
    it once that is sent), and finishes the request after the last one.
    """

    def __init__(self, request: Request, text: bytes) -> None:
        self.request = request
        self.text = memoryview(text)
        self.sent = 0
        self.paused = False

    def start(self) -> None:
        self.request.notifyFinish().addBoth(self._over)
        self.request.registerProducer(self, True)
        self.resumeProducing()

    def _over(self, ignored: object) -> None:
        """
        The scrape is answered, or its scraper gone: the text goes now.  (The
        request and this refer to each other: a cycle that only a full
        collection frees, and the tuned collector seldom runs one.)
        """
        self.text = memoryview(b"")
        self.paused = True

    def resumeProducing(self) -> None:
        self.paused = False
        text = self.text
        while not self.paused and self.sent < len(text):
            chunk = text[self.sent : self.sent + CHUNK]
            self.sent += len(chunk)
            self.request.write(bytes(chunk))  # which may pause it
        if not self.paused and self.sent == len(text):
            self.sent += 1  # finished once
            self.request.unregisterProducer()
            self.request.finish()

    def pauseProducing(self) -> None:
        self.paused = True

    def stopProducing(self) -> None:
        """The connection is gone: write nothing more."""
        self.paused = True


class MetricsPage(Resource):
    """
    C{GET /metrics}: the registry's metrics in the text format; C{GET
    /autoscale[?queue=NAME]}: the autoscaling signal's JSON, when it is on;
    404 elsewhere.

    @ivar scrapes: the scrapes being answered, from their request until
        their scraper has taken the last chunk (or is gone); at most
        C{max_scrapes}, one more is answered 503 at once.
    """

    isLeaf = True
    log = Logger()

    def __init__(
        self,
        collector: QuicxCollector,
        max_scrapes: int,
        in_thread: Callable[..., Deferred[bytes]] = deferToThread,
        autoscale: Callable[[str | None], bytes] | None = None,
    ) -> None:
        Resource.__init__(self)
        self.autoscale = autoscale
        self.collector = collector
        self.max_scrapes = max_scrapes
        self.in_thread = in_thread
        self.scrapes = 0
        self._waiting: list[Deferred[bytes]] | None = None

    def render_GET(self, request: Request) -> bytes | int:
        if request.path == AUTOSCALE and self.autoscale is not None:
            return self._autoscale(request)
        if request.path != PATH:
            return _plain(request, 404, "Not found: the metrics are at /metrics")
        if self.scrapes >= self.max_scrapes:
            return _plain(request, 503, f"{self.scrapes} scrapes are being answered (max_scrapes)")
        self.scrapes += 1
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append).addBoth(self._answered)

        def send(text: bytes) -> None:
            if not gone:
                Body(request, text).start()

        def failed(failure: Failure) -> None:
            if not gone:
                request.setResponseCode(500)
                request.finish()

        self._text().addCallbacks(send, failed)
        return NOT_DONE_YET

    def _autoscale(self, request: Request) -> bytes:
        """The signal's JSON: every queue's, or C{?queue=NAME}'s alone."""
        assert self.autoscale is not None
        names = (request.args or {}).get(b"queue")
        request.setHeader(b"content-type", b"application/json")
        return self.autoscale(names[0].decode("utf-8", "replace") if names else None)

    def _answered(self, ignored: object) -> None:
        self.scrapes -= 1

    def _text(self) -> Deferred[bytes]:
        """The text of a snapshot taken now, or of the one whose text is being built."""
        text: Deferred[bytes] = Deferred()
        if self._waiting is not None:
            self._waiting.append(text)
            return text
        self._waiting = [text]
        self.in_thread(Snapshot.text, self.collector.snapshot()).addBoth(self._built)
        return text

    def _built(self, result: bytes | Failure) -> None:
        """Answer every scrape that waits for this text."""
        waiting, self._waiting = self._waiting or [], None
        if isinstance(result, Failure):
            self.log.failure("metrics: a scrape failed", result, log_id="metrics.failed")
        for text in waiting:
            text.callback(result)


def _plain(request: Request, status: int, text: str) -> bytes:
    request.setResponseCode(status)
    request.setHeader(b"content-type", b"text/plain; charset=utf-8")
    return text.encode() + b"\n"


class MetricsSite(Site):
    """
    The page's site: scrapes are not logged (one every few seconds,
    forever), and a request with a body is refused from its header.
    """

    noisy = False
    requestFactory = BodylessRequest

    def __init__(
        self,
        collector: QuicxCollector,
        max_scrapes: int,
        autoscale: Callable[[str | None], bytes] | None = None,
    ) -> None:
        Site.__init__(self, MetricsPage(collector, max_scrapes, autoscale=autoscale))

    def log(self, request: http.Request) -> None:
        """Log nothing."""
