"""
Following a replicated shard's primary, sans-I/O: where next, when to give up, what to resend.

Which daemon to connect to next, how long to wait first, when to give up,
and which requests may be sent again.

A replicated shard is one primary and its standbys (docs/operations.md,
"High availability").  A client given the shard's addresses with
C{failover=True} keeps one connection, to the primary: a standby (or a
fenced former primary) answers HELLO saying its C{role}, and any request
with C{ERROR 0x0C} (L{NotPrimary}) naming the primary, or none while no
daemon is.  The clients move the bytes; what they do about it is decided
here, once for all of them:

  - where next (L{Shard}): the primary named, else the next address of the
    list; at once the first time an address is tried in an outage, then
    with backoff (L{FIRST_DELAY} doubling up to L{MAX_DELAY}); and, once
    no primary has answered for the shard's C{deadline}
    (L{FAILOVER_DEADLINE} by default), L{PrimaryNotFound};
  - what is sent again (L{lost}): a request refused with C{0x0C} was not
    applied, so it always is; one whose connection dropped before its
    answer only if sending it twice does no harm: a SUBMIT whose tasks all
    have an idempotency key (the daemon answers a repeated key with the
    first task's id), a read (L{READS}), a worker's READY.  A SUBMIT
    without a key may have been applied: it raises L{NotAcknowledged},
    never sent again.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from attrs import frozen

from quicx.clients.connection import Expect, Request
from quicx.clients.requests import AnyTask
from quicx.net.addresses import normalize_address, parse_address, split_addresses
from quicx.protocol import codec
from quicx.protocol.errors import ConnectionLost, NotAcknowledged, NotPrimary, QuicxError

FAILOVER_DEADLINE = 30.0
"""Seconds a call follows the shard before L{PrimaryNotFound}: a failover
takes up to about 10 s with the default lease (5 s), so three of them."""
FIRST_DELAY = 0.05
MAX_DELAY = 1.0
"""Seconds between tries of an address already tried in this outage: from
L{FIRST_DELAY}, doubling, up to L{MAX_DELAY}."""

NOT_PRIMARY_ROLES = frozenset({"standby", "candidate", "fenced"})
"""The C{role}s in HELLO's INFO of a daemon that serves no client."""

READS = frozenset(
    {
        "STATS",
        "hello",
        "status",
        "queues",
        "peek",
        "task",
        "workers",
        "dead",
        "schedules",
        "group",
        "result",
        "wait_group",
        "follow",
    }
)
"""The requests (by L{Request.what}) that change nothing: sent again after
their connection dropped before their answer."""


class PrimaryNotFound(ConnectionLost):
    """
    No daemon of the shard answered as its primary within the shard's
    C{deadline}: the failover took longer, or every daemon is down.

    @ivar addresses: the shard's daemons.
    @ivar seconds: how long the client looked.
    """

    def __init__(self, addresses: tuple[str, ...], seconds: float, last: str) -> None:
        super().__init__(
            f"no primary among {', '.join(addresses)} for {seconds:.1f} s (last: {last})"
        )
        self.addresses = addresses
        self.seconds = seconds


def not_primary(server: Mapping[str, Any]) -> NotPrimary | None:
    """
    What HELLO's INFO (C{server}) says of its daemon: C{None} if it serves
    clients (it says no C{role}, as a daemon without replication, or
    C{"primary"}); else the L{NotPrimary} its requests would get.
    """
    if server.get("role") not in NOT_PRIMARY_ROLES:
        return None
    primary = server.get("primary")
    return NotPrimary(primary if isinstance(primary, str) else "", codec.ErrorCode.NOT_PRIMARY)


def lost(request: Request[Any], address: str) -> ConnectionLost | None:
    """
    C{request}'s connection (to C{address}) dropped before its answer:
    C{None} if it may be sent again, else the error to raise
    (L{NotAcknowledged} for a SUBMIT without keys: it may have been applied).
    """
    if request.expect is Expect.OK:
        if all(len(task) == 3 and task[2].key is not None for task in request.tasks):
            return None
        return NotAcknowledged(address)
    if request.what in READS:
        return None
    return ConnectionLost(
        f"{address} went away before it answered {request.what}: it may have been applied"
    )


class Batch:
    """
    A C{submit_many}'s tasks to a shard's primary: those answered, and
    those to send (again) to the next daemon.

    @ivar results: each task's id or error, C{None} while it has none.
    """

    def __init__(self, tasks: Sequence[AnyTask]) -> None:
        self.tasks = tasks
        self.results: list[int | QuicxError | None] = [None] * len(tasks)
        self._todo = list(range(len(tasks)))

    @property
    def done(self) -> bool:
        return not self._todo

    def pending(self) -> list[AnyTask]:
        """The tasks to send now, in order."""
        return [self.tasks[index] for index in self._todo]

    def answered(self, got: Sequence[Any], sent: int, address: str) -> NotPrimary | None:
        """
        The daemon at C{address} answered the first of L{pending} with
        C{got} (ids and errors, in order), and C{sent} of them may have
        reached it: file the answers, and the L{lost} error of each sent and
        not answered that may not be sent again; the others stay to send.

        @return: its refusal, if it refused one as not the primary.
        """
        refusal = None
        todo, self._todo = self._todo, []
        for place, index in enumerate(todo):
            value = got[place] if place < len(got) else None
            if isinstance(value, NotPrimary):
                refusal, value = value, None
            elif value is None and place < sent:
                value = lost(Request.submit([self.tasks[index]]), address)
            if value is None:
                self._todo.append(index)
            else:
                self.results[index] = value
        return refusal


@frozen
class Hop:
    """
    Where to connect next (C{address}), after C{delay} seconds.

    @ivar overdue: a shard that follows C{forever} (a worker's): no primary
        within its deadline, said once a deadline (it starts over).
    """

    address: str
    delay: float
    overdue: PrimaryNotFound | None = None


class Shard:
    """
    The daemons of one replicated shard, and which of them a client tries now.

    @ivar addresses: the shard's daemons, normalized, in the order given.
    @ivar deadline: seconds without a primary before L{PrimaryNotFound}.
    @ivar current: the address to connect to.
    @ivar forever: past the deadline, start over (a worker's), rather than
        raise L{PrimaryNotFound} (a call's).
    """

    def __init__(
        self,
        addresses: str | Iterable[str],
        deadline: float = FAILOVER_DEADLINE,
        forever: bool = False,
    ) -> None:
        """@raise ValueError: no address, one named twice, a deadline not above 0."""
        if not deadline > 0:
            raise ValueError(f"the failover deadline is seconds above 0, not {deadline}")
        self.addresses = split_addresses(addresses)
        self.forever = forever
        self.deadline = deadline
        self.current = self.addresses[0]
        self._since: float | None = None  # when this outage began
        self._tried: set[str] = set()  # the addresses tried in it
        self._misses = 0

    def reached(self) -> None:
        """The current daemon answered as the primary: the outage, if any, is over."""
        self._since = None
        self._tried.clear()
        self._misses = 0

    def next(self, error: Exception, now: float) -> Hop:
        """L{refused} for a L{NotPrimary} C{error}, else L{unreachable}."""
        if isinstance(error, NotPrimary):
            return self.refused(error, now)
        return self.unreachable(now, str(error))

    def refused(self, error: NotPrimary, now: float) -> Hop:
        """
        The current daemon is not the primary (C{error}: it said so at
        HELLO, or refused a request): to the primary it names, if any.

        @raise PrimaryNotFound: past the deadline.
        """
        why = f"{self.current} is not the primary"
        return self._hop(now, self._named(error.primary) if error.primary else None, why)

    def unreachable(self, now: float, why: str) -> Hop:
        """
        The current daemon could not be reached, or its connection dropped
        (C{why}): to the next address.

        @raise PrimaryNotFound: past the deadline.
        """
        return self._hop(now, None, why)

    def _hop(self, now: float, named: str | None, why: str) -> Hop:
        if self._since is None:
            self._since = now
        elif now - self._since >= self.deadline:
            overdue = PrimaryNotFound(self.addresses, now - self._since, why)
            if not self.forever:
                raise overdue
            self.reached()
            hop = self._hop(now, named, why)
            return Hop(hop.address, MAX_DELAY, overdue)
        self._tried.add(self.current)
        self._misses += 1
        if named is None:
            index = self.addresses.index(self.current) if self.current in self.addresses else -1
            named = self.addresses[(index + 1) % len(self.addresses)]
        self.current = named
        if named in self._tried:
            delay = min(FIRST_DELAY * 2 ** (self._misses - 1), MAX_DELAY)
        else:
            delay = 0.0
        return Hop(named, min(delay, self._since + self.deadline - now))

    def _named(self, primary: str) -> str:
        """
        The address of the list that is C{primary} (a C{host:port}, as a
        daemon says it): its own spelling (a C{tls:} one keeps its
        options); C{tcp:host:port} if the list has none.
        """
        wanted = _sockaddr(normalize_address(primary))
        for address in self.addresses:
            if wanted is not None and _sockaddr(address) == wanted:
                return address
        return normalize_address(primary)


def _sockaddr(address: str) -> object:
    try:
        return parse_address(address)[1]
    except ValueError:
        return None
