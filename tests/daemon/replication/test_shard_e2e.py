"""
A shard of real daemons on loopback and a real etcd (Debian's
C{etcd-server}): what a standby tells clients, a promotion that serves every
replicated task, a zombie worker's outcome fenced by the epoch, a planned
switchover, and the failover client across a kill -9.

One etcd serves the module; each test has a shard of its own.  Every wait is
on a condition, with a generous deadline.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from quicx import Options
from quicx.clients.blocking import QuicxClient
from quicx.daemon.control import StatusUnavailable, fetch_status
from quicx.daemon.replication.node import EXIT_DEMOTED
from quicx.protocol.errors import NotFound, QuicxError
from tests.cli.test_cli import quicx
from tests.interop.raw import ERROR, KEY, Wire, ack, option, ready, submit, submit_v1
from tests.interop.raw import QUEUE as QUEUE_OPTION
from tools.etcd import ETCD, Etcd, free_ports, start_etcd_on_free_ports
from tools.launcher import DaemonProcess

DEADLINE = 60.0
"""Seconds any change of role may take (a loaded machine; it takes a few)."""
LEASE_TTL = 2  # the lowest allowed is 1: 2 s keeps a slow machine's renewals in time
TOKEN_EPOCH_SHIFT = 40
QUEUE = b"jobs"
SHARDS = itertools.count()


@pytest.fixture(scope="module")
def etcd_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Etcd]:
    if not Path(ETCD).exists():
        pytest.skip(f"no {ETCD}: apt-get install etcd-server (or make etcd)")
    member = start_etcd_on_free_ports(tmp_path_factory.mktemp("etcd"))
    yield member
    member.kill()


class Shard:
    """Daemons of one shard (a name of its own), on ports picked before they start."""

    def __init__(self, directory: Path, etcd_url: str) -> None:
        self.directory = directory
        self.etcd_url = etcd_url
        self.name = f"s{next(SHARDS)}"
        self.daemons: list[DaemonProcess] = []

    def start(self, *extra: str) -> DaemonProcess:
        n = len(self.daemons)
        directory = self.directory / f"d{n}"
        directory.mkdir()
        client_port, replication_port = free_ports(2)
        daemon = DaemonProcess(
            directory,
            [
                f"--listen=tcp:{client_port}:interface=127.0.0.1",
                f"--journal={directory / 'quicx.journal'}",
                "--fsync=always",
                f"--replication-etcd={self.etcd_url}",
                f"--replication-listen=tcp:{replication_port}:interface=127.0.0.1",
                f"--replication-name=d{n}",
                f"--replication-shard={self.name}",
                f"--replication-lease-ttl={LEASE_TTL}",
                *extra,
            ],
        )
        self.daemons.append(daemon)
        return daemon.start()

    def pair(self) -> tuple[DaemonProcess, DaemonProcess]:
        """A primary and its in-sync standby."""
        primary = self.start()
        wait_for(lambda: replication(primary).get("role") == "primary", "a primary")
        standby = self.start()
        wait_for(lambda: replication(standby).get("role") == "standby", "a standby")
        wait_for(
            lambda: replication(primary).get("in_sync_standbys") == ["d1"], "an in-sync standby"
        )
        return primary, standby

    def close(self) -> None:
        for daemon in self.daemons:
            if daemon.alive():
                os.kill(daemon.pid, signal.SIGCONT)  # a stopped one dies of SIGKILL too
            daemon.kill()


@pytest.fixture
def shard(tmp_path: Path, etcd_member: Etcd) -> Iterator[Shard]:
    one = Shard(tmp_path, etcd_member.url)
    yield one
    one.close()


def wait_for(condition: Callable[[], object], what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


def replication(daemon: DaemonProcess) -> dict[str, Any]:
    """The replication part of its status ({} while it does not answer)."""
    if not daemon.alive():
        return {}
    try:
        document = fetch_status(str(daemon.control_path), 5.0)
    except StatusUnavailable:
        return {}
    return dict(document.get("replication") or {})


def address(daemon: DaemonProcess) -> str:
    return f"127.0.0.1:{daemon.port}"


def depth(daemon: DaemonProcess, queue: str = QUEUE.decode()) -> int:
    with QuicxClient(daemon.client_address) as client:
        return sum(q["depth"] for q in client.queues() if q["name"] == queue)


def keyed(n: int) -> bytes:
    """A version-2 SUBMIT to L{QUEUE} with the idempotency key C{kN}."""
    key = f"k{n}".encode()
    return submit(b"t", b"x", option(KEY, key), option(QUEUE_OPTION, QUEUE))


def test_a_standby_names_the_primary_and_says_what_it_is(shard: Shard) -> None:
    primary, standby = shard.pair()
    epoch = replication(primary)["epoch"]
    wire = Wire(standby.address)
    try:
        assert wire.error(keyed(0)) == (0x0C, address(primary))
    finally:
        wire.close()
    old = Wire(standby.address, version=1)
    try:
        code, _ = old.error(submit_v1(b"t", b"x"))
        assert code == 0x01
    finally:
        old.close()
    with QuicxClient(standby.client_address) as client:
        info = client.hello("e2e", "1")
    assert (info["role"], info["epoch"], info["primary"]) == ("standby", epoch, address(primary))
    assert depth(primary) == 0  # nothing of the refused SUBMIT reached it


def finished(daemon: DaemonProcess, task_ids: list[int]) -> bool:
    """None of C{task_ids} is queued or running on C{daemon} (a done task is not kept)."""
    with QuicxClient(daemon.client_address) as client:
        for task_id in task_ids:
            try:
                client.task(task_id)
            except NotFound:
                continue
            return False
    return True


def take(wire: Wire, count: int) -> list[dict[str, Any]]:
    wire.send(ready(count, QUEUE))
    return [wire.task() for _ in range(count)]


def test_a_promoted_standby_serves_every_replicated_task_once(shard: Shard) -> None:
    primary, standby = shard.pair()
    old_epoch = replication(primary)["epoch"]
    submitter = Wire(primary.address)
    ids = [submitter.ok(keyed(n))[0] for n in range(20)]
    submitter.close()
    worker = Wire(primary.address)
    held = take(worker, 5)
    done = [task["id"] for task in held[:3]]
    for task_id in done:
        worker.send(ack(task_id, worker.tokens[task_id]))
    wait_for(lambda: finished(primary, done), "the ACKs applied")
    # An ACK has no answer: a SUBMIT's OK after it (sync mode: written by the
    # standby too) says its record, journaled before, is the standby's as well.
    barrier = Wire(primary.address)
    barrier.ok(submit(b"t", b"x", option(QUEUE_OPTION, b"barrier")))
    barrier.close()
    primary.kill()
    started = time.monotonic()
    worker.close()
    wait_for(lambda: replication(standby).get("role") == "primary", "promotion")
    print(f"failover after kill -9: {time.monotonic() - started:.1f} s")
    new_epoch = replication(standby)["epoch"]
    assert new_epoch > old_epoch
    assert depth(standby) == 17  # the 15 queued and the 2 held but not acknowledged
    assert finished(standby, done)
    again = Wire(standby.address)
    try:
        delivered = take(again, 17)
        assert sorted(task["id"] for task in delivered) == sorted(set(ids) - set(done))
        assert {again.tokens[t["id"]] >> TOKEN_EPOCH_SHIFT for t in delivered} == {new_epoch}
        assert again.silent_for(0.5)  # nothing more: the ACKed ones are not run again
    finally:
        again.close()


def test_a_zombie_workers_old_token_is_never_applied(shard: Shard) -> None:
    primary, standby = shard.pair()
    old_epoch = replication(primary)["epoch"]
    submitter = Wire(primary.address)
    (task_id, _) = submitter.ok(keyed(0))
    submitter.close()
    zombie = Wire(primary.address)
    take(zombie, 1)
    old_token = zombie.tokens[task_id]
    assert old_token >> TOKEN_EPOCH_SHIFT == old_epoch
    os.kill(primary.pid, signal.SIGSTOP)
    # Read by the old primary only once it wakes, past its lease.
    zombie.send(ack(task_id, old_token))
    producer = Wire(primary.address)  # the kernel takes the connection
    producer.send(keyed(1))
    wait_for(lambda: replication(standby).get("role") == "primary", "promotion")
    new_epoch = replication(standby)["epoch"]
    assert new_epoch > old_epoch
    worker = Wire(standby.address)
    try:
        code, _ = worker.error(ack(task_id, old_token))
        assert code in (0x08, 0x02)
        (again,) = take(worker, 1)
        assert again["id"] == task_id
        new_token = worker.tokens[task_id]
        assert new_token >> TOKEN_EPOCH_SHIFT == new_epoch
        os.kill(primary.pid, signal.SIGCONT)
        assert primary.process is not None
        assert primary.process.wait(DEADLINE) == EXIT_DEMOTED
        # It acknowledged nothing: the zombie's ACK and the SUBMIT got an
        # ERROR or nothing before the connection closed.
        for wire in (zombie, producer):
            assert all(kind == ERROR for kind, _ in answers(wire))
        assert not finished(standby, [task_id])  # the zombie's ACK: not applied here
        worker.send(ack(task_id, new_token))
        wait_for(lambda: finished(standby, [task_id]), "the new delivery's ACK applied")
    finally:
        worker.close()
        zombie.close()
        producer.close()


def answers(wire: Wire) -> list[tuple[int, bytes]]:
    """Every frame read until the daemon closed the connection."""
    wire.sock.settimeout(DEADLINE)
    read = []
    try:
        while True:
            read.append(wire.read())
    except (ConnectionError, OSError):
        return read


def test_step_down_hands_the_key_to_the_in_sync_standby(shard: Shard) -> None:
    primary, standby = shard.pair()
    epoch = replication(primary)["epoch"]
    # The key is held: a standby asked to campaign answers what it still is.
    asked = quicx("promote", f"--control={standby.control_path}")
    assert (asked.returncode, asked.stdout) == (
        0,
        f"standby at epoch {epoch}: the primary is {address(primary)}\n",
    ), asked.stderr
    # Answered before it leaves (it closed the connection unanswered before).
    stepped = quicx("step-down", f"--control={primary.control_path}")
    assert stepped.returncode == 0, stepped.stderr
    print(stepped.stdout)
    assert primary.process is not None
    assert primary.process.wait(DEADLINE) == EXIT_DEMOTED
    started = time.monotonic()
    wait_for(lambda: replication(standby).get("role") == "primary", "promotion")
    print(f"switchover: {time.monotonic() - started:.1f} s")
    assert replication(standby)["epoch"] > epoch


def unread_bytes(port: int) -> int:
    """Bytes waiting unread on the loopback TCP connections to C{port} (/proc/net/tcp)."""
    waiting = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1] == f"0100007F:{port:04X}" and fields[3] == "01":  # ESTABLISHED
            waiting += int(fields[4].split(":")[1], 16)
    return waiting


def test_the_failover_client_lands_every_task_once_across_a_kill(shard: Shard) -> None:
    primary, standby = shard.pair()
    tasks = [("t", b"x", Options(queue=QUEUE.decode(), key=f"k{n}")) for n in range(400)]
    addresses = f"{primary.client_address},{standby.client_address}"
    with QuicxClient(addresses, failover=True) as client:
        first = client.submit_many(tasks[:200])
        assert depth(primary) == 200
        # Stopped with the next call's SUBMITs unread, then killed: the call
        # follows the standby's promotion and sends again what was not answered.
        os.kill(primary.pid, signal.SIGSTOP)
        answers: list[list[int | QuicxError]] = []
        call = threading.Thread(target=lambda: answers.append(client.submit_many(tasks)))
        call.start()
        wait_for(lambda: unread_bytes(primary.port) > 0, "SUBMITs sent to the stopped primary")
        primary.kill()
        started = time.monotonic()
        wait_for(lambda: replication(standby).get("role") == "primary", "promotion")
        # Its supervisor starts it again: a standby, in sync, so that the new
        # primary (sync mode, standby_lost = wait) acknowledges new tasks.
        primary.start()
        call.join(DEADLINE)
        print(f"the call was answered {time.monotonic() - started:.1f} s after the kill")
    assert not call.is_alive()
    (ids,) = answers
    assert ids[:200] == first  # a key already taken is answered with its first task
    assert len(set(ids)) == 400
    assert (replication(standby)["role"], replication(primary)["role"]) == ("primary", "standby")
    assert depth(standby) == 400
