"""
Black-box interop tests of protocol version 2 (docs/protocol.md, "Version 2").

Raw sockets and C{struct} alone, like the version-1 suite: nothing from the
C{quicx} package is imported, so the layouts are checked against the page,
not against the project's own codec.
"""

from __future__ import annotations

import json
import socket
import struct
import time

import pytest

pytestmark = pytest.mark.interop

SUBMIT, OK, ERROR, READY, TASK, DONE, FAILED, WAIT = range(1, 9)
HEARTBEAT, PONG, STATS, STATS_RESPONSE = 9, 10, 11, 12
HELLO, CANCEL, CANCELLED, PAUSE, RESUME, PURGE, QUEUES, PEEK, INSPECT, INFO = range(13, 23)
QUEUE, PRIORITY, KEY, FAIRNESS = 1, 2, 3, 4


def frame(message_type: int, payload: bytes = b"", version: int = 2) -> bytes:
    return struct.pack(">BBI", version, message_type, len(payload)) + payload


def option(tag: int, value: bytes) -> bytes:
    return bytes([tag, len(value)]) + value


def submit(task_type: bytes, payload: bytes, *options: bytes) -> bytes:
    opts = b"".join(options)
    return frame(
        SUBMIT, bytes([len(task_type)]) + task_type + struct.pack(">H", len(opts)) + opts + payload
    )


def name(queue: bytes) -> bytes:
    return bytes([len(queue)]) + queue


def ready(credits: int = 1, *queues: bytes) -> bytes:
    body = struct.pack(">H", credits)
    if queues:
        body += bytes([len(queues)]) + b"".join(name(q) for q in queues)
    return frame(READY, body)


def task_id_frame(message_type: int, task_id: int) -> bytes:
    return frame(message_type, struct.pack(">I", task_id))


class Wire:
    """A raw connection that reads whole frames, with their version."""

    def __init__(self, address: tuple[str, int] | str) -> None:
        if isinstance(address, str):
            self.sock = socket.socket(socket.AF_UNIX)
            self.sock.settimeout(5)
            self.sock.connect(address)
        else:
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

    def read_versioned(self) -> tuple[int, int, bytes]:
        version, message_type, length = struct.unpack(">BBI", self._exactly(6))
        return version, message_type, self._exactly(length)

    def read(self) -> tuple[int, bytes]:
        version, message_type, body = self.read_versioned()
        assert version == 2, (version, message_type, body)
        return message_type, body

    def ask(self, data: bytes) -> tuple[int, bytes]:
        self.sock.sendall(data)
        return self.read()

    def info(self, data: bytes) -> object:
        kind, body = self.ask(data)
        assert kind == INFO, (kind, body)
        return json.loads(body.decode("utf-8"))

    def ok(self, data: bytes) -> tuple[int, int]:
        kind, body = self.ask(data)
        assert (kind, len(body)) == (OK, 5), (kind, body)
        task_id, flags = struct.unpack(">IB", body)
        return task_id, flags

    def error(self, data: bytes) -> tuple[int, str]:
        kind, body = self.ask(data)
        assert kind == ERROR, (kind, body)
        return body[0], body[1:].decode("utf-8")

    def task(self, data: bytes = b"") -> dict[str, object]:
        """Send C{data} (if any), then read a TASK."""
        if data:
            self.sock.sendall(data)
        kind, body = self.read()
        assert kind == TASK, (kind, body)
        return parse_task(body)

    def silent_for(self, seconds: float) -> bool:
        self.sock.settimeout(seconds)
        try:
            self.sock.recv(1, socket.MSG_PEEK)
        except TimeoutError:
            return True
        finally:
            self.sock.settimeout(5)
        return False

    def close(self) -> None:
        self.sock.close()


def parse_task(body: bytes) -> dict[str, object]:
    """A version-2 TASK, laid out as the page says."""
    task_id, attempt, priority, enqueued_ms = struct.unpack_from(">IHBQ", body)
    offset = 15
    queue = body[offset + 1 : offset + 1 + body[offset]]
    offset += 1 + body[offset]
    task_type = body[offset + 1 : offset + 1 + body[offset]]
    offset += 1 + body[offset]
    (context_length,) = struct.unpack_from(">H", body, offset)
    offset += 2
    context, end = {}, offset + context_length
    while offset < end:
        tag, length = body[offset], body[offset + 1]
        context[tag] = body[offset + 2 : offset + 2 + length]
        offset += 2 + length
    return {
        "id": task_id,
        "attempt": attempt,
        "priority": priority,
        "enqueued_ms": enqueued_ms,
        "queue": queue,
        "type": task_type,
        "context": context,
        "payload": body[end:],
    }


@pytest.fixture
def connect(daemon):
    opened: list[Wire] = []

    def open_wire(address: tuple[str, int] | str | None = None) -> Wire:
        opened.append(Wire(address or daemon.address))
        return opened[-1]

    open_wire.daemon = daemon  # type: ignore[attr-defined]
    yield open_wire
    for wire in opened:
        wire.close()


def test_the_pages_submit_example_and_the_task_a_worker_gets(connect) -> None:
    producer, worker = connect(), connect()
    example = (
        b"\x02\x01\x00\x00\x00\x1e"
        + b"\x0asend_email"
        + b"\x00\x09"
        + b"\x01\x04mail\x02\x01\x09"
        + b'{"to":1}'
    )
    producer.sock.sendall(example)
    kind, body = producer.read()
    assert (kind, len(body), body[4]) == (OK, 5, 0)
    (task_id,) = struct.unpack(">I", body[:4])
    before = time.time() * 1000
    kind, body = worker.ask(ready(1, b"mail"))
    assert kind == TASK
    task = parse_task(body)
    assert (task["id"], task["attempt"], task["priority"]) == (task_id, 1, 9)
    assert (task["queue"], task["type"], task["payload"]) == (b"mail", b"send_email", b'{"to":1}')
    assert task["context"] == {}
    assert before - 60_000 < task["enqueued_ms"] <= time.time() * 1000 + 1
    worker.sock.sendall(task_id_frame(DONE, task_id))
    assert producer.read() == (DONE, struct.pack(">I", task_id))


def test_a_submit_without_options_costs_two_bytes_more_than_version_1(connect) -> None:
    producer, worker = connect(), connect()
    task_id, flags = producer.ok(frame(SUBMIT, b"\x01t\x00\x00" + b"body"))
    assert flags == 0
    task = worker.task(ready())
    assert (task["id"], task["queue"], task["priority"], task["payload"]) == (
        task_id,
        b"default",
        0,
        b"body",
    )


def test_priorities_fifo_keys_and_context(connect) -> None:
    producer, worker = connect(), connect()
    sent = [
        (b"a", 1, []),
        (b"b", 5, [option(FAIRNESS, b"acme")]),
        (b"c", 1, []),
        (b"d", 9, [option(KEY, b"order-1")]),
    ]
    for payload, priority, extra in sent:
        producer.ok(submit(b"t", payload, option(PRIORITY, bytes([priority])), *extra))
    worker.sock.sendall(ready(4))
    tasks = [parse_task(worker.read()[1]) for _ in sent]
    assert [t["payload"] for t in tasks] == [b"d", b"b", b"a", b"c"]
    assert tasks[0]["context"] == {KEY: b"order-1"}
    assert tasks[1]["context"] == {FAIRNESS: b"acme"}


def test_an_idempotency_key_answers_the_first_id_with_the_duplicate_flag(connect) -> None:
    producer = connect()
    first = producer.ok(submit(b"t", b"x", option(QUEUE, b"q"), option(KEY, b"k")))
    again = producer.ok(submit(b"t", b"y", option(QUEUE, b"q"), option(KEY, b"k")))
    assert (first[1], again) == (0, (first[0], 1))
    other_queue = producer.ok(submit(b"t", b"x", option(QUEUE, b"r"), option(KEY, b"k")))
    assert other_queue[1] == 0 and other_queue[0] != first[0]
    (queue,) = [q for q in producer.info(frame(QUEUES)) if q["name"] == "q"]
    assert queue["depth"] == 1


def test_queues_are_isolated_and_served_in_subscription_order(connect) -> None:
    producer, mail, both = connect(), connect(), connect()
    assert mail.ask(ready(1, b"mail")) == (WAIT, b"")
    producer.ok(submit(b"t", b"video", option(QUEUE, b"video")))
    assert mail.silent_for(0.3)
    producer.ok(submit(b"t", b"later", option(QUEUE, b"later"), option(PRIORITY, b"\xff")))
    assert both.task(ready(1, b"video", b"later"))["queue"] == b"video"


def test_version_1_clients_share_the_default_queue(connect) -> None:
    v1_producer, v2_worker, v1_worker = connect(), connect(), connect()
    v1_producer.sock.sendall(frame(SUBMIT, b"\x01told", version=1))
    version, kind, body = v1_producer.read_versioned()
    assert (version, kind, len(body)) == (1, OK, 4)
    assert v2_worker.task(ready())["queue"] == b"default"
    v2_producer = connect()
    task_id, _ = v2_producer.ok(submit(b"t", b"new"))
    v1_worker.sock.sendall(frame(READY, version=1))
    version, kind, body = v1_worker.read_versioned()
    assert (version, kind) == (1, TASK)
    assert body == struct.pack(">I", task_id) + b"\x01tnew"


BAD_INPUT = [
    ("unknown option", submit(b"t", b"x", option(0x7E, b"?"))),
    ("repeated option", submit(b"t", b"x", option(QUEUE, b"a"), option(QUEUE, b"b"))),
    ("priority of 0 bytes", submit(b"t", b"x", option(PRIORITY, b""))),
    ("priority of 2 bytes", submit(b"t", b"x", option(PRIORITY, b"\x00\x01"))),
    ("empty key", submit(b"t", b"x", option(KEY, b""))),
    ("empty fairness key", submit(b"t", b"x", option(FAIRNESS, b""))),
    ("bad queue name", submit(b"t", b"x", option(QUEUE, b"no way"))),
    ("65-byte queue name", submit(b"t", b"x", option(QUEUE, b"q" * 65))),
    (
        "options past the payload",
        frame(SUBMIT, b"\x01t\x00\x09" + option(QUEUE, b"abc")),
    ),
    (
        "options over 4096 bytes",
        frame(SUBMIT, b"\x01t" + struct.pack(">H", 4097) + option(KEY, b"k" * 255) * 17),
    ),
    ("a truncated option", frame(SUBMIT, b"\x01t\x00\x01\x01")),
    ("no options length", frame(SUBMIT, b"\x01t\x00")),
    ("READY of 1 byte", frame(READY, b"\x00")),
    ("READY of 0 credits", frame(READY, b"\x00\x00")),
    ("READY listing 0 queues", frame(READY, b"\x00\x01\x00")),
    ("READY listing a queue twice", ready(1, b"a", b"a")),
    ("READY with trailing bytes", frame(READY, ready(1, b"a")[6:] + b"\x00")),
    ("CANCEL of 3 bytes", frame(CANCEL, b"\x00\x00\x01")),
    ("INSPECT of 5 bytes", frame(INSPECT, b"\x00\x00\x00\x01\x00")),
    ("PEEK of 0 tasks", frame(PEEK, b"\x00\x00" + name(b"q"))),
    ("PEEK of 1001 tasks", frame(PEEK, struct.pack(">H", 1001) + name(b"q"))),
    ("QUEUES with a payload", frame(QUEUES, b"\x00")),
    ("HELLO with an unknown field", frame(HELLO, option(0x7F, b"x"))),
    ("PAUSE with a bad name", frame(PAUSE, name(b"a b"))),
    ("a daemon-to-client type", frame(INFO, b"{}")),
    ("an unknown type", frame(0x7F)),
    ("a version-1 frame on a version-2 connection", frame(HEARTBEAT, version=1)),
]


def test_every_bad_input_gets_error_0x02_and_loses_nothing(connect) -> None:
    producer = connect()
    kept, _ = producer.ok(submit(b"t", b"kept", option(QUEUE, b"keep")))
    for what, data in BAD_INPUT:
        peer = connect()
        if what.startswith("READY"):
            peer.sock.sendall(frame(HEARTBEAT))  # a worker-to-be: no SUBMIT first
            assert peer.read() == (PONG, b"")
        else:
            peer.ok(submit(b"t", b"first"))  # the connection speaks version 2
        peer.sock.sendall(data)
        version, kind, body = peer.read_versioned()
        assert (version, kind, body[:1]) == (2, ERROR, b"\x02"), what
        assert peer.ask(frame(HEARTBEAT)) == (PONG, b""), what
    worker = connect()
    assert worker.task(ready(1, b"keep"))["id"] == kept


def test_oversize_keys_are_error_0x02(start_daemon, tmp_path) -> None:
    config = tmp_path / "quicx.conf"
    config.write_text(
        "[server]\nlisten = tcp:0:interface=127.0.0.1\n[queues]\nmax_key_length = 8\n"
    )
    daemon = start_daemon(f"--config={config}")
    peer = Wire(daemon.address)
    try:
        code, message = peer.error(submit(b"t", b"x", option(KEY, b"k" * 9)))
        assert code == 2 and "max_key_length" in message
        code, message = peer.error(submit(b"t", b"x", option(FAIRNESS, b"f" * 9)))
        assert code == 2 and "max_key_length" in message
        assert peer.ok(submit(b"t", b"x", option(KEY, b"k" * 8)))[1] == 0
    finally:
        peer.close()


def test_a_version_2_frame_on_a_version_1_connection(connect) -> None:
    peer = connect()
    peer.sock.sendall(frame(HEARTBEAT, version=1))
    assert peer.read_versioned() == (1, PONG, b"")
    peer.sock.sendall(frame(HEARTBEAT))
    version, kind, body = peer.read_versioned()
    assert (version, kind, body[:1]) == (1, ERROR, b"\x02")
    peer.sock.sendall(frame(HEARTBEAT, version=1))
    assert peer.read_versioned() == (1, PONG, b"")


def test_versions_1_is_exactly_the_pages_daemon(start_daemon, tmp_path) -> None:
    config = tmp_path / "quicx.conf"
    config.write_text("[server]\nlisten = tcp:0:interface=127.0.0.1\n[protocol]\nversions = 1\n")
    daemon = start_daemon(f"--config={config}")
    peer = Wire(daemon.address)
    try:
        peer.sock.sendall(submit(b"t", b"x"))
        version, kind, body = peer.read_versioned()
        assert (version, kind, body[:1]) == (1, ERROR, b"\x02")
        assert b"version 2" in body
        peer.sock.sendall(frame(SUBMIT, b"\x01tx", version=1))
        assert peer.read_versioned() == (1, OK, b"\x00\x00\x00\x01")
        peer.sock.sendall(frame(HELLO))
        version, kind, body = peer.read_versioned()
        assert (version, kind, body[:1]) == (1, ERROR, b"\x02")
    finally:
        peer.close()


def test_hello_answers_what_the_daemon_is(connect) -> None:
    peer = connect()
    hello = option(1, b"interop") + option(2, b"1.0") + option(3, b"queues,teleport")
    document = peer.info(frame(HELLO, hello))
    assert document["server"] == "quicx" and 2 in document["protocol"]
    assert "queues" in document["capabilities"] and document["missing"] == ["teleport"]
    assert document["limits"]["max_payload"] == 1024


def test_cancel_peek_inspect_and_their_errors(connect) -> None:
    producer, other = connect(), connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"q"), option(PRIORITY, b"\x01")))
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"q"), option(PRIORITY, b"\x07")))
    peeked = producer.info(frame(PEEK, struct.pack(">H", 10) + name(b"q")))
    assert [(t["id"], t["type"], t["queue"], t["priority"], t["state"]) for t in peeked] == [
        (second, "t", "q", 7, "queued"),
        (first, "t", "q", 1, "queued"),
    ]
    inspected = producer.info(task_id_frame(INSPECT, first))
    reasons = {r["reason"]: r for r in inspected["why"]}
    assert reasons["ahead"]["ahead"] == 1 and reasons["ahead"]["higher_priority"] == 1
    assert "no_workers" in reasons
    assert other.ok(submit(b"t", b"mine"))[1] == 0
    assert other.error(task_id_frame(CANCEL, first))[0] == 6  # another's task
    # The answer, and the outcome (not an answer: it may come first).
    producer.sock.sendall(task_id_frame(CANCEL, first))
    got = sorted([producer.read(), producer.read()])
    assert got[0] == (CANCELLED, struct.pack(">I", first))
    assert got[1][0] == INFO
    assert json.loads(got[1][1]) == {"id": first, "state": "cancelled", "queue": "q"}
    assert producer.error(task_id_frame(CANCEL, first))[0] == 5  # finished
    assert producer.error(task_id_frame(INSPECT, 999_999))[0] == 5
    assert producer.error(frame(PEEK, b"\x00\x01" + name(b"nowhere")))[0] == 5
    worker = connect()
    assert worker.task(ready(1, b"q"))["id"] == second
    assert producer.error(task_id_frame(CANCEL, second))[0] == 7  # running


def test_admin_actions_need_the_control_socket(connect) -> None:
    producer, worker = connect(), connect()
    for action in (PAUSE, RESUME, PURGE):
        assert producer.error(frame(action, name(b"q")))[0] == 6
    admin = connect(str(connect.daemon.control_path))
    assert admin.info(frame(PAUSE, name(b"q"))) == {"queue": "q", "paused": True}
    held, _ = producer.ok(submit(b"t", b"held", option(QUEUE, b"q")))
    assert worker.ask(ready(1, b"q")) == (WAIT, b"")
    assert worker.silent_for(0.3)
    assert admin.info(frame(RESUME, name(b"q"))) == {"queue": "q", "paused": False}
    assert worker.task()["id"] == held
    gone = [producer.ok(submit(b"t", b"x", option(QUEUE, b"q")))[0] for _ in range(2)]
    assert admin.info(frame(PURGE, name(b"q"))) == {"queue": "q", "purged": 2}
    assert [producer.read() for _ in gone] == [
        (CANCELLED, struct.pack(">I", task_id)) for task_id in gone
    ]
    assert admin.error(frame(RESUME, name(b"nowhere")))[0] == 5
    assert admin.error(frame(PURGE, name(b"nowhere")))[0] == 5
    # Running tasks are untouched: the held one still finishes.
    worker.sock.sendall(task_id_frame(DONE, held))
    assert producer.read() == (DONE, struct.pack(">I", held))


def test_a_version_1_producer_hears_failed_cancelled(connect) -> None:
    v1 = connect()
    v1.sock.sendall(frame(SUBMIT, b"\x01tx", version=1))
    version, kind, body = v1.read_versioned()
    assert (version, kind) == (1, OK)
    admin = connect(str(connect.daemon.control_path))
    assert admin.info(frame(CANCEL, body))["state"] == "cancelled"
    assert v1.read_versioned() == (1, FAILED, body + b"cancelled")


def test_queue_limits_are_error_0x01_with_the_limit_named(start_daemon, tmp_path) -> None:
    config = tmp_path / "quicx.conf"
    config.write_text(
        "[server]\nlisten = tcp:0:interface=127.0.0.1\n"
        "[queues]\nmax_queues = 2\n[queue small]\nmax_depth = 1\n"
    )
    daemon = start_daemon(f"--config={config}")
    peer = Wire(daemon.address)
    try:
        kept, _ = peer.ok(submit(b"t", b"x", option(QUEUE, b"small")))
        code, message = peer.error(submit(b"t", b"x", option(QUEUE, b"small")))
        assert code == 1 and "max_depth = 1" in message
        code, message = peer.error(submit(b"t", b"x", option(QUEUE, b"third")))
        assert code == 1 and "max_queues = 2" in message
        worker = Wire(daemon.address)
        try:
            assert worker.task(ready(1, b"small"))["id"] == kept
        finally:
            worker.close()
    finally:
        peer.close()
