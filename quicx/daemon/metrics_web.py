"""
The C{/metrics} page: C{twisted.web} on the daemon's own reactor.  A scrape
takes its snapshot on the reactor's thread, between two events, so it never
races the queue; the text is built on a thread, so that a scrape of many
(queue, type) pairs does not stop the daemon while it is (hundreds of
milliseconds at the default C{max_series}).
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
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

    def __init__(self, collector: QuicxCollector) -> None:
        Resource.__init__(self)
        self.collector = collector

    def render_GET(self, request: Request) -> bytes | int:
        if request.path != PATH:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"Not found: the metrics are at /metrics\n"
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        gone: list[Failure] = []
        request.notifyFinish().addErrback(gone.append)
        text = deferToThread(generate_latest, self.collector.snapshot())

        def send(body: bytes) -> None:
            if not gone:
                request.write(body)
                request.finish()

        def failed(failure: Failure) -> None:
            self.log.failure("metrics: a scrape failed", failure, log_id="metrics.failed")
            if not gone:
                request.setResponseCode(500)
                request.finish()

        text.addCallbacks(send, failed)
        return NOT_DONE_YET


class MetricsSite(Site):
    """The page's site: scrapes are not logged (one every few seconds, forever)."""

    noisy = False

    def __init__(self, collector: QuicxCollector) -> None:
        Site.__init__(self, MetricsPage(collector))

    def log(self, request: http.Request) -> None:
        """Log nothing."""
