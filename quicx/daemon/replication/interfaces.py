"""
The contracts between replication's parts: lease store, role, batch hand-off.

The lease store gives leadership, a daemon holds a role, and the journal
hands each group-commit batch to the primary's side of replication.

A shard is a set of daemons (one primary, standbys) sharing one key in the
lease store.  The key's revision when a daemon takes it is the **epoch**:
it grows with every change of primary, and everything a primary sends or
hands out (replication batches, HELLO's INFO, delivery tokens) carries it,
so that whatever a former primary still says is recognised as stale.
"""

from __future__ import annotations

from attrs import define, field
from twisted.internet.defer import Deferred
from zope.interface import Attribute, Interface


@define(frozen=True)
class Leader:
    """
    What the lease store's key holds for the shard's primary.

    @ivar name: the daemon's C{[replication] name}, unique in the shard.
    @ivar client: the C{host:port} clients reach it at (C{ERROR 0x0C} names it).
    @ivar replication: the C{host:port} of its replication listener.
    @ivar epoch: the key's revision when it was taken (0 before it is).
    """

    name: str
    client: str
    replication: str
    epoch: int = 0


@define(frozen=True)
class History:
    """
    What outlives each primary in the lease store (a key without a lease).

    @ivar epoch: the latest epoch that had a primary.
    @ivar primary: that primary's name.
    @ivar in_sync: the standbys that hold every batch the primary of C{epoch}
        acknowledged: only they (and that primary) may take the key next.
    """

    epoch: int
    primary: str
    in_sync: frozenset[str] = field(factory=frozenset)


class ILeaseStore(Interface):
    """
    Leadership for one shard, from a store that has consensus of its own
    (etcd; a Kubernetes C{Lease} could follow).  Every call may fail with
    L{LeaseStoreUnavailable}.
    """

    def campaign(candidate: Leader, ttl: float) -> Deferred[int | None]:
        """
        Take the shard's key for C{candidate} under a new lease of C{ttl}
        seconds, if no one holds it (one transaction): the new epoch, or
        C{None} if another holds it.
        """

    def renew() -> Deferred[bool]:
        """Keep the lease taken by L{campaign} alive: C{False} once it is gone."""

    def leader() -> Deferred[Leader | None]:
        """Who holds the key now, with the epoch they took it at, or C{None}."""

    def resign() -> Deferred[None]:
        """Give the key up (its lease revoked) if this store holds it."""

    def history() -> Deferred[History | None]:
        """The shard's L{History}, or C{None} for a shard that never had a primary."""

    def record(history: History) -> Deferred[bool]:
        """
        Write C{history}, only while this store holds the key at
        C{history.epoch} (one transaction): C{False} if it does not.
        """


class LeaseStoreUnavailable(Exception):
    """The lease store did not answer (down, partitioned, or timed out)."""


@define
class RoleState:
    """
    The role this daemon holds now, as the server and C{quicx status} read it.

    @ivar role: C{primary}, C{standby}, C{candidate} (looking for the
        primary or campaigning) or C{fenced} (was primary, could not renew
        its lease in time: acknowledges nothing).
    @ivar epoch: the epoch of the primary this daemon is or follows (0: none yet).
    @ivar primary: the primary's client C{host:port}, when known and not this daemon.
    """

    role: str = "candidate"
    epoch: int = 0
    primary: str = ""

    @property
    def serving(self) -> bool:
        return self.role == "primary"


class IRoleListener(Interface):
    """Told by the role manager when this daemon's role changes."""

    def became_primary(epoch: int) -> None:
        """This daemon took the key at C{epoch}: serve clients from now on."""

    def became_standby(leader: Leader) -> None:
        """C{leader} is the primary: follow it (replicate from it), serve no client."""

    def fenced(reason: str) -> None:
        """This daemon may no longer be primary: acknowledge nothing more, at once."""


class IReplica(Interface):
    """
    The primary's side of replication, given each group-commit batch by the
    journal (the records it writes to its own file, in order, as one bytes).
    """

    def ship(batch: bytes) -> Deferred[None] | None:
        """
        Send C{batch} to the standbys: a Deferred that fires once the
        acknowledgements that C{[replication] mode} needs are in (C{sync}: every
        in-sync standby's), or C{None} when there is nothing to wait for
        (C{async}, or no standby is required).  It fails if the batch may
        not be acknowledged at all (this daemon was fenced).
        """

    sync = Attribute(
        """
        Whether acknowledgements wait for C{ship}'s Deferreds (C{mode = sync}):
        the journal then holds every SUBMIT's OK and every C{durable()} for
        its batch's job, whatever its fsync policy.
        """
    )
