"""
Black-box interop tests of the trace option (docs/protocol.md, "Version 2:
trace context"): a SUBMIT's option 0x0C reaches its version-2 TASK as the
context item 0x0C, byte for byte, across a restart with a journal; a
version-1 delivery carries nothing; every bad trace is ERROR 0x02 and
loses nothing.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    DONE,
    ERROR,
    HELLO,
    QUEUE,
    TASK,
    Wire,
    ack,
    frame,
    option,
    ready,
    submit,
)
from tests.interop.test_v2_contract import connections
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

TRACE = 0x0C
"""The trace option's tag, and its TASK context item's."""
TRACE_ID = bytes(range(1, 17))
PARENT_ID = bytes(range(0xA1, 0xA9))
HEAD = b"\x00" + TRACE_ID + PARENT_ID + b"\x01"
"""version 0, trace id, parent id, flags (sampled): 26 bytes."""


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("trace")) as daemon:
        yield daemon


@pytest.fixture
def connect(shared: DaemonProcess, wires: Connect) -> Connect:
    return connections(shared, wires)


@pytest.mark.parametrize(
    "trace",
    [HEAD, HEAD + b"vendor=abc,other=1;2", HEAD + b"k=" + b"v" * (255 - 26 - 2)],
    ids=["traceparent", "with tracestate", "255 bytes"],
)
def test_a_trace_reaches_the_task_as_its_context_item(connect: Connect, trace: bytes) -> None:
    producer, worker = connect(), connect()
    task_id, _ = producer.ok(
        submit(b"job", b"body", option(QUEUE, b"traced"), option(TRACE, trace))
    )
    task = worker.task(ready(1, b"traced"))
    assert (task["id"], task["context"][TRACE], task["payload"]) == (task_id, trace, b"body")
    worker.send(ack(task_id, worker.tokens.pop(task_id)))
    assert producer.read()[0] == DONE


def test_hello_lists_the_trace_capability(connect: Connect) -> None:
    info = connect().info(frame(HELLO, b""))
    assert "trace" in info["capabilities"]


def test_a_version_1_worker_gets_no_trace(connect: Connect) -> None:
    producer, worker = connect(), connect(1)
    producer.ok(submit(b"job", b"plain", option(TRACE, HEAD)))
    worker.send(frame(4, version=1))  # READY
    kind, body = worker.read()
    # Version 1's TASK: [task_id u32][type_len u8][type][payload], nothing else.
    assert (kind, body[4:]) == (TASK, b"\x03jobplain")
    worker.send(frame(DONE, body[:4], version=1))


BAD_TRACES = [
    ("a trace of 25 bytes", option(TRACE, HEAD[:25])),
    ("an empty trace", option(TRACE, b"")),
    ("a trace of version 1", option(TRACE, b"\x01" + HEAD[1:])),
    ("a trace of version 0xff", option(TRACE, b"\xff" + HEAD[1:])),
    ("a trace id of zeros", option(TRACE, b"\x00" + bytes(16) + PARENT_ID + b"\x01")),
    ("a parent id of zeros", option(TRACE, b"\x00" + TRACE_ID + bytes(8) + b"\x01")),
    ("a tracestate with a newline", option(TRACE, HEAD + b"a=b\nc=d")),
    ("a tracestate with DEL", option(TRACE, HEAD + b"a=b\x7f")),
    ("a tracestate not ASCII", option(TRACE, HEAD + "a=é".encode())),
    ("a trace given twice", option(TRACE, HEAD) + option(TRACE, HEAD)),
]
"""
Every bad trace the page names.  One longer than 255 bytes cannot be said:
its TLV's length is one byte (a length that runs past C{opts_len} is
refused as any option's is: test_v2_contract's "an option past opts_len").
"""


def test_every_bad_trace_gets_error_0x02_and_loses_nothing(connect: Connect) -> None:
    producer = connect()
    kept, _ = producer.ok(submit(b"t", b"kept", option(QUEUE, b"trace-keep"), option(TRACE, HEAD)))
    for what, items in BAD_TRACES:
        peer = connect()
        peer.send(frame(0x01, b"\x01t" + struct.pack(">H", len(items)) + items + b"x"))
        kind, body = peer.read()
        assert (kind, body[:1]) == (ERROR, b"\x02"), what
        assert b"trace" in body or b"repeats" in body, (what, body)
        assert peer.alive(), what
        assert peer.ok(submit(b"t", b"after", option(TRACE, HEAD)))[1] == 0, what
    worker = connect()
    task = worker.task(ready(1, b"trace-keep"))
    assert (task["id"], task["context"][TRACE]) == (kept, HEAD)


def test_a_trace_survives_a_restart_with_a_journal(tmp_path: Path, wires: Connect) -> None:
    config = f"[journal]\npath = {tmp_path / 'journal'}\nfsync = always\n"
    trace = HEAD + b"vendor=kept"
    with launch(_dir(tmp_path, "a"), config) as daemon:
        task_id, _ = wires(daemon.address).ok(
            submit(b"job", b"body", option(QUEUE, b"after-restart"), option(TRACE, trace))
        )
    with launch(_dir(tmp_path, "b"), config) as daemon:
        task = wires(daemon.address).task(ready(1, b"after-restart"))
    assert (task["id"], task["context"][TRACE]) == (task_id, trace)


def _dir(root: Path, name: str) -> Path:
    path = root / name
    path.mkdir()
    return path
