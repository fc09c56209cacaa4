"""
How a worker splits its capacity among a cluster's daemons.

How a worker with several daemons (a cluster: see L{split_addresses}) splits
its capacity among them, so that it holds no more tasks with k daemons than
with one.

The capacity is what one daemon would get: C{concurrency * credits}, or
C{concurrency * AUTO_MAX} when each connection chooses its own credits (then
a connection's share is the most it may choose).  It is split among the
daemons counted now -- those the worker is connected to, or has not yet
found gone -- and each daemon's share among its C{concurrency} connections.
Nothing here does I/O: the worker runner calls L{slot_credits} whenever a
daemon comes or goes, and sends each connection whose credits changed a
READY with the new count.
"""

from __future__ import annotations

from collections.abc import Sequence


def split(total: int, parts: int) -> tuple[int, ...]:
    """
    C{total} in C{parts} whole shares, as even as they go: the first
    C{total % parts} one more than the others.
    """
    whole, left = divmod(total, parts)
    return tuple(whole + (part < left) for part in range(parts))


def slot_credits(
    capacity: int, concurrency: int, live: Sequence[bool]
) -> tuple[tuple[int, ...], ...]:
    """
    Each connection's credits, by daemon: C{capacity} split among the daemons
    counted (C{live}, in the worker's address order; the first of them get
    the remainder), and each one's share split among its C{concurrency}
    connections -- at least 1 each, as a READY asks for 1 at least.  A
    daemon not counted gets nothing (an empty tuple).

    The credits of a daemon's connections add up to its share, and those of
    all to C{capacity}, unless C{capacity} is less than C{concurrency} times
    the daemons counted: then some connections hold the 1 they cannot go
    under.
    """
    shares = iter(split(capacity, sum(live) or 1))
    return tuple(
        tuple(max(1, credits) for credits in split(next(shares), concurrency)) if counted else ()
        for counted in live
    )
