"""
EtcdLeaseStore (quicx/daemon/replication/etcd.py) against a real etcd on
loopback (tools/etcd.py): the campaign is exclusive, the epoch grows with
each holder, a lease that lapses frees the key, and a store refuses to write
History for a key it does not hold.  Then two role managers on it, in this
process's reactor: a failover.
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, fail
from twisted.web.resource import Resource
from twisted.web.server import Request, Site

from quicx.daemon.replication.etcd import MAX_ANSWER, EtcdLeaseStore
from quicx.daemon.replication.interfaces import History, Leader, LeaseStoreUnavailable, RoleState
from quicx.daemon.replication.role import RoleManager, RoleOptions
from tests.replication_fakes import RecordingListener
from tools.etcd import Etcd

A = Leader("a", "127.0.0.1:11", "127.0.0.1:12")
B = Leader("b", "127.0.0.1:21", "127.0.0.1:22")
TTL = 2.0


def sleep(seconds: float) -> Deferred[None]:
    wait: Deferred[None] = Deferred()
    reactor.callLater(seconds, wait.callback, None)
    return wait


async def eventually(
    check: Callable[[], Deferred[Any]], expected: object, within: float = 30.0
) -> None:
    """Ask C{check} until it answers C{expected} (etcd enforces the TTL: no fixed wait)."""
    deadline = time.monotonic() + within
    while (found := await check()) != expected:
        assert time.monotonic() < deadline, f"still {found!r}, not {expected!r}, after {within} s"
        await sleep(0.1)


@pytest_twisted.async_yield_fixture
async def stores(etcd: Etcd) -> AsyncIterator[Callable[..., EtcdLeaseStore]]:
    made: list[EtcdLeaseStore] = []

    def make(endpoints: str = etcd.url, shard: str = "s1") -> EtcdLeaseStore:
        made.append(EtcdLeaseStore(endpoints, shard, timeout=10.0, reactor=reactor))
        return made[-1]

    yield make
    for store in made:
        await store.close()


pytestmark = pytest.mark.usefixtures("etcd")


@pytest_twisted.ensureDeferred
async def test_a_campaign_is_exclusive_and_the_epoch_is_the_keys_revision(stores: Any) -> None:
    a, b = stores(), stores()
    assert await a.leader() is None
    epoch = await a.campaign(A, TTL)
    assert epoch is not None and epoch > 0
    assert await b.campaign(B, TTL) is None
    assert await a.leader() == await b.leader() == Leader(A.name, A.client, A.replication, epoch)
    assert await a.renew() is True
    assert await b.renew() is False  # b holds nothing
    assert await b.record(History(epoch, "b")) is False


@pytest_twisted.ensureDeferred
async def test_the_epoch_grows_with_each_new_holder(stores: Any) -> None:
    a, b = stores(), stores()
    first = await a.campaign(A, TTL)
    await a.resign()
    assert await a.leader() is None
    second = await b.campaign(B, TTL)
    await b.resign()
    third = await a.campaign(A, TTL)
    assert first is not None and second is not None and third is not None
    assert first < second < third
    assert (await b.leader()).epoch == third


@pytest_twisted.ensureDeferred
async def test_a_lease_that_lapses_frees_the_key_and_cannot_be_renewed(stores: Any) -> None:
    a, b = stores(), stores()
    epoch = await a.campaign(A, 1)
    await eventually(b.leader, None)
    assert await a.renew() is False
    assert await a.record(History(epoch, "a")) is False
    assert await b.campaign(B, TTL) is not None


@pytest_twisted.ensureDeferred
async def test_history_is_written_only_by_the_holder_at_its_epoch(stores: Any) -> None:
    a, b = stores(), stores(shard="s2")
    assert await a.history() is None
    epoch = await a.campaign(A, TTL)
    assert await a.record(History(epoch, "a", frozenset({"b", "c"}))) is True
    assert await a.history() == History(epoch, "a", frozenset({"b", "c"}))
    assert await a.record(History(epoch + 1, "a")) is False  # not its epoch
    assert await b.history() is None  # another shard
    await a.resign()
    assert await a.record(History(epoch, "a")) is False
    assert await a.history() == History(epoch, "a", frozenset({"b", "c"}))  # outlives the lease


def dead_endpoint() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}"


@pytest_twisted.ensureDeferred
async def test_a_dead_endpoint_first_is_passed_over(etcd: Etcd, stores: Any) -> None:
    a = stores(f"{dead_endpoint()},{etcd.url}")
    assert await a.campaign(A, TTL) is not None
    assert (await a.leader()).name == "a"


@pytest_twisted.ensureDeferred
async def test_no_endpoint_answering_is_unavailable_within_the_timeout() -> None:
    with socket.socket() as silent:  # takes connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        store = EtcdLeaseStore(
            f"{dead_endpoint()},http://127.0.0.1:{silent.getsockname()[1]}", "s", 0.5, reactor
        )
        started = time.monotonic()
        with pytest.raises(LeaseStoreUnavailable):
            await store.leader()
        await store.close()
        refused = EtcdLeaseStore(f"{dead_endpoint()},{dead_endpoint()}", "s", 0.5, reactor)
        with pytest.raises(LeaseStoreUnavailable, match="no etcd endpoint took the connection"):
            await refused.history()
        assert time.monotonic() - started < 20


class CutOffStore(EtcdLeaseStore):
    """An etcd lease store whose renewals stop getting through once C{cut}."""

    cut = False

    def renew(self) -> Deferred[bool]:
        if self.cut:
            return fail(LeaseStoreUnavailable("renewals cut off"))
        return super().renew()


async def until(done: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not done():
        assert time.monotonic() < deadline, f"not within {within} s"
        await sleep(0.05)


@pytest_twisted.ensureDeferred
async def test_a_standby_takes_over_from_a_primary_cut_off_from_etcd(etcd: Etcd) -> None:
    # A lease of 4 s, each call given 1.5 s (a loaded machine's etcd may be slow to fsync).
    options = RoleOptions(4.0, call_timeout=1.5)
    a_store = CutOffStore(etcd.url, "s", options.call_timeout, reactor)
    b_store = EtcdLeaseStore(etcd.url, "s", options.call_timeout, reactor)
    a_listener, b_listener = RecordingListener(reactor), RecordingListener(reactor)
    a = RoleManager(a_store, A, options, a_listener, reactor)
    b = RoleManager(b_store, B, options, b_listener, reactor)
    try:
        a.startService()
        await until(lambda: a.state.role == "primary")
        b.startService()
        await until(lambda: b.state.role == "standby")
        first = a.state.epoch
        assert b.state == RoleState("standby", first, A.client)
        assert await a.in_sync(frozenset({"b"})) is True
        a_store.cut = True
        await until(lambda: b.state.role == "primary")
        assert b.state.epoch > first
        assert await b_store.history() == History(b.state.epoch, "b", frozenset())
        assert [kind for kind, _ in a_listener.events][:2] == ["primary", "fenced"]
        assert a_listener.times[1] < b_listener.times[-1]  # never two primaries
        await until(lambda: a.state == RoleState("standby", b.state.epoch, B.client))
    finally:
        await a.stopService()
        await b.stopService()
        await a_store.close()
        await b_store.close()


class Flood(Resource):
    """An endpoint that answers each POST with more than an etcd answer may have."""

    isLeaf = True

    def render_POST(self, request: Request) -> bytes:
        return b"{" + b" " * (MAX_ANSWER + 1)


@pytest_twisted.ensureDeferred
async def test_an_answer_past_its_bound_is_unavailable() -> None:
    tcp: Any = reactor  # Site is a ServerFactory that the stubs do not see as one
    port = tcp.listenTCP(0, Site(Flood()), interface="127.0.0.1")
    store = EtcdLeaseStore(f"http://127.0.0.1:{port.getHost().port}", "s", 10.0, reactor)
    try:
        with pytest.raises(LeaseStoreUnavailable, match="more than"):
            await store.leader()
    finally:
        await store.close()
        await port.stopListening()
