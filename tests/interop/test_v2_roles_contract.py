"""
Black-box interop tests of a shard's roles (docs/protocol.md, "Version 2:
roles"): a daemon of a shard that is not (yet) the primary refuses every
request with ERROR 0x0C (version 2) or 0x01 (version 1) but HELLO, which
tells its role; ROLE's bad inputs, its admin role, and a daemon without
replication answering it not found.

Raw sockets and C{struct} alone (L{tests.interop.raw}): nothing from the
C{quicx} package is imported.  A daemon of a shard with no primary here is a
candidate for good: its lease store is never reached.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable, Iterator

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import (
    ERROR,
    HEARTBEAT,
    HELLO,
    PONG,
    QUEUES,
    READY,
    STATS,
    Wire,
    ack,
    frame,
    ready,
    submit,
    submit_v1,
)
from tools.launcher import DaemonProcess

pytestmark = pytest.mark.interop

Connect = Callable[..., Wire]

ROLE, STATUS = 0x36, 0x2B
STEP_DOWN, PROMOTE = 1, 2
NOT_FOUND, FORBIDDEN, NOT_PRIMARY = 0x05, 0x06, 0x0C


def role(action: int) -> bytes:
    return frame(ROLE, bytes([action]))


@pytest.fixture(scope="module")
def candidate(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    directory = tmp_path_factory.mktemp("roles")
    config = (
        f"[journal]\npath = {directory / 'quicx.journal'}\n"
        "[replication]\netcd = http://127.0.0.1:1\nlisten = tcp:0:interface=127.0.0.1\n"
        "name = one\nclient_address = 127.0.0.1:7001\nadvertise = 127.0.0.1:7002\n"
    )
    with launch(directory, config) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with launch(tmp_path_factory.mktemp("single"), "") as daemon:
        yield daemon


def test_a_candidate_refuses_every_v2_request_but_hello(
    candidate: DaemonProcess, wires: Connect
) -> None:
    peer = wires(candidate.address)
    for request in (
        submit(b"t", b"x"),
        ready(1),
        ack(1, 1),
        frame(QUEUES),
        frame(STATS),
        frame(HEARTBEAT),
        role(PROMOTE),
    ):
        assert peer.error(request) == (NOT_PRIMARY, ""), request
    info = peer.info(frame(HELLO))
    assert (info["server"], info["role"], info["epoch"], info["primary"]) == (
        "quicx",
        "candidate",
        0,
        "",
    )
    peer.send(frame(PONG))  # not answered: the next answer is HELLO's
    assert peer.info(frame(HELLO))["role"] == "candidate"
    assert peer.info(frame(STATUS))["replication"]["role"] == "candidate"


def test_a_candidate_refuses_v1_requests_with_error_1(
    candidate: DaemonProcess, wires: Connect
) -> None:
    peer = wires(candidate.address, 1)
    for request in (
        submit_v1(b"t", b"x"),
        frame(READY, version=1),
        frame(STATS, version=1),
        frame(HEARTBEAT, version=1),
    ):
        assert peer.error(request) == (0x01, "not the primary: no primary is known yet")


def test_a_candidates_control_socket_answers_status_and_role(
    candidate: DaemonProcess, wires: Connect
) -> None:
    admin = wires(str(candidate.control_path))
    assert admin.info(frame(STATUS))["replication"]["role"] == "candidate"
    # Promote: campaign now; with no lease store to reach, it stays a candidate.
    assert admin.info(role(PROMOTE)) == {"role": "candidate", "epoch": 0, "primary": ""}
    assert admin.error(frame(QUEUES)) == (NOT_PRIMARY, "")
    assert admin.info(frame(HELLO))["role"] == "candidate"


def test_a_candidates_status_document_has_its_replication_part(
    candidate: DaemonProcess,
) -> None:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(5)
        sock.connect(str(candidate.control_path))
        sock.sendall(b"status\n")
        data = b""
        while chunk := sock.recv(1 << 16):
            data += chunk
    part = json.loads(data)["replication"]
    assert part == {
        "role": "candidate",
        "epoch": 0,
        "primary": "",
        "name": "one",
        "shard": "default",
        "mode": "sync",
        "standby_lost": "wait",
        "lag_batches": 0,
        "lag_seconds": 0.0,
        "in_sync_standbys": [],
    }


def test_a_daemon_without_replication_answers_role_not_found(
    single: DaemonProcess, wires: Connect
) -> None:
    admin = wires(str(single.control_path))
    assert admin.error(role(STEP_DOWN)) == (
        NOT_FOUND,
        "this daemon is not one of a shard ([replication] etcd is not set)",
    )
    assert "role" not in admin.info(frame(HELLO))


@pytest.mark.parametrize(
    ("payload", "code"),
    [(b"", 0x02), (b"\x00", 0x02), (b"\x03", 0x02), (b"\xff", 0x02)],
)
def test_a_bad_role_is_refused(
    single: DaemonProcess, wires: Connect, payload: bytes, code: int
) -> None:
    admin = wires(str(single.control_path))
    assert admin.error(frame(ROLE, payload))[0] == code
    assert admin.alive()


def test_a_longer_role_is_refused_from_its_header(single: DaemonProcess, wires: Connect) -> None:
    admin = wires(str(single.control_path))
    admin.send(struct.pack(">BBI", 2, ROLE, 1 << 20))
    kind, body = admin.read()
    assert (kind, body[0]) == (ERROR, 0x03)


def test_role_needs_the_admin_role(single: DaemonProcess, wires: Connect) -> None:
    peer = wires(single.address)
    assert peer.error(role(PROMOTE))[0] == FORBIDDEN
    assert peer.alive()


def test_role_in_a_version_1_header_is_an_unknown_type(
    single: DaemonProcess, wires: Connect
) -> None:
    peer = wires(single.address, 1)
    assert peer.error(frame(ROLE, b"\x01", version=1))[0] == 0x02


def test_the_daemon_of_a_shard_logs_that_it_waits_to_be_primary(
    candidate: DaemonProcess,
) -> None:
    assert "not serving until it is the primary" in candidate.log()
