"""
Black-box interop tests of version 2's part 3 (docs/protocol.md, "Version 2:
results, progress, shared data and groups"): results on ACK and DONE, kept
outcomes and AWAIT/OUTCOME, PROGRESS, shared data (PUBLISH, FOLLOW, SHARED)
and groups (GROUP, GROUP_STATE), with every bad input the page names.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  One daemon on the defaults serves most of the
module (each test has queues, names and groups of its own); a second, with
small limits, tests each limit at its edge.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    AWAIT,
    DONE,
    FAILED,
    FOLLOW,
    GROUP,
    GROUP_STATE,
    HELLO,
    IN_GROUP,
    OK,
    OUTCOME,
    PROGRESS,
    PUBLISH,
    QUEUE,
    READY,
    RESULT,
    SHARED,
    STATS,
    STATS_RESPONSE,
    SUBMIT,
    TASK,
    WANT_PROGRESS,
    Wire,
    ack,
    frame,
    nack,
    name,
    option,
    ready,
    submit,
    submit_v1,
    token_of,
)
from tests.interop.test_v2_contract import connections, id_bytes
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

LIMITS = """\
[results]
max_size = 16
max_waiters_per_connection = 2
[progress]
max_message = 8
[shared]
max_size = 8
max_names = 2
[groups]
max_groups = 2
"""
"""The second daemon: every part-3 limit small enough to reach."""

# Result kinds, OUTCOME states, GROUP operations and GROUP_STATE states, from the page.
BYTES, TEXT, JSON = 1, 2, 3
PENDING, DONE_STATE, FAILED_STATE, CANCELLED_STATE, DEAD_STATE, EXPIRED, UNKNOWN = range(7)
OPEN, CLOSE, STATE, WAIT_FOR = 1, 2, 3, 4
G_OPEN, G_CLOSED, G_FINISHED, G_UNKNOWN = range(4)


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("results"), "") as daemon:
        yield daemon


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("results-limits"), LIMITS) as daemon:
        yield daemon


@pytest.fixture
def connect(defaults: DaemonProcess, wires: Connect) -> Connect:
    return connections(defaults, wires)


@pytest.fixture
def small(limited: DaemonProcess, wires: Connect) -> Connect:
    return connections(limited, wires)


# -- the layouts of part 3, packed by hand from the page ----------------------


def u32(n: int) -> bytes:
    return struct.pack(">I", n)


def keep(ttl_s: int = 0) -> bytes:
    return option(RESULT, u32(ttl_s))


def await_(task_id: int, timeout_ms: int = 0) -> bytes:
    return frame(AWAIT, struct.pack(">II", task_id, timeout_ms))


def progress(task_id: int, token: int, fraction: int, message: bytes = b"") -> bytes:
    return frame(PROGRESS, struct.pack(">IQH", task_id, token, fraction) + message)


def publish(shared_name: bytes, data: bytes = b"", flags: int = 0) -> bytes:
    return frame(PUBLISH, bytes([flags]) + name(shared_name) + data)


def follow(*names: bytes) -> bytes:
    return frame(FOLLOW, bytes([len(names)]) + b"".join(name(n) for n in names))


def group(op: int, group_id: int = 0, timeout_ms: int = 0) -> bytes:
    return frame(GROUP, struct.pack(">BII", op, group_id, timeout_ms))


def outcome(peer: Wire) -> tuple[int, int, int, bytes]:
    """Read an OUTCOME C{[task_id u32][state u8][kind u8][tail]}."""
    kind, body = peer.read()
    assert kind == OUTCOME, (kind, body)
    task_id, state, result_kind = struct.unpack_from(">IBB", body)
    return task_id, state, result_kind, body[6:]


def group_state(peer: Wire) -> tuple[int, ...]:
    """Read a GROUP_STATE: group, state, members, done, failed, cancelled, pending."""
    kind, body = peer.read()
    assert kind == GROUP_STATE, (kind, body)
    return struct.unpack(">IBIIIII", body)


def run(producer: Wire, worker: Wire, queue: bytes, *options: bytes) -> dict[str, Any]:
    """Submit a task to C{queue}; C{worker} (holding none) takes it."""
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, queue), *options))
    task = worker.task(ready(1, queue))
    assert task["id"] == task_id
    return task


# -- results on ACK and DONE ----------------------------------------------------


def test_a_workers_result_reaches_the_producer_in_done(connect: Connect) -> None:
    producer, worker = connect(), connect()
    for result in (bytes([BYTES]) + b"\x00\xff", bytes([TEXT]) + "é".encode(), b"\x03[1,2]"):
        task = run(producer, worker, b"r-done")
        worker.send(ack(task["id"], token_of(task), result))
        assert producer.read() == (DONE, id_bytes(task["id"]) + result)
    task = run(producer, worker, b"r-done")
    worker.send(ack(task["id"], token_of(task)))
    assert producer.read() == (DONE, id_bytes(task["id"]))  # no result: the 4-byte DONE


def test_a_version_1_producer_hears_the_pages_done(connect: Connect) -> None:
    producer, worker = connect(1), connect()
    task_id = producer.ok_v1(submit_v1(b"t", b"x"))
    task = worker.task(ready(1, b"default"))
    assert task["id"] == task_id
    worker.send(ack(task_id, token_of(task), b"\x02forty-two"))
    assert producer.read() == (DONE, id_bytes(task_id))


def test_a_bad_result_is_error_0x02_and_the_task_is_still_held(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task = run(producer, worker, b"r-bad")
    token = token_of(task)
    for result in (b"\x00x", b"\x04x", b"\x02\xff", b"\x03{", b"\x03" + b"[" * 5000):
        assert worker.error(ack(task["id"], token, result))[0] == 2
    assert producer.silent_for(0.2)
    worker.send(ack(task["id"], token, b"\x01ok"))
    assert producer.read() == (DONE, id_bytes(task["id"]) + b"\x01ok")


def test_a_result_over_max_size_is_error_0x03_and_not_applied(small: Connect) -> None:
    producer, worker = small(), small()
    task = run(producer, worker, b"r-big")
    code, message = worker.error(ack(task["id"], token_of(task), b"\x01" + bytes(17)))
    assert code == 3 and "17" in message and "16" in message
    assert producer.silent_for(0.2)
    worker.send(ack(task["id"], token_of(task), b"\x01" + bytes(16)))  # at the limit: taken
    assert producer.read() == (DONE, id_bytes(task["id"]) + b"\x01" + bytes(16))


# -- kept outcomes, AWAIT and OUTCOME ------------------------------------------


def test_a_kept_result_is_answered_to_another_connection(connect: Connect) -> None:
    producer, worker, other = connect(), connect(), connect()
    task = run(producer, worker, b"r-kept", keep())
    worker.send(ack(task["id"], token_of(task), b'\x03{"rows":3}'))
    assert producer.read()[0] == DONE
    other.send(await_(task["id"]))
    assert outcome(other) == (task["id"], DONE_STATE, JSON, b'{"rows":3}')


def test_await_of_a_running_task_answers_when_it_finishes(connect: Connect) -> None:
    producer, worker, other = connect(), connect(), connect()
    task = run(producer, worker, b"r-wait")
    other.send(await_(task["id"], 0))
    assert outcome(other) == (task["id"], PENDING, 0, b"")  # 0: answered at once
    other.send(await_(task["id"], 10_000))
    assert other.silent_for(0.2)
    worker.send(ack(task["id"], token_of(task), b"\x02hi"))
    assert outcome(other) == (task["id"], DONE_STATE, TEXT, b"hi")  # not kept: still reaches it
    assert producer.read()[0] == DONE
    other.send(await_(task["id"]))
    assert outcome(other) == (task["id"], UNKNOWN, 0, b"")  # its outcome was not kept


def test_await_times_out_pending(connect: Connect) -> None:
    producer, other = connect(), connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"r-nobody")))
    started = time.monotonic()
    other.send(await_(task_id, 300))
    assert outcome(other) == (task_id, PENDING, 0, b"")
    assert 0.25 <= time.monotonic() - started < 3


def test_failed_dead_and_cancelled_outcomes_are_kept_with_their_reasons(
    connect: Connect,
) -> None:
    producer, worker, other = connect(), connect(), connect()
    failed = run(producer, worker, b"r-reasons", keep())
    worker.send(nack(failed["id"], token_of(failed), b"disk full"))
    assert producer.read() == (FAILED, id_bytes(failed["id"]) + b"disk full")
    other.send(await_(failed["id"]))
    assert outcome(other) == (failed["id"], FAILED_STATE, 0, b"disk full")
    dead = run(producer, worker, b"r-reasons", keep(), option(7, b"\x00\x01"))  # 1 retry
    worker.send(nack(dead["id"], token_of(dead), b"bad input", flags=0x01))
    assert producer.read() == (FAILED, id_bytes(dead["id"]) + b"bad input")
    other.send(await_(dead["id"]))
    assert outcome(other) == (dead["id"], DEAD_STATE, 0, b"bad input")
    queued, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"r-reasons-idle"), keep()))
    producer.send(frame(0x0E, u32(queued)))  # CANCEL
    assert sorted(kind for kind, _ in (producer.read(), producer.read())) == [0x0F, 0x16]
    other.send(await_(queued))
    task_id, state, kind, _ = outcome(other)
    assert (task_id, state, kind) == (queued, CANCELLED_STATE, 0)


def test_a_kept_outcome_expires_after_its_ttl(connect: Connect) -> None:
    producer, worker, other = connect(), connect(), connect()
    task = run(producer, worker, b"r-ttl", keep(1))
    worker.send(ack(task["id"], token_of(task), b"\x02soon gone"))
    assert producer.read()[0] == DONE
    other.send(await_(task["id"]))
    assert outcome(other)[1] == DONE_STATE
    time.sleep(1.3)
    other.send(await_(task["id"]))
    assert outcome(other) == (task["id"], EXPIRED, 0, b"")


def test_a_producer_that_left_learns_its_outcome_on_a_new_connection(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task = run(producer, worker, b"r-cut")  # no result option
    producer.close()
    time.sleep(0.2)
    worker.send(ack(task["id"], token_of(task), b"\x02while you were away"))
    again = connect()
    again.send(await_(task["id"], 2000))
    assert outcome(again) == (task["id"], DONE_STATE, TEXT, b"while you were away")


def test_await_of_an_unknown_task_and_bad_awaits(connect: Connect) -> None:
    other = connect()
    other.send(await_(4_000_000_000))
    assert outcome(other) == (4_000_000_000, UNKNOWN, 0, b"")
    assert other.error(frame(AWAIT, u32(1)))[0] == 2  # 4 bytes, not 8
    assert other.error(frame(AWAIT, bytes(8)))[0] == 2  # task 0
    assert other.alive()


def test_waits_per_connection_are_bounded(small: Connect) -> None:
    producer, waiter = small(), small()
    ids = [producer.ok(submit(b"t", b"x", option(QUEUE, b"r-waiters")))[0] for _ in range(3)]
    waiter.send(await_(ids[0], 10_000))
    waiter.send(await_(ids[1], 10_000))
    code, message = waiter.error(await_(ids[2], 10_000))
    assert code == 1 and "max_waiters_per_connection" in message
    assert waiter.alive()


# -- PROGRESS -------------------------------------------------------------------


def test_progress_reaches_a_producer_that_asked_in_order_before_done(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task = run(producer, worker, b"p-order", option(WANT_PROGRESS, b"\x01"))
    token = token_of(task)
    reports = [progress(task["id"], token, n * 2500, f"{n} of 4".encode()) for n in range(1, 4)]
    for report in reports:
        worker.send(report)
    time.sleep(0.4)  # past the interval: the held report has gone out
    worker.send(ack(task["id"], token))
    seen = []
    while True:
        kind, body = producer.read()
        if kind == DONE:
            break
        assert kind == PROGRESS
        seen.append(frame(PROGRESS, body))
    # The first goes at once; the second was held and replaced by the third.
    assert seen[0] == reports[0] and seen[-1] == reports[-1]
    assert seen in ([reports[0], reports[2]], reports)


def test_progress_is_not_sent_to_a_producer_that_did_not_ask(connect: Connect) -> None:
    producer, worker = connect(), connect()
    task = run(producer, worker, b"p-quiet")
    worker.send(progress(task["id"], token_of(task), 5000, b"half"))
    assert producer.silent_for(0.3)
    worker.send(ack(task["id"], token_of(task)))
    assert producer.read() == (DONE, id_bytes(task["id"]))


def test_bad_progress_reports(connect: Connect, small: Connect) -> None:
    producer, worker, other = connect(), connect(), connect()
    task = run(producer, worker, b"p-bad", option(WANT_PROGRESS, b"\x01"))
    token = token_of(task)
    assert worker.error(progress(task["id"], token + 1, 10))[0] == 8  # stale
    assert worker.error(progress(task["id"], token, 10_001))[0] == 2  # past 10000
    assert worker.error(progress(task["id"], token, 10, b"\xff"))[0] == 2  # not UTF-8
    assert worker.error(progress(999_999, 1, 10))[0] == 2  # not held
    assert worker.error(frame(PROGRESS, bytes(13)))[0] == 2
    assert other.error(progress(task["id"], token, 10))[0] == 2  # not held by this one
    assert producer.silent_for(0.2)
    worker.send(ack(task["id"], token))
    assert producer.read()[0] == DONE
    producer2, worker2 = small(), small()
    task = run(producer2, worker2, b"p-long", option(WANT_PROGRESS, b"\x01"))
    code, message = worker2.error(progress(task["id"], token_of(task), 10, b"123456789"))
    assert code == 2 and "max_message" in message
    worker2.send(progress(task["id"], token_of(task), 10, b"12345678"))  # at the limit
    assert producer2.read()[0] == PROGRESS


# -- shared data ---------------------------------------------------------------


def shared_frame(peer: Wire) -> tuple[bytes, int, bytes]:
    """Read a SHARED C{[name_len u8][name][version u32][data]}."""
    kind, body = peer.read()
    assert kind == SHARED, (kind, body)
    end = 1 + body[0]
    (version,) = struct.unpack_from(">I", body, end)
    return body[1:end], version, body[end + 4 :]


def test_publish_and_follow(connect: Connect) -> None:
    publisher, early, late = connect(), connect(), connect()
    answer = publisher.info(publish(b"prices", b"v1"))
    assert (answer["name"], answer["version"], answer["size"]) == ("prices", 1, 2)
    early.send(follow(b"prices", b"not-yet"))
    assert shared_frame(early) == (b"prices", 1, b"v1")
    kind, body = early.read()  # then the INFO
    assert (kind, json.loads(body)) == (0x16, {"following": {"prices": 1, "not-yet": 0}})
    assert publisher.info(publish(b"prices", b"v2"))["version"] == 2
    assert shared_frame(early) == (b"prices", 2, b"v2")
    assert early.silent_for(0.2)  # once
    late.send(follow(b"prices"))
    assert shared_frame(late) == (b"prices", 2, b"v2")  # the current version, not v1
    assert late.read()[0] == 0x16
    publisher.info(publish(b"not-yet", b"now"))
    assert shared_frame(early) == (b"not-yet", 1, b"now")
    deleted = publisher.info(publish(b"prices", flags=0x01))
    assert deleted["deleted"] is True
    assert shared_frame(early) == (b"prices", 0, b"")
    assert shared_frame(late) == (b"prices", 0, b"")


def test_a_worker_may_not_publish(connect: Connect) -> None:
    worker = connect()
    worker.send(ready(1, b"s-worker"))
    assert worker.read()[0] == 0x08  # WAIT
    assert worker.error(publish(b"from-worker", b"x"))[0] == 6


def test_bad_publishes(connect: Connect, small: Connect) -> None:
    publisher = connect()
    assert publisher.error(publish(b"never-published", flags=0x01))[0] == 5
    assert publisher.error(publish(b"x", b"data", flags=0x01))[0] == 2
    assert publisher.error(publish(b"x", flags=0x02))[0] == 2
    assert publisher.error(frame(PUBLISH, b""))[0] == 2
    assert publisher.error(frame(PUBLISH, b"\x00\x01 "))[0] == 2  # a bad name
    assert publisher.error(frame(FOLLOW, b"\x02\x01a\x01a"))[0] == 2
    limited = small()
    code, message = limited.error(publish(b"big", bytes(9)))
    assert code == 3 and "max_size" in message
    assert limited.info(publish(b"one", bytes(8)))["version"] == 1  # at the limit
    assert limited.info(publish(b"two", b"x"))["version"] == 1
    code, message = limited.error(publish(b"three", b"x"))
    assert code == 1 and "max_names" in message


def test_a_publish_longer_than_max_size_allows_is_refused_at_its_header(
    small: Connect,
) -> None:
    """
    Flags, the longest name (64) and [shared] max_size (8) of data: 74 bytes.
    A longer PUBLISH is ERROR 0x03 on its header alone, before any of its
    payload is sent (none of it is held), and its payload is skipped.
    """
    publisher = small()
    assert publisher.alive()
    code, message = publisher.error(struct.pack(">BBI", 2, PUBLISH, 75))
    assert code == 3 and "75 bytes" in message and "74" in message
    publisher.send(bytes(75))  # skipped
    assert publisher.alive()
    # 74 bytes pass the header: the message itself is then judged (a
    # deletion carries no data).
    code, message = publisher.error(publish(b"x" * 64, bytes(8), flags=0x01))
    assert code == 2 and "carries data" in message


# -- groups ----------------------------------------------------------------------


def test_a_group_reports_once_when_its_members_have_finished(connect: Connect) -> None:
    producer, worker, other = connect(), connect(), connect()
    opened = producer.info(group(OPEN))
    gid = opened["group"]
    assert opened["state"] == "open" and opened["members"] == 0
    member = option(IN_GROUP, u32(gid))
    assert worker.ask(ready(3, b"g-run"))[0] == 0x08  # WAIT: it may hold three
    tasks = []
    for _ in range(3):
        task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"g-run"), member))
        tasks.append(worker.task())  # pushed to the waiting worker
        assert tasks[-1]["id"] == task_id
    closed = producer.info(group(CLOSE, gid))
    assert (closed["state"], closed["members"], closed["pending"]) == ("closed", 3, 3)
    for task in tasks[:2]:
        worker.send(ack(task["id"], token_of(task)))
        assert producer.read()[0] == DONE
    other.send(group(WAIT_FOR, gid, 10_000))
    assert other.silent_for(0.2)
    worker.send(nack(tasks[2]["id"], token_of(tasks[2]), b"no"))
    assert producer.read()[0] == FAILED
    finished = (gid, G_FINISHED, 3, 2, 1, 0, 0)
    assert group_state(producer) == finished
    assert group_state(other) == finished
    assert producer.silent_for(0.2)  # once
    state = other.info(group(STATE, gid))
    assert (state["state"], state["done"], state["failed"]) == ("finished", 2, 1)


def test_joining_unknown_or_closed_groups_and_bad_groups(connect: Connect) -> None:
    producer = connect()
    assert producer.error(submit(b"t", b"x", option(IN_GROUP, u32(3_999_999_999))))[0] == 5
    gid = producer.info(group(OPEN))["group"]
    producer.send(group(CLOSE, gid))
    # Closed with no members, it has finished: its opener hears so, beside the answer.
    answers = sorted([producer.read(), producer.read()])
    assert answers[0][0] == 0x16 and json.loads(answers[0][1])["state"] == "finished"
    assert answers[1] == (GROUP_STATE, struct.pack(">IBIIIII", gid, G_FINISHED, 0, 0, 0, 0, 0))
    code, message = producer.error(submit(b"t", b"x", option(IN_GROUP, u32(gid))))
    assert code == 7 and str(gid) in message
    assert producer.error(frame(GROUP, bytes(9)))[0] == 2  # op 0
    assert producer.error(group(OPEN, 5))[0] == 2
    assert producer.error(group(STATE, 0))[0] == 2
    assert producer.error(frame(GROUP, struct.pack(">BII", CLOSE, gid, 5)))[0] == 2
    assert producer.error(frame(SUBMIT, b"\x01t\x00\x06" + option(IN_GROUP, bytes(4))))[0] == 2
    producer.send(group(WAIT_FOR, 3_999_999_999, 1000))
    assert group_state(producer)[:2] == (3_999_999_999, G_UNKNOWN)
    assert producer.alive()


def test_a_group_wait_times_out_with_the_current_state(connect: Connect) -> None:
    producer, other = connect(), connect()
    gid = producer.info(group(OPEN))["group"]
    producer.ok(submit(b"t", b"x", option(QUEUE, b"g-idle"), option(IN_GROUP, u32(gid))))
    other.send(group(WAIT_FOR, gid, 300))
    assert group_state(other) == (gid, G_OPEN, 1, 0, 0, 0, 1)


def test_a_duplicate_submit_does_not_join_twice(connect: Connect) -> None:
    producer = connect()
    gid = producer.info(group(OPEN))["group"]
    member = (option(QUEUE, b"g-dup"), option(3, b"row-1"), option(IN_GROUP, u32(gid)))
    first, flags = producer.ok(submit(b"t", b"x", *member))
    again, flags_again = producer.ok(submit(b"t", b"x", *member))
    assert (again, flags, flags_again) == (first, 0, 1)
    assert producer.info(group(STATE, gid))["members"] == 1


def test_open_groups_are_bounded(small: Connect) -> None:
    producer = small()
    producer.info(group(OPEN))
    producer.info(group(OPEN))
    code, message = producer.error(group(OPEN))
    assert code == 1 and "max_groups" in message


def test_hello_lists_the_part_3_capabilities(connect: Connect) -> None:
    hello = connect().info(frame(HELLO, b""))
    assert {"results", "progress", "shared", "groups"} <= set(hello["capabilities"])


# -- whose outcomes are kept: a version-1 producer's never; requested before automatic ----


def control_status(daemon: DaemonProcess) -> dict[str, Any]:
    """The control socket's status document (its C{status} line)."""
    with socket.socket(socket.AF_UNIX) as control:
        control.settimeout(5)
        control.connect(str(daemon.control_path))
        control.sendall(b"status\n")
        data = b""
        while chunk := control.recv(65536):
            data += chunk
    return json.loads(data)


def until_connections(daemon: DaemonProcess, count: int) -> None:
    """Wait until the daemon counts C{count} connections (one that closed is seen gone)."""
    deadline = time.monotonic() + 30
    while control_status(daemon)["connections"]["total"] != count:
        assert time.monotonic() < deadline, "the daemon never saw the connection go"
        time.sleep(0.02)


def bytes_used(peer: Wire) -> int:
    """STATS_RESPONSE's pmad_bytes_used, asked on C{peer} (after what it sent before)."""
    kind, body = peer.ask(frame(STATS, version=peer.version))
    assert (kind, len(body)) == (STATS_RESPONSE, 28)
    return struct.unpack_from(">Q", body, 12)[0]


@pytest.mark.parametrize("config", ["", "[protocol]\nversions = 1\n"])
def test_no_outcome_is_kept_for_a_version_1_producer_that_left(
    tmp_path: Any, wires: Connect, config: str
) -> None:
    with launch(tmp_path, config) as daemon:
        worker = wires(daemon.address, 1)
        baseline = bytes_used(worker)
        producer = wires(daemon.address, 1)
        kind, body = producer.ask(submit_v1(b"t", b"fire and forget"))
        assert kind == OK
        (task_id,) = struct.unpack(">I", body)
        assert bytes_used(worker) > baseline
        producer.close()
        until_connections(daemon, 1)
        assert worker.ask(frame(READY, version=1))[0] == TASK
        worker.send(frame(DONE, u32(task_id), version=1))
        # Its block is free, and no outcome took one: a v1 producer could never ask.
        assert bytes_used(worker) == baseline
        assert control_status(daemon)["results"]["kept"] == 0


KEPT_FEW = "[results]\nmax_count = 3\n"


def test_outcomes_kept_for_nobody_go_before_requested_ones(tmp_path: Any, wires: Connect) -> None:
    with launch(tmp_path, KEPT_FEW) as daemon:
        producer, worker = wires(daemon.address), wires(daemon.address)
        asked = run(producer, worker, b"mine", keep())
        worker.send(ack(asked["id"], token_of(asked), b"\x02keep me"))
        assert producer.read()[0] == DONE
        # A fire-and-forget load from a version-2 producer that leaves: its
        # outcomes are kept for it, but never at the cost of one asked for.
        loader = wires(daemon.address)
        ids = [loader.ok(submit(b"t", b"x", option(QUEUE, b"load")))[0] for _ in range(5)]
        loader.close()
        until_connections(daemon, 2)
        for task_id in ids:
            task = worker.task(ready(1, b"load"))
            assert task["id"] == task_id
            worker.send(ack(task_id, token_of(task)))
        assert worker.alive()  # every ACK is applied
        producer.send(await_(asked["id"]))
        assert outcome(producer) == (asked["id"], DONE_STATE, TEXT, b"keep me")
        # The oldest automatic ones were evicted, and AWAIT says so.
        producer.send(await_(ids[0]))
        assert outcome(producer) == (ids[0], EXPIRED, 0, b"evicted: past [results] max_count")
        producer.send(await_(ids[-1]))
        assert outcome(producer)[1] == DONE_STATE
        # Requested ones go too once they alone pass the bound, oldest first.
        for n in range(3):
            task = run(producer, worker, b"mine", keep())
            worker.send(ack(task["id"], token_of(task), b"\x02%d" % n))
            assert producer.read()[0] == DONE
        producer.send(await_(asked["id"]))
        assert outcome(producer) == (asked["id"], EXPIRED, 0, b"evicted: past [results] max_count")
