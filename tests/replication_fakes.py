"""
Fakes for replication's parts, in-process on a L{task.Clock}: a lease store
shared by several daemons (L{FakeEtcd}, each daemon's L{FakeLeaseStore} that
can be made unavailable or silent on its own), and a role listener that
records what it is told.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from attrs import define, field
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import Clock
from zope.interface import implementer

from quicx.daemon.replication.interfaces import (
    History,
    ILeaseStore,
    IRoleListener,
    Leader,
    LeaseStoreUnavailable,
)


@define
class FakeEtcd:
    """
    The state of a lease store for one shard: its leader key, under a lease
    that lapses on C{clock}, and its History; revisions count each write.
    """

    clock: Clock
    revision: int = 0
    leases: dict[int, tuple[float, float]] = field(factory=dict)
    """Each lease's TTL and the time it lapses."""
    key: Leader | None = None
    key_lease: int = 0
    history: History | None = None
    _ids: itertools.count[int] = field(factory=lambda: itertools.count(1))

    def expire(self) -> None:
        now = self.clock.seconds()
        for lease, (_, until) in list(self.leases.items()):
            if until <= now:
                self.revoke(lease)

    def grant(self, ttl: float) -> int:
        lease = next(self._ids)
        self.leases[lease] = (ttl, self.clock.seconds() + ttl)
        return lease

    def keepalive(self, lease: int | None) -> bool:
        if lease not in self.leases:
            return False
        ttl = self.leases[lease][0]
        self.leases[lease] = (ttl, self.clock.seconds() + ttl)
        return True

    def revoke(self, lease: int) -> None:
        if self.leases.pop(lease, None) is not None and self.key_lease == lease:
            self.key, self.key_lease = None, 0
            self.revision += 1


@implementer(ILeaseStore)
class FakeLeaseStore:
    """
    One daemon's L{ILeaseStore} on a L{FakeEtcd}.

    @ivar mode: C{"up"} (answers at once), C{"down"} (fails at once with
        L{LeaseStoreUnavailable}) or C{"silent"} (never answers: a call's
        Deferred is kept in L{pending}).
    @ivar renewals: whether C{renew} reaches the store (C{False}: it fails,
        the rest answers: a lease store that stops renewing this holder).
    """

    def __init__(self, etcd: FakeEtcd) -> None:
        self.etcd = etcd
        self.mode = "up"
        self.renewals = True
        self.lease: int | None = None
        self.pending: list[Deferred[Any]] = []
        self.calls: list[str] = []

    def _answer(self, name: str, compute: Any) -> Deferred[Any]:
        self.calls.append(name)
        if self.mode == "down":
            return fail(LeaseStoreUnavailable(f"{name}: down"))
        if self.mode == "silent":
            self.pending.append(Deferred())
            return self.pending[-1]
        self.etcd.expire()
        return succeed(compute())

    def campaign(self, candidate: Leader, ttl: float) -> Deferred[int | None]:
        def take() -> int | None:
            if self.etcd.key is not None:
                return None
            self.lease = self.etcd.grant(ttl)
            self.etcd.revision += 1
            epoch = self.etcd.revision
            self.etcd.key = Leader(candidate.name, candidate.client, candidate.replication, epoch)
            self.etcd.key_lease = self.lease
            return self.etcd.revision

        return self._answer("campaign", take)

    def renew(self) -> Deferred[bool]:
        def keep() -> bool:
            alive = self.etcd.keepalive(self.lease)
            if not alive:
                self.lease = None
            return alive

        if not self.renewals:
            self.calls.append("renew")
            return fail(LeaseStoreUnavailable("renew: cut off"))
        return self._answer("renew", keep)

    def leader(self) -> Deferred[Leader | None]:
        return self._answer("leader", lambda: self.etcd.key)

    def resign(self) -> Deferred[None]:
        def give_up() -> None:
            if self.lease is not None:
                self.etcd.revoke(self.lease)
                self.lease = None

        return self._answer("resign", give_up)

    def history(self) -> Deferred[History | None]:
        return self._answer("history", lambda: self.etcd.history)

    def record(self, history: History) -> Deferred[bool]:
        def write() -> bool:
            key = self.etcd.key
            if key is None or key.epoch != history.epoch or self.etcd.key_lease != self.lease:
                return False
            self.etcd.history = history
            self.etcd.revision += 1
            return True

        return self._answer("record", write)


@implementer(IRoleListener)
class RecordingListener:
    """
    Records what the role manager tells it: C{("primary", epoch)},
    C{("standby", leader)}, C{("fenced", reason)}, and when.

    @ivar keys: who held the leader key when each event was told, as C{key()} says.
    """

    def __init__(
        self, clock: IReactorTime, key: Callable[[], Leader | None] = lambda: None
    ) -> None:
        self.clock = clock
        self.key = key
        self.events: list[tuple[str, Any]] = []
        self.times: list[float] = []
        self.keys: list[Leader | None] = []

    def _told(self, kind: str, what: object) -> None:
        self.events.append((kind, what))
        self.times.append(self.clock.seconds())
        self.keys.append(self.key())

    def became_primary(self, epoch: int) -> None:
        self._told("primary", epoch)

    def became_standby(self, leader: Leader) -> None:
        self._told("standby", leader)

    def fenced(self, reason: str) -> None:
        self._told("fenced", reason)
