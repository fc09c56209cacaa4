"""
The C{/metrics} page: C{twisted.web} on the daemon's own reactor.  A scrape
takes its snapshot on the reactor's thread, between two events, so it never
races the queue; the text is built on a thread, so that a scrape of many
(queue, type) pairs does not stop the daemon while it is (hundreds of
milliseconds at the default C{max_series}).  A scrape that comes while a
text is being built is answered with that text: however many come at once,
one snapshot is held and one text built.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from quicx.daemon.metrics import QuicxCollector

PATH = b"/metrics"


class MetricsPage(Resource):
    """C{GET /metrics}: the registry's metrics in the text format; 404 elsewhere."""

    isLeaf = True
    log = Logger()

    def __init__(
        self,
        collector: QuicxCollector,
        in_thread: Callable[..., Deferred[bytes]] = deferToThread,
    ) -> None:
        Resource.__init__(self)
        self.collector = collector
        self.in_thread = in_thread
        self._waiting: list[Deferred[bytes]] | None = None

    def render_GET(self, request: Request) -> bytes | int:
        if request.path != PATH:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"Not found: the metrics are at /metrics\n"
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append)

        def send(body: bytes) -> None:
            if not gone:
                request.write(body)
                request.finish()

        def failed(failure: Failure) -> None:
            if not gone:
                request.setResponseCode(500)
                request.finish()

        self._text().addCallbacks(send, failed)
        return NOT_DONE_YET

    def _text(self) -> Deferred[bytes]:
        """The text of a snapshot taken now, or of the one whose text is being built."""
        text: Deferred[bytes] = Deferred()
        if self._waiting is not None:
            self._waiting.append(text)
            return text
        self._waiting = [text]
        self.in_thread(generate_latest, self.collector.snapshot()).addBoth(self._built)
        return text

    def _built(self, result: bytes | Failure) -> None:
        """Answer every scrape that waits for this text."""
        waiting, self._waiting = self._waiting or [], None
        if isinstance(result, Failure):
            self.log.failure("metrics: a scrape failed", result, log_id="metrics.failed")
        for text in waiting:
            text.callback(result)


class MetricsSite(Site):
    """The page's site: scrapes are not logged (one every few seconds, forever)."""

    noisy = False

    def __init__(self, collector: QuicxCollector) -> None:
        Site.__init__(self, MetricsPage(collector))

    def log(self, request: http.Request) -> None:
        """Log nothing."""
