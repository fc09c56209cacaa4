"""
Counting one row's trace (L{tools.failover.trace}): pure functions, no I/O.

Per row: acknowledged tasks lost, tasks delivered twice, outcomes applied
twice, stale outcomes applied (and refused), and seconds without a primary,
seen by the producers (the longest gap between two acknowledgements) and by
the daemons themselves (the longest time no daemon said it was primary).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Iterable

from attrs import define

from tools.failover.trace import (
    APPLIED,
    PENDING,
    PRIMARY,
    STALE,
    UNKNOWN,
    Outcome,
    RoleSample,
    Trace,
)


@define(frozen=True)
class Counts:
    """
    @ivar acknowledged: tasks a producer read OK for (by key).
    @ivar lost: of those, the ones the surviving primary does not know, or
        for which no final state was read.
    @ivar undrained: known but not finished when the drain ended (not lost:
        the drain was too short).
    @ivar delivered_twice: tasks delivered under two tokens or more.
    @ivar applied_twice: tasks two of whose outcomes were applied.
    @ivar stale_applied: outcomes applied after a newer delivery of their task
        had been made (a zombie's late ACK that counted).
    @ivar stale_refused: outcomes refused as stale (ERROR 0x08): fencing at work.
    @ivar ack_gap_s: the longest time, in seconds, between two acknowledgements
        (from the load's start and to its end).
    @ivar no_primary_s: the longest time no daemon said it was primary.
    @ivar two_primaries_s: the longest time two daemons said so at once.
    """

    acknowledged: int
    lost: int
    undrained: int
    delivered_twice: int
    applied_twice: int
    stale_applied: int
    stale_refused: int
    ack_gap_s: float
    no_primary_s: float
    two_primaries_s: float


def lost_keys(trace: Trace) -> list[str]:
    """Acknowledged keys the final primary does not know (or that were not read)."""
    acked = dict.fromkeys(a.key for a in trace.acks)
    return [k for k in acked if (f := trace.finals.get(k)) is None or f.state == UNKNOWN]


def undrained_keys(trace: Trace) -> list[str]:
    acked = dict.fromkeys(a.key for a in trace.acks)
    return [k for k in acked if (f := trace.finals.get(k)) is not None and f.state == PENDING]


def delivered_twice(trace: Trace) -> list[str]:
    """Keys delivered under two tokens or more."""
    tokens: dict[str, set[int]] = defaultdict(set)
    for d in trace.deliveries:
        tokens[d.key].add(d.token)
    return sorted(k for k, t in tokens.items() if len(t) > 1)


def applied_twice(trace: Trace) -> list[str]:
    """Keys with two applied outcomes or more (of different deliveries)."""
    tokens: dict[str, set[int]] = defaultdict(set)
    for o in trace.outcomes:
        if o.verdict == APPLIED:
            tokens[o.key].add(o.token)
    return sorted(k for k, t in tokens.items() if len(t) > 1)


def stale_applied(trace: Trace) -> list[Outcome]:
    """
    Applied outcomes whose delivery had been superseded when they were
    answered: another delivery of the same task made after theirs and
    before the answer.
    """
    made: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for d in trace.deliveries:
        made[d.key].append((d.at, d.token))
    stale = []
    for o in trace.outcomes:
        if o.verdict != APPLIED:
            continue
        own = min((at for at, token in made[o.key] if token == o.token), default=o.sent)
        if any(own < at < o.answered for at, token in made[o.key] if token != o.token):
            stale.append(o)
    return stale


def longest_gap(times: Iterable[float], start: float, end: float) -> float:
    """The longest interval between C{start}, each of C{times} within it, and C{end}."""
    points = [start, *sorted(t for t in times if start <= t <= end), end]
    return max((b - a for a, b in itertools.pairwise(points)), default=0.0)


def longest_spell(samples: Iterable[RoleSample], primaries: int) -> float:
    """
    The longest time the number of daemons saying they were primary was
    C{primaries} (0: none) or more (C{primaries} ≥ 2), from each daemon's latest sample:
    from the first sample that made it so to the first that ended it (or the last sample).
    """
    ordered = sorted(samples, key=lambda s: s.at)
    latest: dict[str, str] = {}
    began: float | None = None
    longest = 0.0
    for sample in ordered:
        latest[sample.daemon] = sample.role
        count = sum(role == PRIMARY for role in latest.values())
        holds = count == 0 if primaries == 0 else count >= primaries
        if holds and began is None:
            began = sample.at
        elif not holds and began is not None:
            longest = max(longest, sample.at - began)
            began = None
    if began is not None and ordered:
        longest = max(longest, ordered[-1].at - began)
    return longest


def count(trace: Trace, start: float, end: float) -> Counts:
    """Every figure of one row whose load ran from C{start} to C{end}."""
    return Counts(
        acknowledged=len({a.key for a in trace.acks}),
        lost=len(lost_keys(trace)),
        undrained=len(undrained_keys(trace)),
        delivered_twice=len(delivered_twice(trace)),
        applied_twice=len(applied_twice(trace)),
        stale_applied=len(stale_applied(trace)),
        stale_refused=sum(o.verdict == STALE for o in trace.outcomes),
        ack_gap_s=longest_gap((a.at for a in trace.acks), start, end),
        no_primary_s=longest_spell(trace.roles, 0),
        two_primaries_s=longest_spell(trace.roles, 2),
    )
