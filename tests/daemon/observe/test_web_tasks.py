"""
The dashboard's finished tasks and task actions in-process: real HTTP into
a queue core on a L{task.Clock} with the history of finished tasks on.
The search's arguments and its refusals, the task page's document, the
workers' running tasks, and single-task retry, delete and cancel: the
admin role only, with its CSRF token, each as the wire's own would.
"""

from __future__ import annotations

from typing import Any

from quicx.protocol import taskflow
from tests.daemon.observe.test_web import (
    ADMIN,
    MONITOR,
    Dashboard,
    bearer,
    dashboard,
    page_post,
)
from tests.fakes import FakePeer, submit_to, v2_producer_of, v2_worker_of

TRACE = "KeyError: 'sku'\nTraceback (most recent call last):\n  File \"h.py\", line 3, in run"


def tasks_of(worker: FakePeer) -> list[taskflow.Task]:
    return [m for m in worker.take() if isinstance(m, taskflow.Task)]


def with_a_dead_and_a_done_task() -> tuple[Dashboard, FakePeer, int, int]:
    """A dashboard whose queue C{mail} has one dead task and one done; its worker."""
    site = dashboard(tasks=100)
    queue = site.queue
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"resize", b"image-1", "mail", key=b"order-1", retries=1)
    submit_to(queue, producer.session, b"send", b"\x00\x01", "mail", key=b"order-2")
    worker = v2_worker_of(queue, credits=2, queues=("mail",))
    dead, done = tasks_of(worker)
    queue.nack(worker.session, dead.task_id, dead.token, TRACE, True)
    queue.ack(worker.session, done.task_id, done.token)
    return site, worker, dead.task_id, done.task_id


def finished(site: Dashboard, query: str = "", token: str = MONITOR) -> Any:
    return site.get(f"/api/finished{query}", token)


def test_the_finished_tasks_are_searched_by_each_field() -> None:
    site, _, dead, done = with_a_dead_and_a_done_task()
    every = finished(site).json()
    assert (every["kept"], every["limit"], every["next"], every["scanned"]) == (2, 100, None, 2)
    assert [(t["id"], t["state"]) for t in every["tasks"]] == [(done, "done"), (dead, "dead")]
    assert every["tasks"][1]["reason"] == "KeyError: 'sku'"
    for query, found in [
        ("?state=dead", [dead]),
        ("?key=order-2", [done]),
        ("?key=order-", [done, dead]),
        ("?type=resize", [dead]),
        ("?queue=mail&state=done", [done]),
        ("?queue=other", []),
        (f"?id={dead}", [dead]),
        ("?limit=1", [done]),
        ("?before=1", [dead]),  # the cursor of the page after the first
        ("?id=&key=", [done, dead]),  # empty fields: not searched
    ]:
        assert [t["id"] for t in finished(site, query).json()["tasks"]] == found, query
    assert finished(site, "?limit=1").json()["next"] == 1


def test_a_bad_search_is_400_and_no_history_says_so() -> None:
    site, *_ = with_a_dead_and_a_done_task()
    for query, words in [
        ("?state=running", "state is one of done, failed, dead, cancelled"),
        ("?limit=0", "limit is a number from 1 to 500"),
        ("?limit=501", "limit is a number from 1 to 500"),
        ("?before=-1", "before is a number from 0 to 9007199254740991"),
        ("?id=x", "a task id is a number"),
        ("?queue=bad%20name", "queue"),
    ]:
        answer = finished(site, query)
        assert answer.status == 400, query
        assert words in answer.json()["error"], query
    off = dashboard().get("/api/finished", MONITOR)
    assert off.status == 400
    assert off.json()["error"] == "no history of finished tasks: [web] task_history is 0"
    assert finished(site, token="").status == 401


def test_a_task_page_has_its_records_payload_and_timeline() -> None:
    site, _, dead, done = with_a_dead_and_a_done_task()
    page = site.get(f"/api/tasks/{dead}", MONITOR).json()
    assert page["found"] == "live" and page["task"]["state"] == "dead"
    assert page["payload"]["text"] == "image-1"
    (record,) = page["history"]
    assert (record["state"], record["reason"], record["worker"]) == ("dead", TRACE, "worker")
    assert record["payload"]["text"] == "image-1"  # read as it failed
    assert [s["event"] for s in record["timeline"]] == ["submitted", "delivered", "dead"]
    gone = site.get(f"/api/tasks/{done}", MONITOR).json()
    assert gone["found"] == "unknown"
    # A DONE's payload is not kept without [web] preview_done; only a live task's block is read.
    assert gone["history"][0]["payload"] is None and "payload" not in gone


def test_the_workers_show_what_they_run_and_for_how_long() -> None:
    site = dashboard(tasks=10)
    queue = site.queue
    submit_to(queue, v2_producer_of(queue).session, b"encode", b"x", "video")
    worker = v2_worker_of(queue, queues=("video",))
    (task,) = tasks_of(worker)
    site.clock.advance(12.5)
    (shown,) = [c for c in site.get("/api/workers", MONITOR).json() if c["role"] == "worker"]
    assert shown["running"] == [
        {"id": task.task_id, "type": "encode", "queue": "video", "for": 12.5}
    ]


def test_retry_then_done_and_delete_a_dead_task() -> None:
    site, worker, dead, _ = with_a_dead_and_a_done_task()
    csrf = site.login(ADMIN)["csrf"]
    answer = site.post(f"/api/tasks/{dead}/retry", page_post(csrf))
    assert (answer.status, answer.json()) == (200, {"replayed": [dead]})
    (again,) = tasks_of(worker)
    assert again.task_id == dead
    site.queue.ack(worker.session, again.task_id, again.token)
    page = site.get(f"/api/tasks/{dead}", MONITOR).json()
    assert [r["state"] for r in page["history"]] == ["done", "dead"]
    assert site.post(f"/api/tasks/{dead}/retry", page_post(csrf)).status == 404
    # Another dies; delete drops it for good.
    submit_to(site.queue, v2_producer_of(site.queue).session, b"t", b"", "mail", retries=1)
    (task,) = tasks_of(worker)
    site.queue.nack(worker.session, task.task_id, task.token, "no", True)
    answer = site.post(f"/api/tasks/{task.task_id}/delete", bearer(ADMIN))
    assert (answer.status, answer.json()) == (200, {"purged": 1})
    assert site.queue.dead_tasks(None, 10)["total"] == 0
    assert site.post(f"/api/tasks/{task.task_id}/delete", bearer(ADMIN)).status == 404


def test_cancel_a_queued_task_but_not_a_running_one() -> None:
    site = dashboard(tasks=10)
    queue = site.queue
    producer = v2_producer_of(queue)
    submit_to(queue, producer.session, b"t", b"", "mail")
    submit_to(queue, producer.session, b"t", b"", "mail")
    worker = v2_worker_of(queue, queues=("mail",))
    (running,) = tasks_of(worker)
    queued = running.task_id + 1
    answer = site.post(f"/api/tasks/{running.task_id}/cancel", bearer(ADMIN))
    assert answer.status == 409 and "a running task is not interrupted" in answer.json()["error"]
    answer = site.post(f"/api/tasks/{queued}/cancel", bearer(ADMIN))
    assert (answer.status, answer.json()) == (
        200,
        {"id": queued, "state": "cancelled", "queue": "mail"},
    )
    assert finished(site, "?state=cancelled").json()["tasks"][0]["id"] == queued
    assert finished(site, "?state=cancelled").json()["tasks"][0]["reason"] == (
        "cancelled from the dashboard"
    )
    assert site.post(f"/api/tasks/{queued}/cancel", bearer(ADMIN)).status == 404


def test_the_task_actions_need_the_admin_role_and_the_csrf_token() -> None:
    site, _, dead, _ = with_a_dead_and_a_done_task()
    monitor = site.login(MONITOR)["csrf"]
    for verb in ("retry", "cancel", "delete"):
        answer = site.post(f"/api/tasks/{dead}/{verb}", page_post(monitor))
        assert answer.status == 403 and "the monitor role reads only" in answer.json()["error"]
    admin = site.login(ADMIN)["csrf"]
    assert site.post(f"/api/tasks/{dead}/retry", {"Origin": "http://evil.example"}).status == 403
    assert site.post(f"/api/tasks/{dead}/retry", page_post("0" * 64)).status == 403
    assert site.get(f"/api/tasks/{dead}/retry", ADMIN).status == 405
    assert site.post(f"/api/tasks/{dead}/undo", page_post(admin)).status == 404
    assert site.queue.dead_tasks(None, 10)["total"] == 1
