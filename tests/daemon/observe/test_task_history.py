"""
The dashboard's history of finished tasks, in-process: a real kernel on a
L{task.Clock} with the history plugged in.  Each bound at its edge (count,
age, payload preview, failure text, steps, the live previews), what a
record says, the search, and the bytes a full history holds.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from attrs import define
from twisted.internet.task import Clock

from quicx.daemon.observe.task_history import (
    MAX_STEPS,
    STEP_TEXT,
    Search,
    TaskHistory,
    payload_view,
    render,
)
from quicx.daemon.queue.core import QueueService
from quicx.protocol import taskflow
from tests.fakes import FakePeer, make_queue, submit_to, v2_producer_of, v2_worker_of

SECOND = taskflow.Backoff(taskflow.BackoffKind.FIXED, 1000, 1000, 0)
"""A retry a second after a failure."""


@define
class Kernel:
    queue: QueueService
    history: TaskHistory
    clock: Clock
    producer: FakePeer

    def submit(self, payload: bytes = b"p", **options: Any) -> int:
        before = self.queue._last_task_id
        submit_to(self.queue, self.producer.session, b"job", payload, "q", **options)
        assert self.queue._last_task_id == before + 1
        return before + 1

    def worker(self, credits: int = 1) -> FakePeer:
        return v2_worker_of(self.queue, credits=credits, queues=("q",))


def kernel(
    count: int = 100, age: float = 3600.0, preview: int = 8, text: int = 64, done: bool = True
) -> Kernel:
    """A kernel with a history; C{done}: with C{[web] preview_done}."""
    clock = Clock()
    clock.advance(1_800_000_000)
    queue = make_queue(clock)
    history = TaskHistory(queue.clock, queue.pool.head, count, age, preview, text, done)
    queue.plug(history=history)
    return Kernel(queue, history, clock, v2_producer_of(queue))


def run(k: Kernel, worker: FakePeer, outcome: str = "done", reason: str = "") -> int:
    """Let C{worker} take one task and end it with C{outcome}; its id."""
    (task,) = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    if outcome == "done":
        k.queue.ack(worker.session, task.task_id, task.token)
    else:
        k.queue.nack(worker.session, task.task_id, task.token, reason, outcome == "dead")
    return int(task.task_id)


def states(k: Kernel) -> list[tuple[int, str]]:
    return [(t["id"], t["state"]) for t in k.history.search(Search(), 0, 1000)["tasks"]]


def test_the_count_bound_keeps_the_newest_at_its_edge() -> None:
    k = kernel(count=3)
    worker = k.worker()
    ids = []
    for _ in range(3):
        k.submit()
        ids.append(run(k, worker))
    assert states(k) == [(i, "done") for i in reversed(ids)]
    k.submit()
    ids.append(run(k, worker))
    assert states(k) == [(i, "done") for i in reversed(ids[1:])]
    assert k.history.search(Search(), 0, 10)["kept"] == 3


def test_the_age_bound_at_its_edge() -> None:
    k = kernel(age=60)
    worker = k.worker()
    k.submit()
    first = run(k, worker)
    k.clock.advance(60)
    assert states(k) == [(first, "done")]  # exactly its age: still kept
    k.clock.advance(0.001)
    assert states(k) == []
    k.submit()
    run(k, worker)
    k.clock.advance(61)
    k.submit()
    last = run(k, worker)
    # Expired as the next one is kept too, not only when read.
    assert [r[0] for r in k.history.ring] == [last]


@pytest.mark.parametrize("size", [7, 8, 9])
def test_the_payload_preview_is_cut_at_its_size(size: int) -> None:
    k = kernel(preview=8)
    worker = k.worker()
    payload = b"abcdefghij"[:size]
    k.submit(payload)
    task_id = run(k, worker)
    (record,) = k.history.of(task_id)
    shown = render(record)["payload"]
    assert shown["text"] == payload[:8].decode()
    assert (shown["size"], shown["shown"], shown["cut"]) == (size, min(size, 8), size > 8)


def test_a_payload_preview_is_hex_unless_it_is_text() -> None:
    assert payload_view(b"\x00\x01\xff", 3)["hex"] == "00 01 ff"
    assert "text" not in payload_view(b"\x00\x01\xff", 3)
    assert payload_view(b"line\n\tnext", 10)["text"] == "line\n\tnext"
    # A character cut in two by the preview: the text before it.
    assert payload_view("ab\N{EURO SIGN}".encode()[:4], 5)["text"] == "ab"


def hears_deliveries(k: Kernel) -> bool:
    return any(getattr(hook, "__self__", None) is k.history for hook in k.queue.hooks.delivered)


@pytest.mark.parametrize(("preview", "done"), [(0, True), (8, False)])
def test_without_preview_done_a_delivery_costs_nothing_and_a_failure_still_shows_it(
    preview: int, done: bool
) -> None:
    k = kernel(preview=preview, done=done)
    assert not hears_deliveries(k)
    worker = k.worker()
    k.submit(b"ran")
    (record,) = k.history.of(run(k, worker))
    assert render(record)["payload"] is None
    # A failure reads it from the block, still live as it fails; a retry keeps it for later.
    k.submit(b"died", retries=1)
    (record,) = k.history.of(run(k, worker, "dead", "E"))
    k.submit(b"retried", retries=1, backoff=SECOND)
    run(k, worker, "failed", "once")
    k.clock.advance(1)
    (retried,) = k.history.of(run(k, worker))
    shown = [render(r)["payload"] for r in (record, retried)]
    if preview:
        assert [p["text"] for p in shown] == ["died", "retried"]
    else:
        assert shown == [None, None]
    assert not k.history._previews


def test_with_preview_done_it_hears_deliveries() -> None:
    assert hears_deliveries(kernel(preview=8, done=True))


@pytest.mark.parametrize(("length", "kept"), [(64, 64), (65, 64)])
def test_a_failures_text_is_cut_at_its_size(length: int, kept: int) -> None:
    k = kernel(text=64)
    worker = k.worker()
    reason = "E" * length
    k.submit(retries=1)
    task_id = run(k, worker, "dead", reason)
    (record,) = k.history.of(task_id)
    shown = render(record)["reason"]
    assert len(shown.encode()) == kept
    assert shown == reason if length == kept else shown.endswith("...")


def test_a_record_tells_the_whole_story() -> None:
    k = kernel()
    worker = k.worker()
    k.submit(b"hello", key=b"order-7", retries=1, backoff=SECOND)
    k.clock.advance(2)
    failed_once = run(k, worker, "failed", "ValueError: first\nTraceback (most recent call last):")
    k.clock.advance(1)
    task_id = run(k, worker, "failed", "ValueError: second")
    assert task_id == failed_once
    (record,) = k.history.of(task_id)
    shown = render(record)
    assert (shown["state"], shown["key"], shown["type"], shown["queue"]) == (
        "dead",
        "order-7",
        "job",
        "q",
    )
    assert shown["attempts"] == 2 and shown["reason"] == "ValueError: second"
    assert shown["worker"] == "worker" and shown["payload"]["text"] == "hello"
    assert [step["event"] for step in shown["timeline"]] == [
        "submitted",
        "retrying",
        "delivered",
        "dead",
    ]
    assert shown["timeline"][1]["text"].startswith("ValueError: first")
    # Replayed, then done: a second record; the first keeps its story.
    k.queue.replay(task_id, None)
    assert run(k, worker) == task_id
    done, dead = k.history.of(task_id)
    assert (done[10], dead[10]) == ("done", "dead")
    assert [step["event"] for step in render(done)["timeline"]][-3:] == [
        "replayed",
        "delivered",
        "done",
    ]


def test_the_steps_kept_are_the_latest_and_cut() -> None:
    k = kernel()
    worker = k.worker()
    k.submit(retries=MAX_STEPS + 1, backoff=SECOND)
    for attempt in range(MAX_STEPS + 1):
        run(k, worker, "failed", f"{attempt}:" + "x" * STEP_TEXT)
        k.clock.advance(1)
    task_id = run(k, worker)
    (record,) = k.history.of(task_id)
    steps = [s for s in render(record)["timeline"] if s["event"] == "retrying"]
    assert len(steps) == MAX_STEPS
    assert steps[0]["text"].startswith("1:") and steps[-1]["text"].startswith(f"{MAX_STEPS}:")
    assert all(len(s["text"].encode()) == STEP_TEXT for s in steps)
    assert not k.history._steps and not k.history._previews


def test_the_live_previews_never_outgrow_the_ring() -> None:
    k = kernel(count=2)
    worker = k.worker(credits=3)
    for _ in range(3):
        k.submit()
    assert len([m for m in worker.take() if isinstance(m, taskflow.Task)]) == 3
    assert len(k.history._previews) == 2


def test_cancelled_withdrawn_and_requeued_tasks() -> None:
    k = kernel()
    task_id = k.submit()
    k.queue.manage.cancel_task(k.queue.task(task_id), "by a test")
    assert states(k) == [(task_id, "cancelled")]
    worker = k.worker()
    requeued = k.submit()
    assert worker.task_ids() == [requeued]
    worker.disconnect()
    assert requeued in k.history._steps and requeued in k.history._previews
    assert run(k, k.worker()) == requeued
    (record,) = k.history.of(requeued)
    assert "requeued" in [step["event"] for step in render(record)["timeline"]]


def test_search_by_each_field_and_page() -> None:
    k = kernel()
    worker = k.worker()
    for n in range(6):
        k.submit(key=f"k{n % 2}-{n}".encode(), retries=1)
        run(k, worker, "done" if n % 3 else "dead", "boom")
    search = k.history.search
    assert search(Search(state="dead"), 0, 10)["matching"] == 2
    assert [t["id"] for t in search(Search(key=b"k1-"), 0, 10)["tasks"]] == [6, 4, 2]
    assert search(Search(task_id=3), 0, 10)["tasks"][0]["key"] == "k0-2"
    assert search(Search(queue="other"), 0, 10)["matching"] == 0
    assert search(Search(task_type=b"job"), 0, 10)["matching"] == 6
    page = search(Search(), 2, 3)
    assert page["matching"] == 6 and [t["id"] for t in page["tasks"]] == [4, 3, 2]
    assert search(Search(), 6, 3)["tasks"] == []


def deep_size(value: object) -> int:
    """The bytes of C{value} and what it holds (shared names and small ints counted too)."""
    if isinstance(value, tuple | list):
        return sys.getsizeof(value) + sum(deep_size(item) for item in value)
    return sys.getsizeof(value)


def test_a_full_history_holds_no_more_than_its_byte_bound() -> None:
    k = kernel(count=50, preview=512, text=4096)
    worker = k.worker()
    for n in range(60):
        k.submit(b"\xff" * 1000, key=b"%064d" % n, retries=MAX_STEPS + 5, backoff=SECOND)
        for _ in range(MAX_STEPS + 5):
            run(k, worker, "failed", "T" * 10_000)
            k.clock.advance(1)
        run(k, worker, "dead", "R" * 10_000)
        k.queue.purge_dead(None)  # the pool's blocks back
    ring = k.history.ring
    assert len(ring) == 50
    largest = max(deep_size(record) for record in ring)
    assert largest <= k.history.record_bytes()
    assert sum(deep_size(record) for record in ring) <= 50 * k.history.record_bytes()
