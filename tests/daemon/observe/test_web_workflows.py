"""
The dashboard's view of the workflows (dependencies, expiry, bulk actions)
in-process: real HTTP into a queue core on a L{task.Clock}. A task's page
says what it waits for (its parents, its group, its policy) and what waits
for it (bounded); an expired task is in the history as expired; bulk actions
by a filter, their dry run, their refusals (the admin role, CSRF and origin,
a bad filter, busy).
"""

from __future__ import annotations

from typing import Any

from quicx.daemon.observe.web.views import SHOWN_RELATIVES
from quicx.daemon.queue.bulk import BulkSettings
from quicx.daemon.queue.expiry import WHY
from quicx.protocol import taskflow
from quicx.protocol.start_options import Expires
from tests.daemon.observe.test_web import (
    ADMIN,
    MONITOR,
    Connection,
    Dashboard,
    Response,
    bearer,
    dashboard,
    page_post,
)
from tests.fakes import FakePeer, submit_to, v2_producer_of, v2_worker_of


def submit(site: Dashboard, producer: FakePeer, queue: str = "work", **options: Any) -> int:
    """A task submitted to C{queue} with C{options}; its id."""
    submit_to(site.queue, producer.session, b"t", b"x", queue, **options)
    (ok,) = [m for m in producer.take() if isinstance(m, taskflow.Ok)]
    return ok.task_id


def relatives(site: Dashboard, task_id: int) -> Any:
    page = site.get(f"/api/tasks/{task_id}", MONITOR).json()
    assert page["found"] == "live"
    return page["task"]["dependencies"]


def test_a_task_page_shows_its_parents_and_the_tasks_waiting_for_it() -> None:
    site = dashboard(tasks=100)
    producer = v2_producer_of(site.queue)
    top = submit(site, producer)
    left = submit(site, producer, after=(top,))
    right = submit(site, producer, after=(top,), on_parent_failure=1)
    bottom = submit(site, producer, after=(left, right))
    assert relatives(site, top) == {"children": [left, right], "children_total": 2}
    assert relatives(site, bottom) == {
        "parents": [{"id": left, "pending": True}, {"id": right, "pending": True}],
        "parents_total": 2,
        "parents_pending": 2,
        "policy": "fail",
        "children": [],
        "children_total": 0,
    }
    page = site.get(f"/api/tasks/{right}", MONITOR).json()["task"]
    assert page["state"] == "waiting" and page["dependencies"]["policy"] == "ignore"
    assert page["dependencies"]["children"] == [bottom]
    # The top runs: its children are due, and no longer wait for it.
    worker = v2_worker_of(site.queue, queues=("work",))
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    site.queue.ack(worker.session, task.task_id, task.token)
    shown = relatives(site, left)
    assert shown["parents"] == [{"id": top, "pending": False}] and shown["parents_pending"] == 0
    # A task without a parent or a child has none.
    loner = submit(site, producer, "other")
    assert relatives(site, loner) is None


def test_the_children_a_page_lists_are_bounded_and_counted() -> None:
    site = dashboard()
    producer = v2_producer_of(site.queue)
    top = submit(site, producer)
    children = [submit(site, producer, after=(top,)) for _ in range(SHOWN_RELATIVES + 5)]
    shown = relatives(site, top)
    assert shown["children"] == children[:SHOWN_RELATIVES]
    assert shown["children_total"] == SHOWN_RELATIVES + 5


def test_a_task_waiting_for_a_group_says_so() -> None:
    site = dashboard()
    producer = v2_producer_of(site.queue)
    group = site.queue.open_group(producer.session)["group"]
    member = submit(site, producer, group=group)
    callback = submit(site, producer, after_group=group)
    shown = relatives(site, callback)
    assert shown["group"] == {"id": group, "pending": True} and shown["parents"] == []
    assert relatives(site, member) is None


def test_an_expired_task_is_in_the_history_as_expired() -> None:
    site = dashboard(tasks=10)
    producer = v2_producer_of(site.queue)
    task_id = submit(site, producer, expires=Expires(1500))
    site.clock.advance(2)
    found = site.get("/api/finished?state=expired", MONITOR).json()["tasks"]
    assert [(t["id"], t["state"], t["reason"]) for t in found] == [(task_id, "expired", WHY)]
    assert site.get("/api/finished?state=done", MONITOR).json()["tasks"] == []


# -- bulk actions ------------------------------------------------------------------


def answered(site: Dashboard, connection: Connection) -> Response:
    """The answer of a bulk action, once its turns (on the clock) are over."""
    for _ in range(1000):
        if connection.transport.value():
            return connection.response()
        site.clock.advance(0)
    raise AssertionError("no answer")


def bulk(site: Dashboard, csrf: str, query: str) -> Response:
    return answered(site, site.open("POST", f"/api/bulk/{query}", page_post(csrf)))


def test_a_dry_run_counts_then_the_cancel_cancels() -> None:
    site = dashboard(tasks=100, bulk=BulkSettings())
    producer = v2_producer_of(site.queue)
    ids = [submit(site, producer, "mail") for _ in range(30)]
    other = submit(site, producer, "other")
    csrf = site.login(ADMIN)["csrf"]
    dry = bulk(site, csrf, "cancel?queue=mail&states=queued&dry_run=1")
    assert dry.status == 200
    counted = dry.json()
    assert (counted["dry_run"], counted["matched"], counted["acted"]) == (True, 30, 0)
    assert counted["sample"] == ids[:10]
    assert site.queue.queued == 31
    done = bulk(site, csrf, "cancel?queue=mail&states=queued").json()
    assert (done["dry_run"], done["matched"], done["acted"], done["skipped"]) == (False, 30, 30, 0)
    assert site.queue.queued == 1 and site.queue.task(other).home.name == "other"
    cancelled = site.get("/api/finished?state=cancelled&limit=100", MONITOR).json()["tasks"]
    assert sorted(t["id"] for t in cancelled) == ids


def test_a_move_names_its_queue_and_every_filter_field_is_read() -> None:
    site = dashboard(bulk=BulkSettings())
    producer = v2_producer_of(site.queue)
    submit(site, producer, "mail", key=b"order-1")
    submit(site, producer, "mail", key=b"invoice-1")
    csrf = site.login(ADMIN)["csrf"]
    query = "move?queue=mail&type=t&key=order-&states=queued,delayed&older=0&newer=1h&to=slow"
    done = bulk(site, csrf, query).json()
    assert (done["acted"], done["to"]) == (1, "slow")
    assert site.queue.queues["slow"].depth == 1 and site.queue.queues["mail"].depth == 1


def test_a_bad_filter_is_400_with_its_words() -> None:
    site = dashboard(bulk=BulkSettings())
    csrf = site.login(ADMIN)["csrf"]
    for query, words in [
        ("cancel?states=running", "unknown state 'running'"),
        ("cancel?states=dead", "cancel does not act on dead tasks"),
        ("move?queue=mail", "a move names its target queue"),
        ("cancel?to=slow", "a move names its target queue, and only a move"),
        ("cancel?older=soon", "soon"),
        ("cancel?older=1h&newer=1m", "no task is older than"),
        ("purge?queue=bad%20name", "queue"),
    ]:
        answer = site.post(f"/api/bulk/{query}", page_post(csrf))
        assert answer.status == 400, query
        assert words in answer.json()["error"], (query, answer.json())
    assert site.post("/api/bulk/undo", page_post(csrf)).status == 404
    assert site.get("/api/bulk/cancel", ADMIN).status == 405
    off = dashboard().post("/api/bulk/cancel", bearer(ADMIN))
    assert (off.status, off.json()["error"]) == (400, "no bulk actions here")


def test_bulk_actions_need_the_admin_role_its_csrf_token_and_origin() -> None:
    site = dashboard(bulk=BulkSettings())
    producer = v2_producer_of(site.queue)
    submit(site, producer, "mail")
    monitor = site.login(MONITOR)["csrf"]
    refused = site.post("/api/bulk/cancel?dry_run=1", page_post(monitor))
    assert refused.status == 403 and "the monitor role reads only" in refused.json()["error"]
    admin = site.login(ADMIN)["csrf"]
    for headers in (
        {"Origin": "http://evil.example", "X-Quicx-CSRF": admin},
        page_post("0" * 64),
        {"Origin": page_post(admin)["Origin"]},
    ):
        assert site.post("/api/bulk/cancel", headers).status == 403, headers
    assert site.queue.queued == 1


def test_past_max_running_a_bulk_action_is_429() -> None:
    site = dashboard(bulk=BulkSettings(max_running=1))
    csrf = site.login(ADMIN)["csrf"]
    first = site.open("POST", "/api/bulk/purge?dry_run=1", page_post(csrf))
    busy = site.post("/api/bulk/purge", page_post(csrf))
    assert busy.status == 429 and "max_running = 1" in busy.json()["error"]
    assert answered(site, first).json()["matched"] == 0
    assert bulk(site, csrf, "purge").status == 200
