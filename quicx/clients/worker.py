"""
The worker runner.

    worker = Worker()

    @worker.handler("send_email")
    def send_email(payload: bytes) -> None:
        ...

    worker.start(reactor, "tcp:127.0.0.1:16381")

Handlers take the task's payload (C{bytes}), and may take a second argument,
the task's L{TaskContext} (id, queue, priority, attempt, enqueue time, keys,
the delivery's fencing token and lease, its failures and retries, progress
reports, shared data, checkpoints).  Returning normally means done, and what
the handler returns (C{bytes}, C{str}, or anything JSON-serialisable; C{None}: nothing)
is the task's result; raising means failed, with the exception's type,
message and traceback as the reason (see L{failure_reason}; the worker logs
it too), L{Unrecoverable}: failed for good, not to be retried.  To a version-2
daemon the worker reports with ACK, with the result, and NACK, quoting the
delivery's token; to a version-1 daemon, with DONE and FAILED (and no
result).  A result that cannot be sent (not serialisable, or larger than
the daemon takes) fails the task for good, saying why.  Plain functions
start in a thread pool, so the reactor stays free to answer heartbeats while
they work, and move to the reactor while their calls are short (under a
millisecond: see L{quicx.clients.adaptive}); C{thread=True} keeps one in the
threads for good.  C{async def} handlers, and handlers registered with
C{thread=False} (which may return a L{Deferred}), run on the reactor thread.

Each of C{concurrency} slots is one connection.  A slot holds one task at a
time, as the protocol page has it, or with C{credits} above 1 up to that many
(Quicx's READY credit extension): the daemon then sends several TASKs in one
write and the slot answers the outcomes of a read in one write.  Without
C{credits}, each slot chooses its own by its handlers' pace
(L{quicx.clients.adaptive.AutoCredits}).  Against a daemon without the
extension a slot falls back to one task at a time.  Slots
reconnect with backoff (at most 3 s apart, as the reference worker waits)
whenever the daemon goes away.  Given several daemons (a cluster), the
worker keeps C{concurrency} slots on each, and the daemons share its
capacity, the daemons it reaches taking a gone one's share until it comes
back (L{quicx.clients.shares}).

Each slot speaks protocol version 2: it opens with HELLO, then FOLLOWs the
worker's shared data (C{follow}: the daemon sends the current version of
each name before any task, and every later one), and READY names the
worker's C{queues}, served in that order.  Against a daemon that speaks
only version 1 it falls back to version 1: it serves the default queue, and
a handler's context has the queue C{None}, priority 0 and the time the task
arrived, and no token or lease.

Each slot announces the task types the worker runs (ANNOUNCE: by default
its handlers' types; C{types="all"}: every type, as before routing), so the
daemon hands it only those: a task of another type waits for a worker that
runs it, instead of failing here with "no handler for".  An admin may steer
the worker from the daemon (C{quicx quiet}, C{quicx terminate}; STOP): a
slot told to go quiet finishes the tasks it holds, is sent no more, and
stays connected and idle (as Faktory's quiet: the process keeps running, and
a quiet slot whose connection drops does not reconnect); told to terminate,
the worker stops at once, every slot on every daemon (the daemon has queued
again the tasks it held; their outcomes are dropped), and calls
C{on_terminate} (C{quicx worker} exits 0), else L{Worker.stop}.

A delivery's lease runs out after the queue's task timeout unless it is
extended: by the handler (L{TaskContext.extend}), or, with
C{Worker(auto_extend=True)}, every half lease while the handler runs.  A
report the daemon refuses as stale (C{ERROR 0x08}: the lease ran out and the
task went back to the queue) is logged as a warning.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from twisted.internet.defer import CancelledError, Deferred, DeferredList, ensureDeferred
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import Factory
from twisted.internet.task import deferLater
from twisted.logger import Logger

from quicx.clients.adaptive import AUTO_MAX
from quicx.clients.address import DEFAULT_ADDRESS, split_addresses
from quicx.clients.failover import FAILOVER_DEADLINE, Shard
from quicx.clients.following import Following
from quicx.clients.handlers import Handler, Handlers, TaskContext
from quicx.clients.reports import Unrecoverable, cut_reason, failure_reason, report
from quicx.clients.shares import Shares
from quicx.clients.slot import Member, WorkerProtocol
from quicx.clients.twisted_client import endpoint_for
from quicx.protocol import codec, shared_data, taskflow, workers
from quicx.protocol.errors import ConnectionLost

RETRY_FIRST = 0.1
RETRY_MAX = 3.0
"""Reconnect delays double from RETRY_FIRST up to RETRY_MAX (the reference's 3 s)."""


class Worker(Handlers):
    """
    Runs handlers for tasks from one daemon, or from each of several (a
    cluster), which share its capacity (L{quicx.clients.shares}).

    @ivar concurrency: how many connections to each daemon it keeps.
    @ivar credits: how many tasks each connection may hold at once; up to
        C{concurrency * credits} tasks run at once.  C{None} (the default):
        each connection chooses, by its handlers' pace (L{AutoCredits}): as
        many as its short handlers run on the reactor in 2 ms, one while a
        handler runs in a thread.  With several daemons, that many run at once
        in all (see L{quicx.clients.shares}).
    @ivar queues: the queues it serves, in order (empty: the daemon's
        default queue).
    @ivar protocol: 2, falling back to 1 where the daemon speaks only 1; or 1.
    @ivar auto_extend: while a handler runs, extend its task's lease every
        half lease (a task whose lease would otherwise run out before its
        handler is done; a handler stuck for good then holds it for good too).
    @ivar follow: the shared-data names it follows (at most 32).
    @ivar shared: the newest version of each of them, by name (read-only;
        what each task's C{context.shared} is).
    @ivar members: its daemons, in the order given, once started.
    @ivar types: the task types it announces it runs: C{"handlers"} (its
        handlers' types, or every type when it has none), C{"all"} (every
        type: it announces none), or a list of them.
    @ivar name: the name it announces (C{quicx workers} shows it, and
        C{quicx quiet NAME} steers every connection that gave it).
    @ivar on_terminate: called once the daemon has terminated the worker
        and its connections are closed (C{None}: L{stop} is).
    """

    log = Logger()

    def __init__(
        self,
        handlers: Mapping[str, Handler] | None = None,
        concurrency: int = 1,
        credits: int | None = None,
        queues: Sequence[str] = (),
        protocol: int = 2,
        auto_extend: bool = False,
        follow: Sequence[str] = (),
        types: Sequence[str] | str = "handlers",
        name: str = "",
    ) -> None:
        super().__init__()
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        if credits is not None and not 1 <= credits <= codec.MAX_CREDITS:
            raise ValueError(f"credits must be 1 to {codec.MAX_CREDITS}")
        self.concurrency = concurrency
        self.credits = credits
        self.queues = tuple(queues)
        self.follow = tuple(follow)
        if protocol not in (1, 2) or (protocol == 1 and (self.queues or self.follow)):
            raise ValueError("protocol is 2, or 1 without queues or shared data")
        self.protocol = protocol
        self.auto_extend = auto_extend
        if isinstance(types, str) and types not in ("handlers", "all"):
            raise ValueError(f'types is "handlers", "all" or a list of task types, not {types!r}')
        self.types = types
        self.name = name
        workers.encode_announce(None if isinstance(types, str) else types, name)  # checks them
        self.on_terminate: Callable[[], object] | None = None
        self.terminated = False
        taskflow.encode_ready(1, self.queues)  # checks the names and their number
        if self.follow:
            shared_data.encode_follow(self.follow)  # the same
        # One slot follows the shared data for all (the follower); the
        # others' READYs wait until its first FOLLOW answer has come.
        self._following: Following[WorkerProtocol] = Following(self._shared)
        for name, function in (handlers or {}).items():
            self.register(name, function)
        self.failover = False
        self._shard_addresses: tuple[str, ...] = ()  # with failover
        self._loops: list[Deferred[None]] = []
        self._waiting: set[Deferred[Any]] = set()
        self._stopping = False
        self._slots: set[WorkerProtocol] = set()
        self.members: list[Member] = []
        # The tasks it may hold, whatever its daemons, shared among them.
        self._shares: Shares[WorkerProtocol] = Shares(self.members, 0, concurrency)

    def _slot_greeted(self, slot: WorkerProtocol) -> bool:
        """
        A slot's daemon has shared data: the first such slot follows it (its
        FOLLOW goes before its READY, so the data comes before any task).

        @return: whether C{slot} may send READY now (not before the data has come).
        """
        return self._following.greeted(slot)

    def _slot_connected(self, slot: WorkerProtocol) -> None:
        """
        A slot's connection opened and was answered: its daemon is counted,
        and it learns its credits.
        """
        if slot.place is None:
            return
        member, place = slot.place
        said, came = self._shares.connected(member, place, slot)
        if said is not None:
            self.log.info(
                "{what} {address} (protocol version {version})",
                what=said,
                address=member.address,
                version=slot.version,
            )
        if came:
            self._log_shares()

    def _slot_gone(self, member: Member) -> None:
        """A slot of C{member} could not open its connection."""
        if self._shares.lost(member, stopping=self._stopping):
            self._log_shares()

    def _log_shares(self) -> None:
        """A daemon came or went: which have a share now (a cluster's worker logs it)."""
        summary = self._shares.summary()
        if summary is not None:
            self.log.info("{summary}", summary=summary)

    def _slot_lost(self, slot: WorkerProtocol) -> None:
        """A slot's connection closed: another slot follows, if it followed."""
        if slot.place is not None:
            member, place = slot.place
            if self._shares.lost(member, place, slot, self._stopping):
                self._log_shares()
        self._following.lost(slot, self._slots)

    def followed(self, following: object, slot: WorkerProtocol) -> None:
        """
        The follower's FOLLOW was answered (C{following}: each name's current
        version, 0 for none): forget the names that no longer exist; the
        held slots may now ask for tasks.
        """
        self._following.followed(following, slot)

    def shared_arrived(self, shared: shared_data.Shared, slot: WorkerProtocol) -> None:
        """C{slot} got a version of shared data: the newest, if it is the follower."""
        self._following.arrived(shared, slot)

    def announcement(self) -> bytes:
        """The ANNOUNCE each slot sends: its types, its name, its host and process id."""
        if isinstance(self.types, str):
            handled = sorted(self._handlers) if self.types == "handlers" else []
        else:
            handled = [t.encode("utf-8") for t in self.types]
        return workers.encode_announce(
            handled or None, self.name, socket.gethostname(), os.getpid()
        )

    def told_to_stop(self, stop: workers.Stop, slot: WorkerProtocol) -> None:
        """The daemon of C{slot} steers this worker (STOP): quiet, or terminate."""
        address = slot.place[0].address if slot.place is not None else "the daemon"
        if stop.action is workers.Steer.QUIET:
            slot.quiet = True
            self.log.info(
                "{address} asks this worker to be quiet: it finishes the {held} task(s) this"
                " connection holds and takes no more",
                address=address,
                held=slot.running,
            )
            return
        if self.terminated:
            return
        self.terminated = self._stopping = True
        self.log.warn(
            "{address} terminates this worker: stopping now (the daemon queues again the"
            " tasks it held)",
            address=address,
        )
        for waiting in list(self._waiting):
            waiting.cancel()
        for each in list(self._slots):
            each.stopping = True
            each.transport.abortConnection()
        if self.on_terminate is not None:
            self.on_terminate()
        else:
            ensureDeferred(self.stop())

    def start(
        self, reactor: Any, address: str | Sequence[str] = DEFAULT_ADDRESS, failover: bool = False
    ) -> None:
        """
        Connect C{concurrency} slots to the daemon at C{address}, or to each
        daemon of a list (C{"tcp:h1:16381,tcp:h2:16381"}, or a sequence:
        see L{split_addresses}), which share the worker's capacity (see
        L{quicx.clients.shares}).

        @param failover: the list names one replicated shard's daemons: the
            slots follow its primary (L{quicx.clients.failover}).
        @raise ValueError: the list is empty, or names a daemon twice; or
            a malformed C{tls:} address (see L{endpoint_for}).
        """
        addresses = split_addresses(address)
        self.failover = failover
        if failover:
            # One member, the shard; each slot's connection goes where it follows.
            self._shard_addresses = addresses
            addresses = (",".join(addresses),)
            following = cast(IStreamClientEndpoint, _Following(reactor))
            self.members = [Member(addresses[0], endpoint=following)]
        else:
            self.members = [
                Member(each, endpoint=endpoint_for(reactor, each)) for each in addresses
            ]
        self._stopping = False
        capacity = self.concurrency * (self.credits or AUTO_MAX)
        self._shares = Shares(self.members, capacity, self.concurrency)
        # A thread per credit, so that no task held waits for another's
        # thread.  (A slot holds one at least: with many daemons, more
        # than the capacity.)
        self._start_threads(reactor, max(capacity, self.concurrency * len(self.members)))
        self.log.info(
            "worker for {addresses}: queues {queues}; handlers {handlers};"
            " {concurrency} connection(s) to each, {credits} credits",
            addresses=", ".join(addresses),
            queues=", ".join(self.queues) or "the default queue",
            handlers=", ".join(sorted(t.decode("utf-8", "replace") for t in self._handlers))
            or "none",
            concurrency=self.concurrency,
            credits="automatic" if self.credits is None else self.credits,
        )
        self._loops = [
            ensureDeferred(self._keep_connected(member, place))
            for member in self.members
            for place in range(self.concurrency)
        ]

    async def _keep_connected(self, member: Member, place: int) -> None:
        """One slot: connect, serve until the connection ends, reconnect."""
        delay = RETRY_FIRST
        address = member.address
        # With failover, where this slot follows the shard's primary to.
        shard = None
        if self.failover:
            shard = Shard(self._shard_addresses, FAILOVER_DEADLINE, forever=True)
        while not self._stopping:
            if shard is not None:
                address = shard.current
            attempt = member.endpoint.connect(_SlotFactory(self, member, place, address))
            try:
                slot = await self._cancellable(attempt)
            except CancelledError:
                return
            except Exception as e:
                self._slot_gone(member)
                if shard is not None:
                    delay = self._hop(shard, e)
                self.log.warn(
                    "cannot reach {address} ({error}); retrying in {delay:.1f} s",
                    address=address,
                    error=e,
                    delay=delay,
                )
            else:
                delay = RETRY_FIRST
                await slot.closed
                if self._stopping or slot.quiet:
                    return  # a quiet slot stays away, as it was told
                if slot.refusal is None:
                    self.log.warn("lost the daemon at {address}; reconnecting", address=address)
                if shard is not None:
                    if slot.primary and slot.refusal is None:
                        shard.reached()
                    delay = self._hop(shard, slot.refusal or ConnectionLost(f"lost {address}"))
                    self.log.info(
                        "following the shard's primary: {address} in {delay:.2f} s",
                        address=shard.current,
                        delay=delay,
                    )
            try:
                await self._cancellable(deferLater(self._reactor, delay, lambda: None))
            except CancelledError:
                return
            if shard is None:
                delay = min(delay * 2, RETRY_MAX)

    def _hop(self, shard: Shard, error: Exception) -> float:
        """
        A slot's daemon is not the primary, or is out of reach: the slot
        follows C{shard} to the next; in how many seconds.
        """
        hop = shard.next(error, self._reactor.seconds())
        if hop.overdue is not None:
            self.log.error("{error}; still trying", error=hop.overdue)
        return hop.delay

    def _cancellable(self, waiting: Deferred[Any]) -> Deferred[Any]:
        """Track C{waiting} so that L{stop} can cancel it."""
        self._waiting.add(waiting)
        return waiting.addBoth(_passthrough_after, self._waiting.discard, waiting)

    async def stop(self) -> None:
        """
        Stop gracefully: every slot finishes its task in hand and reports it,
        then disconnects.  Tasks are not interrupted.
        """
        self._stopping = True
        for waiting in list(self._waiting):
            waiting.cancel()
        await DeferredList([slot.stop() for slot in list(self._slots)])
        await DeferredList(self._loops)
        self._loops = []
        self._stop_threads()


class _SlotFactory(Factory):
    """Builds one slot's connection (quietly: no log line per connection)."""

    noisy = False

    def __init__(self, worker: Worker, member: Member, place: int, address: str) -> None:
        self.worker = worker
        self.place = (member, place)
        self.address = address  # the daemon it connects to

    def buildProtocol(self, addr: Any) -> WorkerProtocol:
        return WorkerProtocol(self.worker, self.place)


class _Following:
    """
    The endpoint of a shard's member: each slot connects to the daemon its
    factory names (the one it follows the primary to).
    """

    def __init__(self, reactor: Any) -> None:
        self._reactor = reactor

    def connect(self, factory: _SlotFactory) -> Deferred[Any]:
        return endpoint_for(self._reactor, factory.address).connect(factory)


def _passthrough_after(result: object, forget: Callable[[Any], None], item: object) -> object:
    forget(item)
    return result


__all__ = [
    "Handler",
    "Member",
    "TaskContext",
    "Unrecoverable",
    "Worker",
    "WorkerProtocol",
    "cut_reason",
    "failure_reason",
    "report",
]
