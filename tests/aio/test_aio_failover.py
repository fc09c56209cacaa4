"""
The asyncio client follows a replicated shard's primary
(L{quicx.clients.failover}), on real sockets: a real daemon as the primary,
scripted standbys (L{tests.clients.standby}) in front of it or beside it.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from quicx.aio import AsyncClient, open_client
from quicx.clients.blocking import QuicxClient
from quicx.clients.failover import PrimaryNotFound
from quicx.clients.requests import Options, Task
from quicx.protocol.errors import NotAcknowledged, NotFinished
from tests.clients.standby import Scripted
from tests.conftest import DaemonProcess


def queued(daemon: DaemonProcess) -> int:
    with QuicxClient(daemon.client_address) as client:
        return client.stats().queue_depth


@pytest.mark.parametrize("role", ["standby", None])
def test_calls_refused_by_a_standby_land_on_the_primary_once_each(
    daemon: DaemonProcess, role: str | None
) -> None:
    standby = Scripted(role=role, primary=f"127.0.0.1:{daemon.port}")

    async def main() -> list[int]:
        client = open_client([standby.address, daemon.client_address], failover=True)
        assert isinstance(client, AsyncClient)
        async with client:
            # At once: pipelined on one connection, all refused, all followed.
            ids = await asyncio.gather(*(client.submit("t", b"%d" % n) for n in range(10)))
            assert client.address == daemon.client_address
            assert (await client.task(ids[0]))["state"] == "queued"  # a read follows too
            return list(ids)

    try:
        ids = asyncio.run(main())
        assert len(set(ids)) == 10
        assert queued(daemon) == 10
    finally:
        standby.close()


def test_a_keyed_submit_cut_off_is_sent_again_once_and_a_keyless_one_raises(
    daemon: DaemonProcess,
) -> None:
    proxy = Scripted(upstream=daemon.address, cut_submits=1)

    async def main() -> None:
        shard = f"{proxy.address},{daemon.client_address}"
        async with AsyncClient(shard, failover=True) as client:
            first = await client.submit("charge", b"x", key="order-42")
            assert await client.submit("charge", b"x", key="order-42") == first
        proxy.cut_submits = 1
        async with AsyncClient(shard, failover=True) as client:
            with pytest.raises(NotAcknowledged):
                await client.submit("charge", b"no key")

    try:
        asyncio.run(main())
        assert proxy.cut_submits == 0
        assert queued(daemon) == 2  # each once
    finally:
        proxy.close()


def test_submit_many_follows(daemon: DaemonProcess) -> None:
    standby = Scripted(role=None, primary=f"127.0.0.1:{daemon.port}")
    tasks: list[Task] = [("t", b"%d" % n, Options(key=f"k{n}")) for n in range(7)]

    async def main() -> list[int | Exception]:
        async with AsyncClient(f"{standby.address},{daemon.client_address}", failover=True) as c:
            return list(await c.submit_many(tasks, window=3))

    try:
        results = asyncio.run(main())
        assert all(type(r) is int for r in results) and len(set(results)) == 7
        assert queued(daemon) == 7
    finally:
        standby.close()


def test_no_primary_within_the_deadline_is_a_clear_error() -> None:
    first, second = Scripted(role="candidate"), Scripted(role=None)

    async def main() -> None:
        shard = f"{first.address},{second.address}"
        async with AsyncClient(shard, failover=True, failover_deadline=1.0) as client:
            began = time.monotonic()
            with pytest.raises(PrimaryNotFound, match=r"no primary among .* for \d+\.\d s"):
                await client.submit("t", b"x")
            assert time.monotonic() - began >= 1.0

    try:
        asyncio.run(main())
    finally:
        first.close()
        second.close()


def test_a_wait_on_the_daemon_follows(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as direct:
        task_id = direct.submit("t", b"x", keep_result=True)
    standby = Scripted(role=None, primary=f"127.0.0.1:{daemon.port}")

    async def main() -> None:
        async with AsyncClient(f"{standby.address},{daemon.client_address}", failover=True) as c:
            with pytest.raises(NotFinished):  # refused by the standby, taken by the primary
                await c.result(task_id, timeout=0)

    try:
        asyncio.run(main())
        assert standby.refused == 1
    finally:
        standby.close()
