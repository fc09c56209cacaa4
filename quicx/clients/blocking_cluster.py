"""
The blocking client of several daemons (L{ClusterClient}).

The blocking client of several daemons: one L{QuicxClient} per daemon, each
task placed on one of them by the rules of L{quicx.clients.cluster}.

    with ClusterClient("tcp:10.0.0.1:16381,tcp:10.0.0.2:16381") as cluster:
        ref = cluster.submit("send_email", b"...")      # a TaskRef: 17@tcp:10.0.0.2:16381
        cluster.wait(ref, timeout=30)
        cluster.submit("charge", b"...", key="order-42")       # the key's daemon, always
        cluster.submit("resize", b"...", shard_key="user-7")   # this user's daemon
        refs = cluster.submit_many(("resize", p) for p in pictures)
        print(cluster.result(refs[0], timeout=60))

Or C{open_client(addresses)}: a L{QuicxClient} for one address, a
L{ClusterClient} for several (C{$QUICX_ADDRESS} when none is given).

When a daemon goes away part-way (or answers nothing for the client's
C{timeout}), what it had not answered is not lost silently: a submit with
an idempotency key goes to the key's next daemon (the daemon that went away
may have accepted it: the task may then run once on each, never twice on
one); one without is not sent again, as it may have been accepted, and is
reported with L{NotAcknowledged}; one it was not sent yet goes to the next
daemon.  A version-1 daemon is sent no task with options (each is
L{NeedsVersion2}), and any other error of one daemon's share stops that
share only: its tasks not sent have the error, the others their answers.
"""

from __future__ import annotations

import enum
import itertools
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from quicx.clients.address import default_address, split_addresses
from quicx.clients.blocking import DEFAULT_WINDOW, QuicxClient, Task
from quicx.clients.cluster import (
    ROUND_ROBIN,
    Cluster,
    ClusterTask,
    Member,
    Ref,
    Route,
    TaskRef,
    as_task,
    shard_key_of,
)
from quicx.clients.outcomes import DEFAULT_KEEP, RetryNotice
from quicx.clients.requests import OPTIONS_NEED_VERSION_2, has_options
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, NeedsVersion2, NotAcknowledged, QuicxError

T = TypeVar("T")


class ClusterClient:
    """
    A blocking producer of several independent daemons.

    Calls are thread-safe; threads that submit at once use the daemons at once.

    @ivar addresses: the daemons, normalized, in the order given.
    @ivar clients: each daemon's L{QuicxClient}, by address: for what goes
        to one daemon (its queues, its dead letters, a group).
    """

    def __init__(
        self,
        addresses: str | Iterable[str],
        timeout: float = 30.0,
        keep_outcomes: int = DEFAULT_KEEP,
        protocol: int = 2,
        spread: str = ROUND_ROBIN,
        clock: Callable[[], float] = time.monotonic,
        first: int | None = None,
    ) -> None:
        """
        @param addresses: C{"tcp:h1:16381,tcp:h2:16381"}, or an iterable of
            addresses: every client of the cluster must name its daemons
            the same way, as placement hashes the names.
        @param spread: how tasks without a shard key are spread:
            C{"round-robin"} or C{"least-loaded"} (see L{quicx.clients.cluster}).
        @param first: the index of the daemon the spread begins at (default:
            a random one).
        @raise ValueError: no address, one named twice, a malformed one, an
            unknown spread.
        """
        self._cluster = Cluster.of(addresses, spread, first)
        self.addresses = tuple(self._cluster.members)
        self.clients = {a: QuicxClient(a, timeout, keep_outcomes, protocol) for a in self.addresses}
        self._clock = clock
        self._lock = threading.Lock()  # the placement's; each client has its own
        self._pool: ThreadPoolExecutor | None = None

    def close(self) -> None:
        for client in self.clients.values():
            client.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> ClusterClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def members(self) -> list[Member]:
        """Each daemon's state as this client sees it (live, awaiting answers), a copy."""
        with self._lock:
            return [attrs.evolve(m) for m in self._cluster.members.values()]

    # -- placement ----------------------------------------------------------------------

    def _place_many(
        self, keys: list[str | bytes | None], avoid: Collection[str]
    ) -> list[str | None]:
        with self._lock:
            return self._cluster.place_many(keys, self._clock(), avoid)

    def _sent(self, address: str, count: int) -> None:
        with self._lock:
            self._cluster.sent(address, count)

    def _answered(self, address: str, count: int, reached: bool) -> None:
        """C{count} submits to C{address} are over: it answered them, or went away."""
        with self._lock:
            self._cluster.answered(address, count)
            if reached:
                self._cluster.reached(address)
            else:
                self._cluster.lost(address, self._clock())

    def _reachable(self, address: str) -> bool:
        """
        Whether C{address} can be reached and answers HELLO (nothing else is
        sent); if not, it is down.
        """
        try:
            self.clients[address].connect()
        except (QuicxError, TimeoutError):
            self._answered(address, 0, reached=False)
            return False
        return True

    # -- submits ------------------------------------------------------------------------

    def submit(
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
            to its idempotency key's (C{key=}); without either, to the
            next by the spread.
        @param options: as L{QuicxClient.submit} takes them.
        @raise NotAcknowledged: its daemon went away, or did not answer in
            C{timeout}, and it has no idempotency key.
        @raise ConnectionLost: no daemon of the cluster can be reached.
        @raise DaemonError, ValueError: as L{QuicxClient.submit}.
        """
        route = Route.of(self._cluster, shard_key, options.get("key"))
        while (address := self._next(route)) is not None:
            if not self._reachable(address):
                continue  # nothing was sent: the next daemon may have it
            with self._lock:
                route.sent(address)
            try:
                task_id = self.clients[address].submit(task_type, payload, **options)
            except (ConnectionLost, TimeoutError):  # gone, or hung: it may have accepted it
                with self._lock:
                    error = route.lost(address, self._clock())
                if error is not None:
                    raise error from None
                continue
            except BaseException:
                with self._lock:
                    route.answered(address)  # a refusal, or slow: it is there
                raise
            with self._lock:
                route.answered(address)
            return TaskRef(task_id, address)
        raise route.exhausted()

    def _next(self, route: Route) -> str | None:
        with self._lock:
            return route.next(self._clock())

    def submit_many(
        self,
        tasks: Iterable[ClusterTask],
        return_exceptions: bool = False,
        window: int = DEFAULT_WINDOW,
    ) -> list[TaskRef | Exception]:
        """
        Submit many tasks, each placed on its daemon, pipelined to each
        daemon (as L{QuicxClient.submit_many}) and to the daemons at once.

        @param tasks: as L{QuicxClient.submit_many} takes them, or
            C{(type, payload, Options, shard_key)}.
        @param return_exceptions: put each task's error in its place in the
            result instead of raising the first one.
        @return: L{TaskRef}s (or errors), in the order of C{tasks}.  A
            task whose daemon went away before it answered was sent to the
            key's next daemon if it has an idempotency key, else its error
            is L{NotAcknowledged}; one no daemon could take, L{ConnectionLost}.
            One with options placed on a version-1 daemon is not sent: its
            error is L{NeedsVersion2}.  When a daemon's client fails
            otherwise part-way (a task it could not encode: a C{ValueError}),
            its tasks not sent have that error, and the other daemons'
            tasks their answers.
        @raise QuicxError, ValueError: the first error, after every task was
            placed; its C{results} attribute holds the whole list.
        """
        chunk = window * len(self.addresses) * 4
        results: list[TaskRef | Exception] = []
        iterator = iter(tasks)
        while items := list(itertools.islice(iterator, chunk)):
            results += self._submit_chunk(items, window)
        if not return_exceptions:
            for result in results:
                if isinstance(result, Exception):
                    result.results = results  # type: ignore[attr-defined]
                    raise result
        return results

    def _submit_chunk(self, items: list[ClusterTask], window: int) -> list[TaskRef | Exception]:
        results: list[TaskRef | Exception | None] = [None] * len(items)
        pending = list(range(len(items)))
        gone: set[str] = set()  # daemons that went away during this call
        while pending:
            placed: dict[str, list[int]] = {}
            addresses = self._place_many([shard_key_of(items[i]) for i in pending], gone)
            for i, address in zip(pending, addresses, strict=True):
                if address is None:
                    results[i] = ConnectionLost(
                        f"none of the {len(self.addresses)} daemons could take this submit"
                    )
                else:
                    placed.setdefault(address, []).append(i)
            pending = []
            sent = {a: [as_task(items[i]) for i in indexes] for a, indexes in placed.items()}
            for address, fates in self._each_daemon(sent, window).items():
                for i, fate in zip(placed[address], fates, strict=True):
                    if not isinstance(fate, _Fate):
                        results[i] = TaskRef(fate, address) if isinstance(fate, int) else fate
                        continue
                    gone.add(address)
                    if fate is _Fate.UNSENT or _idempotent(items[i]):
                        pending.append(i)  # nothing sent, or the key keeps it once a daemon
                    else:
                        results[i] = NotAcknowledged(address)
        return [r for r in results if r is not None]

    def _each_daemon(
        self, sent: dict[str, list[Task]], window: int
    ) -> dict[str, list[int | Exception | _Fate]]:
        """
        Each daemon's tasks submitted to it, the daemons at once: what
        became of each task, in order.  A version-1 daemon is sent none of
        its tasks with options: each is L{NeedsVersion2}.
        """

        def submit(address: str) -> list[int | Exception | _Fate]:
            tasks = sent[address]
            if not self._reachable(address):
                return [_Fate.UNSENT] * len(tasks)
            version_1 = self.clients[address].version == 1
            refused = [version_1 and has_options(task) for task in tasks]
            kept = [task for task, no in zip(tasks, refused, strict=True) if not no]
            fates = iter(self._submit_to(address, kept, window))
            refusal = NeedsVersion2(f"{OPTIONS_NEED_VERSION_2}; {address} speaks version 1 only")
            return [refusal if no else next(fates) for no in refused]

        if len(sent) == 1:
            return {address: submit(address) for address in sent}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self.addresses), "quicx-cluster")
        return dict(zip(sent, self._pool.map(submit, sent), strict=True))

    def _submit_to(
        self, address: str, tasks: list[Task], window: int
    ) -> list[int | Exception | _Fate]:
        """
        C{tasks} submitted to C{address}, pipelined: what became of each.
        When its client raises part-way (see L{QuicxClient.submit_many}),
        the tasks it answered have their answers; those sent and not
        answered are L{_Fate.UNANSWERED}; those not sent are
        L{_Fate.UNSENT} when it went away or hung, else the error (a task
        that could not be encoded, and those after it).
        """
        reached = False
        self._sent(address, len(tasks))
        try:
            answers: list[int | Exception | _Fate] = []
            answers += self.clients[address].submit_many(tasks, True, window)
            reached = True
            return answers
        except Exception as e:
            answers = list(getattr(e, "results", []))
            sent = getattr(e, "sent", len(tasks))
            lost = isinstance(e, ConnectionLost | TimeoutError)  # gone, or hung
            reached = not lost and len(answers) == sent
            unsent = _Fate.UNSENT if lost else e
            return (
                answers
                + [_Fate.UNANSWERED] * (sent - len(answers))
                + [unsent] * (len(tasks) - sent)
            )
        finally:
            self._answered(address, len(tasks), reached)

    # -- one task, by its ref -----------------------------------------------------------

    def _route(self, ref: Ref) -> tuple[QuicxClient, int]:
        """The client of C{ref}'s daemon, and its id there."""
        found = self._cluster.locate(ref)
        return self.clients[found.daemon], found.id

    def wait(
        self,
        ref: Ref,
        timeout: float | None = None,
        on_retry: Callable[[RetryNotice], object] | None = None,
    ) -> Any:
        """The outcome of a task this client submitted: see L{QuicxClient.wait}."""
        client, task_id = self._route(ref)
        return client.wait(task_id, timeout, on_retry)

    def result(self, ref: Ref, timeout: float | None = None) -> Any:
        """Any task's outcome, from its daemon: see L{QuicxClient.result}."""
        client, task_id = self._route(ref)
        return client.result(task_id, timeout)

    def cancel(self, ref: Ref) -> dict[str, Any]:
        """Cancel a queued task on its daemon: see L{QuicxClient.cancel}."""
        client, task_id = self._route(ref)
        return client.cancel(task_id)

    def task(self, ref: Ref) -> dict[str, Any]:
        """One task's state, from its daemon: see L{QuicxClient.task}."""
        client, task_id = self._route(ref)
        return client.task(task_id)

    # -- each daemon --------------------------------------------------------------------

    def each(self, call: Callable[[QuicxClient], T]) -> dict[str, T | Exception]:
        """
        C{call} each daemon's client in turn: what each returned, or the
        error it raised (a daemon that is down does not stop the others).
        """
        answers: dict[str, T | Exception] = {}
        for address, client in self.clients.items():
            try:
                answers[address] = call(client)
            except (QuicxError, TimeoutError) as e:
                answers[address] = e
        return answers

    def stats(self) -> dict[str, wire.StatsResponse | Exception]:
        """Each daemon's STATS (L{QuicxClient.stats}), or the error it got."""
        return self.each(QuicxClient.stats)


class _Fate(enum.Enum):
    """What became of a task that its daemon did not answer."""

    UNSENT = "not sent: another daemon may take it"
    UNANSWERED = "sent and not answered: it may have been accepted"


def _idempotent(task: ClusterTask) -> bool:
    return len(task) >= 3 and task[2].key is not None


def open_client(
    addresses: str | Sequence[str] | None = None,
    timeout: float = 30.0,
    keep_outcomes: int = DEFAULT_KEEP,
    protocol: int = 2,
    spread: str = ROUND_ROBIN,
    failover: bool = False,
) -> QuicxClient | ClusterClient:
    """
    A blocking client of C{addresses} (default: C{$QUICX_ADDRESS}, else
    L{quicx.DEFAULT_ADDRESS}): a L{QuicxClient} for one daemon, a
    L{ClusterClient} for several (C{spread} is theirs); with C{failover},
    a L{QuicxClient} of the one replicated shard they are, which follows
    its primary (L{quicx.clients.failover}).

    @raise ValueError: no address, an empty one, one named twice.
    """
    found = split_addresses(default_address() if addresses is None else addresses)
    if failover:
        return QuicxClient(found, timeout, keep_outcomes, protocol, failover=True)
    if len(found) == 1:
        return QuicxClient(found[0], timeout, keep_outcomes, protocol)
    return ClusterClient(found, timeout, keep_outcomes, protocol, spread)
