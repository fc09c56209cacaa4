"""
The dashboard's workers, checkpoints and routing in-process: real HTTP into
a queue core on a L{task.Clock}.  What each worker announced and its
steering state; quiet and terminate (one, or quiet them all): the admin
role only, with its CSRF token and the page's origin, as STEER does; a
task's checkpoint (its state shown only when small and text); a queue's
unroutable tasks and its promoted count.
"""

from __future__ import annotations

from typing import Any

from quicx.daemon.observe.web.views import ANNOUNCED
from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.workers import workers_of
from quicx.protocol import taskflow, workers
from quicx.protocol.session import Role
from quicx.protocol.taskflow import Result
from tests.daemon.observe.test_web import (
    ADMIN,
    MONITOR,
    Dashboard,
    bearer,
    dashboard,
    page_post,
)
from tests.fakes import FakePeer, submit_to, v2_producer_of, v2_worker_of, worker_of


def announced_worker(
    queue: QueueService,
    name: str,
    types: frozenset[bytes] | None = None,
    queues: tuple[str, ...] = (),
    credits: int = 1,
) -> FakePeer:
    """A version-2 worker that ANNOUNCEd C{name} on host C{box}, pid 4321, and C{types}."""
    peer = FakePeer(queue, name, version=2)
    workers_of(queue).announce(peer.session, workers.Announce(types, name, "box", 4321), 16)
    queue.claim_role(peer.session, Role.WORKER)
    if queues:
        queue.subscribe(peer.session, queues)
    queue.ready(peer.session, credits)
    return peer


def shown_workers(site: Dashboard) -> dict[int, dict[str, Any]]:
    return {c["id"]: c for c in site.get("/api/workers", MONITOR).json() if c["role"] == "worker"}


def test_the_workers_page_shows_what_each_announced_and_its_state() -> None:
    site = dashboard()
    queue = site.queue
    typed = announced_worker(queue, "resizer", frozenset({b"resize", b"crop"}))
    plain = v2_worker_of(queue, name="plain")
    producer = v2_producer_of(queue)
    shown = shown_workers(site)
    assert {k: shown[typed.session.session_id][k] for k in ANNOUNCED} == {
        "name": "resizer",
        "host": "box",
        "pid": 4321,
        "types": ["crop", "resize"],
        "state": "active",
    }
    assert {k: shown[plain.session.session_id][k] for k in ANNOUNCED} == {
        "name": "",
        "host": "",
        "pid": None,
        "types": None,  # every type: the page says "all"
        "state": "active",
    }
    (other,) = [c for c in site.get("/api/workers", MONITOR).json() if c["role"] == "producer"]
    assert other["id"] == producer.session.session_id and "state" not in other


def test_quiet_a_worker_then_terminate_it() -> None:
    site = dashboard()
    queue = site.queue
    worker = announced_worker(queue, "w", credits=2)
    worker.take()  # its WAIT
    wid = worker.session.session_id
    producer = v2_producer_of(queue)
    csrf = site.login(ADMIN)["csrf"]
    answer = site.post(f"/api/workers/{wid}/quiet", page_post(csrf))
    assert (answer.status, answer.json()) == (200, {"action": "quiet", "workers": [wid]})
    assert worker.take() == [workers.Stop(workers.Steer.QUIET, 0)]
    assert shown_workers(site)[wid]["state"] == "quiet"
    # A task submitted after stays queued: a quiet worker is dealt nothing.
    submit_to(queue, producer.session, b"t", b"after")
    assert worker.task_ids() == [] and queue.queued == 1
    answer = site.post(f"/api/workers/{wid}/terminate", page_post(csrf))
    assert (answer.status, answer.json()) == (200, {"action": "terminate", "workers": [wid]})
    # [limits] terminate_grace: the dashboard's default, 5 s.
    assert worker.take() == [workers.Stop(workers.Steer.TERMINATE, 5000)]
    assert shown_workers(site)[wid]["state"] == "terminating"
    site.clock.advance(5.0)
    assert not worker.session.connected and shown_workers(site) == {}


def test_quiet_all_quiets_every_version_2_worker() -> None:
    site = dashboard()
    queue = site.queue
    first, second = v2_worker_of(queue, name="a"), v2_worker_of(queue, name="b")
    worker_of(queue, name="v1")  # cannot be told: left out
    answer = site.post("/api/workers/quiet", bearer(ADMIN))
    ids = [first.session.session_id, second.session.session_id]
    assert (answer.status, answer.json()) == (200, {"action": "quiet", "workers": ids})
    states = {c["id"]: c.get("state") for c in shown_workers(site).values()}
    assert [states[i] for i in ids] == ["quiet", "quiet"]


def test_steering_needs_the_admin_role_the_csrf_token_and_a_connected_worker() -> None:
    site = dashboard()
    queue = site.queue
    worker = v2_worker_of(queue)
    worker.take()  # its WAIT
    old = worker_of(queue, name="v1")
    wid = worker.session.session_id
    paths = [f"/api/workers/{wid}/quiet", f"/api/workers/{wid}/terminate", "/api/workers/quiet"]
    monitor = site.login(MONITOR)["csrf"]
    for path in paths:
        answer = site.post(path, page_post(monitor))
        assert answer.status == 403 and "the monitor role reads only" in answer.json()["error"]
        assert site.post(path, bearer(MONITOR)).status == 403
    admin = site.login(ADMIN)["csrf"]
    for path in paths:
        assert (
            site.post(path, {"Origin": "http://evil.example", "X-Quicx-CSRF": admin}).status == 403
        )
        assert site.post(path, page_post("0" * 64)).status == 403
        assert site.get(path, ADMIN).status == 405
    assert worker.take() == [] and shown_workers(site)[wid]["state"] == "active"
    missing = site.post("/api/workers/999/quiet", page_post(admin))
    assert (missing.status, missing.json()) == (404, {"error": "no worker 999 is connected"})
    producer = v2_producer_of(queue).session.session_id
    assert site.post(f"/api/workers/{producer}/terminate", page_post(admin)).status == 404
    v1 = site.post(f"/api/workers/{old.session.session_id}/quiet", page_post(admin))
    assert v1.status == 409 and "speaks protocol version 1" in v1.json()["error"]
    assert site.post("/api/workers/0/quiet", page_post(admin)).status == 400
    assert site.post("/api/workers/x/quiet", page_post(admin)).status == 400
    assert site.post(f"/api/workers/{wid}/pause", page_post(admin)).status == 404


def checkpointed(state: object) -> dict[str, Any]:
    """The task page's C{checkpoint} of a running task that saved C{state}."""
    site = dashboard(tasks=10)  # [web] payload_preview = 16 bytes
    queue = site.queue
    submit_to(queue, v2_producer_of(queue).session, b"t", b"x")
    worker = v2_worker_of(queue)
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    site.clock.advance(1)
    queue.checkpoints.save(worker.session, task.task_id, task.token, Result.of(state))
    site.clock.advance(30)
    page = site.get(f"/api/tasks/{task.task_id}", MONITOR).json()
    found: dict[str, Any] = page["task"]["checkpoint"]
    return found


def test_a_task_page_shows_its_checkpoint_and_its_state_only_if_small_and_text() -> None:
    at = 1_800_000_001.0
    assert checkpointed("row 20 of 90") == {"size": 12, "at": at, "text": "row 20 of 90"}
    assert checkpointed({"row": 20}) == {"size": 10, "at": at, "text": '{"row":20}'}
    assert checkpointed("x" * 17) == {"size": 17, "at": at}  # over [web] payload_preview
    assert checkpointed(b"ab") == {"size": 2, "at": at}  # bytes: never shown


def test_a_queued_task_no_worker_runs_is_unroutable_on_its_page_and_its_queue() -> None:
    site = dashboard(tasks=10)
    queue = site.queue
    announced_worker(queue, "resizer", frozenset({b"resize"}), ("mail",))
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"send", b"x", "mail")
    submit_to(queue, producer.session, b"send", b"y", "mail")
    submit_to(queue, producer.session, b"other", b"z", "idle")
    page = site.get("/api/tasks/1", MONITOR).json()
    assert "no connected worker handles type send" in [w["text"] for w in page["task"]["why"]]
    shown = {q["name"]: q for q in site.get("/api/queues", MONITOR).json()}
    assert shown["mail"]["unroutable"] == {"send": 2}
    assert shown["idle"]["unroutable"] == {}
    assert (shown["mail"]["promoted"], shown["idle"]["promoted"]) == (0, 0)
    overview = site.get("/api/overview", MONITOR).json()
    assert {q["name"]: q["unroutable"] for q in overview["queues"]}["mail"] == {"send": 2}
    # A worker that runs it takes them: none is unroutable any more.
    v2_worker_of(queue, credits=2, queues=("mail",))
    shown = {q["name"]: q for q in site.get("/api/queues", MONITOR).json()}
    assert shown["mail"]["unroutable"] == {}
