"""
The dashboard's site in-process: real HTTP (Twisted's own parser and
writer) over an in-memory transport, into a queue core on a L{task.Clock}.
Who gets in (tokens, the session cookie, certificates), what the monitor
role may not do, CSRF, the API's answers, and the live stream's bounds.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from attrs import define, field
from twisted.internet.address import IPv4Address
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from quicx.daemon import config as settings
from quicx.daemon.observe.task_history import TaskHistory
from quicx.daemon.observe.web.auth import Gate, Role, same_origin
from quicx.daemon.observe.web.history import History
from quicx.daemon.observe.web.site import DashboardSite, dashboard_site
from quicx.daemon.queue.bulk import BulkActions, BulkSettings
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.daemon.service import on_loopback
from quicx.documents.status import Replication
from quicx.net.certificates import Authorization
from quicx.protocol import taskflow
from quicx.protocol.outcomes import OutcomeState
from tests.fakes import FakeJournal, make_queue, submit_to, v2_producer_of, v2_worker_of

ADMIN = "admin-secret"
MONITOR = "monitor-secret"
HOST = "dash.test:8080"
ORIGIN = f"http://{HOST}"


@define
class Response:
    status: int
    headers: dict[str, list[str]]
    body: bytes

    @classmethod
    def parse(cls, data: bytes) -> Response:
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers: dict[str, list[str]] = {}
        for line in lines:
            name, _, value = line.partition(":")
            headers.setdefault(name.strip().lower(), []).append(value.strip())
        return cls(int(status_line.split()[1]), headers, body)

    def header(self, name: str) -> str | None:
        found = self.headers.get(name)
        return found[0] if found else None

    def json(self) -> Any:
        assert self.header("content-type") == "application/json; charset=utf-8"
        return json.loads(self.body)


@define
class Connection:
    """One request's connection: what was written so far, and the transport."""

    transport: StringTransport
    channel: Any

    def response(self) -> Response:
        return Response.parse(self.transport.value())

    def close(self) -> None:
        self.channel.connectionLost(Failure(ConnectionDone()))


@define
class Dashboard:
    """A site over a queue, and a browser's cookie jar for it."""

    queue: QueueService
    site: DashboardSite
    history: History
    clock: Clock
    cookies: dict[str, str] = field(factory=dict)

    def open(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Connection:
        """Send a request (HTTP/1.0: the answer ends with the connection); its connection."""
        transport = StringTransport(
            hostAddress=IPv4Address("TCP", "127.0.0.1", 8080),
            peerAddress=IPv4Address("TCP", "127.0.0.1", 50000),
        )
        channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 50000))
        assert channel is not None
        channel.makeConnection(transport)
        lines = [f"{method} {path} HTTP/1.0", f"Host: {HOST}"]
        if self.cookies:
            lines.append("Cookie: " + "; ".join(f"{k}={v}" for k, v in self.cookies.items()))
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        if body:
            lines.append(f"Content-Length: {len(body)}")
        channel.dataReceived(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        return Connection(transport, channel)

    def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, body: bytes = b""
    ) -> Response:
        response = self.open(method, path, headers, body).response()
        for cookie in response.headers.get("set-cookie", []):
            name, _, rest = cookie.partition("=")
            self.cookies[name] = rest.split(";")[0]
        return response

    def get(self, path: str, token: str | None = None) -> Response:
        return self.request("GET", path, bearer(token) if token else {})

    def login(self, token: str) -> dict[str, Any]:
        """Log in as a browser does; the /api/session answer."""
        assert self.request("GET", f"/login?token={token}").status == 303
        session: dict[str, Any] = self.get("/api/session").json()
        return session

    def post(self, path: str, headers: dict[str, str] | None = None) -> Response:
        return self.request("POST", path, headers)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def page_post(csrf: str) -> dict[str, str]:
    """The headers of an action posted by the dashboard's own page."""
    return {"Origin": ORIGIN, "X-Quicx-CSRF": csrf}


def dashboard(
    journal: FakeJournal | None = None,
    max_streams: int = 4,
    gate: Gate | None = None,
    cluster: Callable[[], dict[str, Any]] | None = None,
    tasks: int = 0,
    bulk: BulkSettings | None = None,
    replication: Callable[[], Replication] | None = None,
) -> Dashboard:
    """
    A site over a new queue; with C{tasks}, a history of that many finished
    tasks; with C{bulk}, its bulk actions (turns on the clock).
    """
    clock = Clock()
    clock.advance(1_800_000_000)
    queue = make_queue(clock, journal or FakeJournal(waits=False))
    book = ScheduleBook(
        queue,
        clock,
        {
            "tick": ScheduleSpec(
                name="tick", cron="* * * * *", task_type=b"tick", payload=b"", source="config"
            )
        },
        3,
    )
    queue.plug(schedules=book)
    book.restore({}, {})
    book.startService()
    history = History(queue, 60)
    finished = None
    if tasks:
        finished = TaskHistory(
            queue.clock, queue.pool.head, tasks, 3600, 16, 1024, False, 8 << 20, 1000
        )
        queue.plug(history=finished)
    gate = gate or Gate(ADMIN, MONITOR)
    actions = None if bulk is None else BulkActions(queue, bulk, turns=clock)
    site = dashboard_site(
        queue,
        book,
        history,
        gate,
        max_streams,
        cluster,
        finished,
        bulk_actions=actions,
        replication=replication,
    )
    return Dashboard(queue, site, history, clock)


# -- who gets in -------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/app.js", "/api/overview", "/api/stream", "/nothing"])
def test_without_a_role_every_path_is_401_and_shows_nothing(path: str) -> None:
    site = dashboard()
    for headers in ({}, bearer("wrong"), {"Authorization": f"Basic {ADMIN}"}):
        response = site.request("GET", path, headers)
        assert response.status == 401
        assert response.header("www-authenticate") == 'Bearer realm="quicx"'
        assert b"default" not in response.body and b"quicx_session" not in response.body
    assert site.request("GET", path, {"Cookie": "quicx_session_8080=admin.0.0"}).status == 401


def test_a_bearer_token_gives_its_role_and_a_wrong_one_refuses_even_with_a_session() -> None:
    site = dashboard()
    page = site.get("/", ADMIN)
    assert page.status == 200 and page.header("content-type") == "text/html; charset=utf-8"
    assert b'<script src="/app.js"' in page.body
    assert "default-src 'self'" in (page.header("content-security-policy") or "")
    assert site.get("/api/session", ADMIN).json()["role"] == "admin"
    assert site.get("/api/session", MONITOR).json() == {
        "role": "monitor",
        "csrf": None,
        "version": site.get("/api/session", MONITOR).json()["version"],
        "history": 60,
    }
    site.login(ADMIN)
    assert site.get("/api/session").status == 200
    assert site.get("/api/session", "wrong").status == 401


def test_login_sets_an_httponly_samesite_strict_cookie_and_sends_the_browser_home() -> None:
    site = dashboard()
    refused = site.request("GET", "/login?token=wrong")
    assert refused.status == 401 and "set-cookie" not in refused.headers
    assert site.request("GET", "/login").status == 401
    response = site.request("GET", f"/login?token={MONITOR}")
    assert (response.status, response.header("location")) == (303, "/")
    cookie = response.header("set-cookie") or ""
    name, _, attributes = cookie.partition("=")
    assert name == "quicx_session_8080"  # the dashboard's port: one cookie per dashboard
    assert {"Path=/", "HttpOnly", "SameSite=strict"} <= {a.strip() for a in attributes.split(";")}
    assert "Secure" not in cookie  # plain HTTP: a Secure cookie would never come back
    session = site.get("/api/session").json()
    assert session["role"] == "monitor" and len(session["csrf"]) == 64
    # A session signed by another daemon (or before a restart) is no session.
    other = dashboard()
    other.cookies = dict(site.cookies)
    assert other.get("/api/session").status == 401


def test_tokens_compare_whole_and_certificates_give_roles_by_the_tls_lists() -> None:
    gate = Gate(
        ADMIN, "", Authorization(monitors=frozenset({"grafana"}), admins=frozenset({"ops"}))
    )
    assert gate.role_of(ADMIN) is Role.ADMIN
    assert gate.role_of(ADMIN[:-1]) is gate.role_of(ADMIN + "x") is gate.role_of("") is None
    assert gate.visitor(None, None, "ops") == gate.visitor(None, "junk", "ops")
    ops = gate.visitor(None, None, "ops")
    assert ops is not None and (ops.role, ops.how) == (Role.ADMIN, "certificate ops")
    grafana = gate.visitor(None, None, "grafana")
    assert grafana is not None and grafana.role is Role.MONITOR and grafana.csrf != ops.csrf
    assert gate.visitor(None, None, "mallory") is None
    assert gate.visitor(None, None, None) is None
    # Without a tls: listener and client_ca, identities count for nothing.
    assert Gate(ADMIN, "").visitor(None, None, "ops") is None


def test_origin_check() -> None:
    assert same_origin(ORIGIN, None, "http", HOST)
    assert same_origin(None, f"{ORIGIN}/#queues", "http", HOST)
    assert same_origin(None, None, "http", HOST)  # not a browser: the CSRF token decides
    assert not same_origin("http://evil.example", f"{ORIGIN}/", "http", HOST)
    assert not same_origin("null", None, "http", HOST)
    assert not same_origin(None, "http://evil.example/dash.test:8080/", "http", HOST)
    assert not same_origin(ORIGIN, None, "https", HOST)


# -- actions: admin only, CSRF-proof, the core's own ------------------------------------


def test_the_monitor_role_reads_but_every_action_is_403() -> None:
    site = dashboard()
    csrf = site.login(MONITOR)["csrf"]
    assert site.get("/api/queues").status == 200
    for path in ("/api/queues/default/pause", "/api/queues/default/purge", "/api/dead/replay"):
        response = site.post(path, page_post(csrf))
        assert response.status == 403, path
        assert "the monitor role reads only" in response.json()["error"]
    assert site.post("/api/queues/default/pause", bearer(MONITOR)).status == 403
    assert not site.queue.queues["default"].paused


def test_the_cluster_view_is_404_without_peers_and_the_monitor_role_reads_it() -> None:
    none = dashboard().get("/api/cluster", ADMIN)
    assert none.status == 404
    assert none.json()["error"] == "no cluster view: [cluster] peers is not set"
    view = {"daemons": [{"address": "self", "up": True}], "total": {"daemons": 1}}
    site = dashboard(cluster=lambda: view)
    assert site.get("/api/cluster").status == 401
    for token in (MONITOR, ADMIN):
        answer = site.get("/api/cluster", token)
        assert (answer.status, answer.json()) == (200, view)


def test_a_session_action_needs_its_csrf_token_and_the_dashboards_origin() -> None:
    journal = FakeJournal(waits=False)
    site = dashboard(journal)
    csrf = site.login(ADMIN)["csrf"]
    refusals = [
        {"Origin": ORIGIN},
        {"Origin": ORIGIN, "X-Quicx-CSRF": "0" * 64},
        {"Origin": "http://evil.example", "X-Quicx-CSRF": csrf},
        {"Referer": "http://evil.example/page", "X-Quicx-CSRF": csrf},
    ]
    for headers in refusals:
        response = site.post("/api/queues/mail/pause", headers)
        assert response.status == 403, headers
    # What a cross-site form does: the browser's cookie, another origin, a form body or none.
    for body in (b"queue=mail", b""):
        form = site.request(
            "POST",
            "/api/queues/mail/pause",
            {"Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"},
            body,
        )
        assert form.status in (403, 413)
    assert journal.pauses == [] and "mail" not in site.queue.queues
    # A GET never acts.
    assert site.get("/api/queues/mail/pause").status == 405
    response = site.post("/api/queues/mail/pause", page_post(csrf))
    assert response.json() == {"queue": "mail", "paused": True}
    assert journal.pauses == [("mail", True)]
    # Without Origin, the Referer is checked.
    resumed = site.post("/api/queues/mail/resume", {"Referer": f"{ORIGIN}/", "X-Quicx-CSRF": csrf})
    assert resumed.json() == {"queue": "mail", "paused": False}


def test_a_request_with_a_body_is_refused_unread() -> None:
    site = dashboard()
    response = site.request("POST", "/api/queues/mail/pause", bearer(ADMIN), b"queue=mail")
    assert response.status == 413
    assert "mail" not in site.queue.queues


def test_pause_purge_resume_call_the_core_and_a_paused_queue_dispatches_nothing() -> None:
    site = dashboard()
    queue = site.queue
    worker = v2_worker_of(queue, queues=("mail",))
    worker.take()
    assert site.post("/api/queues/mail/pause", bearer(ADMIN)).status == 200
    producer = v2_producer_of(queue)
    for n in range(3):
        submit_to(queue, producer.session, b"t", b"%d" % n, "mail")
    assert worker.task_ids() == []
    queues = {q["name"]: q for q in site.get("/api/queues", MONITOR).json()}
    assert (queues["mail"]["paused"], queues["mail"]["depth"]) == (True, 3)
    assert site.post("/api/queues/mail/purge", bearer(ADMIN)).json() == {
        "queue": "mail",
        "purged": 3,
    }
    submit_to(queue, producer.session, b"t", b"after", "mail")
    assert site.post("/api/queues/mail/resume", bearer(ADMIN)).status == 200
    assert len(worker.task_ids()) == 1
    missing = site.post("/api/queues/nowhere/resume", bearer(ADMIN))
    assert missing.status == 404 and "nowhere" in missing.json()["error"]
    assert site.post("/api/queues/bad%20name/pause", bearer(ADMIN)).status == 400


def test_an_action_is_answered_once_the_journal_holds_it() -> None:
    journal = FakeJournal(waits=False)
    journal.syncing = []
    site = dashboard(journal)
    connection = site.open("POST", "/api/queues/mail/pause", bearer(ADMIN))
    assert connection.transport.value() == b"" and site.queue.queues["mail"].paused
    journal.syncing[-1].callback(None)
    assert connection.response().json() == {"queue": "mail", "paused": True}
    failing = site.open("POST", "/api/queues/mail/resume", bearer(ADMIN))
    journal.syncing[-1].errback(OSError("No space left on device"))
    response = failing.response()
    assert response.status == 500
    assert "not journaled (No space left on device)" in response.json()["error"]
    gone = site.open("POST", "/api/queues/mail/pause", bearer(ADMIN))
    gone.close()
    journal.syncing[-1].callback(None)  # nothing is written to a closed connection


def test_dead_letters_list_replay_one_replay_a_queue_and_purge() -> None:
    site = dashboard()
    queue = site.queue
    producer = v2_producer_of(queue)
    worker = v2_worker_of(queue, credits=10, queues=("mail", "sms"))
    for queue_name in ("mail", "mail", "sms"):
        submit_to(queue, producer.session, b"t", b"x", queue_name, retries=1)
    for task in [m for m in worker.take() if isinstance(m, taskflow.Task)]:
        queue.nack(worker.session, task.task_id, task.token, "hopeless", True)
    listing = site.get("/api/dead?queue=mail", MONITOR).json()
    assert listing["total"] == 2
    assert [(t["id"], t["queue"], t["reason"]) for t in listing["tasks"]] == [
        (1, "mail", "hopeless"),
        (2, "mail", "hopeless"),
    ]
    assert site.get("/api/dead?limit=1", MONITOR).json()["total"] == 3
    assert site.get("/api/dead?limit=0", MONITOR).status == 400
    assert site.post("/api/dead/1/replay", bearer(ADMIN)).json() == {"replayed": [1]}
    assert worker.task_ids() == [1]
    assert site.post("/api/dead/1/replay", bearer(ADMIN)).status == 404
    assert site.post("/api/dead/replay?queue=sms", bearer(ADMIN)).json() == {"replayed": [3]}
    assert worker.task_ids() == [3]
    assert site.post("/api/dead/purge?queue=mail", bearer(ADMIN)).json() == {"purged": 1}
    assert site.get("/api/dead", MONITOR).json() == {"total": 0, "tasks": []}


def test_a_task_is_found_live_kept_expired_or_unknown() -> None:
    site = dashboard()
    queue = site.queue
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"resize", b"x", "mail")
    submit_to(queue, producer.session, b"resize", b"y", "mail", result_ttl=60)
    live = site.get("/api/tasks/1", MONITOR).json()
    assert live["found"] == "live"
    assert (live["task"]["id"], live["task"]["state"], live["task"]["queue"]) == (
        1,
        "queued",
        "mail",
    )
    assert {"no_workers"} <= {why["reason"] for why in live["task"]["why"]}
    worker = v2_worker_of(queue, credits=2, queues=("mail",))
    first, second = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, first.task_id, first.token)
    queue.ack(
        worker.session,
        second.task_id,
        second.token,
        taskflow.Result(taskflow.ResultKind.TEXT, b"ok"),
    )
    kept = site.get("/api/tasks/2", MONITOR).json()
    assert kept["found"] == "kept" and kept["outcome"] == OutcomeState.DONE.name.lower()
    assert kept["result"] == {"kind": "text", "text": "ok"}
    assert site.get("/api/tasks/1", MONITOR).json() == {"found": "unknown", "id": 1}
    site.clock.advance(61)
    assert site.get("/api/tasks/2", MONITOR).json() == {"found": "forgotten", "id": 2}
    submit_to(queue, producer.session, b"resize", b"z", "mail", result_ttl=60)
    (third,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    queue.ack(worker.session, third.task_id, third.token)
    assert queue.kept.make_room(1)  # as a SUBMIT does when the pool is full
    assert site.get(f"/api/tasks/{third.task_id}", MONITOR).json() == {
        "found": "forgotten",
        "id": third.task_id,
        "evicted": "evicted: the pool is full",
    }
    assert site.get("/api/tasks/zero", MONITOR).status == 400
    assert site.get("/api/tasks/0", MONITOR).status == 400


def test_the_reads_the_pages_use() -> None:
    site = dashboard()
    queue = site.queue
    worker = v2_worker_of(queue, credits=3, queues=("mail",), name="10.0.0.7:4242")
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"x", "mail")
    site.history.sample()
    site.clock.advance(1)
    site.history.sample()
    overview = site.get("/api/overview", MONITOR).json()
    assert overview["tasks"]["submitted"] == 1 and overview["running"] == 1
    assert overview["sample"]["submitted"] == 1
    assert [q["name"] for q in overview["queues"]] == ["default", "mail"]
    history = site.get("/api/history", MONITOR).json()
    assert len(history["rows"]) == 1 and history["fields"][0] == "time"
    connections = site.get("/api/workers", MONITOR).json()
    assert [(c["role"], c["peer"]) for c in connections] == [
        ("worker", "10.0.0.7:4242"),
        ("producer", "producer"),
    ]
    assert (connections[0]["queues"], connections[0]["held"], connections[0]["tasks"]) == (
        ["mail"],
        1,
        [1],
    )
    assert worker.task_ids() == [1]
    schedules = site.get("/api/schedules", MONITOR).json()
    assert [(s["name"], s["cron"]) for s in schedules] == [("tick", "* * * * *")]
    for path in ("/app.js", "/chart.js", "/style.css", "/favicon.svg"):
        assert site.get(path, MONITOR).status == 200, path
    assert site.get("/api/nothing", MONITOR).status == 404
    assert site.post("/api/overview", bearer(ADMIN)).status == 405
    assert site.request("HEAD", "/api/stream", bearer(ADMIN)).status == 404
    assert site.request("DELETE", "/api/queues", bearer(ADMIN)).status == 405
    assert site.request("POST", "/", bearer(ADMIN)).status == 405


# -- the live stream ----------------------------------------------------------------


def events(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in data.split(b"\n") if line.startswith(b"data: ")]


def test_the_stream_sends_the_overview_each_second_and_is_bounded() -> None:
    site = dashboard(max_streams=2)
    first = site.open("GET", "/api/stream", bearer(MONITOR))
    response = first.response()
    assert response.status == 200
    assert response.header("content-type") == "text/event-stream; charset=utf-8"
    assert response.body.startswith(b"retry: 2000\n\n")
    assert events(response.body)[0]["sample"] is None  # no sample yet
    second = site.open("GET", "/api/stream", bearer(MONITOR))
    refused = site.open("GET", "/api/stream", bearer(MONITOR)).response()
    assert refused.status == 503 and b"max_streams" in refused.body
    site.history.sample()
    for _ in range(3):
        site.clock.advance(1)
        site.history.sample()
    sent = events(first.response().body)
    assert len(sent) == 4 and [e["sample"]["time"] for e in sent[1:]] == [
        1_800_000_001,
        1_800_000_002,
        1_800_000_003,
    ]
    assert sent[-1]["queues"][0]["name"] == "default"
    first.close()
    assert site.open("GET", "/api/stream", bearer(MONITOR)).response().status == 200
    second.close()


def test_a_stream_whose_transport_is_full_drops_samples_instead_of_buffering() -> None:
    site = dashboard()
    slow = site.open("GET", "/api/stream", bearer(MONITOR))
    fast = site.open("GET", "/api/stream", bearer(MONITOR))
    site.history.sample()
    before = len(slow.transport.value())
    slow.transport.producer.pauseProducing()  # what a full socket buffer does
    for _ in range(5):
        site.clock.advance(1)
        site.history.sample()
    assert len(slow.transport.value()) == before
    assert len(events(fast.response().body)) == 6
    slow.transport.producer.resumeProducing()  # it drained
    site.clock.advance(1)
    site.history.sample()
    latest = events(slow.response().body)[-1]
    assert latest["sample"]["time"] == 1_800_000_006
    assert latest["streams"] == {"open": 2, "dropped": 5}


# -- configuration --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "listened"),
    [
        ("tcp:8080", "tcp:8080:interface=127.0.0.1"),
        ("tls:8443", "tls:8443:interface=127.0.0.1"),
        ("tcp6:8080", "tcp6:8080:interface=\\:\\:1"),
        ("tcp:8080:interface=0.0.0.0", "tcp:8080:interface=0.0.0.0"),
        ("unix:/run/quicx/web.sock", "unix:/run/quicx/web.sock"),
    ],
)
def test_the_dashboard_listens_on_loopback_unless_told_otherwise(given: str, listened: str) -> None:
    assert on_loopback(given) == listened


@pytest.mark.parametrize(
    "text",
    [
        "[web]\nlisten = tcp:8080:interface=127.0.0.1\n",
        "[web]\nlisten = tcp:8080\n[tls]\nclient_ca = /ca.pem\ncertificate = /c.pem\n",
    ],
)
def test_a_dashboard_nobody_can_get_into_is_refused_naming_the_key(text: str) -> None:
    with pytest.raises(settings.ConfigError) as raised:
        settings.parse(text, "f")
    assert str(raised.value).startswith("f:2: [web] listen needs admin_token or monitor_token")


@pytest.mark.parametrize(
    "text",
    [
        "[web]\nlisten = tcp:8080\nmonitor_token = m\n",
        "[web]\nlisten = tls:8443\n[tls]\nclient_ca = /ca.pem\ncertificate = /c.pem\n",
    ],
)
def test_a_token_or_client_certificates_let_the_dashboard_start(text: str) -> None:
    assert settings.parse(text, "f").web.listen


# -- a daemon of a shard --------------------------------------------------------------------


def test_the_overview_shows_the_role_and_a_standby_refuses_actions() -> None:
    role = Replication("standby", 5, "10.0.0.2:16381", "a", "orders")
    site = dashboard(replication=lambda: role)
    overview = site.get("/api/overview", ADMIN).json()
    assert overview["replication"] == role.summary
    assert overview["replication"].startswith("a: standby of 10.0.0.2:16381 (shard orders)")
    csrf = site.login(ADMIN)["csrf"]
    refused = site.post("/api/queues/default/pause", page_post(csrf))
    assert (refused.status, refused.json()) == (
        503,
        {
            "error": "pause queue default: this daemon is not the primary"
            " (the primary is at 10.0.0.2:16381)"
        },
    )
    assert not site.queue.queues["default"].paused
    role = Replication("primary", 6, "10.0.0.1:16381", "a", "orders")
    assert site.post("/api/queues/default/pause", page_post(csrf)).status == 200


def test_without_replication_the_overview_has_no_role() -> None:
    assert "replication" not in dashboard().get("/api/overview", ADMIN).json()
