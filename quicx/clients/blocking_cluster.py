"""
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
reported with L{NotAcknowledged}.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import attrs

from quicx.clients.address import default_address, split_addresses
from quicx.clients.blocking import DEFAULT_WINDOW, QuicxClient, Task
from quicx.clients.cluster import ROUND_ROBIN, Cluster, Member, Route, TaskRef
from quicx.clients.outcomes import DEFAULT_KEEP, RetryNotice
from quicx.clients.requests import Options
from quicx.protocol import wire
from quicx.protocol.errors import ConnectionLost, DaemonError, NotAcknowledged, QuicxError

T = TypeVar("T")

ClusterTask = Task | tuple[str | bytes, str | bytes, Options, str | bytes | None]
"""What L{ClusterClient.submit_many} takes: as L{QuicxClient.submit_many}, or
C{(type, payload, Options, shard_key)}."""

Ref = TaskRef | str
"""A task of the cluster: a L{TaskRef}, or its text form C{ID@ADDRESS}."""


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
    ) -> None:
        """
        @param addresses: C{"tcp:h1:16381,tcp:h2:16381"}, or an iterable of
            addresses: every client of the cluster must name its daemons
            the same way, as placement hashes the names.
        @param spread: how tasks without a shard key are spread:
            C{"round-robin"} or C{"least-loaded"} (see L{quicx.clients.cluster}).
        @raise ValueError: no address, one named twice, a malformed one, an
            unknown spread.
        """
        self._cluster = Cluster.of(addresses, spread)
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

    def _place(self, key: str | bytes | None, avoid: Collection[str]) -> str | None:
        with self._lock:
            return self._cluster.place(key, self._clock(), avoid)

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
    ) -> list[TaskRef | QuicxError]:
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
        @raise QuicxError: the first error, after every task was placed;
            its C{results} attribute holds the whole list.
        """
        chunk = window * len(self.addresses) * 4
        results: list[TaskRef | QuicxError] = []
        iterator = iter(tasks)
        while items := list(itertools.islice(iterator, chunk)):
            results += self._submit_chunk(items, window)
        if not return_exceptions:
            for result in results:
                if isinstance(result, QuicxError):
                    result.results = results  # type: ignore[attr-defined]
                    raise result
        return results

    def _submit_chunk(self, items: list[ClusterTask], window: int) -> list[TaskRef | QuicxError]:
        results: list[TaskRef | QuicxError | None] = [None] * len(items)
        pending = list(range(len(items)))
        gone: set[str] = set()  # daemons that went away during this call
        while pending:
            placed: dict[str, list[int]] = {}
            addresses = self._place_many([_shard_key(items[i]) for i in pending], gone)
            for i, address in zip(pending, addresses, strict=True):
                if address is None:
                    results[i] = ConnectionLost(
                        f"none of the {len(self.addresses)} daemons could take this submit"
                    )
                else:
                    placed.setdefault(address, []).append(i)
            pending = []
            sent = {a: [_as_task(items[i]) for i in indexes] for a, indexes in placed.items()}
            for address, (answers, connected) in self._each_daemon(sent, window).items():
                indexes = placed[address]
                for i, answer in zip(indexes, answers, strict=False):
                    results[i] = TaskRef(answer, address) if isinstance(answer, int) else answer
                if len(answers) == len(indexes):
                    continue
                gone.add(address)
                for i in indexes[len(answers) :]:
                    if not connected or _idempotent(items[i]):
                        pending.append(i)  # nothing sent, or the key keeps it once a daemon
                    else:
                        results[i] = NotAcknowledged(address)
        return [r for r in results if r is not None]

    def _each_daemon(
        self, sent: dict[str, list[Task]], window: int
    ) -> dict[str, tuple[list[int | DaemonError], bool]]:
        """
        Each daemon's tasks submitted to it, the daemons at once: what each
        answered (its first tasks', all of them unless it went away), and
        whether it could be reached at all.
        """

        def submit(address: str) -> tuple[list[int | DaemonError], bool]:
            if not self._reachable(address):
                return [], False
            tasks = sent[address]
            self._sent(address, len(tasks))
            answers: list[int | DaemonError] = []
            try:
                answers = self.clients[address].submit_many(tasks, True, window)
            except (ConnectionLost, TimeoutError) as e:  # gone, or hung
                answers = e.results  # type: ignore[union-attr]
            finally:
                self._answered(address, len(tasks), reached=len(answers) == len(tasks))
            return answers, True

        if len(sent) == 1:
            return {address: submit(address) for address in sent}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(len(self.addresses), "quicx-cluster")
        return dict(zip(sent, self._pool.map(submit, sent), strict=True))

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


def _shard_key(task: ClusterTask) -> str | bytes | None:
    if len(task) == 4 and task[3] is not None:
        return task[3]
    return task[2].key if len(task) >= 3 else None


def _idempotent(task: ClusterTask) -> bool:
    return len(task) >= 3 and task[2].key is not None


def _as_task(task: ClusterTask) -> Task:
    return (task[0], task[1], task[2]) if len(task) == 4 else task


def open_client(
    addresses: str | Sequence[str] | None = None,
    timeout: float = 30.0,
    keep_outcomes: int = DEFAULT_KEEP,
    protocol: int = 2,
    spread: str = ROUND_ROBIN,
) -> QuicxClient | ClusterClient:
    """
    A blocking client of C{addresses} (default: C{$QUICX_ADDRESS}, else
    L{quicx.DEFAULT_ADDRESS}): a L{QuicxClient} for one daemon, a
    L{ClusterClient} for several (C{spread} is theirs).

    @raise ValueError: no address, an empty one, one named twice.
    """
    found = split_addresses(default_address() if addresses is None else addresses)
    if len(found) == 1:
        return QuicxClient(found[0], timeout, keep_outcomes, protocol)
    return ClusterClient(found, timeout, keep_outcomes, protocol, spread)
