"""
The lease store on etcd: a shard's leader key under an etcd lease, over etcd's v3 JSON gateway.

It speaks with Twisted's own HTTP client (C{Agent}).

The requests and the reading of answers are L{etcd_wire}'s; this module only
moves bytes, to the first endpoint that answers, each call within a timeout.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from io import BytesIO
from typing import Any, TypeVar

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.error import ConnectError
from twisted.internet.protocol import Protocol, connectionDone
from twisted.python.failure import Failure
from twisted.web.client import (
    Agent,
    FileBodyProducer,
    HTTPConnectionPool,
    ResponseDone,
)
from twisted.web.http import PotentialDataLoss
from twisted.web.http_headers import Headers
from zope.interface import implementer

from quicx.daemon.replication import etcd_wire as wire
from quicx.daemon.replication.interfaces import (
    History,
    ILeaseStore,
    Leader,
    LeaseStoreUnavailable,
)
from quicx.net.private import quiet_connection_pool

T = TypeVar("T")
MAX_ANSWER = 1 << 20
"""The most bytes an answer of etcd's may have (the lease store's are a few hundred)."""
HEADERS = Headers({b"Content-Type": [b"application/json"]})


@implementer(ILeaseStore)
class EtcdLeaseStore:
    """
    L{ILeaseStore} for one shard, on an etcd cluster (its client URLs,
    comma-separated).

    A connection refused (or any failure to connect) moves on to the next
    endpoint at once; a call that gets no answer within C{timeout} seconds
    fails with L{LeaseStoreUnavailable}, and the next call starts at the next
    endpoint.

    @ivar lease: the id of the lease this store holds the key under (C{None}: it holds none).
    """

    def __init__(
        self,
        etcd: str,
        shard: str,
        timeout: float,
        reactor: Any,
        prefix: str = "/quicx",
    ) -> None:
        self._endpoints = wire.endpoints(etcd)
        self._keys = wire.shard_keys(prefix, shard)
        self._timeout = timeout
        self._reactor = reactor
        self._pool = HTTPConnectionPool(reactor, persistent=True)
        quiet_connection_pool(self._pool)
        self._agent = Agent(reactor, connectTimeout=timeout, pool=self._pool)
        self._next = 0
        self.lease: int | None = None

    def close(self) -> Deferred[None]:
        """Close the connections kept open to etcd."""
        closed: Deferred[None] = self._pool.closeCachedConnections()
        return closed

    # -- ILeaseStore ---------------------------------------------------------------------------

    def campaign(self, candidate: Leader, ttl: float) -> Deferred[int | None]:
        return ensureDeferred(self._campaign(candidate, ttl))

    def renew(self) -> Deferred[bool]:
        return ensureDeferred(self._renew())

    def leader(self) -> Deferred[Leader | None]:
        return ensureDeferred(
            self._call(wire.RANGE, wire.range_request(self._keys.leader), wire.leader_of)
        )

    def resign(self) -> Deferred[None]:
        return ensureDeferred(self._resign())

    def history(self) -> Deferred[History | None]:
        return ensureDeferred(
            self._call(wire.RANGE, wire.range_request(self._keys.history), wire.history_of)
        )

    def record(self, history: History) -> Deferred[bool]:
        return ensureDeferred(self._record(history))

    # -- the calls -----------------------------------------------------------------------------

    async def _campaign(self, candidate: Leader, ttl: float) -> int | None:
        lease = await self._call(wire.GRANT, wire.grant_request(ttl), wire.granted)
        try:
            request = wire.campaign_request(self._keys, candidate, lease)
            epoch = await self._call(wire.TXN, request, lambda body: wire.campaigned(body, lease))
        except LeaseStoreUnavailable:
            self._revoke_quietly(lease)
            raise
        if epoch is None:
            self._revoke_quietly(lease)
        else:
            self.lease = lease
        return epoch

    async def _renew(self) -> bool:
        if self.lease is None:
            return False
        lease = self.lease
        alive = await self._call(wire.KEEPALIVE, wire.keepalive_request(lease), wire.kept_alive)
        if not alive and self.lease == lease:
            self.lease = None
        return alive

    async def _resign(self) -> None:
        lease, self.lease = self.lease, None
        if lease is not None:
            await self._call(wire.REVOKE, wire.revoke_request(lease), wire.revoked)

    async def _record(self, history: History) -> bool:
        if self.lease is None:
            return False
        request = wire.record_request(self._keys, history, self.lease)
        return await self._call(wire.TXN, request, wire.recorded)

    def _revoke_quietly(self, lease: int) -> None:
        """Give back a lease that holds nothing (it expires by itself if etcd does not answer)."""
        revoking = ensureDeferred(self._call(wire.REVOKE, wire.revoke_request(lease), wire.revoked))
        revoking.addErrback(lambda failure: failure.trap(LeaseStoreUnavailable))

    # -- moving bytes --------------------------------------------------------------------------

    async def _call(self, path: str, request: wire.Json, read: Callable[[bytes], T]) -> T:
        """
        POST C{request} to C{path} and C{read} the answer, from the first
        endpoint that takes the connection.

        @raise LeaseStoreUnavailable: no endpoint took it, no answer in time,
            or an answer that is an error or not etcd's.
        """
        body = json.dumps(request).encode()
        why = ""
        for _ in self._endpoints:
            url = self._endpoints[self._next]
            try:
                answer = await self._post(url + path, body)
            except ConnectError as e:
                why = f"{url}: {e}"
                self._next = (self._next + 1) % len(self._endpoints)
                continue
            except Exception as e:  # whatever went wrong on the wire
                self._next = (self._next + 1) % len(self._endpoints)
                raise LeaseStoreUnavailable(f"{url}{path}: {e!r}") from None
            try:
                return read(answer)
            except wire.EtcdError as e:
                raise LeaseStoreUnavailable(f"{url}{path}: {e.args[0]}") from None
        raise LeaseStoreUnavailable(f"no etcd endpoint took the connection ({why})")

    async def _post(self, url: str, body: bytes) -> bytes:
        async def exchange() -> bytes:
            producer = FileBodyProducer(BytesIO(body))
            response = await self._agent.request(b"POST", url.encode(), HEADERS, producer)
            answer = AnswerBody(MAX_ANSWER)
            response.deliverBody(answer)
            return await answer.finished

        return await ensureDeferred(exchange()).addTimeout(self._timeout, self._reactor)


class AnswerBody(Protocol):
    """An answer's body, whole, or a failure past C{limit} bytes (its connection dropped)."""

    def __init__(self, limit: int) -> None:
        self.finished: Deferred[bytes] = Deferred(lambda _: self._stop())
        self._limit = limit
        self._parts: list[bytes] = []
        self._size = 0

    def dataReceived(self, data: bytes) -> None:
        self._size += len(data)
        if self.finished.called:
            return
        if self._size > self._limit:
            self.finished.errback(wire.EtcdError(f"an answer of more than {self._limit} bytes"))
            self._stop()
            return
        self._parts.append(data)

    def _stop(self) -> None:
        producer: Any = self.transport  # the response's body, an IPushProducer
        producer.stopProducing()

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self.finished.called:
            return
        if reason.check(ResponseDone, PotentialDataLoss):
            self.finished.callback(b"".join(self._parts))
        else:
            self.finished.errback(reason)
