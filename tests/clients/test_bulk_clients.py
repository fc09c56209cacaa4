"""
C{bulk()} of every client (blocking, Twisted, asyncio) against a real
daemon: the dry run and each action answered with its counts, the admin
role, a request the client refuses to send, and ERROR 0x0B as L{Busy}.
"""

from __future__ import annotations

import asyncio
import time

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx import Busy, Forbidden
from quicx.aio import AsyncClient
from quicx.clients.blocking import QuicxClient
from quicx.clients.twisted_client import connect
from quicx.protocol import bulk
from tests.conftest import DaemonProcess
from tests.interop.raw import Wire


def test_the_blocking_client_counts_then_acts(daemon: DaemonProcess) -> None:
    with QuicxClient(daemon.client_address) as client:
        ids = [client.submit("t", "x", queue="bulk", key=f"k-{i}") for i in range(3)]
        client.submit("t", "x", queue="bulk")
        with pytest.raises(Forbidden):
            client.bulk("cancel", queue="bulk")
    with QuicxClient(f"unix:{daemon.control_path}") as admin:
        counted = admin.bulk("cancel", True, queue="bulk", key_prefix="k-")
        assert (counted["matched"], counted["acted"], counted["sample"]) == (3, 0, ids)
        moved = admin.bulk("move", queue="bulk", key_prefix=b"k-", to="elsewhere")
        assert (moved["acted"], moved["to"]) == (3, "elsewhere")
        assert admin.bulk("purge", states=["queued"], older_than="0.001s")["acted"] == 4
        with pytest.raises(ValueError, match="cancel does not act on dead"):
            admin.bulk("cancel", states=["dead"])
        with pytest.raises(ValueError, match="unknown bulk action"):
            admin.bulk("delete")
        with pytest.raises(TypeError, match="unexpected keyword argument 'type'"):
            admin.bulk("cancel", type="t")  # type: ignore[call-arg]


@pytest_twisted.ensureDeferred
async def test_the_twisted_client(daemon: DaemonProcess) -> None:
    client = await connect(reactor, f"unix:{daemon.control_path}")
    try:
        await client.submit("t", b"x", queue="tw")
        answer = await client.bulk("cancel", queue="tw")
        assert (answer["action"], answer["acted"]) == ("cancel", 1)
    finally:
        client.transport.loseConnection()


def test_the_asyncio_client(daemon: DaemonProcess) -> None:
    async def main() -> None:
        async with AsyncClient(f"unix:{daemon.control_path}", timeout=10) as client:
            await client.submit("t", b"x", queue="aio")
            answer = await client.bulk("purge", dry_run=True, queue="aio")
            assert (answer["matched"], answer["dry_run"]) == (1, True)

    asyncio.run(main())


def test_a_bulk_action_past_max_running_is_busy(start_daemon) -> None:
    daemon = start_daemon("--bulk-max-running=1", "--bulk-batch=10")
    with QuicxClient(daemon.client_address) as producer:
        producer.submit_many(("t", b"x") for _ in range(TASKS))
        first = Wire(str(daemon.control_path))
        first.send(bulk.encode_bulk(bulk.request("cancel")))
        deadline = time.monotonic() + 60
        while producer.stats().queue_depth == TASKS:  # until the first is under way
            assert time.monotonic() < deadline, "the first action never started"
        with QuicxClient(f"unix:{daemon.control_path}") as second, pytest.raises(Busy) as caught:
            second.bulk("cancel", True)
        assert caught.value.code == 0x0B and "max_running = 1" in str(caught.value)
        # The first was still under way then: its queue is not empty yet.
        assert producer.stats().queue_depth > 0
        first.close()


TASKS = 20_000
