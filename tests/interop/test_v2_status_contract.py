"""
Black-box interop tests of STATUS (docs/protocol.md, "Version 2: live
events", "### STATUS"): the status document it is answered with, every bad
input the page names, and STATUS in a byte stream like any other message
(split across writes, pipelined behind other requests).

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  One daemon on the defaults serves the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    ERROR,
    HEARTBEAT,
    INFO,
    OK,
    PONG,
    QUEUE,
    QUEUES,
    STATS,
    STATS_RESPONSE,
    Wire,
    frame,
    option,
    submit,
)
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

STATUS = 0x2B
FORMAT = "quicx-status/1"
"""The status document's C{format} (docs/operations.md, "Status")."""


@pytest.fixture(scope="module")
def defaults(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("status"), "") as daemon:
        yield daemon


@pytest.fixture
def connect(defaults: DaemonProcess, wires: Connect) -> Connect:
    return lambda version=2: wires(defaults.address, version)


def test_status_is_answered_with_the_status_document(
    connect: Connect, defaults: DaemonProcess
) -> None:
    peer = connect()
    document = peer.info(frame(STATUS))
    assert document["format"] == FORMAT
    assert document["pid"] == defaults.process.pid  # type: ignore[union-attr]
    assert document["protocols"] == [1, 2]
    assert f"127.0.0.1:{defaults.address[1]}" in document["listening"]
    assert {"submitted", "queued", "running"} <= document["tasks"].keys()
    assert {"used", "total"} <= document["memory"].keys()
    assert document["uptime"] > 0
    # The numbers are live: a task submitted is counted by the next STATUS.
    assert peer.ask(submit(b"t", b"x", option(QUEUE, b"status-live")))[0] == OK
    later = peer.info(frame(STATUS))
    assert later["tasks"]["submitted"] == document["tasks"]["submitted"] + 1
    assert later["uptime"] >= document["uptime"]
    assert peer.alive()


@pytest.mark.parametrize("payload", [b"\x00", b"{}", bytes(300)])
def test_a_status_with_a_payload_is_error_0x02_and_the_connection_stays(
    connect: Connect, payload: bytes
) -> None:
    peer = connect()
    code, message = peer.error(frame(STATUS, payload))
    assert code == 2 and "STATUS" in message
    assert peer.alive()
    assert peer.info(frame(STATUS))["format"] == FORMAT


def test_status_in_a_version_1_header_is_an_unknown_type(connect: Connect) -> None:
    v1 = connect(1)
    kind, body = v1.ask(frame(STATUS, version=1))
    assert (kind, body[0]) == (ERROR, 2) and b"unknown message type 0x2b" in body
    assert v1.alive()  # an unknown type is skipped; the connection stays version 1
    kind, body = v1.ask(frame(STATUS))  # a version-2 frame on it
    assert (kind, body[0]) == (ERROR, 2) and b"version-2 frame on a version-1" in body
    assert v1.alive()


def test_status_split_across_writes(connect: Connect) -> None:
    peer = connect()
    for byte in frame(STATUS):
        peer.send(bytes([byte]))
        time.sleep(0.005)
    kind, body = peer.read()
    assert kind == INFO and json.loads(body)["format"] == FORMAT
    assert peer.alive()


def test_status_pipelined_with_other_requests_is_answered_in_order(connect: Connect) -> None:
    peer = connect()
    peer.send(
        frame(HEARTBEAT)
        + frame(STATUS)
        + frame(STATUS, b"x")
        + submit(b"t", b"y", option(QUEUE, b"status-pipe"))
        + frame(STATUS)
        + frame(STATS)
        + frame(QUEUES)
    )
    kinds = [peer.read() for _ in range(7)]
    assert [kind for kind, _ in kinds] == [PONG, INFO, ERROR, OK, INFO, STATS_RESPONSE, INFO]
    assert kinds[2][1][0] == 2
    assert b"quicx-status/1" in kinds[1][1] and b"quicx-status/1" in kinds[4][1]
    assert b"status-pipe" in kinds[6][1]
