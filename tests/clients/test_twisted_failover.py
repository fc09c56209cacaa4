"""
The Twisted producer (L{ProducerService}) follows a replicated shard's
primary (L{quicx.clients.failover}), on real sockets: a real daemon as the
primary, scripted standbys (L{tests.clients.standby}) in front of it or beside it.
"""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor

from quicx.clients.blocking import QuicxClient
from quicx.clients.failover import PrimaryNotFound
from quicx.clients.twisted_client import ProducerService
from tests.clients.standby import Scripted
from tests.conftest import DaemonProcess


def queued(daemon: DaemonProcess) -> int:
    with QuicxClient(daemon.client_address) as client:
        return client.stats().queue_depth


@pytest.mark.parametrize("role", ["standby", None])
@pytest_twisted.ensureDeferred
async def test_submits_refused_or_cut_off_land_on_the_primary_once_each(
    daemon: DaemonProcess, role: str | None
) -> None:
    standby = Scripted(role=role, primary=f"127.0.0.1:{daemon.port}")
    # A proxy to the primary that drops the connection after the daemon took
    # a SUBMIT: the service's own key makes the resubmit the same task.
    proxy = Scripted(upstream=daemon.address, cut_submits=1)
    shard = [proxy.address, standby.address, daemon.client_address]
    producer = ProducerService(reactor, shard, failover=True)
    producer.startService()
    try:
        first = await producer.submit("t", b"cut off")
        second = await producer.submit("t", b"next")
        assert first != second
        assert proxy.cut_submits == 0
        assert queued(daemon) == 2  # each once
    finally:
        await producer.stopService()
        standby.close()
        proxy.close()


@pytest_twisted.ensureDeferred
async def test_no_primary_within_the_deadline_is_a_clear_error() -> None:
    first, second = Scripted(role="candidate"), Scripted(role=None)
    producer = ProducerService(
        reactor, f"{first.address},{second.address}", failover=True, failover_deadline=1.0
    )
    producer.startService()
    try:
        with pytest.raises(PrimaryNotFound, match=r"no primary among .* for \d+\.\d s"):
            await producer.submit("t", b"x")
    finally:
        await producer.stopService()
        first.close()
        second.close()
