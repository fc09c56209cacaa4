"""
Black-box interop tests of dependencies (docs/protocol.md, "Version 2:
dependencies"): a diamond of tasks runs in order and the last gets its
parents' results in its context (0x23); a group's callback gets the
group's counts; a waiting task is INSPECTed and cancelled; every bad value
of the options 0x0D, 0x0E and 0x0F is ERROR 0x02, an unknown parent or group
ERROR 0x09, the bounds ERROR 0x02 (max_parents) and 0x01 (max_waiting) at
their edges, and each leaves the connection usable and nothing queued.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    CANCEL,
    CANCELLED,
    DONE,
    FAILED,
    GROUP,
    GROUP_STATE,
    IN_GROUP,
    INFO,
    INSPECT,
    QUEUE,
    QUEUES,
    TASK,
    Wire,
    ack,
    frame,
    nack,
    option,
    ready,
    submit,
    task_id_frame,
)
from tests.interop.test_v2_contract import connections
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

AFTER, ON_PARENT_FAILURE, AFTER_GROUP, PARENTS = 0x0D, 0x0E, 0x0F, 0x23
INVALID, QUEUE_FULL, UNKNOWN_PARENT = 0x02, 0x01, 0x09
JSON = 3
CONFIG = "\n[dependencies]\nmax_parents = 3\nmax_waiting = 4\n"


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("deps"), CONFIG) as daemon:
        yield daemon


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


def after(*parents: int) -> bytes:
    return option(AFTER, bytes([len(parents)]) + b"".join(struct.pack(">I", p) for p in parents))


def in_queue(name: bytes) -> bytes:
    return option(QUEUE, name)


def parents_block(worker: Wire, data: bytes = b"") -> tuple[int, bytes, bytes]:
    """Read a TASK: its id, its payload and the concatenated values of its 0x23 items."""
    if data:
        worker.send(data)
    kind, body = worker.read()
    assert kind == TASK, (kind, body)
    task_id = struct.unpack_from(">I", body)[0]
    offset = 15
    offset += 1 + body[offset]  # queue
    offset += 1 + body[offset]  # type
    (length,) = struct.unpack_from(">H", body, offset)
    offset += 2
    end, block = offset + length, b""
    while offset < end:
        tag, size = body[offset], body[offset + 1]
        value = body[offset + 2 : offset + 2 + size]
        if tag == PARENTS:
            block += value
        if tag == 0x20:
            worker.tokens[task_id] = struct.unpack(">Q", value)[0]
        offset += 2 + size
    return task_id, body[end:], block


def outcomes(block: bytes) -> tuple[dict[str, Any], dict[int, tuple[int, int, bytes]]]:
    """The block's head (and group counts), and each outcome by task id."""
    flags, left_out, count = struct.unpack_from(">BIH", block)
    offset, head = 7, {"left_out": left_out}
    if flags & 1:
        head["group"] = struct.unpack_from(">IIIII", block, offset)
        offset += 20
    found = {}
    for _ in range(count):
        task_id, state, kind, length = struct.unpack_from(">IBBI", block, offset)
        offset += 10
        found[task_id] = (state, kind, block[offset : offset + length])
        offset += length
    assert offset == len(block)
    return head, found


def cancel(producer: Wire, task_id: int) -> tuple[int, ...]:
    """CANCEL C{task_id}: the kinds of its answer and of the outcome (either may come first)."""
    producer.send(task_id_frame(CANCEL, task_id))
    return tuple(sorted(producer.read()[0] for _ in range(2)))


def group(op: int, group_id: int = 0) -> bytes:
    return frame(GROUP, struct.pack(">BII", op, group_id, 0))


def finish(worker: Wire, task_id: int, result: bytes = b"") -> None:
    worker.send(ack(task_id, worker.tokens.pop(task_id), result))


def test_a_diamond_runs_in_order_with_its_parents_results(connect: Connect) -> None:
    producer, worker = connect(), connect()
    q = in_queue(b"diamond")
    a, _ = producer.ok(submit(b"t", b"a", q))
    b, _ = producer.ok(submit(b"t", b"b", q, after(a)))
    c, _ = producer.ok(submit(b"t", b"c", q, after(a)))
    d, _ = producer.ok(submit(b"t", b"d", q, after(b, c)))
    got, _, block = parents_block(worker, ready(1, b"diamond"))
    assert (got, block) == (a, b"")
    finish(worker, a, bytes([JSON]) + b'{"n":1}')
    for expected in (b, c):
        got, _, block = parents_block(worker)
        assert got == expected
        assert outcomes(block)[1] == {a: (1, JSON, b'{"n":1}')}
        finish(worker, got, bytes([JSON]) + str(got).encode())
    got, payload, block = parents_block(worker)
    assert (got, payload) == (d, b"d")
    assert outcomes(block)[1] == {b: (1, JSON, str(b).encode()), c: (1, JSON, str(c).encode())}
    finish(worker, d)
    done = [producer.read() for _ in range(4)]
    assert all(kind == DONE for kind, _ in done)


def test_a_failed_parent_fails_its_child_unless_it_continues(connect: Connect) -> None:
    producer, worker = connect(), connect()
    q = in_queue(b"failing")
    parent, _ = producer.ok(submit(b"t", b"p", q))
    failing, _ = producer.ok(submit(b"t", b"c1", q, after(parent)))
    going, _ = producer.ok(
        submit(b"t", b"c2", q, after(parent), option(ON_PARENT_FAILURE, b"\x02"))
    )
    got, _, _ = parents_block(worker, ready(1, b"failing"))
    worker.send(nack(got, worker.tokens.pop(got), b"broken", 1))
    told = sorted(producer.read() for _ in range(2))
    assert told == sorted(
        [
            (FAILED, struct.pack(">I", parent) + b"broken"),
            (FAILED, struct.pack(">I", failing) + f"parent {parent} failed: broken".encode()),
        ]
    )
    got, _, block = parents_block(worker)
    assert got == going and outcomes(block)[1] == {parent: (2, 0, b"broken")}
    finish(worker, got)


def test_a_group_callback_gets_the_groups_counts(connect: Connect) -> None:
    producer, worker, opener = connect(), connect(), connect()
    q = in_queue(b"chord")
    group_id = opener.info(group(1))["group"]
    member = option(IN_GROUP, struct.pack(">I", group_id))
    members = [producer.ok(submit(b"t", b"m", q, member))[0] for _ in range(3)]
    callback, _ = producer.ok(
        submit(b"t", b"cb", q, option(AFTER_GROUP, struct.pack(">I", group_id)))
    )
    worker.send(ready(1, b"chord"))
    for expected in members:
        got, _, _ = parents_block(worker)
        assert got == expected
        finish(worker, got, b"\x01" + bytes([got % 256]))
    assert worker.silent_for(0.3)  # the group is still open
    opener.send(group(2, group_id))
    assert sorted(opener.read()[0] for _ in range(2)) == [INFO, GROUP_STATE]
    got, _, block = parents_block(worker)
    head, found = outcomes(block)
    assert got == callback and head["group"] == (group_id, 3, 3, 0, 0)
    assert found == {m: (1, 1, bytes([m % 256])) for m in members}
    finish(worker, got)


def test_a_waiting_task_is_inspected_and_cancelled(connect: Connect) -> None:
    producer = connect()
    parent, _ = producer.ok(submit(b"t", b"p", in_queue(b"parked")))
    child, _ = producer.ok(submit(b"t", b"c", in_queue(b"parked"), after(parent)))
    inspected = producer.info(task_id_frame(INSPECT, child))
    assert inspected["state"] == "waiting"
    assert inspected["why"][0]["parents"] == [parent]
    assert inspected["why"][0]["text"] == f"it waits for parent {parent} (0 of 1 parents finished)"
    assert cancel(producer, child) == (CANCELLED, INFO)
    assert producer.error(task_id_frame(INSPECT, child))[0] == 5  # finished
    assert cancel(producer, parent) == (CANCELLED, INFO)


@pytest.mark.parametrize(
    ("items", "code"),
    [
        (option(AFTER, b"\x00"), INVALID),
        (option(AFTER, b"\x01\x00\x00\x00"), INVALID),
        (option(AFTER, b"\x02\x00\x00\x00\x01"), INVALID),
        (after(0), INVALID),
        (after(1, 1), INVALID),
        (after(999_999) + option(ON_PARENT_FAILURE, b"\x03"), INVALID),
        (after(999_999) + option(ON_PARENT_FAILURE, b"\x00\x00"), INVALID),
        (option(ON_PARENT_FAILURE, b"\x01"), INVALID),
        (option(AFTER_GROUP, b"\x00\x00\x00\x00"), INVALID),
        (option(AFTER_GROUP, b"\x00\x00\x01"), INVALID),
        (after(999_999), UNKNOWN_PARENT),
        (option(AFTER_GROUP, struct.pack(">I", 999_999)), UNKNOWN_PARENT),
        (after(1, 2, 3, 4), INVALID),  # max_parents = 3
    ],
    ids=[
        "count 0",
        "short",
        "count past the ids",
        "task 0",
        "a parent twice",
        "policy 3",
        "policy of 2 bytes",
        "policy alone",
        "group 0",
        "group of 3 bytes",
        "unknown parent",
        "unknown group",
        "past max_parents",
    ],
)
def test_every_bad_dependency_is_refused_and_loses_nothing(
    connect: Connect, items: bytes, code: int
) -> None:
    producer = connect()
    got, _ = producer.error(submit(b"t", b"x", in_queue(b"refused"), items))
    assert got == code
    assert producer.alive()
    queues = {q["name"]: q for q in producer.info(frame(QUEUES))}
    assert "refused" not in queues or queues["refused"]["depth"] == 0


def test_max_parents_and_max_waiting_at_their_edges(connect: Connect) -> None:
    producer = connect()
    parked = in_queue(b"edges")
    parents = [producer.ok(submit(b"t", b"p", parked))[0] for _ in range(3)]
    waiting = [producer.ok(submit(b"t", b"c", parked, after(*parents)))[0] for _ in range(4)]
    code, message = producer.error(submit(b"t", b"c", parked, after(parents[0])))
    assert code == QUEUE_FULL and "max_waiting = 4" in message
    assert cancel(producer, waiting[0]) == (CANCELLED, INFO)
    waiting[0], _ = producer.ok(submit(b"t", b"c", parked, after(parents[0])))
    for task_id in waiting + parents:
        assert cancel(producer, task_id) == (CANCELLED, INFO)
