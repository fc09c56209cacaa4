"""
The dashboard's history of finished tasks, in-process: a real kernel on a
L{task.Clock} with the history plugged in.  Each bound at its edge (count,
age, bytes, payload preview, failure text, steps, the live previews), what
a record says, the search and its cursor, and the bytes a full history
holds beside those it accounts.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from attrs import define
from twisted.internet.task import Clock

from quicx.daemon.config.sections import WebSettings
from quicx.daemon.observe.task_history import (
    BYTES,
    BYTES_OBJECT,
    LIVE_BYTES,
    MAX_STEPS,
    STEP_TEXT,
    Search,
    TaskHistory,
    _steps_bytes,
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
    count: int = 100,
    age: float = 3600.0,
    preview: int = 8,
    text: int = 64,
    done: bool = True,
    budget: int = 8 << 20,
    step: int = 10_000,
) -> Kernel:
    """A kernel with a history; C{done}: with C{[web] preview_done}."""
    clock = Clock()
    clock.advance(1_800_000_000)
    queue = make_queue(clock)
    history = TaskHistory(
        queue.clock, queue.pool.head, count, age, preview, text, done, budget, step
    )
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
    return [(t["id"], t["state"]) for t in k.history.search(Search(), None, 1000)["tasks"]]


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
    assert k.history.search(Search(), None, 10)["kept"] == 3


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

    def ids(search: Search, before: int | None = None, limit: int = 10) -> list[int]:
        return [t["id"] for t in k.history.search(search, before, limit)["tasks"]]

    assert ids(Search(state="dead")) == [4, 1]
    assert ids(Search(key=b"k1-")) == [6, 4, 2]
    assert k.history.search(Search(task_id=3), None, 10)["tasks"][0]["key"] == "k0-2"
    assert ids(Search(task_id=3, state="dead")) == []
    assert ids(Search(queue="other")) == []
    assert ids(Search(task_type=b"job")) == [6, 5, 4, 3, 2, 1]
    # Pages: each says where the next starts (a record's place), the last none.
    page = k.history.search(Search(), None, 4)
    assert [t["id"] for t in page["tasks"]] == [6, 5, 4, 3] and page["next"] == 2
    last = k.history.search(Search(), page["next"], 4)
    assert [t["id"] for t in last["tasks"]] == [2, 1] and last["next"] is None
    full = k.history.search(Search(key=b"k1-"), None, 2)
    assert [t["id"] for t in full["tasks"]] == [6, 4] and full["next"] == 3
    assert ids(Search(key=b"k1-"), full["next"]) == [2]
    assert ids(Search(), 0) == []


@pytest.mark.parametrize("step", [104, 105])
def test_a_search_reads_at_most_its_step_a_call_and_its_cursor_finds_all(step: int) -> None:
    k = kernel(count=1000, preview=0, done=False, step=step)
    worker = k.worker()
    for n in range(210):
        k.submit(key=(b"odd-%d" if n % 10 == 1 else b"even-%d") % n)
        run(k, worker)
    found, calls, before = [], 0, None
    while True:
        answer = k.history.search(Search(key=b"odd-"), before, 50)
        calls += 1
        assert answer["scanned"] <= step
        found += [t["id"] for t in answer["tasks"]]
        if (before := answer["next"]) is None:
            break
    odd = [r[0] for r in k.history.ring if (r[3] or b"").startswith(b"odd-")][::-1]
    assert (
        found == odd and len(odd) == 21 and calls == (3 if step == 104 else 2)
    )  # 210 records: 2 steps of 105
    # A full page stops at its last match; the rest follows.
    page = k.history.search(Search(key=b"odd-"), None, 5)
    assert [t["id"] for t in page["tasks"]] == odd[:5]
    after = k.history.search(Search(key=b"odd-"), page["next"], 5)
    assert [t["id"] for t in after["tasks"]] == odd[5:10]
    # By id: its index answers at once.
    assert k.history.search(Search(task_id=odd[-1]), None, 5)["scanned"] == 1


def deep_size(value: object) -> int:
    """The bytes of C{value} and what it holds (shared names and small ints counted too)."""
    if isinstance(value, tuple | list):
        return sys.getsizeof(value) + sum(deep_size(item) for item in value)
    return sys.getsizeof(value)


def accounted(history: TaskHistory) -> int:
    """The bytes C{history} accounts, counted afresh: its records' and its live parts'."""
    live = [(LIVE_BYTES + len(p) + BYTES_OBJECT) for p in history._previews.values()]
    steps = [LIVE_BYTES + _steps_bytes(s) for s in history._steps.values()]
    return sum(r[BYTES] for r in history.ring) + sum(live) + sum(steps)


def test_a_full_history_holds_no_more_than_it_accounts() -> None:
    k = kernel(count=50, preview=512, text=4096)
    worker = k.worker()
    for n in range(60):
        k.submit(b"\xff" * 1000, key=b"%064d" % n, retries=MAX_STEPS + 5, backoff=SECOND)
        for _ in range(MAX_STEPS + 5):
            run(k, worker, "failed", "T" * 10_000)
            k.clock.advance(1)
        run(k, worker, "dead", "R" * 10_000)
        k.queue.purge_dead(None)  # the pool's blocks back
        assert k.history.used == accounted(k.history)
    ring = k.history.ring
    assert len(ring) == 50
    assert all(deep_size(record) <= record[BYTES] for record in ring)
    held = sum(map(deep_size, ring)) + sys.getsizeof(ring) + sys.getsizeof(k.history._by_id)
    assert held <= k.history.used


def test_the_live_parts_are_accounted_and_let_go() -> None:
    k = kernel(preview=64)
    worker = k.worker(credits=2)
    first, second = k.submit(b"x" * 100, retries=3, backoff=SECOND), k.submit()
    worker.take()
    assert k.history.used == accounted(k.history) > 0
    k.queue.nack(worker.session, first, k.queue.task(first).token, "once", False)
    assert k.history.used == accounted(k.history)
    worker.disconnect()  # second: requeued
    assert k.history.used == accounted(k.history)
    k.queue.manage.cancel_task(k.queue.task(first), "by a test")
    k.queue.manage.cancel_task(k.queue.task(second), "by a test")
    assert not k.history._previews and not k.history._steps
    assert k.history.used == accounted(k.history) == sum(r[BYTES] for r in k.history.ring)


@pytest.mark.parametrize("less", [0, 1])
def test_the_byte_budget_evicts_the_oldest_at_its_edge(less: int) -> None:
    probe = kernel(done=False)
    worker = probe.worker()
    for _ in range(3):
        probe.submit()
        run(probe, worker)
    three = probe.history.used
    k = kernel(done=False, budget=three - less)
    worker = k.worker()
    ids = []
    for _ in range(4):
        k.submit()
        ids.append(run(k, worker))
    assert [i for i, _ in states(k)] == ids[::-1][: 3 - less]
    assert k.history.used <= three - less


def test_past_the_budget_the_live_parts_go_last() -> None:
    k = kernel(preview=1000, done=True, budget=5000)
    worker = k.worker(credits=8)
    k.submit()
    run(k, worker)
    for _ in range(8):
        k.submit(b"x" * 1000)
    worker.take()
    # 8 previews of 1,000 B: the record went first, then the oldest previews.
    assert len(k.history.ring) == 0 and len(k.history._previews) == 4
    assert k.history.used == accounted(k.history) <= 5000


def test_at_the_defaults_a_history_of_failures_stays_within_its_byte_budget() -> None:
    """4 KiB tracebacks, the most the defaults keep, in 3,000 dead tasks: 13 MB, not 8 MiB."""
    web = WebSettings()
    k = kernel(
        web.task_history,
        web.task_history_age,
        web.payload_preview,
        web.failure_text,
        web.preview_done,
        web.task_history_bytes,
    )
    worker = k.worker()
    for _ in range(3000):
        k.submit(b"\xff" * 1000, retries=1)
        run(k, worker, "dead", "T" * 10_000)
        k.queue.purge_dead(None)
    kept = k.history.ring
    assert 1000 < len(kept) < 3000
    assert sum(deep_size(record) for record in kept) <= k.history.used <= 8 << 20


def test_a_replayed_tasks_records_leave_the_index_oldest_first() -> None:
    k = kernel(count=3)
    worker = k.worker()
    k.submit(retries=1)
    task_id = run(k, worker, "dead", "E")
    k.queue.replay(task_id, None)
    assert run(k, worker) == task_id
    assert [r[10] for r in k.history.of(task_id)] == ["done", "dead"]
    k.submit()
    run(k, worker)  # 3 kept
    k.submit()
    run(k, worker)  # its death goes
    assert [r[10] for r in k.history.of(task_id)] == ["done"]
    k.submit()
    run(k, worker)
    assert k.history.of(task_id) == [] and len(k.history._by_id) == 3
