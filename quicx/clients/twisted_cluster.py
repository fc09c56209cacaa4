"""
The Twisted producer of several daemons.

The Twisted producer of several daemons: one L{ProducerService} per daemon,
each reconnecting with backoff, and each task placed on one of them by the
rules of L{quicx.clients.cluster} (the blocking L{ClusterClient}'s).

    producer = ClusterProducerService(reactor, "tcp:10.0.0.1:16381,tcp:10.0.0.2:16381")
    producer.setServiceParent(application)      # or producer.startService()
    ref = await producer.submit("send_email", b"...")       # a TaskRef: 17@tcp:10.0.0.2:16381
    await producer.outcome(ref)
    await producer.submit("charge", b"...", key="order-42")       # the key's daemon, always
    await producer.submit("resize", b"...", shard_key="user-7")   # this user's daemon
    print(await producer.result(ref, timeout=60))

Or C{open_producer(reactor, addresses)}: a L{ProducerService} for one
address, a L{ClusterProducerService} for several.

A daemon whose connection is down, or that does not answer HELLO in the
service's C{timeout}, is skipped (nothing was sent to it); its service
reconnects in the background, and the daemon takes tasks again once it is
connected.  A daemon that goes away with submits unanswered, or does not
answer one in C{timeout}, may have accepted them (it is down until its
retry time, as if it had gone away): one with an idempotency key goes to the key's next daemon,
one without is L{NotAcknowledged}.  So, unlike a L{ProducerService} of one
daemon, this service gives a submit no key of its own: such a key keeps a
task once per daemon, and sent to another daemon it could run once on each.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any, TypeVar, cast

import attrs
from twisted.application.service import MultiService
from twisted.internet.defer import (
    CancelledError,
    Deferred,
    DeferredList,
    ensureDeferred,
)
from twisted.internet.error import ConnectError
from twisted.python.failure import Failure

from quicx.clients.address import default_address, split_addresses
from quicx.clients.cluster import ROUND_ROBIN, Cluster, Member, Route, TaskRef
from quicx.clients.outcomes import RetryListener
from quicx.clients.twisted_client import ProducerService, QuicxClientProtocol
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, QuicxError

T = TypeVar("T")

Ref = TaskRef | str
"""A task of the cluster: a L{TaskRef}, or its text form C{ID@ADDRESS}."""


class ClusterProducerService(MultiService):
    """
    A producer of several independent daemons that stays connected to each.

    @ivar addresses: the daemons, normalized, in the order given.
    @ivar producers: each daemon's L{ProducerService}, by address: for what
        goes to one daemon.
    @ivar timeout: seconds a daemon has to answer HELLO, a submit, or a
        call of L{each}.
    """

    def __init__(
        self,
        reactor: Any,
        addresses: str | Iterable[str],
        spread: str = ROUND_ROBIN,
        first: int | None = None,
        timeout: float = 30.0,
    ) -> None:
        """
        @param addresses: C{"tcp:h1:16381,tcp:h2:16381"}, or an iterable of
            addresses: every client of the cluster must name its daemons the
            same way, as placement hashes the names.
        @param spread: how tasks without a shard key are spread:
            C{"round-robin"} or C{"least-loaded"} (see L{quicx.clients.cluster}).
        @param first: the index of the daemon the spread begins at (default:
            a random one).
        @param timeout: seconds a daemon has to answer HELLO (else it
            counts as one that cannot be reached) or a submit (else the
            submit is lost as if its daemon went away, and the daemon is
            down until its retry time); a late answer is dropped.
        @raise ValueError: no address, one named twice, a malformed one, an
            unknown spread.
        """
        super().__init__()
        self._cluster = Cluster.of(addresses, spread, first)
        self._reactor = reactor
        self.timeout = timeout
        self.addresses = tuple(self._cluster.members)
        self.producers = {a: ProducerService(reactor, a) for a in self.addresses}
        for address, producer in self.producers.items():
            producer.setName(address)
            producer.setServiceParent(self)
        # The daemons whose first connection was made or failed: one of them
        # not connected now is down (the others are being reached the first
        # time, and a submit waits for that).
        self._known: set[str] = set()

    def startService(self) -> None:
        super().startService()
        for address, producer in self.producers.items():
            producer.whenConnected(failAfterFailures=1).addBoth(self._first_attempt, address)

    def _first_attempt(self, result: object, address: str) -> None:
        """
        The first connection to C{address} was made, or failed: then it is
        down until its service reconnects.
        """
        if isinstance(result, Failure):
            if result.check(CancelledError):
                return  # the service stopped first
            self._cluster.lost(address, self._now())
        self._known.add(address)

    @property
    def members(self) -> list[Member]:
        """Each daemon's state as this service sees it (live, awaiting answers), a copy."""
        return [attrs.evolve(m) for m in self._cluster.members.values()]

    def _now(self) -> float:
        return cast(float, self._reactor.seconds())

    def _timed(self, answer: Deferred[T]) -> Deferred[T]:
        """
        C{answer}, cancelled (so that a late answer is dropped) and failed
        with C{TimeoutError} when it does not fire in C{timeout}.
        """
        return answer.addTimeout(self.timeout, self._reactor, _timed_out)

    async def _connection(self, address: str) -> QuicxClientProtocol:
        """
        C{address}'s connection, once greeted: the current one; while the
        service has never been connected to it, the first it makes.

        @raise ConnectionLost: it is not connected (it went away, or its
            first connection failed), or did not answer HELLO in
            C{timeout}: nothing was sent.
        """
        connected = self.producers[address].whenConnected(failAfterFailures=1)
        if not connected.called and address in self._known:
            connected.cancel()  # its service goes on reconnecting
        try:
            client = cast(QuicxClientProtocol, await connected)
            await self._timed(client.greeted())
        except TimeoutError:
            raise ConnectionLost(f"{address} did not answer HELLO in {self.timeout} s") from None
        except (ConnectionLost, ConnectError, OSError) as e:
            raise ConnectionLost(f"{address} cannot be reached: {e}") from None
        except CancelledError:
            raise ConnectionLost(f"{address} cannot be reached: not connected") from None
        return client

    # -- submits ------------------------------------------------------------------------

    async def _submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        shard_key: str | bytes | None,
        options: dict[str, Any],
    ) -> tuple[QuicxClientProtocol, TaskRef]:
        route = Route.of(self._cluster, shard_key, options.get("key"))
        while (address := route.next(self._now())) is not None:
            try:
                client = await self._connection(address)
            except ConnectionLost:
                route.unreachable(address, self._now())
                continue
            route.sent(address)
            try:
                task_id = await self._timed(client.submit(task_type, payload, **options))
            except (ConnectionLost, TimeoutError):  # gone, or hung: it may have accepted it
                error = route.lost(address, self._now())
                if error is not None:
                    raise error from None
                continue
            except BaseException:
                route.answered(address)  # a refusal: it is there
                raise
            route.answered(address)
            return client, TaskRef(task_id, address)
        raise route.exhausted()

    async def submit(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        *,
        shard_key: str | bytes | None = None,
        **options: Any,
    ) -> TaskRef:
        """
        Submit one task to one daemon; return its L{TaskRef}.

        @param shard_key: the task goes to this key's daemon; without one,
            to its idempotency key's (C{key=}); without either, to the next
            connected daemon by the spread.
        @param options: as L{QuicxClientProtocol.submit} takes them.
        @raise NotAcknowledged: its daemon went away, or did not answer in
            C{timeout}, and it has no idempotency key.
        @raise ConnectionLost: no daemon of the cluster is connected.
        @raise DaemonError, ValueError: as L{QuicxClientProtocol.submit}.
        """
        return (await self._submit(task_type, payload, shard_key, options))[1]

    async def submit_and_wait(
        self,
        task_type: str | bytes,
        payload: str | bytes,
        on_retry: RetryListener | None = None,
        *,
        shard_key: str | bytes | None = None,
        **options: Any,
    ) -> TaskRef:
        """Submit a task (as L{submit}) and wait for its outcome (see L{outcome})."""
        client, ref = await self._submit(task_type, payload, shard_key, options)
        await client.outcome(ref.id, on_retry)
        return ref

    # -- one task, by its ref -----------------------------------------------------------

    async def _route(self, ref: Ref) -> tuple[QuicxClientProtocol, int]:
        """The connection to C{ref}'s daemon, and its id there."""
        found = self._cluster.locate(ref)
        return await self._connection(found.daemon), found.id

    async def outcome(self, ref: Ref, on_retry: RetryListener | None = None) -> Any:
        """
        The outcome of a task this service submitted, on its daemon's
        connection: see L{QuicxClientProtocol.outcome}.  One submitted on a
        connection that closed since is not known on the next: ask for it
        with L{result} (and C{keep_result}).
        """
        client, task_id = await self._route(ref)
        return await client.outcome(task_id, on_retry)

    async def result(self, ref: Ref, timeout: float = 0.0) -> Any:
        """Any task's outcome, from its daemon: see L{QuicxClientProtocol.result}."""
        client, task_id = await self._route(ref)
        return await client.result(task_id, timeout)

    async def cancel(self, ref: Ref) -> dict[str, Any]:
        """Cancel a queued task on its daemon: see L{QuicxClientProtocol.cancel}."""
        client, task_id = await self._route(ref)
        return await client.cancel(task_id)

    async def task(self, ref: Ref) -> dict[str, Any]:
        """One task's state, from its daemon: see L{QuicxClientProtocol.task}."""
        client, task_id = await self._route(ref)
        return await client.task(task_id)

    # -- each daemon --------------------------------------------------------------------

    async def each(
        self, call: Callable[[QuicxClientProtocol], Deferred[T] | Coroutine[Any, Any, T]]
    ) -> dict[str, T | Exception]:
        """
        C{call} each daemon's connection, the daemons at once: what each
        call fired with, or the error it failed with (a daemon that is down,
        or does not answer in C{timeout}, does not stop the others).
        """

        async def ask(address: str) -> T:
            client = await self._connection(address)
            return await self._timed(ensureDeferred(call(client)))

        asked = [ensureDeferred(ask(address)) for address in self.addresses]
        answers = await DeferredList(asked, consumeErrors=True)
        found: dict[str, T | Exception] = {}
        for address, (ok, answer) in zip(self.addresses, answers, strict=True):
            if ok:
                found[address] = answer
            else:
                failure = cast(Failure, answer)
                failure.trap(QuicxError, TimeoutError)
                found[address] = cast(Exception, failure.value)
        return found

    async def stats(self) -> dict[str, wire.StatsResponse | Exception]:
        """Each daemon's STATS (L{QuicxClientProtocol.stats}), or the error it got."""
        return await self.each(QuicxClientProtocol.stats)


def _timed_out(result: T | Failure, timeout: float) -> T:
    """A timed-out answer's C{CancelledError} as the C{TimeoutError} to raise."""
    if isinstance(result, Failure):
        result.trap(CancelledError)
        raise TimeoutError(f"no answer in {timeout} s")
    return result


def open_producer(
    reactor: Any, addresses: str | Sequence[str] | None = None, spread: str = ROUND_ROBIN
) -> ProducerService | ClusterProducerService:
    """
    A Twisted producer service of C{addresses} (default: C{$QUICX_ADDRESS},
    else L{quicx.DEFAULT_ADDRESS}): a L{ProducerService} for one daemon, a
    L{ClusterProducerService} for several (C{spread} is theirs).  Start it
    (or add it to an application) before use.

    @raise ValueError: no address, an empty one, one named twice.
    """
    found = split_addresses(default_address() if addresses is None else addresses)
    if len(found) == 1:
        return ProducerService(reactor, found[0])
    return ClusterProducerService(reactor, found, spread)


__all__ = ["ClusterProducerService", "open_producer"]
