"""
Black-box interop tests of version 2's part 4 (docs/protocol.md, "Version 2:
live events"): WATCH and its answer, the EVENTS lines (the events files'
records), filters by queue, type and kind, replacing and stopping a watch,
every bad input the page names, the limit on watchers, and a watcher that
reads too slowly: told what it missed, never more.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  One daemon on the defaults serves most of the
module (each test has queues of its own); a second, with small limits, tests
each limit at its edge.
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
    ERROR,
    EVENTS,
    HELLO,
    INFO,
    QUEUE,
    WATCH,
    Wire,
    ack,
    frame,
    name,
    option,
    ready,
    submit,
    token_of,
)
from tests.interop.test_v2_contract import connections
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

LIMITS = """\
[events]
max_subscribers = 2
max_held = 50
[limits]
max_output_buffer = 4096
[tasks]
allow = ok
"""
"""The second daemon: two watchers at most, few events held, small output buffers."""

KINDS = (
    "submitted",
    "rejected",
    "dispatched",
    "progress",
    "done",
    "failed",
    "retrying",
    "requeued",
    "cancelled",
    "dead",
    "replayed",
    "dropped",
    "recovered",
    "expired",
    "debounced",
    "moved",
)
"""The event kinds, in the page's order."""
FIELDS = {"t", "event", "task", "type", "size", "producer", "worker", "attempt", "queue"}
FIELDS |= {"priority", "v"}
"""The fields every line has (the events files'; C{v}, the schema version, 3)."""


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("events"), "") as daemon:
        yield daemon


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("events-limits"), LIMITS) as daemon:
        yield daemon


@pytest.fixture
def connect(defaults: DaemonProcess, wires: Connect) -> Connect:
    return connections(defaults, wires)


@pytest.fixture
def small(limited: DaemonProcess, wires: Connect) -> Connect:
    return connections(limited, wires)


# -- the layouts of part 4, packed by hand from the page ----------------------


def items(values: tuple[bytes, ...]) -> bytes:
    return bytes([len(values)]) + b"".join(name(v) for v in values)


def watch(
    queues: tuple[bytes, ...] = (),
    types: tuple[bytes, ...] = (),
    kinds: tuple[bytes, ...] = (),
) -> bytes:
    """WATCH C{[flags u8][queues][types][kinds]}, each list a count and C{[len u8][item]}s."""
    return frame(WATCH, b"\x00" + items(queues) + items(types) + items(kinds))


STOP = frame(WATCH, b"\x01")


def events(peer: Wire) -> tuple[int, list[dict[str, Any]]]:
    """Read an EVENTS C{[missed u64][lines]}: the count, and each line's JSON."""
    kind, body = peer.read()
    assert kind == EVENTS, (kind, body)
    (missed,) = struct.unpack_from(">Q", body)
    text = body[8:].decode("utf-8")
    assert text == "" or text.endswith("\n")
    return missed, [json.loads(line) for line in text.splitlines()]


def heard(peer: Wire, count: int) -> list[dict[str, Any]]:
    """Read EVENTS until C{count} events have come (none missed)."""
    records: list[dict[str, Any]] = []
    while len(records) < count:
        missed, lines = events(peer)
        assert missed == 0
        records += lines
    assert len(records) == count, records
    return records


def run(producer: Wire, worker: Wire, queue: bytes, task_type: bytes = b"t") -> int:
    """Submit a task of C{task_type} to C{queue}; C{worker} takes it and ACKs it."""
    task_id, _ = producer.ok(submit(task_type, b"x", option(QUEUE, queue)))
    task = worker.task(ready(1, queue))
    assert task["id"] == task_id
    worker.send(ack(task_id, token_of(task)))
    producer.read()  # its DONE
    return task_id


# -- WATCH and EVENTS -----------------------------------------------------------


def test_a_watcher_hears_each_step_of_a_task_as_the_files_write_it(connect: Connect) -> None:
    watcher, producer, worker = connect(), connect(), connect()
    assert watcher.info(watch((b"ev-one",))) == {
        "watching": {"queues": ["ev-one"], "types": [], "kinds": []}
    }
    task_id = run(producer, worker, b"ev-one", b"send_email")
    records = heard(watcher, 3)
    assert [r["event"] for r in records] == ["submitted", "dispatched", "done"]
    assert all(set(r) == FIELDS for r in records)
    assert all(r["v"] == 3 for r in records)  # the schema version, on every line
    assert {(r["task"], r["type"], r["queue"], r["size"]) for r in records} == {
        (task_id, "send_email", "ev-one", 1)
    }
    assert [r["attempt"] for r in records] == [0, 1, 1]
    assert records[0]["worker"] is None and records[1]["worker"] == records[2]["worker"]
    assert records[0]["t"] <= records[1]["t"] <= records[2]["t"]
    assert abs(records[0]["t"] / 1000 - time.time()) < 60


def test_filters_by_queue_type_and_kind(connect: Connect) -> None:
    by_kind, by_type, producer, worker = connect(), connect(), connect(), connect()
    by_kind.info(watch((b"ev-f1", b"ev-f2"), (), (b"done",)))
    by_type.info(watch((), (b"ev-resize",), (b"submitted", b"done")))
    first = run(producer, worker, b"ev-f1", b"ev-mail")
    second = run(producer, worker, b"ev-f2", b"ev-resize")
    run(producer, worker, b"ev-f3", b"ev-mail")
    assert [(r["event"], r["task"]) for r in heard(by_kind, 2)] == [
        ("done", first),
        ("done", second),
    ]
    assert [(r["event"], r["task"]) for r in heard(by_type, 2)] == [
        ("submitted", second),
        ("done", second),
    ]
    assert by_kind.silent_for(0.3) and by_type.silent_for(0.01)


def test_a_second_watch_replaces_the_filter_and_a_stop_ends_the_events(
    connect: Connect,
) -> None:
    watcher, producer, worker = connect(), connect(), connect()
    watcher.info(watch((b"ev-r1",)))
    assert watcher.info(watch((b"ev-r2",), (), (b"done",)))["watching"] == {
        "queues": ["ev-r2"],
        "types": [],
        "kinds": ["done"],
    }
    run(producer, worker, b"ev-r1")
    task_id = run(producer, worker, b"ev-r2")
    assert [(r["event"], r["task"]) for r in heard(watcher, 1)] == [("done", task_id)]
    assert watcher.info(STOP) == {"watching": None}
    run(producer, worker, b"ev-r2")
    assert watcher.silent_for(0.4)
    assert watcher.info(STOP) == {"watching": None}  # not watching: the same answer


def test_hello_names_the_capability_and_the_limits(connect: Connect) -> None:
    server = connect().info(frame(HELLO))
    assert "events" in server["capabilities"]
    assert server["limits"]["max_subscribers"] == 16
    assert server["limits"]["max_held_events"] == 10_000


def test_the_longest_watch_is_taken_and_a_byte_more_is_too_large(connect: Connect) -> None:
    queues = tuple(f"ev-{i:02d}".ljust(64, "x").encode() for i in range(32))
    types = tuple(bytes([i]) * 255 for i in range(32))
    kinds = tuple(k.encode() for k in KINDS)
    payload = b"\x00" + items(queues) + items(types) + items(kinds)
    assert len(payload) == 10_411  # as the page says
    peer = connect()
    answer = peer.info(frame(WATCH, payload))["watching"]
    assert len(answer["queues"]) == 32 and answer["kinds"] == list(KINDS)
    assert peer.error(frame(WATCH, payload + b"x"))[0] == 3
    assert peer.alive()


BAD = {
    "no flags": b"",
    "unknown flags": b"\x02\x00\x00\x00",
    "a stop with lists": b"\x01\x00\x00\x00",
    "33 queues": b"\x00\x21" + b"\x01q" * 33 + b"\x00\x00",
    "33 types": b"\x00\x00\x21" + b"\x01t" * 33 + b"\x00",
    "a queue twice": b"\x00\x02\x01q\x01q\x00\x00",
    "a type twice": b"\x00\x00\x02\x01t\x01t\x00",
    "a kind twice": b"\x00\x00\x00\x02\x04done\x04done",
    "a bad queue name": b"\x00\x01\x03a b\x00\x00",
    "an empty type": b"\x00\x00\x01\x00\x00",
    "an unknown kind": b"\x00\x00\x00\x01\x08finished",
    "a queue past the payload": b"\x00\x01\x09short",
    "no kind count": b"\x00\x00\x00",
    "bytes after the kinds": b"\x00\x00\x00\x00\x00",
}


@pytest.mark.parametrize("case", list(BAD))
def test_every_bad_watch_is_error_0x02_and_changes_nothing(connect: Connect, case: str) -> None:
    watcher, producer, worker = connect(), connect(), connect()
    code, message = watcher.error(frame(WATCH, BAD[case]))
    assert code == 2 and "WATCH" in message
    assert watcher.alive()
    run(producer, worker, b"ev-bad")  # it was not made a watcher
    assert watcher.silent_for(0.3)


def test_watch_is_version_2_only_and_events_go_one_way(connect: Connect) -> None:
    v1 = connect(1)
    kind, body = v1.ask(frame(WATCH, b"\x00\x00\x00\x00", version=1))
    assert (kind, body[0]) == (ERROR, 2) and b"unknown message type 0x29" in body
    kind, body = v1.ask(frame(WATCH, b"\x00\x00\x00\x00"))  # a version-2 frame
    assert (kind, body[0]) == (ERROR, 2) and b"version-2 frame on a version-1" in body
    assert v1.alive()
    v2 = connect()
    assert v2.error(frame(EVENTS, bytes(8))) == (2, "EVENTS is sent by the daemon, not to it")
    assert v2.alive()


# -- limits ---------------------------------------------------------------------


def test_past_max_subscribers_a_watch_is_error_0x01_and_a_replace_is_taken(
    small: Connect,
) -> None:
    first, second, third = small(), small(), small()
    first.info(watch())
    second.info(watch())
    code, message = third.error(watch())
    assert code == 1 and "max_subscribers = 2" in message
    assert second.info(watch(kinds=(b"done",)))["watching"]["kinds"] == ["done"]
    first.close()
    taken(third, watch())


def taken(peer: Wire, request: bytes) -> None:
    """Send WATCH C{request} until it is taken (once the daemon has seen earlier watchers go)."""
    deadline = time.monotonic() + 5
    while (answer := peer.ask(request))[0] != INFO:
        assert answer[0] == ERROR and answer[1][0] == 1 and time.monotonic() < deadline, answer
        time.sleep(0.05)


def status(daemon: DaemonProcess) -> dict[str, Any]:
    """The status document, from the control socket."""
    with socket.socket(socket.AF_UNIX) as control:
        control.settimeout(5)
        control.connect(str(daemon.control_path))
        control.sendall(b"status\n")
        answer = b""
        while chunk := control.recv(65536):
            answer += chunk
    document: dict[str, Any] = json.loads(answer)
    return document


def test_a_slow_watcher_is_told_what_it_missed_and_the_daemon_never_holds_more(
    limited: DaemonProcess, small: Connect
) -> None:
    before = status(limited)["events"]
    slow = Wire(limited.address, receive_buffer=4096)
    try:
        taken(slow, watch(kinds=(b"rejected",)))
        producer = small()
        total, batch = 0, 1000
        refused = frame(1, b"\x03bad\x00\x00x")  # a type [tasks] allow refuses: one event each
        # Until the watcher's socket buffers are full and the daemon drops
        # (how much they hold depends on the kernel's autotuning), and past it.
        dropping = 0
        while dropping < 5:
            assert total < 1_000_000, "the daemon never dropped a slow watcher's events"
            producer.send(refused * batch)
            for _ in range(batch):
                assert producer.read()[0] == ERROR
            total += batch
            dropping += status(limited)["events"]["dropped"] > before["dropped"]
        assert producer.alive()
        heard_lines = missed = 0
        while heard_lines + missed < total:
            count, lines = events(slow)
            missed += count
            heard_lines += len(lines)
            assert all(r["event"] == "rejected" and r["code"] == 4 for r in lines)
        assert heard_lines + missed == total
        assert missed > 0 and heard_lines >= 50
        assert slow.silent_for(0.3)
        after = status(limited)["events"]
        assert after["dropped"] - before["dropped"] == missed
        assert after["subscribers"] == 1 and after["directory"] is None
    finally:
        slow.close()


def test_a_watcher_sets_no_role(connect: Connect) -> None:
    peer = connect()
    peer.info(watch((b"ev-role",)))
    worker = connect()
    task_id, _ = peer.ok(submit(b"t", b"x", option(QUEUE, b"ev-role")))  # it may submit...
    task = worker.task(ready(1, b"ev-role"))
    worker.send(ack(task_id, token_of(task)))
    records: list[dict[str, Any]] = []
    while len(records) < 3:
        kind, body = peer.read()  # ...and hears its DONE among the EVENTS
        if kind == EVENTS:
            records += [json.loads(line) for line in body[8:].decode().splitlines()]
    assert [r["event"] for r in records] == ["submitted", "dispatched", "done"]
    assert peer.alive()
