"""
Black-box interop tests of checkpoints (docs/protocol.md, "Version 2:
checkpoints"): CHECKPOINT and its answer, the TASK context items 0x24 that
hand the state back, and every bad input the page names, each limit at its
edge.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  One daemon with small limits serves the
module (each test has a queue of its own).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    ERROR,
    HELLO,
    QUEUE,
    WAIT,
    Wire,
    ack,
    frame,
    option,
    parse_task,
    ready,
    submit,
    token_of,
)
from tests.interop.test_v2_contract import connections
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

CHECKPOINT = 0x30
SAVED = 0x24  # the TASK context tag that carries it back
BYTES, TEXT, JSON = 1, 2, 3
MAX_SIZE, MAX_MEMORY = 300, 600

LIMITS = f"""\
[checkpoints]
max_size = {MAX_SIZE}
max_memory = {MAX_MEMORY}
"""


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("checkpoints"), LIMITS) as daemon:
        yield daemon


@pytest.fixture
def connect(small: DaemonProcess, wires: Connect) -> Connect:
    return connections(small, wires)


def checkpoint(task_id: int, token: int, kind: int, state: bytes) -> bytes:
    return frame(CHECKPOINT, struct.pack(">IQB", task_id, token, kind) + state)


def answer(peer: Wire, data: bytes) -> tuple[int, int, int, str]:
    """Send C{data}; the answer (past WAITs) must be a CHECKPOINT: task id, token, code, reason."""
    peer.send(data)
    while (message := peer.read())[0] == WAIT:
        pass
    kind, body = message
    assert kind == CHECKPOINT, (kind, body)
    task_id, token, code = struct.unpack_from(">IQB", body)
    return task_id, token, code, body[13:].decode("utf-8")


def saved_state(raw_task_body: bytes) -> bytes | None:
    """The 0x24 items of a raw TASK's context, joined in order (None: none)."""
    offset = 15
    offset += 1 + raw_task_body[offset]  # queue
    offset += 1 + raw_task_body[offset]  # type
    (length,) = struct.unpack_from(">H", raw_task_body, offset)
    offset += 2
    end, parts = offset + length, []
    while offset < end:
        tag, size = raw_task_body[offset], raw_task_body[offset + 1]
        if tag == SAVED:
            parts.append(raw_task_body[offset + 2 : offset + 2 + size])
        offset += 2 + size
    return b"".join(parts) if parts else None


def held(connect: Connect, queue: bytes, count: int = 1) -> tuple[Wire, Wire, list[dict]]:
    """A producer, a worker of C{queue}, and C{count} tasks it holds."""
    producer, worker = connect(), connect()
    for n in range(count):
        producer.ok(submit(b"t", b"p%d" % n, option(QUEUE, queue)))
    worker.send(ready(count, queue))
    tasks = [worker.task() for _ in range(count)]
    return producer, worker, tasks


def next_raw_task(worker: Wire) -> tuple[int, bytes]:
    """The next TASK's id and raw body, past WAITs."""
    while True:
        kind, body = worker.read()
        if kind != WAIT:
            assert kind == 5, (kind, body)
            return struct.unpack_from(">I", body)[0], body


def finish(worker: Wire, body: bytes) -> None:
    """ACK the raw TASK C{body}: its checkpoint is freed (the module's daemon has little room)."""
    task = parse_task(body)
    worker.send(ack(task["id"], token_of(task)))


def test_hello_says_it_takes_checkpoints_and_how_large(connect: Connect) -> None:
    document = connect().info(frame(HELLO))
    assert "checkpoints" in document["capabilities"]
    assert document["limits"]["max_checkpoint"] == MAX_SIZE


def test_a_kept_checkpoint_rides_the_redelivery_in_255_byte_items(connect: Connect) -> None:
    _, worker, (task,) = held(connect, b"cp-kept")
    token = worker.tokens[task["id"]]
    assert SAVED not in task["context"]  # a first delivery has none
    state = json.dumps("y" * (MAX_SIZE - 2)).encode()  # the largest: a JSON string of 300 bytes
    assert answer(worker, checkpoint(task["id"], token, JSON, state)) == (task["id"], token, 0, "")
    worker.sock.close()  # lost: the task goes back to its queue
    again = connect()
    again.send(ready(1, b"cp-kept"))
    task_id, body = next_raw_task(again)
    assert task_id == task["id"]
    assert saved_state(body) == bytes([JSON]) + state
    # 301 bytes: two items, of 255 and 46 bytes, in order.
    offset = body.index(bytes([SAVED, 255]))
    assert body[offset + 2 + 255 : offset + 2 + 255 + 2] == bytes([SAVED, 46])
    finish(again, body)


def test_a_frame_longer_than_max_size_is_refused_from_its_header(connect: Connect) -> None:
    _, worker, (task,) = held(connect, b"cp-large")
    token = worker.tokens[task["id"]]
    too_long = struct.pack(">BBI", 2, CHECKPOINT, 13 + MAX_SIZE + 1)
    kind, body = worker.ask(too_long)  # its payload not sent yet: refused all the same
    assert (kind, body[0]) == (ERROR, 0x03), (kind, body)
    worker.send(struct.pack(">IQB", task["id"], token, BYTES) + b"z" * (MAX_SIZE + 1))
    assert worker.alive()  # the payload was skipped, the connection is usable
    fits = checkpoint(task["id"], token, BYTES, b"z" * MAX_SIZE)
    assert answer(worker, fits)[2] == 0
    worker.send(ack(task["id"], token))


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        (b"", "needs at least 13 bytes"),
        (struct.pack(">IQ", 1, 1), "needs at least 13 bytes"),
        (struct.pack(">IQB", 0, 1, BYTES), "names task 0"),
        (struct.pack(">IQB", 1, 1, 9) + b"x", "unknown result kind"),
        (struct.pack(">IQB", 1, 1, JSON) + b"{nope", "not JSON"),
        (struct.pack(">IQB", 1, 1, TEXT) + b"\xff\xfe", "not TEXT"),
    ],
)
def test_a_malformed_checkpoint_is_error_2(connect: Connect, payload: bytes, fragment: str) -> None:
    peer = connect()
    code, message = peer.error(frame(CHECKPOINT, payload))
    assert code == 0x02 and fragment in message, message
    assert peer.alive()


def test_a_task_this_connection_does_not_hold_is_error_2(connect: Connect) -> None:
    producer, worker, (task,) = held(connect, b"cp-stranger")
    token = worker.tokens[task["id"]]
    for stranger in (producer, connect()):
        code, _ = stranger.error(checkpoint(task["id"], token, BYTES, b"mine"))
        assert code == 0x02


def test_a_stale_token_is_answered_0x08_and_the_last_checkpoint_stands(connect: Connect) -> None:
    _, worker, (task,) = held(connect, b"cp-stale")
    token = worker.tokens[task["id"]]
    assert answer(worker, checkpoint(task["id"], token, TEXT, b"first"))[2] == 0
    task_id, stale, code, reason = answer(worker, checkpoint(task["id"], token + 1, TEXT, b"x"))
    assert (task_id, stale, code) == (task["id"], token + 1, 0x08)
    assert "not its current one" in reason
    worker.sock.close()
    again = connect()
    again.send(ready(1, b"cp-stale"))
    _, body = next_raw_task(again)
    assert saved_state(body) == bytes([TEXT]) + b"first"
    finish(again, body)


def test_memory_is_bounded_and_a_checkpoint_past_it_is_answered_0x01(connect: Connect) -> None:
    _, worker, tasks = held(connect, b"cp-memory", 3)
    first, second, third = ((t["id"], worker.tokens[t["id"]]) for t in tasks)
    assert answer(worker, checkpoint(*first, BYTES, b"a" * MAX_SIZE))[2] == 0
    assert answer(worker, checkpoint(*second, BYTES, b"b" * MAX_SIZE))[2] == 0  # at the bound
    _, _, code, reason = answer(worker, checkpoint(*third, BYTES, b"c"))
    assert code == 0x01 and "max_memory" in reason, reason
    worker.send(ack(*first))  # done: its checkpoint is freed
    assert answer(worker, checkpoint(*third, BYTES, b"c"))[2] == 0
    worker.send(ack(*second) + ack(*third))


def test_a_version_1_frame_of_type_0x30_is_unknown(connect: Connect) -> None:
    peer = connect(1)
    code, _ = peer.error(frame(CHECKPOINT, struct.pack(">IQB", 1, 1, BYTES), version=1))
    assert code == 0x02


def test_inspect_shows_its_size_and_when_it_was_saved(connect: Connect) -> None:
    _, worker, (task,) = held(connect, b"cp-inspect")
    token = worker.tokens[task["id"]]
    assert answer(worker, checkpoint(task["id"], token, BYTES, b"12345"))[2] == 0
    shown = connect().info(frame(0x15, struct.pack(">I", task["id"])))
    assert shown["checkpoint"]["size"] == 5
    assert isinstance(shown["checkpoint"]["at"], float)
    worker.send(ack(task["id"], token))
