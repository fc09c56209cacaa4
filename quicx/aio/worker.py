"""
The asyncio worker: handlers run on the application's own event loop.

    worker = AsyncWorker(credits=50, follow=["rates"])

    @worker.handler("fetch")
    async def fetch(payload: bytes, context: TaskContext) -> dict:
        context.progress(0.5, "halfway")
        ...

    await worker.run("tcp:127.0.0.1:16381")  # until worker.stop(), or SIGTERM with signals=True

Or inside a running application: C{worker.start(address)} returns the
task that serves, and C{await worker.stop()} stops it gracefully (C{quicx
worker --loop asyncio MODULE:OBJECT} runs one on its own loop, uvloop's
where installed, until SIGTERM or Ctrl-C).

Handlers are C{async def} functions (run as tasks of the loop, up to
C{credits} at once on each connection) or plain ones, which run on the
loop itself and must be quick.  They take the payload, and may take the
task's L{TaskContext} (its C{extend} sends TOUCH, its C{progress}
PROGRESS, its C{shared} the newest version of each name the worker
C{follow}s); what they return is the result, what they raise the failure
(L{Unrecoverable}: for good), as with L{quicx.clients.worker.Worker}.

Without C{credits}, each connection chooses its own as the Twisted
runner's do (L{quicx.clients.adaptive.AutoCredits}): as many as its plain
handlers run on the loop in 2 ms, up to 256; one while an C{async def}
handler runs (give C{credits} for coroutines that should overlap).

Each of C{concurrency} connections to each daemon reconnects with
backoff.  Given several daemons (a list of addresses), the daemons share
the worker's capacity (C{concurrency * credits}, as one daemon would get),
the daemons it reaches taking a gone one's share until it comes back
(L{quicx.clients.shares}), as with the Twisted runner.  A handler whose
delivery's lease was lost (the daemon says so, stale, in answer to its
TOUCH or PROGRESS) is cancelled; the protocol does not tell a worker that
its running task was cancelled, as a running task cannot be.

An admin may steer it from the daemon (C{quicx quiet}, C{quicx terminate}):
a connection told to go quiet finishes what it holds, is sent no more, and
stays connected (not reconnecting once it closes); told to terminate, the
worker cancels its handlers (the daemon has queued their tasks again) and
L{run} returns.  It announces no task types: it is sent every type.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

from quicx.aio.slot import AsyncSlot, log
from quicx.clients.adaptive import AUTO_MAX
from quicx.clients.address import DEFAULT_ADDRESS, parse_address, split_addresses
from quicx.clients.context import TaskContext, takes_context
from quicx.clients.failover import FAILOVER_DEADLINE, Shard
from quicx.clients.following import Following
from quicx.clients.reports import Unrecoverable
from quicx.clients.shares import Member, Shares
from quicx.protocol import codec, shared_data, taskflow, workers
from quicx.protocol.errors import ConnectionLost

Handler = Callable[..., Any]

RETRY_FIRST = 0.1
RETRY_MAX = 3.0
"""Reconnect delays double from RETRY_FIRST up to RETRY_MAX."""


class AsyncWorker:
    """
    Runs C{async def} handlers for tasks from one daemon, or each of several.

    @ivar concurrency: connections to each daemon.
    @ivar credits: tasks each connection may hold (and run) at once
        (C{None}, the default: each chooses, by its handlers' pace).
    @ivar queues: the queues it serves, in order (empty: the default queue).
    @ivar auto_extend: while a handler runs, extend its lease every half lease.
    @ivar follow: the shared-data names it follows (at most 32).
    @ivar shared: the newest version of each of them, by name (read-only;
        what each task's C{context.shared} is).
    @ivar members: its daemons, in the order given, once started.
    """

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        concurrency: int = 1,
        credits: int | None = None,
        queues: Sequence[str] = (),
        protocol: int = 2,
        auto_extend: bool = False,
        follow: Sequence[str] = (),
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if credits is not None and not 1 <= credits <= codec.MAX_CREDITS:
            raise ValueError(f"credits must be 1 to {codec.MAX_CREDITS}")
        if protocol not in (1, 2) or (protocol == 1 and (queues or follow)):
            raise ValueError("protocol is 2, or 1 without queues or shared data")
        taskflow.encode_ready(1, tuple(queues))  # checks the names and their number
        if follow:
            shared_data.encode_follow(tuple(follow))  # the same
        self.concurrency = concurrency
        self.credits = credits
        self.queues = tuple(queues)
        self.follow = tuple(follow)
        self.protocol = protocol
        self.auto_extend = auto_extend
        self.failover = False
        self._shard: tuple[str, ...] = ()  # with failover, the shard's daemons
        self._handlers: dict[bytes, tuple[Handler, bool]] = {}
        for name, function in (handlers or {}).items():
            self.register(name, function)
        self._shared: dict[str, bytes] = {}
        self.shared = MappingProxyType(self._shared)
        # One slot follows the shared data for all; the others' READYs wait for it.
        self._following: Following[AsyncSlot] = Following(self._shared)
        self.members: list[Member[AsyncSlot]] = []
        self._shares: Shares[AsyncSlot] = Shares(self.members, 0, concurrency)
        self.slots: set[AsyncSlot] = set()
        self._stopping: asyncio.Event | None = None
        self._serving: asyncio.Task[None] | None = None
        self._stopper: asyncio.Future[None] | None = None

    def register(self, task_type: str, function: Handler) -> None:
        """Run C{function} (C{async def}, or a quick plain one) for tasks of C{task_type}."""
        self._handlers[task_type.encode("utf-8")] = (function, takes_context(function))

    def handler(self, task_type: str) -> Callable[[Handler], Handler]:
        """Decorator form of L{register}."""

        def decorate(function: Handler) -> Handler:
            self.register(task_type, function)
            return function

        return decorate

    def handler_for(self, task_type: bytes) -> tuple[Handler, bool] | None:
        return self._handlers.get(task_type)

    # -- what its slots tell it (the sans-I/O parts are the Twisted runner's too) -----

    def _slot_connected(self, slot: AsyncSlot) -> None:
        """A slot's connection was answered: its daemon is counted, and it learns its credits."""
        if slot.place is None:
            return
        member, place = slot.place
        said, came = self._shares.connected(member, place, slot)
        if said is not None:
            log.info("%s %s (protocol version %d)", said, member.address, slot.version)
        if came:
            self._log_shares()

    def _slot_greeted(self, slot: AsyncSlot) -> bool:
        """A slot's daemon has shared data: whether it may send READY now."""
        return self._following.greeted(slot)

    def _slot_lost(self, slot: AsyncSlot) -> None:
        """A slot's connection closed: its daemon's share, and the following, move on."""
        self.slots.discard(slot)
        if slot.place is not None:
            member, place = slot.place
            if self._shares.lost(member, place, slot, self._is_stopping()):
                self._log_shares()
        self._following.lost(slot, self.slots)

    def followed(self, following: object, slot: AsyncSlot) -> None:
        """The follower's FOLLOW was answered: the held slots may ask for tasks."""
        self._following.followed(following, slot)

    def shared_arrived(self, shared: shared_data.Shared, slot: AsyncSlot) -> None:
        """C{slot} got a version of shared data: the newest, if it is the follower."""
        self._following.arrived(shared, slot)

    def _log_shares(self) -> None:
        summary = self._shares.summary()
        if summary is not None:
            log.info("%s", summary)

    def _is_stopping(self) -> bool:
        return self._stopping is not None and self._stopping.is_set()

    async def run(
        self,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
        signals: bool = False,
        failover: bool = False,
    ) -> None:
        """
        Serve the daemon at C{address} (or each of a list) until L{stop}; with
        C{signals}, the first SIGTERM or SIGINT stops it gracefully.

        @param failover: the list names one replicated shard's daemons: the
            connections follow its primary (L{quicx.clients.failover}).
        @raise ValueError: a malformed or empty address list.
        """
        addresses = split_addresses(address)
        for each in addresses:
            parse_address(each)
        self.failover = failover
        if failover:
            # One member, the shard; each connection goes where it follows.
            self._shard, addresses = addresses, (",".join(addresses),)
        self.members = [Member(each) for each in addresses]
        capacity = self.concurrency * (self.credits or AUTO_MAX)
        self._shares = Shares(self.members, capacity, self.concurrency)
        self._stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        if signals:
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(number, self._signalled, number)
        log.info(
            "asyncio worker for %s: queues %s; %d connection(s) to each, %s credits",
            ", ".join(addresses),
            ", ".join(self.queues) or "the default queue",
            self.concurrency,
            "automatic" if self.credits is None else self.credits,
        )
        try:
            async with asyncio.TaskGroup() as group:
                for member in self.members:
                    for place in range(self.concurrency):
                        group.create_task(self._keep_connected(member, place))
        finally:
            if signals:
                for number in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(number)

    def start(
        self, address: str | Sequence[str] = DEFAULT_ADDRESS, failover: bool = False
    ) -> asyncio.Task[None]:
        """L{run}, as a task of the running loop (an application's): stop it with L{stop}."""
        self._serving = asyncio.ensure_future(self.run(address, failover=failover))
        return self._serving

    def _signalled(self, number: int) -> None:
        log.warning("%s: stopping once the tasks in hand are done", signal.Signals(number).name)
        self._stopper = asyncio.ensure_future(self.stop())

    async def stop(self) -> None:
        """
        Stop gracefully: every connection finishes the tasks in hand and
        reports them, then closes; L{run} returns.
        """
        if self._stopping is None:
            return
        self._stopping.set()
        await asyncio.gather(*(slot.stop() for slot in list(self.slots)))
        if self._serving is not None:
            await self._serving

    def told_to_stop(self, stop: workers.Stop, slot: AsyncSlot) -> None:
        """
        The daemon steers this worker (STOP): a quiet connection finishes
        what it holds and stays, idle, not reconnecting once it closes; a
        terminate stops every connection now (the daemon queued again what
        they held: their handlers are cancelled), and L{run} returns.
        """
        if stop.action is workers.Steer.QUIET:
            slot.quiet = True
            log.info("the daemon asks this worker to be quiet: it takes no more tasks")
            return
        log.warning("the daemon terminates this worker: stopping now")
        if self._stopping is not None:
            self._stopping.set()
        for each in list(self.slots):
            each.terminate()

    async def _keep_connected(self, member: Member[AsyncSlot], place: int) -> None:
        """One connection: connect, serve until it ends, reconnect."""
        assert self._stopping is not None
        loop = asyncio.get_running_loop()
        address = member.address
        # With failover, where this connection follows the shard's primary to.
        shard = Shard(self._shard, FAILOVER_DEADLINE, forever=True) if self.failover else None
        delay = RETRY_FIRST
        while not self._stopping.is_set():
            if shard is not None:
                address = shard.current
            _, sockaddr, tls = parse_address(address)
            context = tls.context() if tls is not None else None
            slot = AsyncSlot(self, self.shared, (member, place))
            factory = functools.partial(_same, slot)
            try:
                if isinstance(sockaddr, str):
                    await loop.create_unix_connection(factory, sockaddr)
                else:
                    hostname = tls.hostname if tls is not None else None
                    transport, _ = await loop.create_connection(
                        factory, *sockaddr, ssl=context, server_hostname=hostname
                    )
                    if tls is not None:
                        try:
                            tls.verify(transport.get_extra_info("ssl_object"))
                        except Exception:
                            transport.abort()
                            raise
            except Exception as e:
                if self._shares.lost(member, stopping=self._stopping.is_set()):
                    self._log_shares()
                if shard is not None:
                    delay = _hop(shard, e)
                log.warning("cannot reach %s (%s); retrying in %.1f s", address, e, delay)
            else:
                self.slots.add(slot)
                if self._stopping.is_set():
                    slot.stop()
                with contextlib.suppress(ConnectionError):
                    await slot.greeted
                    delay = RETRY_FIRST
                await slot.closed
                self.slots.discard(slot)
                if self._stopping.is_set() or slot.quiet:
                    return
                if slot.refusal is None:
                    log.warning("lost the daemon at %s; reconnecting", address)
                if shard is not None:
                    if slot.primary and slot.refusal is None:
                        shard.reached()
                    delay = _hop(shard, slot.refusal or ConnectionLost(f"lost {address}"))
                    log.info("following the shard's primary: %s in %.2f s", shard.current, delay)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._stopping.wait()
            if shard is None:
                delay = min(delay * 2, RETRY_MAX)


def _hop(shard: Shard, error: Exception) -> float:
    """A connection follows C{shard} to its next daemon: in how many seconds."""
    hop = shard.next(error, time.monotonic())
    if hop.overdue is not None:
        log.error("%s; still trying", hop.overdue)
    return hop.delay


def _same(slot: AsyncSlot) -> AsyncSlot:
    return slot


__all__ = ["AsyncWorker", "Handler", "TaskContext", "Unrecoverable"]
