"""
Black-box interop tests of protocol version 2 (docs/protocol.md, "Version 2").

Raw sockets and C{struct} alone (L{tests.interop.raw}), like the version-1
suite: nothing from the C{quicx} package is imported, so the layouts are
checked against the page, not against the project's own codec.

Three daemons serve the whole module: one on the built-in defaults (each test
uses queues of its own, and takes back what it puts in the default queue),
one with C{[protocol] versions = 1}, and one with queue limits.
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    CANCEL,
    CANCELLED,
    DONE,
    ERROR,
    FAILED,
    FAIRNESS,
    HEARTBEAT,
    HELLO,
    IN_GROUP,
    INFO,
    INSPECT,
    KEY,
    LEASE,
    OK,
    PAUSE,
    PEEK,
    PONG,
    PRIORITY,
    PURGE,
    QUEUE,
    QUEUES,
    READY,
    RESUME,
    STATS,
    STATS_RESPONSE,
    SUBMIT,
    TASK,
    TOKEN,
    WAIT,
    Wire,
    ack,
    frame,
    name,
    option,
    peek,
    ready,
    submit,
    submit_v1,
    task_id_frame,
)
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    """The module's daemon on the built-in defaults (versions 1 and 2)."""
    with launch(tmp_path_factory.mktemp("v2")) as daemon:
        yield daemon


def connections(daemon: DaemonProcess, wires: Connect) -> Connect:
    """
    Connections to a module's C{daemon}, version 2 unless told; once the
    daemon has seen the last test's workers go (an idle one would take tasks).
    """
    monitor = wires(daemon.address)
    wait_for(lambda: all(q["workers"] == 0 for q in monitor.info(frame(QUEUES))))
    return lambda version=2: wires(daemon.address, version)


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


@pytest.fixture
def admin(shared: DaemonProcess, wires: Connect) -> Wire:
    """A version-2 connection to the shared daemon's control socket: an admin."""
    return wires(str(shared.control_path))


def id_bytes(task_id: int) -> bytes:
    return struct.pack(">I", task_id)


def queue_named(peer: Wire, queue: str) -> dict[str, Any]:
    (found,) = [q for q in peer.info(frame(QUEUES)) if q["name"] == queue]
    return found


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        time.sleep(0.02)


def leave(worker: Wire, monitor: Wire, queue: str) -> None:
    """Close a worker, and wait until the daemon counts no worker on C{queue}."""
    worker.close()
    wait_for(lambda: queue_named(monitor, queue)["workers"] == 0)


def finish(worker: Wire, producer: Wire, task_id: int) -> None:
    """
    The worker reports the task done: ACK with its delivery's token in
    version 2 (where DONE is refused: outcomes are fenced), DONE in version 1.
    Its producer hears DONE.
    """
    if worker.version == 2:
        worker.send(ack(task_id, worker.tokens.pop(task_id)))
    else:
        worker.send(task_id_frame(DONE, task_id, 1))
    assert producer.read() == (DONE, id_bytes(task_id))


def keys_of(task: dict[str, Any]) -> dict[int, bytes]:
    """A version-2 TASK's context less the token and lease that every one carries."""
    context = dict(task["context"])
    assert (len(context.pop(TOKEN)), len(context.pop(LEASE))) == (8, 4), task["context"]
    return context


# -- SUBMIT, OK and TASK ------------------------------------------------------


def test_the_pages_submit_example_and_the_task_a_worker_gets(connect: Connect) -> None:
    producer, worker = connect(), connect()
    example = (
        b"\x02\x01\x00\x00\x00\x1e"
        + b"\x0asend_email"
        + b"\x00\x09"
        + b"\x01\x04mail\x02\x01\x09"
        + b'{"to":1}'
    )
    before = time.time() * 1000
    producer.send(example)
    kind, body = producer.read()
    assert (kind, len(body), body[4]) == (OK, 5, 0)
    (task_id,) = struct.unpack(">I", body[:4])
    task = worker.task(ready(1, b"mail"))
    after = time.time() * 1000
    assert (task["id"], task["attempt"], task["priority"]) == (task_id, 1, 9)
    assert (task["queue"], task["type"], task["payload"]) == (b"mail", b"send_email", b'{"to":1}')
    assert keys_of(task) == {}
    assert before - 1000 <= task["enqueued_ms"] <= after + 1000
    finish(worker, producer, task_id)


ONE_OPTION = {
    "no options": ([], b"default", 0, {}),
    "queue": ([option(QUEUE, b"solo")], b"solo", 0, {}),
    "priority": ([option(PRIORITY, b"\x07")], b"default", 7, {}),
    "idempotency key": ([option(KEY, b"only-key")], b"default", 0, {KEY: b"only-key"}),
    "fairness key": ([option(FAIRNESS, b"acme")], b"default", 0, {FAIRNESS: b"acme"}),
    "all four": (
        [
            option(FAIRNESS, b"acme"),
            option(KEY, b"all-four"),
            option(PRIORITY, b"\xff"),
            option(QUEUE, b"every.option:1-2_3"),
        ],
        b"every.option:1-2_3",
        255,
        {KEY: b"all-four", FAIRNESS: b"acme"},
    ),
}


@pytest.mark.parametrize("options", ONE_OPTION, ids=list(ONE_OPTION))
def test_each_submit_option_reaches_the_task(connect: Connect, options: str) -> None:
    items, queue, priority, context = ONE_OPTION[options]
    producer, worker = connect(), connect()
    task_id, flags = producer.ok(submit(b"job", b"body", *items))
    assert flags == 0
    task = worker.task(ready(1, queue))
    assert task == {
        "id": task_id,
        "attempt": 1,
        "priority": priority,
        "enqueued_ms": task["enqueued_ms"],
        "queue": queue,
        "type": b"job",
        "context": task["context"],
        "payload": b"body",
    }
    assert keys_of(task) == context
    finish(worker, producer, task_id)


def test_a_submit_without_options_costs_two_bytes_more_than_version_1(connect: Connect) -> None:
    producer, worker = connect(), connect()
    producer.send(frame(SUBMIT, b"\x01t\x00\x00"))  # an empty payload is legal
    kind, body = producer.read()
    assert (kind, len(body), body[4]) == (OK, 5, 0)
    task = worker.task(ready())
    assert (task["queue"], task["type"], task["payload"]) == (b"default", b"t", b"")
    finish(worker, producer, task["id"])


def test_priorities_highest_first_fifo_within_one(connect: Connect) -> None:
    producer, worker = connect(), connect()
    sent = [(b"a", 1), (b"b", 5), (b"c", 1), (b"d", 9), (b"e", 0), (b"f", 5)]
    for payload, priority in sent:
        producer.ok(
            submit(b"t", payload, option(QUEUE, b"prio"), option(PRIORITY, bytes([priority])))
        )
    worker.send(ready(len(sent), b"prio"))
    tasks = [worker.task() for _ in sent]
    assert [t["payload"] for t in tasks] == [b"d", b"b", b"f", b"a", b"c", b"e"]
    assert [t["priority"] for t in tasks] == [9, 5, 5, 1, 1, 0]


def test_fairness_keys_take_turns_within_a_priority(connect: Connect) -> None:
    producer, worker = connect(), connect()
    sent = [
        (b"a1", b"A"),
        (b"a2", b"A"),
        (b"a3", b"A"),
        (b"b1", b"B"),
        (b"n1", None),
        (b"b2", b"B"),
    ]
    for payload, key in sent:
        items = [option(QUEUE, b"turns")] + ([option(FAIRNESS, key)] if key else [])
        producer.ok(submit(b"t", payload, *items))
    worker.send(ready(len(sent), b"turns"))
    got = [worker.task()["payload"] for _ in sent]
    assert got == [b"a1", b"b1", b"n1", b"a2", b"b2", b"a3"]


def test_a_lost_workers_task_goes_back_to_the_head_as_attempt_2(connect: Connect) -> None:
    producer, lost = connect(), connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"loss")))
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"loss")))
    assert lost.task(ready(1, b"loss"))["id"] == first
    lost.close()
    wait_for(lambda: queue_named(producer, "loss")["depth"] == 2)
    worker = connect()
    worker.send(ready(2, b"loss"))
    again, other = worker.task(), worker.task()
    assert (again["id"], again["attempt"], again["payload"]) == (first, 2, b"one")
    assert (other["id"], other["attempt"]) == (second, 1)


# -- idempotency keys ---------------------------------------------------------


def test_a_duplicate_key_answers_the_first_id_and_queues_nothing(connect: Connect) -> None:
    producer, worker = connect(), connect()
    first = producer.ok(submit(b"t", b"x", option(QUEUE, b"dedup"), option(KEY, b"k")))
    again = producer.ok(submit(b"t", b"y", option(QUEUE, b"dedup"), option(KEY, b"k")))
    assert (first[1], again) == (0, (first[0], 1))
    assert queue_named(producer, "dedup")["depth"] == 1
    worker.send(ready(2, b"dedup"))
    task = worker.task()
    assert (task["id"], task["payload"], keys_of(task)) == (first[0], b"x", {KEY: b"k"})
    assert worker.silent_for(0.3)  # nothing queued twice
    finish(worker, producer, first[0])
    # Finished: the duplicate's OK is followed at once by the outcome.
    assert producer.ok(submit(b"t", b"z", option(QUEUE, b"dedup"), option(KEY, b"k"))) == (
        first[0],
        1,
    )
    assert producer.read() == (DONE, id_bytes(first[0]))
    assert worker.silent_for(0.2)


def test_a_duplicate_adopts_a_live_task_whose_producer_left(connect: Connect) -> None:
    gone, heir, worker = connect(), connect(), connect()
    task_id, _ = gone.ok(submit(b"t", b"x", option(QUEUE, b"adopt"), option(KEY, b"k")))
    gone.close()
    time.sleep(0.1)  # the daemon sees the close
    assert heir.ok(submit(b"t", b"x", option(QUEUE, b"adopt"), option(KEY, b"k"))) == (task_id, 1)
    assert worker.task(ready(1, b"adopt"))["id"] == task_id
    finish(worker, heir, task_id)


def test_the_same_key_in_another_queue_is_another_task(connect: Connect) -> None:
    producer = connect()
    first, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"keys-a"), option(KEY, b"k")))
    other, flags = producer.ok(submit(b"t", b"x", option(QUEUE, b"keys-b"), option(KEY, b"k")))
    assert flags == 0 and other != first


# -- READY and subscriptions --------------------------------------------------


def test_queues_are_isolated(connect: Connect) -> None:
    producer, worker = connect(), connect()
    assert worker.ask(ready(1, b"iso-a")) == (WAIT, b"")
    producer.ok(submit(b"t", b"not yours", option(QUEUE, b"iso-b")))
    assert worker.silent_for(0.3)
    mine, _ = producer.ok(submit(b"t", b"yours", option(QUEUE, b"iso-a")))
    assert worker.task()["id"] == mine  # pushed, no polling
    finish(worker, producer, mine)
    assert worker.silent_for(0.2)
    assert queue_named(producer, "iso-b")["depth"] == 1


def test_subscription_order_is_strict(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()

    def put(queue: bytes, payload: bytes, priority: int = 0) -> int:
        items = (option(QUEUE, queue), option(PRIORITY, bytes([priority])))
        return producer.ok(submit(b"t", payload, *items))[0]

    s1 = put(b"second", b"s1", 255)
    f1, f2 = put(b"first", b"f1"), put(b"first", b"f2")
    # The second queue's task waits while the first has any, whatever its priority.
    assert worker.task(ready(1, b"first", b"second"))["id"] == f1
    finish(worker, producer, f1)
    assert worker.task()["id"] == f2
    finish(worker, producer, f2)
    assert worker.task()["id"] == s1
    # A paused first queue has none it may take now: the second's are sent.
    assert admin.info(frame(PAUSE, name(b"first")))["paused"] is True
    f3, s2 = put(b"first", b"f3"), put(b"second", b"s2")
    finish(worker, producer, s1)
    assert worker.task()["id"] == s2
    assert admin.info(frame(RESUME, name(b"first")))["paused"] is False
    finish(worker, producer, s2)
    assert worker.task()["id"] == f3
    finish(worker, producer, f3)


def test_a_subscription_creates_its_queues(connect: Connect) -> None:
    worker = connect()
    assert worker.ask(ready(1, b"made-by-ready")) == (WAIT, b"")
    assert queue_named(worker, "made-by-ready")["workers"] == 1


# -- versions 1 and 2 together ------------------------------------------------


def test_version_1_clients_share_the_default_queue(connect: Connect) -> None:
    v1_producer, v2_worker, v1_producer_monitor = connect(1), connect(), connect()
    old = v1_producer.ok_v1(submit_v1(b"told", b"old"))
    task = v2_worker.task(ready())
    assert (task["id"], task["queue"], task["priority"], keys_of(task)) == (
        old,
        b"default",
        0,
        {},
    )
    finish(v2_worker, v1_producer, old)
    leave(v2_worker, v1_producer_monitor, "default")  # idle longest, it would get the next
    v2_producer, v1_worker = connect(), connect(1)
    new, _ = v2_producer.ok(submit(b"t", b"new"))
    # A version-1 worker gets the version-1 TASK: no context.
    assert v1_worker.ask(frame(READY, version=1)) == (TASK, id_bytes(new) + b"\x01tnew")
    finish(v1_worker, v2_producer, new)


def test_a_version_2_frame_on_a_version_1_connection(connect: Connect) -> None:
    peer = connect(1)
    assert peer.alive()
    for data in (frame(HEARTBEAT), submit(b"t", b"x"), frame(HELLO)):
        code, _ = peer.error(data)
        assert code == 2
        assert peer.alive()


@pytest.mark.parametrize(
    "message_type", [HELLO, CANCEL, PAUSE, QUEUES, PEEK, INSPECT, INFO, CANCELLED]
)
def test_version_2_types_in_a_version_1_frame_are_unknown(
    connect: Connect, message_type: int
) -> None:
    peer = connect(1)
    assert peer.ok_v1(submit_v1(b"t", b"v1")) > 0  # the connection speaks version 1
    assert peer.error(frame(message_type, b"\x00\x00\x00\x01", version=1))[0] == 2
    assert peer.alive()
    worker = connect(1)
    kind, body = worker.ask(frame(READY, version=1))
    assert kind == TASK and body.endswith(b"\x01tv1")
    worker.send(frame(DONE, body[:4], version=1))
    assert peer.read() == (DONE, body[:4])


def test_version_2_frames_may_be_larger_by_the_options(connect: Connect) -> None:
    producer, worker = connect(), connect()
    items = [
        option(QUEUE, b"big" + b"q" * 61),
        option(PRIORITY, b"\x01"),
        option(KEY, b"k" * 255),
        option(FAIRNESS, b"f" * 255),
    ]
    data = submit(b"t" * 255, b"p" * 1000, *items)
    assert len(data) - 6 > 1280  # past version 1's limit
    task_id, _ = producer.ok(data)
    task = worker.task(ready(1, b"big" + b"q" * 61))
    assert (task["id"], task["payload"], task["context"][KEY]) == (task_id, b"p" * 1000, b"k" * 255)
    # Past 1,280 + 2 + 4,096 bytes: ERROR 0x03 at once, the payload skipped.
    limit = 1280 + 2 + 4096
    producer.send(struct.pack(">BBI", 2, SUBMIT, limit + 1))
    kind, body = producer.read()
    assert (kind, body[:1]) == (ERROR, b"\x03")
    producer.send(b"\x00" * (limit + 1))
    assert producer.alive()
    # A payload past the largest size class is ERROR 0x03 too.
    assert producer.error(submit(b"t", b"p" * 1025, option(QUEUE, b"big")))[0] == 3
    finish(worker, producer, task_id)


# -- bad input ----------------------------------------------------------------

BAD_INPUT = [
    ("unknown option", submit(b"t", b"x", option(0x09, b"?"))),
    ("repeated option", submit(b"t", b"x", option(QUEUE, b"a"), option(QUEUE, b"b"))),
    ("repeated key", submit(b"t", b"x", option(KEY, b"a"), option(KEY, b"a"))),
    ("priority of 0 bytes", submit(b"t", b"x", option(PRIORITY, b""))),
    ("priority of 2 bytes", submit(b"t", b"x", option(PRIORITY, b"\x00\x01"))),
    ("empty key", submit(b"t", b"x", option(KEY, b""))),
    ("empty fairness key", submit(b"t", b"x", option(FAIRNESS, b""))),
    ("empty queue name", submit(b"t", b"x", option(QUEUE, b""))),
    ("queue name with a space", submit(b"t", b"x", option(QUEUE, b"no way"))),
    ("queue name with a slash", submit(b"t", b"x", option(QUEUE, b"a/b"))),
    ("queue name not ASCII", submit(b"t", b"x", option(QUEUE, "café".encode()))),
    ("65-byte queue name", submit(b"t", b"x", option(QUEUE, b"q" * 65))),
    ("options past the payload", frame(SUBMIT, b"\x01t\x00\x09" + option(QUEUE, b"abc"))),
    ("an option past opts_len", frame(SUBMIT, b"\x01t\x00\x04" + option(QUEUE, b"abc") + b"x")),
    (
        "options over 4096 bytes",
        frame(SUBMIT, b"\x01t" + struct.pack(">H", 4097) + option(KEY, b"k" * 255) * 17),
    ),
    ("a truncated option", frame(SUBMIT, b"\x01t\x00\x01\x01")),
    ("no options length", frame(SUBMIT, b"\x01t\x00")),
    ("type_len of 0", frame(SUBMIT, b"\x00\x00\x00x")),
    ("type past the payload", frame(SUBMIT, b"\x09t\x00\x00")),
    ("READY of 1 byte", frame(READY, b"\x00")),
    ("READY of 0 credits", frame(READY, b"\x00\x00")),
    ("READY listing 0 queues", frame(READY, b"\x00\x01\x00")),
    ("READY listing 33 queues", ready(1, *[b"q%d" % n for n in range(33)])),
    ("READY listing a queue twice", ready(1, b"a", b"b", b"a")),
    ("READY with a bad queue name", ready(1, b"a", b"b c")),
    ("READY with trailing bytes", frame(READY, ready(1, b"a")[6:] + b"\x00")),
    ("READY with a list cut short", frame(READY, b"\x00\x01\x02\x01a")),
    ("DONE of a task not held", task_id_frame(DONE, 1)),
    ("CANCEL of 3 bytes", frame(CANCEL, b"\x00\x00\x01")),
    ("CANCEL of 5 bytes", frame(CANCEL, b"\x00\x00\x00\x01\x00")),
    ("INSPECT of 5 bytes", frame(INSPECT, b"\x00\x00\x00\x01\x00")),
    ("PEEK of 0 tasks", peek(0, b"q")),
    ("PEEK of 1001 tasks", peek(1001, b"q")),
    ("PEEK of a bad queue name", peek(1, b"a b")),
    ("PEEK with no queue", frame(PEEK, b"\x00\x01")),
    ("QUEUES with a payload", frame(QUEUES, b"\x00")),
    ("STATS with a payload", frame(STATS, b"\x00")),
    ("HEARTBEAT with a payload", frame(HEARTBEAT, b"\x00")),
    ("a daemon-to-client type", frame(INFO, b"{}")),
    ("CANCELLED from a client", task_id_frame(CANCELLED, 1)),
    ("an unknown type", frame(0x7F)),
    ("a version-1 frame on a version-2 connection", frame(HEARTBEAT, version=1)),
    ("a version-1 SUBMIT on a version-2 connection", submit_v1(b"t", b"x")),
]


def test_every_bad_input_gets_error_0x02_and_loses_nothing(connect: Connect) -> None:
    producer = connect()
    kept, _ = producer.ok(submit(b"t", b"kept", option(QUEUE, b"keep")))
    for what, data in BAD_INPUT:
        peer = connect()
        assert peer.alive()  # the connection speaks version 2, and has no role yet
        peer.send(data)
        kind, body = peer.read()  # in a version-2 header
        assert (kind, body[:1]) == (ERROR, b"\x02"), what
        assert peer.alive(), what
        if what.startswith("READY"):
            assert peer.ask(ready(1, b"bad-input-ready")) == (WAIT, b""), what
        else:
            assert peer.ok(submit(b"t", b"after", option(QUEUE, b"bad-input-after")))[1] == 0
    submitted = [what for what, _ in BAD_INPUT if not what.startswith("READY")]
    assert queue_named(producer, "bad-input-after")["depth"] == len(submitted)
    worker = connect()
    assert worker.task(ready(1, b"keep"))["id"] == kept
    finish(worker, producer, kept)


# -- HELLO, QUEUES, STATS, PEEK, INSPECT --------------------------------------


# The page's HELLO example, on the built-in defaults.
DEFAULT_LIMITS = {
    "max_payload": 1024,
    "max_credits": 1024,
    "max_queues": 1000,
    "max_key_length": 255,
    "max_type_length": 255,
}


def test_hello_answers_what_the_daemon_is(connect: Connect) -> None:
    peer = connect()
    hello = option(1, b"interop") + option(2, b"1.0") + option(3, b"queues,teleport,cancel")
    document = peer.info(frame(HELLO, hello))
    assert document["server"] == "quicx"
    assert isinstance(document["version"], str) and document["version"]
    assert document["protocol"] == [1, 2]
    assert set(document["capabilities"]) >= {
        "queues",
        "priorities",
        "idempotency",
        "cancel",
        "pause",
        "purge",
        "peek",
        "inspect",
        "fairness",
        "rate-limits",
    }
    assert document["missing"] == ["teleport"]
    limits = document["limits"]
    assert {name: limits.get(name) for name in DEFAULT_LIMITS} == DEFAULT_LIMITS
    # It may be sent again, and with no fields at all.
    assert peer.info(frame(HELLO))["missing"] == []
    assert peer.ok(submit(b"t", b"x", option(QUEUE, b"hello")))[1] == 0


def test_queues_lists_every_queue_by_name_and_stats_counts_them_all(connect: Connect) -> None:
    producer, monitor = connect(), connect()
    kind, before = monitor.ask(frame(STATS))
    assert (kind, len(before)) == (STATS_RESPONSE, 28)
    for queue, priority in [(b"zz-last", 3), (b"zz-last", 3), (b"zz-last", 0), (b"aa-first", 1)]:
        producer.ok(submit(b"t", b"x", option(QUEUE, queue), option(PRIORITY, bytes([priority]))))
    queues = monitor.info(frame(QUEUES))
    names = [q["name"] for q in queues]
    assert names == sorted(names) and {"aa-first", "zz-last"} <= set(names)
    (last,) = [q for q in queues if q["name"] == "zz-last"]
    assert (last["depth"], last["paused"], last["workers"], last["running"]) == (3, False, 0, 0)
    assert last["priorities"] == {"3": 2, "0": 1}
    assert isinstance(last["oldest_age"], int | float) and last["oldest_age"] >= 0
    assert last["declared"] is False
    assert last["promoted"] == 0  # no task has waited [queues] aging
    kind, after = monitor.ask(frame(STATS))
    assert kind == STATS_RESPONSE
    assert struct.unpack(">I", after[:4])[0] == struct.unpack(">I", before[:4])[0] + 4


def test_peek_shows_the_next_tasks_without_taking_them(connect: Connect) -> None:
    producer, worker = connect(), connect()
    low, _ = producer.ok(submit(b"low", b"1", option(QUEUE, b"peek"), option(FAIRNESS, b"f")))
    high, _ = producer.ok(submit(b"high", b"22", option(QUEUE, b"peek"), option(PRIORITY, b"\x04")))
    peeked = producer.info(peek(1000, b"peek"))
    assert [(t["id"], t["type"], t["queue"], t["priority"], t["state"]) for t in peeked] == [
        (high, "high", "peek", 4, "queued"),
        (low, "low", "peek", 0, "queued"),
    ]
    for field in ("size", "age", "attempt", "fairness_key"):
        assert all(field in t for t in peeked), field
    assert peeked[1]["fairness_key"] == "f" and peeked[1]["attempt"] in (0, 1)
    assert [t["id"] for t in producer.info(peek(1, b"peek"))] == [high]
    worker.send(ready(2, b"peek"))
    assert [worker.task()["id"], worker.task()["id"]] == [high, low]
    assert producer.error(peek(1, b"nowhere"))[0] == 5


def test_inspect_says_why_a_task_waits(connect: Connect) -> None:
    producer = connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"why"), option(PRIORITY, b"\x01")))
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"why"), option(PRIORITY, b"\x07")))
    third, _ = producer.ok(submit(b"t", b"three", option(QUEUE, b"why"), option(PRIORITY, b"\x01")))
    inspected = producer.info(task_id_frame(INSPECT, third))
    assert (inspected["id"], inspected["queue"], inspected["state"]) == (third, "why", "queued")
    reasons = {r["reason"]: r for r in inspected["why"]}
    assert (reasons["ahead"]["ahead"], reasons["ahead"]["higher_priority"]) == (2, 1)
    assert "no_workers" in reasons
    assert all(isinstance(r["text"], str) and r["text"] for r in inspected["why"])
    assert "estimated_start" in inspected
    worker = connect()
    assert worker.task(ready(1, b"why"))["id"] == second
    running = producer.info(task_id_frame(INSPECT, second))
    assert (running["id"], running["state"]) == (second, "running")
    finish(worker, producer, second)
    assert worker.task()["id"] == first
    assert producer.error(task_id_frame(INSPECT, second))[0] == 5  # finished
    assert producer.error(task_id_frame(INSPECT, 999_999))[0] == 5  # unknown


# -- CANCEL -------------------------------------------------------------------


def test_cancel_own_queued_task_and_the_errors(connect: Connect) -> None:
    producer, other = connect(), connect()
    first, _ = producer.ok(submit(b"t", b"one", option(QUEUE, b"cancel")))
    second, _ = producer.ok(submit(b"t", b"two", option(QUEUE, b"cancel")))
    assert other.ok(submit(b"t", b"mine", option(QUEUE, b"cancel-other")))[1] == 0
    assert other.error(task_id_frame(CANCEL, first))[0] == 6  # another's task
    # The answer, and the outcome (not an answer: it may come first).
    producer.send(task_id_frame(CANCEL, first))
    got = sorted([producer.read(), producer.read()])
    assert got[0] == (CANCELLED, id_bytes(first))
    assert got[1][0] == INFO
    assert json.loads(got[1][1]) == {"id": first, "state": "cancelled", "queue": "cancel"}
    assert producer.error(task_id_frame(CANCEL, first))[0] == 5  # finished
    assert producer.error(task_id_frame(CANCEL, 999_999))[0] == 5  # unknown
    worker = connect()
    assert worker.task(ready(2, b"cancel"))["id"] == second  # the cancelled one is gone
    assert worker.silent_for(0.2)
    assert producer.error(task_id_frame(CANCEL, second))[0] == 7  # running
    assert producer.alive()
    finish(worker, producer, second)


def test_a_version_1_producer_hears_failed_cancelled(connect: Connect, admin: Wire) -> None:
    v1 = connect(1)
    task_id = v1.ok_v1(submit_v1(b"t", b"x"))
    answer = admin.info(task_id_frame(CANCEL, task_id))
    assert answer == {"id": task_id, "state": "cancelled", "queue": "default"}
    assert v1.read() == (FAILED, id_bytes(task_id) + b"cancelled")


# -- admin: PAUSE, RESUME, PURGE ----------------------------------------------


def test_pause_resume_and_purge_need_the_admin_role(connect: Connect) -> None:
    peer = connect()
    peer.ok(submit(b"t", b"x", option(QUEUE, b"not-admin")))
    for action in (PAUSE, RESUME, PURGE):
        assert peer.error(frame(action, name(b"not-admin")))[0] == 6
    assert peer.alive()
    assert queue_named(peer, "not-admin")["depth"] == 1


def test_admin_actions_over_the_control_socket(connect: Connect, admin: Wire) -> None:
    producer, worker = connect(), connect()
    assert admin.info(frame(PAUSE, name(b"adm"))) == {"queue": "adm", "paused": True}
    assert queue_named(producer, "adm")["paused"] is True  # pausing creates it
    held, _ = producer.ok(submit(b"t", b"held", option(QUEUE, b"adm")))
    assert worker.ask(ready(1, b"adm")) == (WAIT, b"")
    assert worker.silent_for(0.3)  # paused: accepted, not dispatched
    reasons = [r["reason"] for r in producer.info(task_id_frame(INSPECT, held))["why"]]
    assert "paused" in reasons
    assert admin.info(frame(RESUME, name(b"adm"))) == {"queue": "adm", "paused": False}
    assert worker.task()["id"] == held
    gone = [producer.ok(submit(b"t", b"x", option(QUEUE, b"adm")))[0] for _ in range(2)]
    assert admin.info(frame(PURGE, name(b"adm"))) == {"queue": "adm", "purged": 2}
    assert sorted(producer.read() for _ in gone) == [(CANCELLED, id_bytes(t)) for t in gone]
    assert queue_named(producer, "adm")["depth"] == 0
    assert admin.error(frame(RESUME, name(b"nowhere")))[0] == 5
    assert admin.error(frame(PURGE, name(b"nowhere")))[0] == 5
    assert admin.error(frame(PAUSE, name(b"a b")))[0] == 2
    # The running task was not touched: it still finishes.
    finish(worker, producer, held)
    # The admin may cancel anyone's queued task.
    other, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"adm-cancel")))
    producer.ok(submit(b"t", b"x", option(QUEUE, b"adm-cancel")))
    admin.send(task_id_frame(CANCEL, other))
    assert admin.read()[0] == INFO
    assert producer.read() == (CANCELLED, id_bytes(other))


def test_cancel_of_the_last_task_of_a_queue_nobody_serves(connect: Connect) -> None:
    # Such a queue is forgotten once idle; the canceller still gets its answer.
    producer = connect()
    task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"lonely")))
    producer.send(task_id_frame(CANCEL, task_id))
    answers = sorted([producer.read(), producer.read()])
    assert answers[0] == (CANCELLED, id_bytes(task_id))
    assert json.loads(answers[1][1]) == {"id": task_id, "state": "cancelled", "queue": "lonely"}
    assert producer.alive()


def test_purge_of_a_queue_nobody_serves(connect: Connect, admin: Wire) -> None:
    producer = connect()
    gone = [producer.ok(submit(b"t", b"x", option(QUEUE, b"lonelier")))[0] for _ in range(2)]
    assert admin.info(frame(PURGE, name(b"lonelier"))) == {"queue": "lonelier", "purged": 2}
    assert sorted(producer.read() for _ in gone) == [(CANCELLED, id_bytes(t)) for t in gone]
    assert admin.alive()


def test_the_control_socket_still_answers_its_status_line(shared: DaemonProcess) -> None:
    with socket.socket(socket.AF_UNIX) as control:
        control.settimeout(5)
        control.connect(str(shared.control_path))
        control.sendall(b"status\n")
        answer = b""
        while chunk := control.recv(65536):
            answer += chunk
    status = json.loads(answer)
    assert status["format"] == "quicx-status/1"
    assert status["protocols"] == [1, 2]


# -- [protocol] versions = 1 --------------------------------------------------


@pytest.fixture(scope="module")
def v1_only(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("v1"), "[protocol]\nversions = 1\n") as daemon:
        yield daemon


def test_versions_1_is_exactly_the_pages_daemon(v1_only: DaemonProcess, wires: Connect) -> None:
    producer, worker = wires(v1_only.address, 1), wires(v1_only.address, 1)
    # As the first frame: an unsupported version, in a version-1 header.
    assert producer.error(submit(b"t", b"x"))[0] == 2
    # Its payload is skipped: the next frame in the same write is read as one.
    producer.send(submit(b"t", b"x" * 100) + submit_v1(b"t", b"v1"))
    kind, body = producer.read()
    assert (kind, body[:1]) == (ERROR, b"\x02")
    kind, body = producer.read()
    assert (kind, len(body)) == (OK, 4)
    (task_id,) = struct.unpack(">I", body)
    for message_type in (HELLO, QUEUES, STATS):
        assert producer.error(frame(message_type))[0] == 2
    assert worker.ask(frame(READY, version=1)) == (TASK, id_bytes(task_id) + b"\x01tv1")
    finish(worker, producer, task_id)


# -- queue limits (and a journal with fsync = always) ----------------------

LIMITS = """\
[protocol]
default_queue = main
[queues]
max_queues = 5
max_key_length = 8
[queue main]
priority = 5
[queue small]
max_depth = 1
[queue kc]
key_concurrency = 1
[queue slow]
rate = 2
burst = 1
"""


@pytest.fixture(scope="module")
def limited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    directory = tmp_path_factory.mktemp("limits")
    journal = f"[journal]\npath = {directory / 'quicx.journal'}\nfsync = always\n"
    with launch(directory, LIMITS + journal) as daemon:
        yield daemon


@pytest.fixture
def connect_limited(limited: DaemonProcess, wires: Connect) -> Connect:
    return connections(limited, wires)


def test_keys_past_max_key_length_are_error_0x02(connect_limited: Connect) -> None:
    producer, worker = connect_limited(), connect_limited()
    for tag in (KEY, FAIRNESS):
        code, message = producer.error(submit(b"t", b"x", option(tag, b"k" * 9)))
        assert code == 2 and "max_key_length" in message
    task_id, flags = producer.ok(
        submit(b"t", b"x", option(KEY, b"k" * 8), option(FAIRNESS, b"f" * 8))
    )
    assert flags == 0
    assert keys_of(worker.task(ready(1, b"main"))) == {KEY: b"k" * 8, FAIRNESS: b"f" * 8}
    finish(worker, producer, task_id)


def test_the_default_queue_and_its_priority(connect_limited: Connect) -> None:
    v1_producer, v2_producer = connect_limited(1), connect_limited()
    v2_worker, v1_worker = connect_limited(), connect_limited(1)
    old = v1_producer.ok_v1(submit_v1(b"t", b"old"))
    task = v2_worker.task(ready(1, b"main"))
    assert (task["id"], task["queue"], task["priority"]) == (old, b"main", 5)
    finish(v2_worker, v1_producer, old)
    leave(v2_worker, v2_producer, "main")
    new, _ = v2_producer.ok(submit(b"t", b"new"))
    assert v1_worker.ask(frame(READY, version=1)) == (TASK, id_bytes(new) + b"\x01tnew")
    finish(v1_worker, v2_producer, new)


def test_max_depth_is_error_0x01_naming_the_limit(connect_limited: Connect) -> None:
    producer, worker = connect_limited(), connect_limited()
    kept, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"small")))
    code, message = producer.error(submit(b"t", b"x", option(QUEUE, b"small")))
    assert code == 1 and "max_depth = 1" in message
    assert producer.alive()
    assert worker.task(ready(1, b"small"))["id"] == kept
    finish(worker, producer, kept)
    again, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"small")))  # room again
    assert worker.task()["id"] == again
    finish(worker, producer, again)


def test_max_queues_is_error_0x01_naming_the_limit(
    connect_limited: Connect, limited: DaemonProcess, wires: Connect
) -> None:
    producer = connect_limited()
    existing = {q["name"] for q in producer.info(frame(QUEUES))}
    assert existing >= {"main", "small", "kc", "slow"}  # declared: they count
    kept = {}
    for n in range(5 - len(existing)):
        queue = b"extra%d" % n
        kept[queue] = producer.ok(submit(b"t", b"x", option(QUEUE, queue)))[0]
    assert len(producer.info(frame(QUEUES))) == 5
    code, message = producer.error(submit(b"t", b"x", option(QUEUE, b"one-too-many")))
    assert code == 1 and "max_queues = 5" in message
    # Subscribing to, or pausing, one more queue would create it too.
    worker = connect_limited()
    assert worker.error(ready(1, b"one-too-many"))[0] == 1
    admin = wires(str(limited.control_path))
    assert admin.error(frame(PAUSE, name(b"one-too-many")))[0] == 1
    # Nothing lost: the queues there still take and give tasks.
    for queue, task_id in kept.items():
        assert worker.task(ready(1, queue))["id"] == task_id
        finish(worker, producer, task_id)


def test_refused_requests_leave_no_queue_to_count_against_max_queues(
    tmp_path: Path, wires: Connect
) -> None:
    """
    A SUBMIT refused for its size (0x03) or an unknown group (0x05), and a
    READY refused for the queue limit, each left its empty queue behind for
    good: with max_queues = 20, every new queue was then refused for everyone.
    """
    with launch(tmp_path, "[queues]\nmax_queues = 20\n") as daemon:
        producer, worker = wires(daemon.address), wires(daemon.address)
        for n in range(50):
            queue = option(QUEUE, b"refused%d" % n)
            if n % 2:
                code, _ = producer.error(submit(b"t", b"x" * 2000, queue))
                assert code == 3
            else:
                code, _ = producer.error(
                    submit(b"t", b"x", queue, option(IN_GROUP, struct.pack(">I", 99)))
                )
                assert code == 5
        many = [b"ready%d" % n for n in range(25)]
        code, message = worker.error(ready(1, *many))
        assert code == 1 and "max_queues = 20" in message
        assert [q["name"] for q in producer.info(frame(QUEUES))] == ["default"]
        task_id, _ = producer.ok(submit(b"t", b"x", option(QUEUE, b"fresh")))
        assert wires(daemon.address).task(ready(1, b"fresh"))["id"] == task_id


def test_key_concurrency_holds_a_key_back_and_inspect_says_why(connect_limited: Connect) -> None:
    producer, worker = connect_limited(), connect_limited()
    a1, _ = producer.ok(submit(b"t", b"a1", option(QUEUE, b"kc"), option(FAIRNESS, b"a")))
    a2, _ = producer.ok(submit(b"t", b"a2", option(QUEUE, b"kc"), option(FAIRNESS, b"a")))
    b1, _ = producer.ok(submit(b"t", b"b1", option(QUEUE, b"kc"), option(FAIRNESS, b"b")))
    worker.send(ready(3, b"kc"))
    assert [worker.task()["id"], worker.task()["id"]] == [a1, b1]  # a2 skipped, not b1
    assert worker.silent_for(0.3)
    why = {r["reason"]: r for r in producer.info(task_id_frame(INSPECT, a2))["why"]}
    limit = why["key_concurrency"]
    assert (limit["key"], limit["running"], limit["limit"]) == ("a", 1, 1)
    finish(worker, producer, a1)
    assert worker.task()["id"] == a2
    finish(worker, producer, a2)
    finish(worker, producer, b1)


def test_a_rate_limited_queue_starts_tasks_at_its_rate(connect_limited: Connect) -> None:
    producer, worker = connect_limited(), connect_limited()
    first, _ = producer.ok(submit(b"t", b"1", option(QUEUE, b"slow")))
    second, _ = producer.ok(submit(b"t", b"2", option(QUEUE, b"slow")))
    worker.send(ready(2, b"slow"))
    assert worker.task()["id"] == first
    started = time.monotonic()
    why = {r["reason"]: r for r in producer.info(task_id_frame(INSPECT, second))["why"]}
    assert why["rate_limited"]["until"] > time.time() - 1
    assert worker.task()["id"] == second
    assert 0.3 <= time.monotonic() - started <= 2.0  # 2 a second, a burst of 1
    finish(worker, producer, first)
    finish(worker, producer, second)


def test_admin_answers_keep_request_order_with_fsync_always(
    limited: DaemonProcess, wires: Connect
) -> None:
    # The answers to PAUSE, RESUME, PURGE and CANCEL wait for the journal, in
    # order with the connection's other answers.
    admin = wires(str(limited.control_path))
    requests = [
        (submit(b"t", b"x", option(QUEUE, b"main")), OK),
        (frame(PAUSE, name(b"main")), INFO),
        (frame(HEARTBEAT), PONG),
        (frame(RESUME, name(b"main")), INFO),
        (frame(QUEUES), INFO),
        (frame(PURGE, name(b"main")), INFO),
        (frame(PURGE, name(b"nowhere")), ERROR),
        (frame(STATS), STATS_RESPONSE),
    ] * 10
    admin.send(b"".join(request for request, _ in requests))
    kinds: list[int] = []
    while len(kinds) < len(requests):
        kind, _ = admin.read()
        if kind != CANCELLED:  # an outcome (its tasks were purged), not an answer
            kinds.append(kind)
    assert kinds == [kind for _, kind in requests]
