"""
The replication listener's contract, from docs/protocol.md ("Version 2:
replication") alone, over raw sockets: a standby's REPLICATE is answered
with the snapshot (whole, flagged last) and the stream acknowledges as the
page says; every bad input is answered with the ERROR the page names and
the connection closed; a frame past its type's limit is refused from its
header.  The listener is tools/replication_listener.py's (a primary's
listener alone) until the daemon's own is wired.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop.raw import ERROR, Wire, frame

REPLICATE, SNAPSHOT, BATCH, BATCH_ACK = 0x32, 0x33, 0x34, 0x35
EPOCH = 9
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    directory = tmp_path_factory.mktemp("replication")
    process = subprocess.Popen(
        [sys.executable, "-m", "tools.replication_listener", str(directory), str(EPOCH)],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:
        deadline = time.monotonic() + 120
        while not (directory / "port").exists() or not (directory / "port").read_text():
            assert process.poll() is None, "the listener ended"
            assert time.monotonic() < deadline, "the listener did not start"
            time.sleep(0.05)
        yield ("127.0.0.1", int((directory / "port").read_text()))
    finally:
        process.kill()
        process.wait(60)


def replicate(epoch: int, name: bytes) -> bytes:
    return frame(REPLICATE, struct.pack(">QB", epoch, len(name)) + name)


def closed(wire: Wire) -> bool:
    """The listener closed the connection (after what was read)."""
    wire.sock.settimeout(30)
    try:
        return wire.sock.recv(1) == b""
    except (TimeoutError, ConnectionResetError):
        return False


def refused(wire: Wire, data: bytes) -> int:
    wire.send(data)
    kind, body = wire.read()
    assert kind == ERROR, (kind, body)
    assert closed(wire)
    return body[0]


def test_a_standby_gets_the_whole_snapshot_and_acknowledges_it(listener: tuple[str, int]) -> None:
    wire = Wire(listener)
    try:
        wire.send(replicate(EPOCH, b"s-interop"))
        data, last, seq = b"", False, -1
        while not last:
            kind, body = wire.read()
            assert kind == SNAPSHOT, (kind, body)
            epoch, seq, flags = struct.unpack_from(">QQB", body)
            assert (epoch, flags & ~1) == (EPOCH, 0)
            assert len(body) - 17 <= 262_144
            data, last = data + body[17:], bool(flags & 1)
        assert data.startswith(b"QUICXJ")
        wire.send(frame(BATCH_ACK, struct.pack(">QQ", EPOCH, seq)))
        wire.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):  # taken: no ERROR, no close
            wire.sock.recv(1)
    finally:
        wire.close()


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (frame(REPLICATE, struct.pack(">Q", EPOCH)), 0x02),  # no name length
        (frame(REPLICATE, struct.pack(">QB", EPOCH, 0)), 0x02),  # an empty name
        (frame(REPLICATE, struct.pack(">QB", EPOCH, 5) + b"abc"), 0x02),  # short name
        (frame(REPLICATE, struct.pack(">QB", EPOCH, 1) + b"\xff"), 0x02),  # not UTF-8
        (replicate(EPOCH + 1, b"newer"), 0x0C),  # knows a newer epoch: not the primary
        (frame(BATCH_ACK, struct.pack(">QQ", EPOCH, 0)), 0x02),  # before REPLICATE
        (frame(BATCH, struct.pack(">QQ", EPOCH, 1) + b"x"), 0x03),  # not sent to a primary
        (frame(SNAPSHOT, b""), 0x02),
        (frame(0x01, b"\x01t"), 0x03),  # a client's SUBMIT: none is taken here
        (frame(0x09, b"", version=1), 0x02),  # a version-1 frame
    ],
    ids=[
        "no-name",
        "empty-name",
        "short-name",
        "not-utf8",
        "newer-epoch",
        "ack-first",
        "batch-to-primary",
        "snapshot-to-primary",
        "submit",
        "version-1",
    ],
)
def test_bad_input_is_refused_and_the_connection_closed(
    listener: tuple[str, int], data: bytes, code: int
) -> None:
    wire = Wire(listener)
    try:
        assert refused(wire, data) == code
    finally:
        wire.close()


def test_acknowledgements_of_another_epoch_or_out_of_turn_are_refused(
    listener: tuple[str, int],
) -> None:
    for ack, code in [((EPOCH - 1, 0), 0x08), ((EPOCH, 1 << 40), 0x02)]:
        wire = Wire(listener)
        try:
            wire.send(replicate(EPOCH, b"s-acks"))
            while True:
                kind, body = wire.read()
                assert kind == SNAPSHOT
                if body[16] & 1:
                    break
            assert refused(wire, frame(BATCH_ACK, struct.pack(">QQ", *ack))) == code
        finally:
            wire.close()


@pytest.mark.parametrize(
    ("message_type", "length"), [(REPLICATE, 265), (BATCH_ACK, 17), (BATCH, 1), (0x01, 1)]
)
def test_a_frame_past_its_limit_is_refused_from_its_header(
    listener: tuple[str, int], message_type: int, length: int
) -> None:
    wire = Wire(listener)
    try:
        # The header alone: refused before any of the payload is sent.
        assert refused(wire, struct.pack(">BBI", 2, message_type, length)) == 0x03
    finally:
        wire.close()


@pytest.mark.parametrize("message_type", [REPLICATE, SNAPSHOT, BATCH, BATCH_ACK])
def test_a_clients_port_refuses_replication_from_the_header(daemon: Any, message_type: int) -> None:
    wire = Wire(daemon.address)
    try:
        # A daemon's client port takes none: refused unread, the connection kept.
        wire.send(struct.pack(">BBI", 2, message_type, 100))
        kind, body = wire.read()
        assert (kind, body[0]) == (ERROR, 0x03), (kind, body)
    finally:
        wire.close()
