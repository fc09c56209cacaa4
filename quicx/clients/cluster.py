"""
Many daemons, one producer: which daemon each task goes to, and how the
producer names a task of one of them.  Sans-I/O: no sockets, no clock (the
caller gives the times), shared by the blocking and the Twisted clients.

Each daemon is independent: a task never crosses daemons, and a task id
means something only on the daemon that handed it out, so a client of a
cluster names each task with a L{TaskRef}: its id and its daemon's address.

Placement:

  - A task with a shard key (an explicit one, else its idempotency key) goes
    to the key's daemon, by rendezvous hashing (highest random weight): each
    daemon's weight for the key is L{weight}, the first 8 bytes of the
    BLAKE2b digest of C{ADDRESS NUL KEY}, and the live daemon of highest
    weight takes it.  Every process that names the same daemons the same
    way sends a key to the same daemon; while a daemon is down its keys
    alone move, each to its next choice; adding a daemon moves a share of
    the keys (about 1 in N+1), all of them to the new one.
  - A task without one is spread over the live daemons: C{round-robin}
    (the default: each in turn) or C{least-loaded} (the one with the fewest
    submits sent and not yet answered, in turn among equals).

A daemon that cannot be reached is down until its retry time: L{FIRST_RETRY}
after its first failure, twice as long after each further one, at most
L{LAST_RETRY}; it is tried again then, and live again once it answers.
While every daemon is down, each is tried.

A submit follows a L{Route} from daemon to daemon: one that cannot be
reached was sent nothing, so the next may have it; one that goes away
before it answers may have accepted it, so only a submit with an
idempotency key goes on to the key's next daemon (the task may then run
once on each, never twice on one), and one without is L{NotAcknowledged}.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Collection, Iterable

from attrs import Factory, define, field, frozen

from quicx.clients.address import as_bytes, normalize_address, split_addresses
from quicx.clients.requests import Options, Task
from quicx.protocol.errors import ConnectionLost, NotAcknowledged

ROUND_ROBIN = "round-robin"
LEAST_LOADED = "least-loaded"
SPREADS = (ROUND_ROBIN, LEAST_LOADED)
"""How tasks without a shard key are spread over the live daemons."""

FIRST_RETRY = 0.1
"""Seconds a daemon is left alone after it could not be reached."""
LAST_RETRY = 3.0
"""The longest wait before it is tried again (the wait doubles up to it)."""


@frozen(order=True)
class TaskRef:
    """
    A task of a cluster: its id on its daemon, and that daemon's address.

    Its text form, C{ID@ADDRESS} (C{42@tcp:10.0.0.2:16381}), is what the
    C{quicx} command prints and takes back (L{parse}); C{int()} of it is the
    bare id, which means nothing without the daemon.
    """

    id: int
    daemon: str = field(converter=normalize_address)

    def __str__(self) -> str:
        return f"{self.id}@{self.daemon}"

    def __int__(self) -> int:
        return self.id

    @classmethod
    def parse(cls, text: str) -> TaskRef:
        """
        C{ID@ADDRESS} -> the L{TaskRef}.

        @raise ValueError: no C{@}, or no positive id before it, or no address after it.
        """
        number, at, address = text.partition("@")
        if not at or not number.isdigit() or int(number) < 1 or not address:
            raise ValueError(f"{text!r} is not a task ID@ADDRESS (42@tcp:host:16381)")
        return cls(int(number), address)


def weight(key: bytes, address: str) -> int:
    """A daemon's weight for C{key}: the same in every process, for ever."""
    digest = hashlib.blake2b(address.encode("utf-8") + b"\0" + key, digest_size=8).digest()
    return int.from_bytes(digest, "big")


def ranking(key: str | bytes, addresses: Iterable[str]) -> list[str]:
    """C{addresses} in the order a task with shard key C{key} tries them: heaviest first."""
    data = as_bytes(key)
    return sorted(addresses, key=lambda address: (weight(data, address), address), reverse=True)


@define
class Member:
    """
    One daemon of a cluster, as one client sees it.

    @ivar awaiting: submits sent to it and not answered yet.
    @ivar failures: times in a row it could not be reached (0: live).
    @ivar retry_at: when it may be tried again, on the caller's clock.
    """

    address: str
    awaiting: int = 0
    failures: int = 0
    retry_at: float = 0.0

    def live(self, now: float) -> bool:
        """Whether a task may be sent to it now: it answered last time, or its wait is over."""
        return self.retry_at <= now


@define
class Cluster:
    """
    The daemons of a cluster and the rules that place each task on one.

    @ivar members: the daemons, in the order the client was given them.
    @ivar spread: L{ROUND_ROBIN} or L{LEAST_LOADED}.
    """

    members: dict[str, Member]
    spread: str = ROUND_ROBIN
    _turn: int = 0

    @classmethod
    def of(
        cls, addresses: str | Iterable[str], spread: str = ROUND_ROBIN, first: int | None = None
    ) -> Cluster:
        """
        The cluster of C{addresses} (as L{split_addresses} takes them).

        @param first: the index of the daemon the spread's turns begin at;
            C{None}, the default, a random one, so that producers that each
            submit a few tasks (a C{quicx submit} a task) do not all load
            the first daemon.
        @raise ValueError: no address, one given twice, or an unknown spread.
        """
        if spread not in SPREADS:
            raise ValueError(f"spread is {' or '.join(SPREADS)}, not {spread!r}")
        members = {a: Member(a) for a in split_addresses(addresses)}
        turn = random.randrange(len(members)) if first is None else first
        return cls(members, spread, turn)

    @property
    def addresses(self) -> list[str]:
        return list(self.members)

    def member(self, address: str) -> Member:
        """
        The member at C{address}, however it is spelled (C{HOST:PORT} or C{tcp:HOST:PORT}).

        @raise ValueError: no daemon of the cluster has that address.
        """
        found = self.members.get(normalize_address(address))
        if found is None:
            raise ValueError(f"{address} is not one of this cluster's daemons")
        return found

    def locate(self, ref: TaskRef | str) -> TaskRef:
        """
        C{ref} (or its text, C{ID@ADDRESS}) with its daemon's address as
        this cluster names it.

        @raise ValueError: malformed text, or no daemon of the cluster has that address.
        """
        found = TaskRef.parse(ref) if isinstance(ref, str) else ref
        return TaskRef(found.id, self.member(found.daemon).address)

    def live(self, now: float, avoid: Collection[str] = ()) -> list[Member]:
        """
        The members a task may go to now, but those in C{avoid}: the live
        ones; all of them when none is.
        """
        allowed = [m for m in self.members.values() if m.address not in avoid]
        return [m for m in allowed if m.live(now)] or allowed

    def place(self, key: str | bytes | None, now: float, avoid: Collection[str] = ()) -> str | None:
        """
        The address a task with shard key C{key} (C{None}: none) goes to
        now, avoiding the addresses in C{avoid} (those that just failed it);
        C{None} when it avoids them all.
        """
        return self.place_many([key], now, avoid)[0]

    def place_many(
        self, keys: Iterable[str | bytes | None], now: float, avoid: Collection[str] = ()
    ) -> list[str | None]:
        """
        L{place} for each task of C{keys} in turn, at the same C{now}: the
        live members are found once for them all.
        """
        live = self.live(now, avoid)
        if not live:
            return [None for _ in keys]
        allowed = {m.address for m in live}
        # Each live member and its place in the order the client was given them.
        index = {address: i for i, address in enumerate(self.members)}
        placed = [(index[m.address], m) for m in live]
        return [
            self._turn_of(placed)
            if key is None
            else next(a for a in ranking(key, self.members) if a in allowed)
            for key in keys
        ]

    def _turn_of(self, placed: list[tuple[int, Member]]) -> str:
        """
        The next of C{placed} (the live members with their places, in order)
        by the spread: each in turn from the one after the last chosen;
        least-loaded takes the first of those with the fewest awaiting.
        """
        after = [p for p in placed if p[0] >= self._turn]
        turn = after + placed[: len(placed) - len(after)]  # from the turn on, then before it
        i, chosen = (
            min(turn, key=lambda p: p[1].awaiting) if self.spread == LEAST_LOADED else turn[0]
        )
        self._turn = i + 1
        return chosen.address

    def sent(self, address: str, count: int = 1) -> None:
        """C{count} submits went to C{address}, their answers to come."""
        self.members[address].awaiting += count

    def answered(self, address: str, count: int = 1) -> None:
        """C{count} of its submits were answered, or will never be."""
        member = self.members[address]
        member.awaiting = max(0, member.awaiting - count)

    def reached(self, address: str) -> None:
        """C{address} answered: it is live."""
        member = self.members[address]
        member.failures = 0
        member.retry_at = 0.0

    def lost(self, address: str, now: float) -> None:
        """C{address} could not be reached, or went away: down until its retry time."""
        member = self.members[address]
        member.failures += 1
        member.retry_at = now + min(LAST_RETRY, FIRST_RETRY * 2 ** min(member.failures - 1, 8))


@define
class Route:
    """
    The way of one submit through a cluster, daemon after daemon: both
    cluster clients follow it.

        route = Route.of(cluster, shard_key, key)
        while (address := route.next(now)) is not None:
            if <address cannot be reached>:
                route.unreachable(address, now)      # nothing was sent
                continue
            route.sent(address)
            <submit>: answered (an id or a refusal): route.answered(address)
                      went away first: raise route.lost(address, now), or go on if None
        raise route.exhausted()

    @ivar key: the shard key it is placed by (C{None}: spread).
    @ivar keyed: whether it carries an idempotency key, so that sending it
        again elsewhere keeps it once per daemon.
    @ivar tried: the daemons it was sent to or found down.
    """

    cluster: Cluster
    key: str | bytes | None
    keyed: bool
    tried: set[str] = Factory(set)

    @classmethod
    def of(cls, cluster: Cluster, shard_key: str | bytes | None, key: str | bytes | None) -> Route:
        """A submit with C{shard_key} (placed by it) and idempotency key C{key} (else by it)."""
        return cls(cluster, shard_key if shard_key is not None else key, key is not None)

    def next(self, now: float) -> str | None:
        """The daemon to try next; C{None} when every daemon was tried."""
        address = self.cluster.place(self.key, now, self.tried)
        if address is not None:
            self.tried.add(address)
        return address

    def unreachable(self, address: str, now: float) -> None:
        """C{address} could not be reached: nothing was sent to it."""
        self.cluster.lost(address, now)

    def sent(self, address: str) -> None:
        self.cluster.sent(address)

    def answered(self, address: str) -> None:
        """C{address} answered the submit: with its id, or a refusal."""
        self.cluster.answered(address)
        self.cluster.reached(address)

    def lost(self, address: str, now: float) -> NotAcknowledged | None:
        """
        C{address} went away before it answered: it may have accepted the
        submit.  C{None} when it goes on to the next daemon (it has an
        idempotency key), else the error to report.
        """
        self.cluster.answered(address)
        self.cluster.lost(address, now)
        return None if self.keyed else NotAcknowledged(address)

    def exhausted(self) -> ConnectionLost:
        """The error when L{next} has no daemon left."""
        return ConnectionLost(f"none of the {len(self.cluster.members)} daemons can be reached")


ClusterTask = Task | tuple[str | bytes, str | bytes, Options, str | bytes | None]
"""What L{ClusterClient.submit_many} takes: as L{QuicxClient.submit_many}, or
C{(type, payload, Options, shard_key)}."""

Ref = TaskRef | str
"""A task of the cluster: a L{TaskRef}, or its text form C{ID@ADDRESS}."""


def shard_key_of(task: ClusterTask) -> str | bytes | None:
    """A task's shard key: the one given, else its idempotency key, else C{None}."""
    if len(task) == 4 and task[3] is not None:
        return task[3]
    return task[2].key if len(task) >= 3 else None


def as_task(task: ClusterTask) -> Task:
    """The task, as a single daemon's client takes it (its shard key left out)."""
    return (task[0], task[1], task[2]) if len(task) == 4 else task
