"""
Black-box interop tests: the Quicx protocol page, checked byte for byte.

These drive a running C{twistd -n quicx} with raw sockets and C{struct}
alone.  Nothing from the C{quicx} package is imported, so they check the wire
contract independently of the project's own encoders and decoders.
"""

from __future__ import annotations

import struct
import time

import pytest

from tests.interop import raw
from tests.interop.raw import (
    DONE,
    ERROR,
    FAILED,
    HEARTBEAT,
    OK,
    PONG,
    READY,
    STATS,
    STATS_RESPONSE,
    SUBMIT,
    TASK,
    WAIT,
    Wire,
)
from tests.interop.raw import submit_v1 as submit

pytestmark = pytest.mark.interop


def frame(message_type: int, payload: bytes = b"") -> bytes:
    return raw.frame(message_type, payload, version=1)


@pytest.fixture
def connect(daemon, wires):
    return lambda: wires(daemon.address, 1)


def test_protocol_page_example_end_to_end(connect) -> None:
    producer, worker = connect(), connect()
    payload = b'{"to":"user@gmail.com"}'
    producer.sock.sendall(b"\x01\x01\x00\x00\x00\x22" + b"\x0a" + b"send_email" + payload)
    kind, body = producer.read()
    assert (kind, len(body)) == (OK, 4)
    (task_id,) = struct.unpack(">I", body)
    kind, body = worker.ask(b"\x01\x04\x00\x00\x00\x00")
    assert kind == TASK
    assert body == struct.pack(">I", task_id) + b"\x0asend_email" + payload
    worker.sock.sendall(frame(DONE, struct.pack(">I", task_id)))
    assert producer.read() == (DONE, struct.pack(">I", task_id))


def test_failed_reason_reaches_the_producer_verbatim(connect) -> None:
    producer, worker = connect(), connect()
    kind, body = producer.ask(submit(b"job", b"x"))
    assert kind == OK
    worker.ask(frame(READY))
    reason = "disk full — ✗".encode()
    worker.sock.sendall(frame(FAILED, body + reason))
    assert producer.read() == (FAILED, body + reason)


def test_ready_on_empty_queue_waits_then_task_is_pushed(connect) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(frame(READY)) == (WAIT, b"")
    kind, body = producer.ask(submit(b"t", b"push me"))
    assert kind == OK
    assert worker.read() == (TASK, body + b"\x01t" + b"push me")


def test_ok_ids_are_distinct_and_increasing(connect) -> None:
    producer = connect()
    producer.sock.sendall(b"".join(submit(b"t", b"%d" % i) for i in range(100)))
    ids = []
    for _ in range(100):
        kind, body = producer.read()
        assert kind == OK
        ids.append(struct.unpack(">I", body)[0])
    assert ids == sorted(set(ids))


def test_heartbeat_is_answered_with_pong(connect) -> None:
    peer = connect()
    assert peer.ask(frame(HEARTBEAT)) == (PONG, b"")


def test_stats_response_is_28_bytes(connect) -> None:
    producer, monitor = connect(), connect()
    producer.ask(submit(b"t", b"abc"))
    producer.ask(submit(b"t", b"defg"))
    worker = connect()
    assert worker.ask(frame(READY))[0] == TASK
    kind, body = monitor.ask(frame(STATS))
    assert (kind, len(body)) == (STATS_RESPONSE, 28)
    depth, total, idle, used, pool = struct.unpack(">IIIQQ", body)
    assert (depth, total, idle) == (1, 1, 0)
    assert 0 < used < pool


def test_worker_loss_redelivers_the_task(connect) -> None:
    producer = connect()
    kind, body = producer.ask(submit(b"t", b"again"))
    assert kind == OK
    first = connect()
    assert first.ask(frame(READY)) == (TASK, body + b"\x01tagain")
    first.close()
    time.sleep(0.1)
    second = connect()
    assert second.ask(frame(READY)) == (TASK, body + b"\x01tagain")


@pytest.mark.parametrize(
    "data",
    [
        struct.pack(">BBI", 3, STATS, 0),  # bad version (2 is valid by default)
        struct.pack(">BBI", 1, 0x7F, 0),  # unknown type
        frame(SUBMIT, b"\x20short"),  # type_len past the payload
        frame(DONE, b"\x00\x00\x00"),  # DONE not 4 bytes
        frame(READY, b"\x00"),  # READY with a payload
        frame(OK, b"\x00\x00\x00\x01"),  # daemon-to-client type
    ],
)
def test_invalid_messages_get_error_0x02(connect, data: bytes) -> None:
    peer = connect()
    kind, body = peer.ask(data)
    assert (kind, body[:1]) == (ERROR, b"\x02")
    assert peer.ask(frame(HEARTBEAT)) == (PONG, b"")


def test_payload_larger_than_the_largest_class_gets_error_0x03(connect) -> None:
    producer = connect()
    kind, body = producer.ask(submit(b"t", b"x" * 1025))
    assert (kind, body[:1]) == (ERROR, b"\x03")
    # A length prefix far beyond any class: answered at once, the payload
    # skipped as it streams in, the connection still usable.
    producer.sock.sendall(struct.pack(">BBI", 1, SUBMIT, 8_000_000))
    kind, body = producer.read()
    assert (kind, body[:1]) == (ERROR, b"\x03")
    producer.sock.sendall(b"\x00" * 8_000_000)
    assert producer.ask(submit(b"t", b"fine"))[0] == OK


def test_full_pool_gets_error_0x01(connect) -> None:
    producer = connect()
    # Only the largest class (1024 bytes by default) holds 1020 bytes; fill it.
    accepted = 0
    while (reply := producer.ask(submit(b"t", b"x" * 1020)))[0] == OK and accepted < 100_000:
        accepted += 1
    assert (reply[0], reply[1][:1]) == (ERROR, b"\x01")
    assert accepted > 0
    # Smaller classes still have room.
    assert producer.ask(submit(b"t", b"small"))[0] == OK


@pytest.mark.parametrize("fsync", ["always", "everysec"])
def test_pipelined_answers_keep_request_order_with_a_journal(
    tmp_path, start_daemon, fsync: str
) -> None:
    # Clients match answers to requests by order: an ERROR, PONG or
    # STATS_RESPONSE must never overtake an OK still waiting for its sync.
    daemon = start_daemon(f"--journal={tmp_path / 'journal'}", f"--fsync={fsync}")
    peer = Wire(daemon.address, 1)
    try:
        requests = [
            (submit(b"t", b"one"), OK),
            (frame(SUBMIT, b"\x09short"), ERROR),  # a type longer than the payload
            (frame(HEARTBEAT), PONG),
            (submit(b"t", b"x" * 5000), ERROR),
            (frame(STATS), STATS_RESPONSE),
            (submit(b"t", b"two"), OK),
        ] * 25
        peer.sock.sendall(b"".join(request for request, _ in requests))
        kinds = [peer.read()[0] for _ in requests]
    finally:
        peer.close()
    assert kinds == [kind for _, kind in requests]
