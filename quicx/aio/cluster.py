"""
The asyncio client of several daemons (L{AsyncClusterClient}), placed by L{quicx.clients.cluster}.

One L{AsyncClient} per daemon; each submit follows a L{Route}: the shard
key's daemon by rendezvous hashing (else its idempotency key's), or the
next live one by the spread; a daemon that cannot be reached is skipped,
and one that goes away before it answers is L{NotAcknowledged} unless the
task has an idempotency key (as L{quicx.clients.blocking_cluster.ClusterClient}).

    async with open_client("tcp:h1:16381,tcp:h2:16381") as client:
        ref = await client.submit("charge", b"...", key="order-42")   # a TaskRef
        await client.wait(ref, timeout=30)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, cast

from quicx.aio.client import AsyncClient
from quicx.clients import operations
from quicx.clients.address import default_address, split_addresses
from quicx.clients.cluster import (
    ROUND_ROBIN,
    Cluster,
    ClusterTask,
    Ref,
    Route,
    TaskRef,
    as_task,
    shard_key_of,
)
from quicx.clients.connection import Request
from quicx.clients.operations import SubmitKeywords
from quicx.clients.outcomes import DEFAULT_KEEP, RetryListener
from quicx.protocol.errors import ConnectionLost, QuicxError


class AsyncClusterClient:
    """
    An asyncio producer of several independent daemons.

    @ivar clients: each daemon's L{AsyncClient}, by address.
    """

    def __init__(
        self,
        addresses: str | Iterable[str],
        timeout: float = 30.0,
        keep_outcomes: int = DEFAULT_KEEP,
        protocol: int = 2,
        spread: str = ROUND_ROBIN,
        first: int | None = None,
    ) -> None:
        self._cluster = Cluster.of(addresses, spread, first)
        self.addresses = tuple(self._cluster.members)
        self.clients = {a: AsyncClient(a, timeout, keep_outcomes, protocol) for a in self.addresses}

    async def close(self) -> None:
        await asyncio.gather(*(client.close() for client in self.clients.values()))

    async def __aenter__(self) -> AsyncClusterClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        *,
        shard_key: str | bytes | None = None,
        **options: Any,
    ) -> TaskRef:
        """Submit one task to its daemon (see L{ClusterClient.submit}); its L{TaskRef}."""
        keywords = cast(SubmitKeywords, options)
        operations.submit(task_type, payload, keywords).prepare()  # a bad option, at once
        make = partial(operations.submit, task_type, payload, keywords)
        return await self._route(make, shard_key, options.get("key"))

    async def _route(
        self, make: Callable[[], Request[int]], shard_key: str | bytes | None, key: Any
    ) -> TaskRef:
        route = Route.of(self._cluster, shard_key, key)
        while (address := route.next(time.monotonic())) is not None:
            client = self.clients[address]
            try:
                await client.connect()
            except (QuicxError, TimeoutError):
                route.unreachable(address, time.monotonic())
                continue  # nothing was sent: the next daemon may have it
            route.sent(address)
            try:
                task_id = await client._call(make())
            except (ConnectionLost, TimeoutError):  # gone, or hung: it may have accepted it
                error = route.lost(address, time.monotonic())
                if error is not None:
                    raise error from None
                continue
            except BaseException:
                route.answered(address)  # a refusal: it is there
                raise
            route.answered(address)
            return TaskRef(task_id, address)
        raise route.exhausted()

    async def submit_many(
        self, tasks: Iterable[ClusterTask], return_exceptions: bool = False
    ) -> list[TaskRef | BaseException]:
        """
        Submit many tasks, each placed on its daemon, all at once (each
        connection pipelines its share): L{TaskRef}s or errors, in order.
        """

        async def one(task: ClusterTask) -> TaskRef:
            plain = as_task(task)
            key = plain[2].key if len(plain) == 3 else None
            return await self._route(lambda: Request.submit([plain]), shard_key_of(task), key)

        results = await asyncio.gather(*(one(task) for task in tasks), return_exceptions=True)
        if not return_exceptions:
            for result in results:
                if isinstance(result, BaseException):
                    result.results = results  # type: ignore[attr-defined]
                    raise result
        return results

    def _locate(self, ref: Ref) -> tuple[AsyncClient, int]:
        found = self._cluster.locate(ref)
        return self.clients[found.daemon], found.id

    async def wait(
        self, ref: Ref, timeout: float | None = None, on_retry: RetryListener | None = None
    ) -> Any:
        client, task_id = self._locate(ref)
        return await client.wait(task_id, timeout, on_retry)

    async def result(self, ref: Ref, timeout: float | None = None) -> Any:
        client, task_id = self._locate(ref)
        return await client.result(task_id, timeout)

    async def cancel(self, ref: Ref) -> dict[str, Any]:
        client, task_id = self._locate(ref)
        return await client.cancel(task_id)

    async def task(self, ref: Ref) -> dict[str, Any]:
        client, task_id = self._locate(ref)
        return await client.task(task_id)


def open_client(
    addresses: str | Sequence[str] | None = None,
    timeout: float = 30.0,
    keep_outcomes: int = DEFAULT_KEEP,
    protocol: int = 2,
    spread: str = ROUND_ROBIN,
    failover: bool = False,
) -> AsyncClient | AsyncClusterClient:
    """
    An L{AsyncClient} for one address, an L{AsyncClusterClient} for several
    ($QUICX_ADDRESS); with C{failover}, an L{AsyncClient} of the replicated
    shard they are, which follows its primary (L{quicx.clients.failover}).
    """
    found = split_addresses(default_address() if addresses is None else addresses)
    if failover:
        return AsyncClient(found, timeout, keep_outcomes, protocol, failover=True)
    if len(found) == 1:
        return AsyncClient(found[0], timeout, keep_outcomes, protocol)
    return AsyncClusterClient(found, timeout, keep_outcomes, protocol, spread)
