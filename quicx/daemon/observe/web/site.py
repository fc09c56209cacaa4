"""
The dashboard's web site: the gate, C{/api/}, and the static pages.

The dashboard's web site: every request is let in by the L{Gate} or
refused (401, nothing of the daemon's in the answer); then C{/api/...} goes
to the L{Api}, and the rest are the few static files of the pages.

C{/login?token=TOKEN} is the one way in without credentials: it sets the
session cookie (HttpOnly, SameSite=Strict; Secure over TLS) and sends the
browser to C{/}.  Every answer forbids framing, sniffing and any script,
style or connection but the dashboard's own (a Content-Security-Policy).
The site writes no access log, and keeps no request body (no request of
the dashboard has one: one that has is refused from its header, unread).
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.resources import files
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from quicx.daemon.observe.http_limits import BodylessRequest
from quicx.daemon.observe.task_history import TaskHistory
from quicx.daemon.observe.web.api import Api, header, refusal
from quicx.daemon.observe.web.auth import COOKIE, Gate
from quicx.daemon.observe.web.history import History
from quicx.daemon.observe.web.stream import Streams
from quicx.daemon.queue.bulk import BulkActions
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.documents.status import Replication
from quicx.net.tls import peer_identity

STATIC: dict[str, tuple[str, bytes]] = {
    "": ("index.html", b"text/html; charset=utf-8"),
    "app.js": ("app.js", b"text/javascript; charset=utf-8"),
    "chart.js": ("chart.js", b"text/javascript; charset=utf-8"),
    "style.css": ("style.css", b"text/css; charset=utf-8"),
    "favicon.svg": ("favicon.svg", b"image/svg+xml"),
}
"""The pages' files, by path: the file in C{static/} and its type."""

HEADERS = {
    b"content-security-policy": b"default-src 'self'; frame-ancestors 'none'; base-uri 'none';"
    b" form-action 'self'",
    b"x-content-type-options": b"nosniff",
    b"x-frame-options": b"DENY",
    b"referrer-policy": b"same-origin",
}
"""Sent with every answer."""


def static_files() -> dict[str, tuple[bytes, bytes]]:
    """The pages' files, read once from the package: body and type, by path."""
    folder = files(__package__) / "static"
    return {path: ((folder / name).read_bytes(), kind) for path, (name, kind) in STATIC.items()}


class Dashboard(Resource):
    """The root, and every path under it (a leaf: it routes by itself)."""

    isLeaf = True

    def __init__(self, api: Api, gate: Gate) -> None:
        Resource.__init__(self)
        self.api = api
        self.gate = gate
        self.files = static_files()

    def render(self, request: Any) -> bytes | int:
        assert isinstance(request, Request)
        for name, value in HEADERS.items():
            request.setHeader(name, value)
        try:
            path = [segment.decode() for segment in request.postpath or []]
        except UnicodeDecodeError:
            return refusal(request, 400, "the path is not UTF-8")
        if path == ["login"]:
            return self._login(request)
        cookie = request.getCookie(_cookie_name(request))
        visitor = self.gate.visitor(
            header(request, b"authorization"),
            None if cookie is None else cookie.decode("latin-1"),
            peer_identity(request.transport) if self.gate.authorization else None,
        )
        if visitor is None:
            request.setHeader(b"www-authenticate", b'Bearer realm="quicx"')
            return refusal(
                request,
                401,
                "a token is needed (Authorization: Bearer TOKEN, or open /login?token=TOKEN)"
                " or a client certificate",
            )
        if path[:1] == ["api"]:
            return self.api.render(request, visitor, path[1:])
        found = self.files.get("/".join(path))
        if found is None:
            return refusal(request, 404, "no such page")
        if request.method not in (b"GET", b"HEAD"):
            request.setHeader(b"allow", b"GET, HEAD")
            return refusal(request, 405, "a page is read with GET")
        body, kind = found
        request.setHeader(b"content-type", kind)
        request.setHeader(b"cache-control", b"no-cache")
        return body

    def _login(self, request: Request) -> bytes:
        token = (request.args or {}).get(b"token", [b""])[0].decode("utf-8", "replace")
        cookie = self.gate.login(token)
        if cookie is None:
            return refusal(request, 401, "that token gives no role")
        request.addCookie(
            _cookie_name(request),
            cookie.encode(),
            path=b"/",
            secure=request.isSecure(),
            httpOnly=True,
            sameSite="strict",
        )
        request.redirect(b"/")
        request.setResponseCode(303)
        return b""


def _cookie_name(request: Request) -> bytes:
    return COOKIE.format(port=getattr(request.getHost(), "port", 0)).encode()


class DashboardSite(Site):
    """The site: no access log (the actions are logged by the API)."""

    noisy = False
    requestFactory = BodylessRequest

    def __init__(self, resource: Dashboard) -> None:
        Site.__init__(self, resource, parsePOSTFormSubmission=False)

    def log(self, request: Any) -> None:
        pass


def dashboard_site(
    queue: QueueService,
    schedules: ScheduleBook,
    history: History,
    gate: Gate,
    max_streams: int,
    cluster: Callable[[], dict[str, Any]] | None = None,
    tasks: TaskHistory | None = None,
    terminate_grace: float = 5.0,
    bulk_actions: BulkActions | None = None,
    replication: Callable[[], Replication] | None = None,
) -> DashboardSite:
    """
    The site of the dashboard over C{queue}; its live streams follow
    C{history}; C{cluster} makes its cluster view (C{None}: it has none);
    C{tasks}: the finished tasks' history (C{None}: none is kept);
    C{terminate_grace}: a terminated worker's (C{[limits] terminate_grace});
    C{bulk_actions}: what runs its bulk actions (C{None}: it has none);
    C{replication}: its role in its shard (C{None}: replication is off).
    """
    api = Api(
        queue,
        schedules,
        history,
        Streams(max_streams),
        gate,
        cluster,
        tasks,
        terminate_grace,
        bulk_actions,
        replication,
    )
    history.listen(api.publish)
    return DashboardSite(Dashboard(api, gate))
