"""
The replication listener's contract, from docs/protocol.md ("Version 2:
replication") alone, over raw sockets: a standby's REPLICATE is answered
with the snapshot (whole, flagged last) and the stream acknowledges as the
page says; every bad input is answered with the ERROR the page names and
the connection closed; a frame past its type's limit is refused from its
header.  The listener is a real daemon's C{[replication] listen}: the
primary of a shard of one, its lease in a real etcd (Debian's C{etcd-server}).
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.interop.conftest import launch
from tests.interop.raw import ERROR, Wire, frame
from tools.etcd import ETCD, free_ports, start_etcd_on_free_ports

REPLICATE, SNAPSHOT, BATCH, BATCH_ACK = 0x32, 0x33, 0x34, 0x35
SHARD = """
[journal]
path = {journal}
[replication]
etcd = {etcd}
shard = interop
name = p-interop
listen = tcp:{port}:interface=127.0.0.1
standby_lost = async
client_address = 127.0.0.1:1
"""
"""A shard of one: its client port (0, picked at start) is named to no client here."""


class Primary(NamedTuple):
    """The primary's replication listener, and the epoch it serves at."""

    address: tuple[str, int]
    epoch: int


@pytest.fixture(scope="module")
def listener(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Primary]:
    if not Path(ETCD).exists():
        pytest.skip(f"no {ETCD}: apt-get install etcd-server (or make etcd)")
    directory = tmp_path_factory.mktemp("replication")
    member = start_etcd_on_free_ports(directory / "etcd")
    try:
        (port,) = free_ports(1)
        with launch(
            directory, SHARD.format(journal=directory / "quicx.journal", etcd=member.url, port=port)
        ) as daemon:
            # Logged once it is the primary and its replication listener listens.
            log = daemon.wait_for_log("ReplicationPrimary starting on", 60)
            served = re.search(r"primary of shard interop at epoch (\d+)", log)
            assert served is not None, log
            yield Primary(("127.0.0.1", port), int(served.group(1)))
    finally:
        member.kill()


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


def test_a_standby_gets_the_whole_snapshot_and_acknowledges_it(listener: Primary) -> None:
    wire = Wire(listener.address)
    try:
        wire.send(replicate(listener.epoch, b"s-interop"))
        data, last, seq = b"", False, -1
        while not last:
            kind, body = wire.read()
            assert kind == SNAPSHOT, (kind, body)
            epoch, seq, flags = struct.unpack_from(">QQB", body)
            assert (epoch, flags & ~1) == (listener.epoch, 0)
            assert len(body) - 17 <= 262_144
            data, last = data + body[17:], bool(flags & 1)
        assert data.startswith(b"QUICXJ")
        wire.send(frame(BATCH_ACK, struct.pack(">QQ", listener.epoch, seq)))
        wire.sock.settimeout(0.5)
        with pytest.raises(socket.timeout):  # taken: no ERROR, no close
            wire.sock.recv(1)
    finally:
        wire.close()


BAD: list[tuple[Callable[[int], bytes], int]] = [
    (lambda epoch: frame(REPLICATE, struct.pack(">Q", epoch)), 0x02),  # no name length
    (lambda epoch: frame(REPLICATE, struct.pack(">QB", epoch, 0)), 0x02),  # an empty name
    (lambda epoch: frame(REPLICATE, struct.pack(">QB", epoch, 5) + b"abc"), 0x02),  # short name
    (lambda epoch: frame(REPLICATE, struct.pack(">QB", epoch, 1) + b"\xff"), 0x02),  # not UTF-8
    (lambda epoch: replicate(epoch + 1, b"newer"), 0x0C),  # knows a newer epoch: not the primary
    (lambda epoch: frame(BATCH_ACK, struct.pack(">QQ", epoch, 0)), 0x02),  # before REPLICATE
    (lambda epoch: frame(BATCH, struct.pack(">QQ", epoch, 1) + b"x"), 0x03),  # to a primary
    (lambda epoch: frame(SNAPSHOT, b""), 0x02),
    (lambda epoch: frame(0x01, b"\x01t"), 0x03),  # a client's SUBMIT: none is taken here
    (lambda epoch: frame(0x09, b"", version=1), 0x02),  # a version-1 frame
]
"""Bad inputs, each made for the primary's epoch, and the ERROR code each gets."""


@pytest.mark.parametrize(
    ("data", "code"),
    BAD,
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
    listener: Primary, data: Callable[[int], bytes], code: int
) -> None:
    wire = Wire(listener.address)
    try:
        assert refused(wire, data(listener.epoch)) == code
    finally:
        wire.close()


def test_acknowledgements_of_another_epoch_or_out_of_turn_are_refused(
    listener: Primary,
) -> None:
    epoch = listener.epoch
    for ack, code in [((epoch - 1, 0), 0x08), ((epoch, 1 << 40), 0x02)]:
        wire = Wire(listener.address)
        try:
            wire.send(replicate(epoch, b"s-acks"))
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
    listener: Primary, message_type: int, length: int
) -> None:
    wire = Wire(listener.address)
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
