"""
Black-box interop tests of version 2's part 2 (docs/protocol.md, "Version 2:
retries, dead letters, leases and schedules"): delayed SUBMITs, retries and
RETRYING, fenced outcomes (ACK, NACK, TOUCH and ERROR 0x08), the dead-letter
set (DEAD, REPLAY, DEAD_PURGE) and schedules (SCHEDULES, SCHEDULE,
UNSCHEDULE).

Raw sockets and C{struct} alone (L{tests.interop.raw}), like the rest of the
suite: nothing from the C{quicx} package is imported.  One daemon serves
most of the module (each test has queues of its own); settings that act on
every queue, and declared schedules, have daemons of their own.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    ACK,
    BACKOFF,
    CANCEL,
    CANCELLED,
    DEAD,
    DEAD_PURGE,
    DELAY,
    DONE,
    FAILED,
    INFO,
    INSPECT,
    KEY,
    LEASE,
    NACK,
    QUEUE,
    READY,
    REPLAY,
    RETRIES,
    RETRY_COUNTS,
    RETRYING,
    RUN_AT,
    SCHEDULE,
    SCHEDULES,
    TASK,
    TOKEN,
    TOUCH,
    UNSCHEDULE,
    WAIT,
    Wire,
    ack,
    frame,
    nack,
    name,
    option,
    peek,
    ready,
    submit,
    submit_v1,
    task_id_frame,
    token_of,
    touch,
)
from tests.interop.test_v2_contract import connections, id_bytes, queue_named
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

SETTINGS = """\
[tasks]
max_delay = 3600
[queue leased]
timeout = 1
[queue long-lease]
timeout = 30
"""
"""The shared daemon: delays up to an hour, and two queues with leases."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("lifecycle"), SETTINGS) as daemon:
        yield daemon


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


@pytest.fixture
def admin(shared: DaemonProcess, wires: Connect) -> Wire:
    """A version-2 connection to the shared daemon's control socket: an admin."""
    return wires(str(shared.control_path))


# -- the layouts of part 2, packed by hand from the page ----------------------


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def delay(ms: int) -> bytes:
    return option(DELAY, u32(ms))


def run_at(ms: int) -> bytes:
    return option(RUN_AT, struct.pack(">Q", ms))


def retries(n: int) -> bytes:
    return option(RETRIES, struct.pack(">H", n))


def backoff(kind: int, base_ms: int, cap_ms: int, jitter: int) -> bytes:
    """The backoff option: C{[kind u8][base_ms u32][cap_ms u32][jitter u8]}."""
    return option(BACKOFF, struct.pack(">BIIB", kind, base_ms, cap_ms, jitter))


FIXED_100MS = backoff(0, 100, 100, 0)
"""A fixed backoff of 100 ms, no jitter."""


def dead(limit: int, queue: bytes = b"") -> bytes:
    """DEAD C{[limit u16][name_len u8][name]}; no queue: every queue."""
    return frame(DEAD, struct.pack(">H", limit) + name(queue))


def replay(task_id: int, queue: bytes = b"") -> bytes:
    return frame(REPLAY, u32(task_id) + name(queue))


def dead_purge(queue: bytes = b"") -> bytes:
    return frame(DEAD_PURGE, name(queue))


# SCHEDULE's field tags.
CRON, EVERY, TIMEZONE, TYPE, SQUEUE, SPRIORITY, MISSED = range(1, 8)


def schedule(schedule_name: bytes, *fields: bytes, payload: bytes = b"") -> bytes:
    """SCHEDULE C{[name_len u8][name][fields_len u16][fields][payload]}."""
    body = b"".join(fields)
    return frame(SCHEDULE, name(schedule_name) + struct.pack(">H", len(body)) + body + payload)


def unschedule(schedule_name: bytes) -> bytes:
    return frame(UNSCHEDULE, name(schedule_name))


def every(seconds: int, task_type: bytes = b"tick") -> tuple[bytes, bytes]:
    """The fields of a schedule on an interval, of C{task_type}."""
    return option(EVERY, u32(seconds)), option(TYPE, task_type)


def now_ms() -> int:
    return int(time.time() * 1000)


def retry_counts(task: dict[str, Any]) -> tuple[int, int]:
    """A TASK's C{[failures u16][retries u16]} context item."""
    failures, allowed = struct.unpack(">HH", task["context"][RETRY_COUNTS])
    return failures, allowed


def lease_of(task: dict[str, Any]) -> int:
    (lease,) = struct.unpack(">I", task["context"][LEASE])
    return int(lease)


def retrying(producer: Wire) -> tuple[int, int, int, bytes]:
    """Read a RETRYING C{[task_id u32][attempt u16][due_ms u64][reason]}."""
    kind, body = producer.read()
    assert kind == RETRYING, (kind, body)
    task_id, attempt, due_ms = struct.unpack_from(">IHQ", body)
    return task_id, attempt, due_ms, body[14:]


def acknowledge(worker: Wire, producer: Wire, task: dict[str, Any]) -> None:
    """The worker ACKs its delivery of C{task}; the producer hears DONE."""
    worker.send(ack(task["id"], token_of(task)))
    assert producer.read() == (DONE, id_bytes(task["id"]))


def kill(worker: Wire, producer: Wire, task: dict[str, Any], reason: bytes) -> None:
    """The worker NACKs C{task} permanent; the producer hears FAILED with the reason."""
    worker.send(nack(task["id"], token_of(task), reason, flags=0x01))
    assert producer.read() == (FAILED, id_bytes(task["id"]) + reason)


def dead_ids(peer: Wire, queue: bytes) -> list[int]:
    return [t["id"] for t in peer.info(dead(1000, queue))["tasks"]]


def cancel(producer: Wire, task_id: int) -> None:
    """CANCEL a task not running: its INFO answer and its CANCELLED outcome, in either order."""
    producer.send(task_id_frame(CANCEL, task_id))
    got = sorted([producer.read(), producer.read()])
    assert got[0] == (CANCELLED, id_bytes(task_id))
    assert got[1][0] == INFO and json.loads(got[1][1])["state"] == "cancelled"


# -- TASK's context -----------------------------------------------------------


def test_every_version_2_task_carries_a_token_and_a_lease(connect: Connect) -> None:
    producer, worker, leased = connect(), connect(), connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"ctx")))
    task = worker.task(ready(1, b"ctx"))
    assert task["id"] == first
    assert (len(task["context"][TOKEN]), lease_of(task)) == (8, 0)  # no timeout: no limit
    assert RETRY_COUNTS not in task["context"]  # it may not retry
    acknowledge(worker, producer, task)
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"long-lease")))
    other = leased.task(ready(1, b"long-lease"))
    assert other["id"] == second
    assert lease_of(other) == 30_000  # the queue's timeout, in milliseconds
    assert token_of(other) > token_of(task)  # tokens grow with every delivery
    acknowledge(leased, producer, other)


# -- delayed SUBMITs ----------------------------------------------------------


def test_a_delayed_submit_is_not_dispatched_before_its_time(connect: Connect) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"delayed")) == (WAIT, b"")
    started = time.monotonic()
    task_id, flags = producer.ok(submit(b"t", b"later", option(QUEUE, b"delayed"), delay(200)))
    assert flags == 0
    task = worker.task()
    waited = time.monotonic() - started
    assert 0.199 <= waited < 2.0, waited
    assert (task["id"], task["attempt"], task["payload"]) == (task_id, 1, b"later")
    acknowledge(worker, producer, task)


def test_a_submit_at_a_time_runs_then_or_at_once_if_past(connect: Connect) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"run-at")) == (WAIT, b"")
    due = now_ms() + 300
    soon, _ = producer.ok(submit(b"t", b"soon", option(QUEUE, b"run-at"), run_at(due)))
    task = worker.task()
    assert now_ms() >= due - 1, "dispatched before its time"
    assert task["id"] == soon
    acknowledge(worker, producer, task)
    started = time.monotonic()
    past, _ = producer.ok(
        submit(b"t", b"past", option(QUEUE, b"run-at"), run_at(now_ms() - 60_000))
    )
    assert worker.task()["id"] == past
    assert time.monotonic() - started < 1.0


def test_a_delayed_task_is_not_queued_and_can_be_cancelled(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"delayed-long"), delay(60_000)))
    queue = queue_named(producer, "delayed-long")
    assert (queue["depth"], queue["delayed"]) == (0, 1)
    assert producer.info(peek(10, b"delayed-long")) == []
    inspected = producer.info(task_id_frame(INSPECT, task_id))
    assert (inspected["id"], inspected["state"], inspected["failures"]) == (task_id, "delayed", 0)
    assert abs(inspected["due"] - (time.time() + 60)) < 5
    (why,) = [r for r in inspected["why"] if r["reason"] == "delayed"]
    assert abs(why["until"] - inspected["due"]) < 1
    assert worker.ask(ready(1, b"delayed-long")) == (WAIT, b"")
    assert worker.silent_for(0.3)
    cancel(producer, task_id)
    assert queue_named(producer, "delayed-long")["delayed"] == 0
    assert worker.silent_for(0.2)


def test_delays_past_max_delay_are_error_0x02(connect: Connect) -> None:
    producer = connect()
    for too_far in (delay(3_600_001), run_at(now_ms() + 3_610_000)):
        code, message = producer.error(submit(b"t", b"x", option(QUEUE, b"too-far"), too_far))
        assert code == 2 and message
        assert producer.alive()
    at_most, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"too-far"), delay(3_600_000)))
    cancel(producer, at_most)


# -- retries, RETRYING and the final outcome ----------------------------------


def test_retries_with_a_fixed_backoff_then_done(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(
        submit(b"t", b"flaky", option(QUEUE, b"retry"), retries(2), FIXED_100MS)
    )
    task = worker.task(ready(1, b"retry"))
    assert (task["id"], task["attempt"], retry_counts(task)) == (task_id, 1, (0, 2))
    for failure in (1, 2):
        reason = b"busy %d" % failure
        sent, before = time.monotonic(), now_ms()
        worker.send(nack(task_id, token_of(task), reason))
        got_id, attempt, due_ms, got_reason = retrying(producer)
        assert (got_id, attempt, got_reason) == (task_id, failure, reason)
        assert before + 100 - 1 <= due_ms <= now_ms() + 100 + 1
        again = worker.task()
        assert time.monotonic() - sent >= 0.099  # it waited its backoff
        assert (again["id"], again["attempt"]) == (task_id, failure + 1)
        assert retry_counts(again) == (failure, 2)
        assert token_of(again) > token_of(task)
        task = again
    acknowledge(worker, producer, task)
    assert producer.silent_for(0.3)  # the final outcome comes once
    assert dead_ids(producer, b"retry") == []


def test_out_of_retries_fails_with_the_last_reason_and_is_dead(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(
        submit(b"job", b"payload", option(QUEUE, b"exhaust"), retries(1), FIXED_100MS)
    )
    task = worker.task(ready(1, b"exhaust"))
    worker.send(nack(task_id, token_of(task), b"first"))
    assert retrying(producer)[:2] == (task_id, 1)
    task = worker.task()
    assert retry_counts(task) == (1, 1)
    worker.send(nack(task_id, token_of(task), b"second"))
    assert producer.read() == (FAILED, id_bytes(task_id) + b"second")
    listed = producer.info(dead(10, b"exhaust"))
    assert listed["total"] == 1
    (entry,) = listed["tasks"]
    assert (entry["id"], entry["queue"], entry["type"]) == (task_id, "exhaust", "job")
    assert (entry["failures"], entry["reason"], entry["size"]) == (2, "second", 7)
    assert entry["priority"] == 0 and "worker" in entry
    assert abs(entry["died_at"] - time.time()) < 10
    assert queue_named(producer, "exhaust")["dead"] == 1


def test_a_permanent_nack_fails_at_once_and_the_task_is_dead(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"\x00bad\xff", option(QUEUE, b"perm"), retries(3)))
    task = worker.task(ready(1, b"perm"))
    kill(worker, producer, task, "bad input ✗".encode())  # no RETRYING first
    (entry,) = producer.info(dead(10, b"perm"))["tasks"]
    assert (entry["id"], entry["failures"], entry["reason"]) == (task_id, 1, "bad input ✗")
    inspected = producer.info(task_id_frame(INSPECT, task_id))
    assert (inspected["id"], inspected["state"]) == (task_id, "dead")
    assert base64.b64decode(inspected["payload_base64"]) == b"\x00bad\xff"
    assert worker.silent_for(0.3)  # not retried


def test_a_task_without_retries_fails_as_in_version_1_and_is_not_kept(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"no-retries")))
    task = worker.task(ready(1, b"no-retries"))
    worker.send(nack(task_id, token_of(task), b"nope"))
    assert producer.read() == (FAILED, id_bytes(task_id) + b"nope")
    assert producer.info(dead(10, b"no-retries")) == {"total": 0, "tasks": []}
    assert producer.error(task_id_frame(INSPECT, task_id))[0] == 5


# -- the dead-letter set: DEAD, REPLAY, DEAD_PURGE ----------------------------


def make_dead(producer: Wire, worker: Wire, queue: bytes, payload: bytes) -> int:
    """Submit a task with a retry to C{queue} and have C{worker} (subscribed) kill it."""
    task_id, _ = producer.ok(submit(b"t", payload, option(QUEUE, queue), retries(1)))
    task = worker.task()
    assert task["id"] == task_id
    kill(worker, producer, task, b"dead: " + payload)
    return task_id


def test_dead_lists_the_oldest_first_by_queue_or_all(connect: Connect) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"dead-a", b"dead-b")) == (WAIT, b"")
    a1 = make_dead(producer, worker, b"dead-a", b"a1")
    b1 = make_dead(producer, worker, b"dead-b", b"b1")
    a2 = make_dead(producer, worker, b"dead-a", b"a2")
    assert producer.info(dead(1, b"dead-a")) == {
        "total": 2,
        "tasks": [producer.info(dead(10, b"dead-a"))["tasks"][0]],
    }
    assert dead_ids(producer, b"dead-a") == [a1, a2]
    everywhere = dead_ids(producer, b"")  # name_len 0: every queue
    assert [t for t in everywhere if t in (a1, b1, a2)] == [a1, b1, a2]


def test_replay_brings_a_dead_task_back_as_a_task(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"replay")) == (WAIT, b"")
    task_id = make_dead(producer, worker, b"replay", b"again")
    assert admin.info(replay(task_id)) == {"replayed": [task_id]}
    task = worker.task()
    assert (task["id"], task["payload"], task["queue"]) == (task_id, b"again", b"replay")
    assert retry_counts(task) == (0, 1)  # failures reset
    assert dead_ids(producer, b"replay") == []
    worker.send(ack(task_id, token_of(task)))
    assert worker.alive()
    assert admin.error(replay(task_id))[0] == 5  # not dead any more
    assert admin.error(replay(999_999))[0] == 5  # unknown
    queued, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"replay-live")))
    assert admin.error(replay(queued))[0] == 5  # live, not dead
    assert admin.alive()


def test_replay_of_every_dead_task_of_a_queue(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"replay-all")) == (WAIT, b"")
    killed = [make_dead(producer, worker, b"replay-all", b"%d" % n) for n in range(2)]
    answer = admin.info(replay(0, b"replay-all"))
    assert sorted(answer["replayed"]) == killed
    again = [worker.task()]
    worker.send(ack(again[0]["id"], token_of(again[0])))
    again.append(worker.task())
    assert sorted(t["id"] for t in again) == killed
    worker.send(ack(again[1]["id"], token_of(again[1])))
    assert dead_ids(producer, b"replay-all") == []


def test_dead_purge_empties_the_set(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"purge-dead", b"purge-other")) == (WAIT, b"")
    make_dead(producer, worker, b"purge-dead", b"1")
    make_dead(producer, worker, b"purge-dead", b"2")
    other = make_dead(producer, worker, b"purge-other", b"3")
    assert admin.info(dead_purge(b"purge-dead")) == {"purged": 2}
    assert producer.info(dead(10, b"purge-dead")) == {"total": 0, "tasks": []}
    assert queue_named(producer, "purge-dead")["dead"] == 0
    assert dead_ids(producer, b"purge-other") == [other]  # another queue's are kept
    assert admin.info(dead_purge())["purged"] >= 1  # name_len 0: every queue
    assert producer.info(dead(1000)) == {"total": 0, "tasks": []}
    assert admin.error(task_id_frame(INSPECT, other))[0] == 5


# -- fenced outcomes: ACK, NACK, TOUCH ----------------------------------------


def test_a_stale_token_is_error_0x08_and_never_applied(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"stale")))
    task = worker.task(ready(1, b"stale"))
    token = token_of(task)
    for data in (
        ack(task_id, token + 1),
        nack(task_id, token + 1, b"no"),
        nack(task_id, token + 1, b"no", flags=0x01),
        touch(task_id, token + 1, 10),
    ):
        code, message = worker.error(data)
        assert code == 8
        assert str(task_id) in message and str(token + 1) in message  # names the task and token
        assert worker.alive()
    assert producer.silent_for(0.3)  # none applied
    acknowledge(worker, producer, task)


def test_a_second_report_of_a_delivery_is_error_0x02(connect: Connect) -> None:
    # "A worker that reports a delivery twice holds no such task the second time"
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"stale-finished")))
    task = worker.task(ready(1, b"stale-finished"))
    acknowledge(worker, producer, task)
    for data in (
        ack(task_id, token_of(task)),
        nack(task_id, token_of(task), b"late"),
        touch(task_id, token_of(task), 10),
    ):
        assert worker.error(data)[0] == 2
        assert worker.alive()
    assert producer.silent_for(0.2)


def test_outcomes_of_tasks_never_sent_are_error_0x02(connect: Connect) -> None:
    producer, holder, other = connect(), connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"never-sent")))
    task = holder.task(ready(1, b"never-sent"))
    assert other.ask(ready(1, b"never-sent-2")) == (WAIT, b"")
    token = token_of(task)
    for data in (
        ack(task_id, token),  # another worker's task, its real token
        nack(task_id, token, b"x"),
        touch(task_id, token, 10),
        ack(999_999, 1),  # no such task
        nack(999_999, 1),
        touch(999_999, 1, 10),
    ):
        assert other.error(data)[0] == 2
        assert other.alive()
    producer_only = connect()
    assert producer_only.ok(submit(b"t", b"y", option(QUEUE, b"never-sent-3")))[1] == 0
    assert producer_only.error(ack(task_id, token))[0] == 2
    assert producer.silent_for(0.2)
    acknowledge(holder, producer, task)


def test_done_and_failed_from_a_version_2_worker_are_error_0x02(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"unfenced")))
    task = worker.task(ready(1, b"unfenced"))
    assert worker.error(task_id_frame(DONE, task_id))[0] == 2
    assert worker.error(frame(FAILED, id_bytes(task_id) + b"why"))[0] == 2
    assert worker.alive()
    assert producer.silent_for(0.2)
    acknowledge(worker, producer, task)  # it still held the task


def test_touch_is_unanswered_and_extends_the_lease(connect: Connect) -> None:
    producer, holder, spare = connect(), connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"leased")))
    task = holder.task(ready(1, b"leased"))
    assert lease_of(task) == 1000
    holder.send(touch(task_id, token_of(task), 5))
    assert holder.alive()  # the PONG is the first thing back: no answer to TOUCH
    assert spare.ask(ready(1, b"leased")) == (WAIT, b"")
    assert spare.silent_for(1.8)  # the one-second lease would have run out
    holder.send(touch(task_id, token_of(task), 0xFFFFFFFF))  # past max_lease: cut, not refused
    assert holder.alive()
    acknowledge(holder, producer, task)
    # Without a timeout there is no lease: TOUCH is accepted and changes nothing.
    unleased, _ = producer.ok(submit(b"t", b"y", option(QUEUE, b"unleased")))
    task = holder.task(ready(1, b"unleased"))
    assert (task["id"], lease_of(task)) == (unleased, 0)
    holder.send(touch(unleased, token_of(task), 30))
    assert holder.alive()
    acknowledge(holder, producer, task)


def test_a_lease_that_runs_out_makes_the_old_token_stale(connect: Connect) -> None:
    producer, slow, spare = connect(), connect(), connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"leased")))
    lost = slow.task(ready(1, b"leased"))
    assert spare.ask(ready(1, b"leased")) == (WAIT, b"")
    again = spare.task()  # taken back from the slow worker past its one-second lease
    assert (again["id"], again["attempt"]) == (first, 2)
    assert token_of(again) > token_of(lost)
    acknowledge(spare, producer, again)
    # Taken back, and finished by another: the slow worker's ACK is stale.
    code, message = slow.error(ack(first, token_of(lost)))
    assert code == 8 and str(token_of(lost)) in message
    assert producer.silent_for(0.2)  # the outcome came once
    # A stale ACK gives the slow worker its credit back: it gets the next task.
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"leased")))
    task = slow.task()
    assert task["id"] == second
    acknowledge(slow, producer, task)


# -- bad input ----------------------------------------------------------------

BAD_WORKER_INPUT = [
    ("ACK of 11 bytes", frame(ACK, bytes(11))),
    ("ACK of 13 bytes", frame(ACK, bytes(13))),
    ("ACK of task 0", ack(0, 1)),
    ("NACK without flags", frame(NACK, bytes(12))),
    ("NACK of task 0", nack(0, 1)),
    ("NACK with flag 0x02", nack(1, 1, b"", flags=0x02)),
    ("NACK with flag 0x80", nack(1, 1, b"why", flags=0x81)),
    ("NACK with a reason not UTF-8", nack(1, 1, b"\xff")),
    ("TOUCH of 15 bytes", frame(TOUCH, bytes(15))),
    ("TOUCH of 17 bytes", frame(TOUCH, bytes(17))),
    ("TOUCH of task 0", touch(0, 1, 10)),
    ("TOUCH of 0 seconds", touch(1, 1, 0)),
]
"""Malformed ACK, NACK and TOUCH: each ERROR 0x02, sent by a worker holding a task."""


def test_every_malformed_outcome_is_error_0x02_and_the_task_stays_held(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"bad-outcomes")))
    task = worker.task(ready(1, b"bad-outcomes"))
    for what, data in BAD_WORKER_INPUT:
        assert worker.error(data)[0] == 2, what
        assert worker.alive(), what
    # The right task and token in a malformed frame are refused as well.
    right = struct.pack(">IQ", task_id, token_of(task))
    for what, data in [
        ("its ACK with a byte more", frame(ACK, right + b"\x00")),
        ("its NACK with an unknown flag", frame(NACK, right + b"\x02")),
        ("its NACK with a reason not UTF-8", frame(NACK, right + b"\x00\xc3(")),
        ("its TOUCH cut short", frame(TOUCH, right + b"\x00\x00\x0a")),
    ]:
        assert worker.error(data)[0] == 2, what
    assert producer.silent_for(0.2)
    acknowledge(worker, producer, task)


BAD_INPUT = [
    ("SUBMIT with a delay and a run-at", submit(b"t", b"x", delay(10), run_at(now_ms()))),
    ("SUBMIT with a delay of 3 bytes", submit(b"t", b"x", option(DELAY, bytes(3)))),
    ("SUBMIT with a delay of 8 bytes", submit(b"t", b"x", option(DELAY, bytes(8)))),
    ("SUBMIT with a run-at of 4 bytes", submit(b"t", b"x", option(RUN_AT, bytes(4)))),
    ("SUBMIT with retries of 1 byte", submit(b"t", b"x", option(RETRIES, b"\x01"))),
    ("SUBMIT with retries of 4 bytes", submit(b"t", b"x", option(RETRIES, bytes(4)))),
    ("SUBMIT with a backoff of 9 bytes", submit(b"t", b"x", option(BACKOFF, bytes(9)))),
    ("SUBMIT with a backoff of kind 2", submit(b"t", b"x", backoff(2, 1, 2, 0))),
    ("SUBMIT with a backoff base past its cap", submit(b"t", b"x", backoff(1, 1001, 1000, 0))),
    ("SUBMIT with a backoff jitter of 101", submit(b"t", b"x", backoff(0, 1, 2, 101))),
    ("SUBMIT with a delay twice", submit(b"t", b"x", delay(1), delay(1))),
    ("SUBMIT with an option 0x09", submit(b"t", b"x", option(0x09, b"?"))),
    ("DEAD of 1 byte", frame(DEAD, b"\x00")),
    ("DEAD of 0 tasks", dead(0, b"q")),
    ("DEAD of 1001 tasks", dead(1001)),
    ("DEAD with no queue length", frame(DEAD, b"\x00\x01")),
    ("DEAD with a bad queue name", dead(1, b"a b")),
    ("DEAD with a queue cut short", frame(DEAD, b"\x00\x01\x05abc")),
    ("DEAD with trailing bytes", frame(DEAD, b"\x00\x01\x00X")),
    ("SCHEDULES with a payload", frame(SCHEDULES, b"\x00")),
    ("RETRYING from a client", frame(RETRYING, struct.pack(">IHQ", 1, 1, 0))),
]
"""Malformed messages any connection may send: each ERROR 0x02."""


def test_every_bad_input_gets_error_0x02_and_the_connection_stays_usable(
    connect: Connect,
) -> None:
    for what, data in BAD_INPUT:
        peer = connect()
        assert peer.alive()
        code, _ = peer.error(data)
        assert code == 2, what
        assert peer.alive(), what
        assert peer.ok(submit(b"t", b"after", option(QUEUE, b"bad-input-after")))[1] == 0, what
    assert queue_named(connect(), "bad-input-after")["depth"] == len(BAD_INPUT)


def fields(*items: bytes) -> bytes:
    """A SCHEDULE's body without its name: C{[fields_len u16][fields]}."""
    body = b"".join(items)
    return struct.pack(">H", len(body)) + body


INTERVAL = option(EVERY, u32(60))
TICK = option(TYPE, b"tick")


def bad_schedule(*items: bytes) -> bytes:
    """A SCHEDULE named C{s}, of C{items}."""
    return schedule(b"s", *items)


def cron(expression: bytes) -> bytes:
    return option(CRON, expression)


BAD_ADMIN_INPUT = [
    ("REPLAY of 3 bytes", frame(REPLAY, b"\x00\x00\x01")),
    ("REPLAY with no queue length", frame(REPLAY, u32(1))),
    ("REPLAY naming a task and a queue", replay(1, b"q")),  # a task: queue name empty
    ("REPLAY with a bad queue name", replay(0, b"a/b")),
    ("REPLAY with trailing bytes", frame(REPLAY, u32(0) + b"\x00X")),
    ("DEAD_PURGE of 0 bytes", frame(DEAD_PURGE)),
    ("DEAD_PURGE with a bad queue name", dead_purge(b"no way")),
    ("DEAD_PURGE with a queue cut short", frame(DEAD_PURGE, b"\x05ab")),
    ("DEAD_PURGE with trailing bytes", frame(DEAD_PURGE, b"\x01qX")),
    ("SCHEDULE of 0 bytes", frame(SCHEDULE)),
    ("SCHEDULE with an empty name", frame(SCHEDULE, b"\x00" + fields(INTERVAL, TICK))),
    ("SCHEDULE with a bad name", schedule(b"a b", INTERVAL, TICK)),
    ("SCHEDULE with no fields length", frame(SCHEDULE, name(b"s") + b"\x00")),
    ("SCHEDULE with fields past the payload", frame(SCHEDULE, name(b"s") + b"\x00\x09" + TICK)),
    ("SCHEDULE with a field cut short", frame(SCHEDULE, name(b"s") + fields(b"\x04\x05t"))),
    ("SCHEDULE with a cron and an interval", bad_schedule(cron(b"* * * * *"), INTERVAL, TICK)),
    ("SCHEDULE with neither cron nor interval", bad_schedule(TICK)),
    ("SCHEDULE with an empty cron", bad_schedule(cron(b""), TICK)),
    ("SCHEDULE with an empty cron and an interval", bad_schedule(cron(b""), INTERVAL, TICK)),
    ("SCHEDULE with a cron not UTF-8", bad_schedule(cron(b"* \xff"), TICK)),
    ("SCHEDULE with an interval of 0", bad_schedule(option(EVERY, u32(0)), TICK)),
    ("SCHEDULE with an interval of 2 bytes", bad_schedule(option(EVERY, b"\x00\x3c"), TICK)),
    ("SCHEDULE without a type", bad_schedule(INTERVAL)),
    ("SCHEDULE with an empty type", bad_schedule(INTERVAL, option(TYPE, b""))),
    ("SCHEDULE with a bad queue", bad_schedule(INTERVAL, TICK, option(SQUEUE, b"a b"))),
    ("SCHEDULE with a 2-byte priority", bad_schedule(INTERVAL, TICK, option(SPRIORITY, b"\0\1"))),
    ("SCHEDULE with missed policy 3", bad_schedule(INTERVAL, TICK, option(MISSED, b"\3\0\1"))),
    ("SCHEDULE with a 2-byte missed field", bad_schedule(INTERVAL, TICK, option(MISSED, b"\1\0"))),
    ("SCHEDULE with a field 0x08", bad_schedule(INTERVAL, TICK, option(0x08, b"?"))),
    ("SCHEDULE with a type twice", bad_schedule(INTERVAL, TICK, TICK)),
    ("SCHEDULE with a bad cron expression", bad_schedule(cron(b"not a cron"), TICK)),
    ("SCHEDULE with 6 cron fields", bad_schedule(cron(b"0 * * * * *"), TICK)),
    ("SCHEDULE with minute 60", bad_schedule(cron(b"60 * * * *"), TICK)),
    ("SCHEDULE in an unknown zone", bad_schedule(INTERVAL, TICK, option(TIMEZONE, b"Mars/Base"))),
    ("UNSCHEDULE of 0 bytes", frame(UNSCHEDULE)),
    ("UNSCHEDULE with an empty name", unschedule(b"")),
    ("UNSCHEDULE with a bad name", unschedule(b"s/t")),
    ("UNSCHEDULE with trailing bytes", frame(UNSCHEDULE, name(b"s") + b"\x00")),
]
"""Malformed or impossible admin messages: each ERROR 0x02, even to an admin."""


def test_every_bad_admin_input_gets_error_0x02(connect: Connect, admin: Wire) -> None:
    for what, data in BAD_ADMIN_INPUT:
        code, message = admin.error(data)
        assert code == 2, what
        assert message, what  # with the reason
        assert admin.alive(), what
    listed = [s["name"] for s in connect().info(frame(SCHEDULES))]
    assert "s" not in listed  # none was added


@pytest.mark.parametrize(
    "message_type",
    [ACK, NACK, TOUCH, RETRYING, DEAD, REPLAY, DEAD_PURGE, SCHEDULES, SCHEDULE, UNSCHEDULE],
)
def test_part_2_types_in_a_version_1_frame_are_unknown(connect: Connect, message_type: int) -> None:
    peer = connect(1)
    assert peer.ok_v1(submit_v1(b"t", b"v1")) > 0  # the connection speaks version 1
    assert peer.error(frame(message_type, bytes(13), version=1))[0] == 2
    assert peer.alive()
    worker = connect(1)
    kind, body = worker.ask(frame(READY, version=1))
    assert kind == TASK and body.endswith(b"\x01tv1")
    worker.send(frame(DONE, body[:4], version=1))  # a version-1 worker is not fenced
    assert peer.read() == (DONE, body[:4])


# -- the admin role -----------------------------------------------------------


def test_replay_dead_purge_schedule_and_unschedule_need_the_admin_role(
    connect: Connect, admin: Wire
) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"not-admin-dead")) == (WAIT, b"")
    task_id = make_dead(producer, worker, b"not-admin-dead", b"x")
    for data in (
        replay(task_id),
        replay(0, b"not-admin-dead"),
        replay(0),
        dead_purge(b"not-admin-dead"),
        dead_purge(),
        schedule(b"not-admin", *every(60)),
        unschedule(b"not-admin"),
    ):
        assert producer.error(data)[0] == 6
        assert producer.alive()
    assert dead_ids(producer, b"not-admin-dead") == [task_id]  # nothing replayed or purged
    assert "not-admin" not in [s["name"] for s in producer.info(frame(SCHEDULES))]
    # DEAD and SCHEDULES are for any connection.
    assert dead_ids(worker, b"not-admin-dead") == [task_id]
    assert isinstance(worker.info(frame(SCHEDULES)), list)
    assert admin.info(dead_purge(b"not-admin-dead")) == {"purged": 1}


# -- schedules ----------------------------------------------------------------


def test_schedule_schedules_and_unschedule(connect: Connect, admin: Wire) -> None:
    monitor = connect()
    added = admin.info(
        schedule(
            b"hourly",
            *every(3600),
            option(SQUEUE, b"sched-q"),
            option(SPRIORITY, b"\x04"),
            payload=b"{}",
        )
    )
    expected = {"name": "hourly", "every": 3600, "timezone": "UTC", "type": "tick"}
    expected |= {"queue": "sched-q", "priority": 4, "missed": "once", "source": "runtime"}
    expected |= {"last_fire": None, "fired": 0}
    assert {key: added.get(key) for key in expected} == expected
    assert "catch_up" in added and added.get("cron") is None
    assert time.time() < added["next_fire"] <= time.time() + 3600 + 5
    listed = monitor.info(frame(SCHEDULES))
    names = [s["name"] for s in listed]
    assert names == sorted(names)
    (entry,) = [s for s in listed if s["name"] == "hourly"]
    assert entry == added
    paris = cron(b"*/5 * * * *"), option(TIMEZONE, b"Europe/Paris"), option(TYPE, b"t")
    by_cron = admin.info(schedule(b"a-cron", *paris))
    assert (by_cron["cron"], by_cron["timezone"], by_cron.get("every")) == (
        "*/5 * * * *",
        "Europe/Paris",
        None,
    )
    # The same name again replaces it.
    assert admin.info(schedule(b"hourly", *every(60)))["every"] == 60
    (entry,) = [s for s in monitor.info(frame(SCHEDULES)) if s["name"] == "hourly"]
    assert entry["every"] == 60
    assert admin.info(unschedule(b"hourly")) == {"name": "hourly", "removed": True}
    assert admin.info(unschedule(b"a-cron")) == {"name": "a-cron", "removed": True}
    listed = [s["name"] for s in monitor.info(frame(SCHEDULES))]
    assert "hourly" not in listed and "a-cron" not in listed
    assert admin.error(unschedule(b"hourly"))[0] == 5  # gone
    assert admin.error(unschedule(b"never-was"))[0] == 5
    assert admin.alive()


def test_a_schedule_fires_a_task_keyed_by_its_fire_time(connect: Connect, admin: Wire) -> None:
    worker = connect()
    assert worker.ask(ready(1, b"fire-q")) == (WAIT, b"")
    added_ms = now_ms()
    items = (*every(1, b"beat"), option(SQUEUE, b"fire-q"))
    admin.info(schedule(b"every-second", *items, payload=b"thump"))
    task = worker.task()  # within the socket's 5 s
    assert (task["type"], task["payload"], task["queue"]) == (b"beat", b"thump", b"fire-q")
    key = re.fullmatch(rb"schedule:every-second:(\d+)", task["context"][KEY])
    assert key is not None, task["context"]
    assert added_ms - 1000 <= int(key[1]) <= now_ms() + 1000
    (entry,) = [s for s in admin.info(frame(SCHEDULES)) if s["name"] == "every-second"]
    assert entry["fired"] >= 1 and entry["last_fire"] is not None
    assert admin.info(unschedule(b"every-second"))["removed"] is True
    worker.send(ack(task["id"], token_of(task)))
    assert worker.alive()


# -- daemons of their own: a tight [tasks] max_delayed, [retries] count_lost, a
#    default queue with retries, declared schedules ----------------------------

TIGHT = """\
[tasks]
max_delayed = 2
[retries]
count_lost = yes
[queue default]
retries = 1
backoff = fixed:100ms
"""


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("tight"), TIGHT) as daemon:
        yield daemon


@pytest.fixture
def connect_tight(tight: DaemonProcess, wires: Connect) -> Connect:
    return connections(tight, wires)


def test_max_delayed_is_error_0x01_and_retries_still_wait(connect_tight: Connect) -> None:
    producer, worker = connect_tight(), connect_tight()
    held = [
        producer.ok(submit(b"t", b"x", option(QUEUE, b"cap"), delay(60_000)))[0] for _ in range(2)
    ]
    code, message = producer.error(submit(b"t", b"x", option(QUEUE, b"cap"), delay(60_000)))
    assert code == 1 and "max_delayed" in message
    assert producer.alive()
    # A failed task waiting for its retry always waits.
    task_id, _ = producer.ok(
        submit(b"t", b"x", option(QUEUE, b"cap-retry"), retries(1), FIXED_100MS)
    )
    task = worker.task(ready(1, b"cap-retry"))
    worker.send(nack(task_id, token_of(task), b"again"))
    assert retrying(producer)[:2] == (task_id, 1)
    again = worker.task()
    assert (again["id"], again["attempt"]) == (task_id, 2)
    acknowledge(worker, producer, again)
    for delayed in held:
        cancel(producer, delayed)


def test_a_version_1_producer_hears_only_the_final_outcome(connect_tight: Connect) -> None:
    v1_producer, worker = connect_tight(1), connect_tight()
    task_id = v1_producer.ok_v1(submit_v1(b"t", b"old"))
    task = worker.task(ready(1, b"default"))
    assert retry_counts(task) == (0, 1)  # the default queue's retries
    worker.send(nack(task_id, token_of(task), b"first"))
    assert v1_producer.silent_for(0.3)  # no RETRYING in version 1
    task = worker.task()
    worker.send(nack(task_id, token_of(task), b"last"))
    assert v1_producer.read() == (FAILED, id_bytes(task_id) + b"last")
    assert dead_ids(worker, b"default") == [task_id]


def test_count_lost_counts_a_lost_worker_as_a_failure(connect_tight: Connect) -> None:
    producer, first, second = connect_tight(), connect_tight(), connect_tight()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"lost"), retries(1), FIXED_100MS))
    assert first.task(ready(1, b"lost"))["id"] == task_id
    assert second.ask(ready(1, b"lost")) == (WAIT, b"")
    first.close()
    assert retrying(producer)[:2] == (task_id, 1)
    task = second.task()
    assert (task["id"], task["attempt"], retry_counts(task)) == (task_id, 2, (1, 1))
    second.close()
    kind, body = producer.read()
    assert (kind, body[:4]) == (FAILED, id_bytes(task_id))
    assert dead_ids(producer, b"lost") == [task_id]


SCHEDULED = """\
[schedules]
max_schedules = 2
[schedule declared]
every = 3600
type = tick
"""


@pytest.fixture(scope="module")
def scheduled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("scheduled"), SCHEDULED) as daemon:
        yield daemon


def test_declared_schedules_are_not_changed_at_run_time(
    scheduled: DaemonProcess, wires: Connect
) -> None:
    admin = wires(str(scheduled.control_path))
    (declared,) = admin.info(frame(SCHEDULES))
    assert (declared["name"], declared["source"], declared["every"]) == ("declared", "config", 3600)
    assert admin.error(schedule(b"declared", *every(60)))[0] == 7
    assert admin.error(unschedule(b"declared"))[0] == 7
    assert admin.alive()
    # max_schedules counts the declared one.
    assert admin.info(schedule(b"runtime", *every(60)))["source"] == "runtime"
    code, message = admin.error(schedule(b"one-too-many", *every(60)))
    assert code == 1 and "max_schedules" in message
    assert [s["name"] for s in admin.info(frame(SCHEDULES))] == ["declared", "runtime"]
