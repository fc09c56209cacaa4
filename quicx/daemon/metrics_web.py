"""
The C{/metrics} page: C{twisted.web} on the daemon's own reactor, so a
scrape reads the state between two events and never races the queue.
"""

from __future__ import annotations

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry
from twisted.web import http
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

PATH = b"/metrics"


class MetricsPage(Resource):
    """C{GET /metrics}: the registry's metrics in the text format; 404 elsewhere."""

    isLeaf = True

    def __init__(self, registry: CollectorRegistry) -> None:
        Resource.__init__(self)
        self.registry = registry

    def render_GET(self, request: Request) -> bytes:
        if request.path != PATH:
            request.setResponseCode(404)
            request.setHeader(b"content-type", b"text/plain; charset=utf-8")
            return b"Not found: the metrics are at /metrics\n"
        request.setHeader(b"content-type", CONTENT_TYPE_LATEST.encode())
        return generate_latest(self.registry)


class MetricsSite(Site):
    """The page's site: scrapes are not logged (one every few seconds, forever)."""

    noisy = False

    def __init__(self, registry: CollectorRegistry) -> None:
        Site.__init__(self, MetricsPage(registry))

    def log(self, request: http.Request) -> None:
        """Log nothing."""
