"""
Black-box interop tests: the Quicx protocol page, checked byte for byte.

These drive a running C{twistd -n quicx} with raw sockets and C{struct}
alone.  Nothing from the C{quicx} package is imported, so they check the wire
contract independently of the project's own encoders and decoders.
"""

from __future__ import annotations

import socket
import struct
import time

import pytest

pytestmark = pytest.mark.interop

SUBMIT, OK, ERROR, READY, TASK, DONE, FAILED, WAIT = range(1, 9)
HEARTBEAT, PONG, STATS, STATS_RESPONSE = 9, 10, 11, 12


def frame(message_type: int, payload: bytes = b"") -> bytes:
    return struct.pack(">BBI", 1, message_type, len(payload)) + payload


def submit(task_type: bytes, payload: bytes) -> bytes:
    return frame(SUBMIT, bytes([len(task_type)]) + task_type + payload)


class Wire:
    """A raw connection that reads whole frames."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=5)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _exactly(self, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed")
            data += chunk
        return data

    def read(self) -> tuple[int, bytes]:
        version, message_type, length = struct.unpack(">BBI", self._exactly(6))
        assert version == 1
        return message_type, self._exactly(length)

    def ask(self, data: bytes) -> tuple[int, bytes]:
        self.sock.sendall(data)
        return self.read()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def connect(daemon):
    opened: list[Wire] = []

    def open_wire() -> Wire:
        opened.append(Wire(daemon.address))
        return opened[-1]

    yield open_wire
    for wire in opened:
        wire.close()


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
        struct.pack(">BBI", 2, STATS, 0),  # bad version
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
    peer = Wire(daemon.address)
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
