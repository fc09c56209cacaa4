"""
Black-box interop tests of the debounce and expiry options (docs/protocol.md,
"Version 2: debounce and expiry"): option 0x10 folds a keyed SUBMIT into
the waiting task of its key; option 0x11 gives a task a deadline to start,
past which its producer hears OUTCOME state 7 and no worker gets it; every
bad value of either is ERROR 0x02 and loses nothing.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    DELAY,
    ERROR,
    HELLO,
    KEY,
    OK,
    OUTCOME,
    QUEUE,
    RUN_AT,
    TASK,
    Wire,
    frame,
    option,
    parse_task,
    ready,
    submit,
)
from tests.interop.test_v2_contract import connections
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

DEBOUNCE, EXPIRES = 0x10, 0x11
"""The options' tags."""
DROP, REPLACE, EXTEND = 1, 2, 3
EXPIRED = 7
"""OUTCOME's state of a task not started before its deadline."""


def debounce(mode: int, window_ms: int) -> bytes:
    return option(DEBOUNCE, struct.pack(">BI", mode, window_ms))


def expires_in(ms: int) -> bytes:
    return option(EXPIRES, struct.pack(">I", ms))


def next_task(worker: Wire) -> dict[str, object]:
    """The next TASK C{worker} reads, past any WAIT (a debounced task waits its window)."""
    deadline = time.monotonic() + 30
    while True:
        kind, body = worker.read()
        if kind == TASK:
            return parse_task(body)
        assert time.monotonic() < deadline, (kind, body)


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("startopts")) as daemon:
        yield daemon


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


def test_hello_lists_debounce_and_expiry(connect: Connect) -> None:
    document = connect().info(frame(HELLO, option(1, b"interop") + option(2, b"1.0")))
    assert {"debounce", "expiry"} <= set(document["capabilities"])


BAD_OPTIONS = [
    ("a debounce without a key", debounce(REPLACE, 1000)),
    ("a debounce of 4 bytes", option(KEY, b"k") + option(DEBOUNCE, b"\x02\x00\x00\x03")),
    ("a debounce of 6 bytes", option(KEY, b"k") + option(DEBOUNCE, b"\x02" + bytes(4) + b"\x01")),
    ("debounce mode 0", option(KEY, b"k") + debounce(0, 1000)),
    ("debounce mode 4", option(KEY, b"k") + debounce(4, 1000)),
    ("a debounce window of 0", option(KEY, b"k") + debounce(DROP, 0)),
    ("a debounce and a delay", option(KEY, b"k") + debounce(DROP, 1) + option(DELAY, bytes(4))),
    ("a debounce and a run-at", option(KEY, b"k") + debounce(DROP, 1) + option(RUN_AT, bytes(8))),
    ("a debounce twice", option(KEY, b"k") + debounce(DROP, 1) + debounce(DROP, 1)),
    ("an empty expiry", option(EXPIRES, b"")),
    ("an expiry of 5 bytes", option(EXPIRES, bytes(4) + b"\x01")),
    ("an expiry of 0 ms", expires_in(0)),
    ("an expiry at 0", option(EXPIRES, bytes(8))),
    ("an expiry twice", expires_in(1000) + expires_in(1000)),
    ("an expiry that has passed", option(EXPIRES, struct.pack(">Q", 1000))),
    ("an expiry before the delay", expires_in(1000) + option(DELAY, struct.pack(">I", 5000))),
]
"""Every bad debounce and expiry the page names."""


def test_every_bad_debounce_and_expiry_gets_error_0x02_and_loses_nothing(
    connect: Connect,
) -> None:
    producer = connect()
    kept, _ = producer.ok(
        submit(b"t", b"kept", option(QUEUE, b"bad-keep"), option(KEY, b"kk"), debounce(DROP, 1))
    )
    for what, items in BAD_OPTIONS:
        peer = connect()
        peer.send(frame(0x01, b"\x01t" + struct.pack(">H", len(items)) + items + b"x"))
        kind, body = peer.read()
        assert (kind, body[:1]) == (ERROR, b"\x02"), (what, body)
        assert peer.alive(), what
        assert peer.ok(submit(b"t", b"after", option(QUEUE, b"bad-other")))[1] == 0, what
    worker = connect()
    task = worker.task(ready(1, b"bad-keep"))
    assert (task["id"], task["payload"]) == (kept, b"kept")


def test_replace_folds_into_the_waiting_task(connect: Connect) -> None:
    producer = connect()
    items = (option(QUEUE, b"fold"), option(KEY, b"r"), debounce(REPLACE, 300))
    first, flags = producer.ok(submit(b"t", b"one", *items))
    assert flags == 0
    assert producer.ok(submit(b"t", b"two", *items)) == (first, 1)  # a duplicate
    assert producer.ok(submit(b"t", b"three", *items)) == (first, 1)
    worker = connect()
    worker.send(ready(1, b"fold"))
    task = next_task(worker)
    assert (task["id"], task["payload"]) == (first, b"three")
    assert worker.silent_for(0.5)


def test_a_task_past_its_deadline_is_expired_not_delivered(connect: Connect) -> None:
    producer = connect()
    task_id, _ = producer.ok(submit(b"t", b"late", option(QUEUE, b"exp"), expires_in(200)))
    kind, body = producer.read()
    assert kind == OUTCOME
    got_id, state, result_kind = struct.unpack_from(">IBB", body)
    assert (got_id, state, result_kind) == (task_id, EXPIRED, 0)
    assert body[6:] == b"expired: not started before its deadline"
    worker = connect()
    worker.send(ready(1, b"exp"))
    kind, _ = worker.read()
    assert kind != TASK  # WAIT: nothing for it
    on_time, _ = producer.ok(submit(b"t", b"on time", option(QUEUE, b"exp"), expires_in(60_000)))
    assert next_task(worker)["id"] == on_time


def test_ok_is_the_answer_of_a_fold(connect: Connect) -> None:
    """An OK of a fold is flagged 0x01, as a key's duplicate is."""
    producer = connect()
    items = (option(QUEUE, b"ok-fold"), option(KEY, b"o"), debounce(EXTEND, 60_000))
    first, _ = producer.ok(submit(b"t", b"a", *items))
    kind, body = producer.ask(submit(b"t", b"b", *items))
    assert kind == OK and body == struct.pack(">IB", first, 1)
