"""
Black-box interop tests of bulk actions (docs/protocol.md, "Version 2: bulk
actions"): BULK's dry run, cancel, retry, replay, purge and move over real
sockets; every bad BULK is ERROR 0x02 and changes nothing; the admin role;
and a daemon that keeps answering other connections while one action goes
over 200,000 tasks.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    CANCELLED,
    ERROR,
    FAILED,
    HEARTBEAT,
    INFO,
    OK,
    PONG,
    QUEUE,
    QUEUES,
    RETRIES,
    Wire,
    frame,
    nack,
    option,
    ready,
    submit,
    token_of,
)
from tests.interop.test_v2_contract import connections, id_bytes, queue_named
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

BULK, BUSY = 0x31, 0x0B
CANCEL_, RETRY_, REPLAY_, PURGE_, MOVE_ = range(1, 6)
F_QUEUE, F_TYPE, F_KEY_PREFIX, F_STATES, F_OLDER, F_NEWER, F_REASON, F_TARGET = range(1, 9)
QUEUED, DELAYED, DEAD = 1, 2, 4


def bulk(action: int, *fields: bytes, dry_run: bool = False) -> bytes:
    """BULK C{[action u8][flags u8][fields_len u16][fields]}."""
    body = b"".join(fields)
    return frame(BULK, struct.pack(">BBH", action, int(dry_run), len(body)) + body)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("bulk")) as daemon:
        yield daemon


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


@pytest.fixture
def admin(shared: DaemonProcess, wires: Connect) -> Wire:
    """A version-2 connection to the control socket: an admin."""
    return wires(str(shared.control_path))


def submitted(producer: Wire, count: int, task_type: bytes, *options: bytes) -> list[int]:
    return [producer.ok(submit(task_type, b"x", *options))[0] for _ in range(count)]


def test_a_dry_run_counts_then_a_cancel_by_queue_and_type(connect: Connect, admin: Wire) -> None:
    producer = connect()
    mail = option(QUEUE, b"bulk-mail")
    wanted = submitted(producer, 12, b"email", mail)
    submitted(producer, 1, b"sms", mail)
    fields = (option(F_QUEUE, b"bulk-mail"), option(F_TYPE, b"email"))
    counted = admin.info(bulk(CANCEL_, *fields, dry_run=True))
    assert (counted["matched"], counted["acted"], counted["dry_run"]) == (12, 0, True)
    assert counted["sample"] == wanted[:10]
    assert queue_named(admin, "bulk-mail")["depth"] == 13
    done = admin.info(bulk(CANCEL_, *fields))
    assert (done["action"], done["matched"], done["acted"], done["skipped"]) == (
        "cancel",
        12,
        12,
        0,
    )
    assert sorted(producer.read() for _ in wanted) == [(CANCELLED, id_bytes(i)) for i in wanted]
    assert queue_named(admin, "bulk-mail")["depth"] == 1


def dead_tasks(connect: Connect, queue: bytes, reasons: list[bytes]) -> list[int]:
    """Tasks (with a retry, so they are kept) failed for good with these reasons."""
    producer, worker = connect(), connect()
    ids = submitted(
        producer, len(reasons), b"job", option(QUEUE, queue), option(RETRIES, b"\x00\x01")
    )
    worker.send(ready(len(reasons), queue))
    for reason in reasons:
        task = worker.task()
        worker.send(nack(task["id"], token_of(task), reason, flags=0x01))
        kind, body = producer.read()
        assert (kind, body[:4]) == (FAILED, id_bytes(task["id"]))
    worker.close()
    return ids


def test_replay_by_failure_reason(connect: Connect, admin: Wire) -> None:
    reasons = [b"upstream timeout", b"bad input", b"timeout again"]
    ids = dead_tasks(connect, b"bulk-dead", reasons)
    fields = (option(F_QUEUE, b"bulk-dead"), option(F_REASON, b"timeout"))
    assert admin.info(bulk(REPLAY_, *fields))["acted"] == 2
    assert queue_named(admin, "bulk-dead")["depth"] == 2
    assert queue_named(admin, "bulk-dead")["dead"] == 1
    purged = admin.info(bulk(PURGE_, option(F_QUEUE, b"bulk-dead")))
    assert purged["acted"] == 3 and len(ids) == 3


def test_move_keeps_ids_and_order(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()
    ids = submitted(producer, 4, b"job", option(QUEUE, b"bulk-from"))
    answer = admin.info(bulk(MOVE_, option(F_QUEUE, b"bulk-from"), option(F_TARGET, b"bulk-to")))
    assert (answer["acted"], answer["to"]) == (4, "bulk-to")
    worker.send(ready(4, b"bulk-to"))
    assert [worker.task()["id"] for _ in ids] == ids


def test_the_answer_keeps_its_place_among_the_connections_answers(admin: Wire) -> None:
    admin.send(bulk(PURGE_, option(F_QUEUE, b"bulk-nothing"), dry_run=True))
    admin.send(frame(HEARTBEAT))
    kind, _ = admin.read()
    assert kind == INFO
    assert admin.read() == (PONG, b"")


BAD = {
    "short head": b"\x01\x00\x00",
    "action 0": struct.pack(">BBH", 0, 0, 0),
    "action 6": struct.pack(">BBH", 6, 0, 0),
    "unknown flag": struct.pack(">BBH", 1, 2, 0),
    "fields length": struct.pack(">BBH", 1, 0, 5),
    "field past its end": struct.pack(">BBH", 1, 0, 3) + b"\x01\x05a",
    "unknown field": struct.pack(">BBH", 1, 0, 3) + b"\x09\x01a",
    "field twice": struct.pack(">BBH", 1, 0, 6) + b"\x01\x01a\x01\x01b",
    "bad queue name": struct.pack(">BBH", 1, 0, 4) + b"\x01\x02a b"[:4],
    "no states": struct.pack(">BBH", 1, 0, 3) + b"\x04\x01\x00",
    "unknown state": struct.pack(">BBH", 4, 0, 3) + b"\x04\x01\x10",
    "state not acted on": struct.pack(">BBH", 1, 0, 3) + b"\x04\x01\x04",
    "a move of waiting tasks": struct.pack(">BBH", 5, 0, 6) + b"\x04\x01\x08\x08\x01b",
    "age of 4 bytes": struct.pack(">BBH", 1, 0, 6) + b"\x05\x04\x00\x00\x00\x01",
    "reason not UTF-8": struct.pack(">BBH", 1, 0, 3) + b"\x07\x01\xff",
    "move without target": struct.pack(">BBH", 5, 0, 0),
    "cancel with target": struct.pack(">BBH", 1, 0, 3) + b"\x08\x01b",
    "target is the queue": struct.pack(">BBH", 5, 0, 6) + b"\x01\x01b\x08\x01b",
    "newer not past older": struct.pack(">BBH", 1, 0, 20)
    + b"\x05\x08" + struct.pack(">Q", 60_000) + b"\x06\x08" + struct.pack(">Q", 1_000),
}  # fmt: skip


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_bulk_is_error_0x02_and_changes_nothing(
    connect: Connect, admin: Wire, case: str
) -> None:
    producer = connect()
    (task_id,) = submitted(producer, 1, b"job", option(QUEUE, b"bulk-bad"))
    code, message = admin.error(frame(BULK, BAD[case]))
    assert code == 2 and message.startswith("BULK "), message
    assert admin.alive()
    assert queue_named(admin, "bulk-bad")["depth"] >= 1
    assert admin.info(bulk(PURGE_, option(F_QUEUE, b"bulk-bad")))["acted"] >= 1
    assert producer.read() == (CANCELLED, id_bytes(task_id))


def test_bulk_needs_the_admin_role_and_version_2(connect: Connect) -> None:
    peer = connect()
    code, message = peer.error(bulk(CANCEL_, dry_run=True))
    assert code == 6 and "admin" in message
    assert peer.alive()
    v1 = connect(1)
    kind, body = v1.ask(frame(BULK, struct.pack(">BBH", 1, 1, 0), version=1))
    assert (kind, body[0]) == (ERROR, 2) and b"unknown message type 0x31" in body
    assert v1.alive()


def test_hello_lists_the_bulk_capability(connect: Connect) -> None:
    assert "bulk" in connect().info(frame(0x0D, b""))["capabilities"]


# -- bounded work ---------------------------------------------------------------------

MANY = 200_000
OK_FRAME = 6 + 5


def submit_many(producer: Wire, count: int, queue: bytes, chunk: int = 5_000) -> None:
    """C{count} SUBMITs, pipelined a chunk at a time, each answered OK."""
    one = submit(b"job", b"x", option(QUEUE, queue))
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        producer.send(one * n)
        answers = producer._exactly(OK_FRAME * n)
        kinds = answers[1::OK_FRAME]
        assert kinds == bytes((OK,)) * n, "a SUBMIT not answered OK"


def depth(peer: Wire, queue: str) -> int:
    """The depth of C{queue}: 0 once it is gone (an empty queue no section declares)."""
    return next((q["depth"] for q in peer.info(frame(QUEUES)) if q["name"] == queue), 0)


def test_the_daemon_answers_others_while_a_bulk_action_goes_over_200000_tasks(
    tmp_path_factory: pytest.TempPathFactory, wires: Connect
) -> None:
    config = "[allocator]\npool_size = 96M\n[bulk]\nbatch = 100\nmax_running = 1\n"
    with launch(tmp_path_factory.mktemp("bulk-many"), config) as daemon:
        producer, other = wires(daemon.address), wires(daemon.address)
        submit_many(producer, MANY, b"many")
        assert depth(other, "many") == MANY
        admin, second = wires(str(daemon.control_path)), wires(str(daemon.control_path))
        admin.sock.settimeout(120)
        admin.send(bulk(CANCEL_, option(F_QUEUE, b"many")))
        # Another client is answered while the action is under way: QUEUES
        # sees the queue part-cancelled, then a HEARTBEAT and a SUBMIT are
        # answered before the queue is empty.
        seen, deadline = MANY, time.monotonic() + 60
        while seen == MANY:
            assert time.monotonic() < deadline, "the action never started"
            seen = depth(other, "many")
        assert 0 < seen < MANY
        assert other.ask(frame(HEARTBEAT)) == (PONG, b"")
        task_id, _ = other.ok(submit(b"job", b"late", option(QUEUE, b"elsewhere")))
        assert depth(other, "many") > 0
        code, message = second.error(bulk(CANCEL_, dry_run=True))
        assert code == BUSY and "max_running" in message
        assert depth(other, "many") > 0  # the action was still running then
        answer = read_answer(admin)
        assert (answer["matched"], answer["acted"]) == (MANY, MANY)
        assert answer["turns"] >= MANY // 100
        assert depth(other, "many") == 0 and depth(other, "elsewhere") == 1
        assert task_id > MANY


def read_answer(admin: Wire) -> dict[str, Any]:
    kind, body = admin.read()
    assert kind == INFO, (kind, body)
    answer: dict[str, Any] = json.loads(body)
    return answer


def test_a_bulk_longer_than_its_fields_may_be_is_refused_at_its_header(admin: Wire) -> None:
    """
    Its head and each of its 8 fields once, at 255 bytes: 2,060 bytes; one
    more is refused from the header (ERROR 0x03), not buffered up to the
    largest SUBMIT's length (a megabyte) and then found malformed.
    """
    longest = 4 + 8 * 257
    code, message = admin.error(frame(BULK, bytes(longest + 1)))
    assert (code, f"exceeds the limit of {longest}" in message) == (3, True), message
    code, message = admin.error(frame(BULK, struct.pack(">BBH", 1, 0, longest - 4) + bytes(2056)))
    assert code == 2 and message.startswith("BULK "), message
    assert admin.alive()
