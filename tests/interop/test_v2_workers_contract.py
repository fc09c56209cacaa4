"""
Black-box interop tests of the workers' messages (docs/protocol.md, "Version
2: workers"): ANNOUNCE and routing by type, WORKERS, STEER and the STOP a
steered worker is sent, and every bad input the page names.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  One daemon serves the module, with
C{max_worker_types = 3} and a short C{terminate_grace}.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    OK,
    READY,
    TASK,
    WAIT,
    Wire,
    frame,
    option,
    parse_task,
    ready,
    submit,
)
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

ANNOUNCE, WORKERS, STEER, STOP = 0x2C, 0x2D, 0x2E, 0x2F
QUIET, TERMINATE = 1, 2
NAME, HOST, PID = 1, 2, 3
INVALID, TOO_LARGE, NOT_FOUND, FORBIDDEN, UNSTEERABLE = 0x02, 0x03, 0x05, 0x06, 0x0A
MAX_TYPES = 3

Connect = Callable[..., Wire]


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    config = f"[limits]\nmax_worker_types = {MAX_TYPES}\nterminate_grace = 0.5\n"
    with launch(tmp_path_factory.mktemp("workers"), config) as daemon:
        yield daemon


@pytest.fixture
def connect(daemon: DaemonProcess, wires: Connect) -> Connect:
    return lambda version=2: wires(daemon.address, version)


@pytest.fixture
def admin(daemon: DaemonProcess, wires: Connect) -> Wire:
    """The control socket: the admin role."""
    return wires(str(daemon.control_path))


def announce(*types: bytes, fields: bytes = b"", count: int | None = None) -> bytes:
    body = struct.pack(">H", len(types) if count is None else count)
    body += b"".join(bytes([len(t)]) + t for t in types)
    return frame(ANNOUNCE, body + fields)


def steer(action: int, worker: int) -> bytes:
    return frame(STEER, struct.pack(">BI", action, worker))


def worker_ids(admin: Wire, name: str) -> list[int]:
    return [w["id"] for w in admin.info(frame(WORKERS)) if w["name"] == name]


def test_a_worker_is_sent_only_the_types_it_announced(connect: Connect, admin: Wire) -> None:
    worker = connect()
    fields = option(NAME, b"raw-routed") + option(HOST, b"h") + option(PID, struct.pack(">I", 7))
    worker.send(announce(b"route-a", b"route-b", fields=fields))
    worker.send(ready(1, b"routing"))
    assert worker.read()[0] == WAIT
    producer = connect()
    queue = option(1, b"routing")
    assert producer.ask(submit(b"route-c", b"no", queue))[0] == OK
    assert producer.ask(submit(b"route-b", b"yes", queue))[0] == OK
    # The task behind the one nobody runs is not held up by it.
    assert worker.task()["type"] == b"route-b"
    [record] = [w for w in admin.info(frame(WORKERS)) if w["name"] == "raw-routed"]
    assert (record["host"], record["pid"], record["types"]) == ("h", 7, ["route-a", "route-b"])
    assert record["holding"] == 1 and record["state"] == "active"
    assert record["tasks"][0]["type"] == "route-b"


@pytest.mark.parametrize(
    ("payload", "said"),
    [
        (b"", "has no type count"),
        (b"\x00", "has no type count"),
        (b"\x00\x02\x01a", "lists 2 task types but has 1"),
        (b"\x00\x01\x00", "empty task type"),
        (b"\x00\x01\x05ab", "runs past the payload"),
        (b"\x00\x02\x01a\x01a", "lists a task type twice"),
        (b"\x00\x00" + option(PID, b"\x00\x00\x07"), "process id is 4 bytes"),
        (b"\x00\x00" + option(NAME, b"\xff\xfe"), "not UTF-8"),
        (b"\x00\x00" + option(NAME, b"a") + option(NAME, b"b"), "repeats option 0x01"),
        (b"\x00\x00\x01", "has no length"),
    ],
)
def test_a_malformed_announce_is_error_0x02_and_the_connection_stays(
    connect: Connect, payload: bytes, said: str
) -> None:
    peer = connect()
    code, message = peer.error(frame(ANNOUNCE, payload))
    assert code == INVALID and said in message
    assert peer.alive()


def test_announce_comes_once_before_ready_and_within_its_limit(connect: Connect) -> None:
    late = connect()
    late.send(ready())
    assert late.read()[0] == WAIT
    code, message = late.error(announce(b"x"))
    assert (code, "before the connection's first READY" in message) == (INVALID, True)
    twice = connect()
    twice.send(announce(b"x"))
    assert twice.error(announce(b"y"))[0] == INVALID
    too_many = connect()
    code, message = too_many.error(announce(b"a", b"b", b"c", b"d"))
    assert code == INVALID and f"max_worker_types ({MAX_TYPES})" in message
    producer = connect()
    assert producer.ask(submit(b"t", b"x", option(1, b"producing")))[0] == OK
    assert producer.error(announce(b"t"))[0] == INVALID
    assert too_many.alive() and producer.alive()


@pytest.mark.parametrize("payload", [b"\x00", bytes(3)])
def test_a_workers_cursor_that_is_not_4_bytes_is_error_0x02(admin: Wire, payload: bytes) -> None:
    code, message = admin.error(frame(WORKERS, payload))
    assert (code, "payload must be empty or 4 bytes" in message) == (INVALID, True)
    assert admin.alive()


def test_workers_is_answered_a_page_at_a_time_after_a_cursor(connect: Connect, admin: Wire) -> None:
    for n in range(3):
        worker = connect()
        worker.send(announce(b"paged", fields=option(NAME, f"paged-{n}".encode())))
        worker.send(ready(1, b"paging"))
        assert worker.read()[0] == WAIT
    ids = [w["id"] for w in admin.info(frame(WORKERS)) if w["name"].startswith("paged-")]
    page = admin.info(frame(WORKERS, struct.pack(">I", 0)))
    assert [w["id"] for w in page["workers"] if w["name"].startswith("paged-")] == ids
    assert page["next"] is None
    after = admin.info(frame(WORKERS, struct.pack(">I", ids[0])))
    assert [w["id"] for w in after["workers"] if w["name"].startswith("paged-")] == ids[1:]


def test_a_frame_longer_than_its_type_may_carry_is_refused_at_its_header(
    connect: Connect,
) -> None:
    peer = connect()
    # max_worker_types * 256, the count and the fields: one byte more is too large.
    longest = 2 + MAX_TYPES * 256 + 3 * 257
    code, message = peer.error(frame(ANNOUNCE, bytes(longest + 1)))
    assert (code, f"exceeds the limit of {longest}" in message) == (TOO_LARGE, True)
    assert peer.error(frame(WORKERS, bytes(5)))[0] == TOO_LARGE
    assert peer.error(frame(STEER, bytes(6)))[0] == TOO_LARGE
    assert peer.alive()


@pytest.mark.parametrize(
    ("payload", "said"),
    [(b"", "must be 5 bytes"), (b"\x01\x00\x00\x00", "must be 5 bytes"),
     (b"\x03\x00\x00\x00\x01", "neither quiet (1) nor terminate (2)"),
     (b"\x00\x00\x00\x00\x01", "neither quiet")],
)  # fmt: skip
def test_a_malformed_steer_is_error_0x02(admin: Wire, payload: bytes, said: str) -> None:
    code, message = admin.error(frame(STEER, payload))
    assert code == INVALID and said in message
    assert admin.alive()


def test_steer_needs_the_admin_role_and_a_version_2_worker(connect: Connect, admin: Wire) -> None:
    tcp = connect()
    code, message = tcp.error(steer(QUIET, 0))
    assert code == FORBIDDEN and "STEER needs the admin role" in message
    assert admin.error(steer(TERMINATE, 0xFFFFFFF0)) == (
        NOT_FOUND,
        "no worker 4294967280 is connected",
    )
    old = connect(version=1)
    old.send(frame(READY, version=1))
    assert old.read()[0] == WAIT
    ids = [w["id"] for w in admin.info(frame(WORKERS)) if w["protocol"] == 1]
    code, message = admin.error(steer(QUIET, ids[-1]))
    assert code == UNSTEERABLE and "protocol version 1" in message
    # The daemon sends STOP; a client may not.
    assert tcp.error(frame(STOP, b"\x01\x00\x00\x00\x00"))[0] == INVALID


def test_a_quiet_worker_is_told_and_sent_nothing_more(connect: Connect, admin: Wire) -> None:
    worker = connect()
    worker.send(announce(fields=option(NAME, b"raw-quiet")))
    worker.send(ready(2, b"quiet-q"))
    assert worker.read()[0] == WAIT
    producer = connect()
    assert producer.ask(submit(b"t", b"1", option(1, b"quiet-q")))[0] == OK
    held = worker.task()
    [worker_id] = worker_ids(admin, "raw-quiet")
    assert admin.info(steer(QUIET, worker_id)) == {"action": "quiet", "workers": [worker_id]}
    assert worker.read() == (STOP, bytes([QUIET]) + bytes(4))
    assert producer.ask(submit(b"t", b"2", option(1, b"quiet-q")))[0] == OK
    worker.send(ready(5, b"quiet-q"))  # asks again: still nothing
    assert worker.silent_for(0.3)
    worker.send(frame(0x17, struct.pack(">IQ", held["id"], worker.tokens[held["id"]])))
    assert worker.silent_for(0.3)
    [record] = [w for w in admin.info(frame(WORKERS)) if w["id"] == worker_id]
    assert (record["state"], record["holding"], record["credits"]) == ("quiet", 0, 0)


def test_a_terminated_worker_is_told_its_tasks_go_elsewhere_and_it_is_closed(
    connect: Connect, admin: Wire
) -> None:
    worker = connect()
    worker.send(announce(fields=option(NAME, b"raw-terminated")))
    worker.send(ready(1, b"terminate-q"))
    assert worker.read()[0] == WAIT
    producer = connect()
    assert producer.ask(submit(b"t", b"x", option(1, b"terminate-q")))[0] == OK
    held = worker.task()
    other = connect()
    other.send(ready(1, b"terminate-q"))
    assert other.read()[0] == WAIT  # idle before the terminate: it takes what is requeued
    [worker_id] = worker_ids(admin, "raw-terminated")
    assert admin.info(steer(TERMINATE, worker_id))["workers"] == [worker_id]
    told = worker.read()
    while told[0] == WAIT:  # (its credit, freed as its task was taken back, found none)
        told = worker.read()
    assert told == (STOP, bytes([TERMINATE]) + struct.pack(">I", 500))
    kind, body = other.read()
    if kind == WAIT:  # its READY came before the task was taken back: nothing then
        kind, body = other.read()
    assert kind == TASK, (kind, body)
    again = parse_task(body)
    assert (again["id"], again["attempt"]) == (held["id"], 2)
    # Its late ACK is stale; after the grace the daemon closes it.
    code, _ = worker.error(frame(0x17, struct.pack(">IQ", held["id"], worker.tokens[held["id"]])))
    assert code == 0x08
    deadline = time.monotonic() + 10
    with pytest.raises(ConnectionError):
        while time.monotonic() < deadline:
            worker.read()
