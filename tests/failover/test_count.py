"""
The failover matrix's counters (tools.failover.count) on hand-made traces:
each figure is shown to count what it must (a loss, a double, a stale apply)
and to count nothing on a clean trace.
"""

from __future__ import annotations

import pytest

from tools.failover.count import count, longest_gap, longest_spell
from tools.failover.load import owned_ids
from tools.failover.trace import (
    APPLIED,
    DONE,
    DOWN,
    PENDING,
    PRIMARY,
    REFUSED,
    STALE,
    UNANSWERED,
    UNKNOWN,
    Ack,
    Delivery,
    Final,
    Outcome,
    RoleSample,
    Trace,
)


def clean(keys: int = 3) -> Trace:
    """C{keys} tasks acknowledged, each delivered once, applied once, kept as done."""
    trace = Trace()
    for n in range(keys):
        key = f"k{n}"
        trace.acks.append(Ack(key, n + 1, 1.0 + n))
        trace.deliveries.append(Delivery(key, n + 1, 100 + n, 1.1 + n))
        trace.outcomes.append(Outcome(key, n + 1, 100 + n, 1.2 + n, 1.25 + n, APPLIED))
        trace.finals[key] = Final(key, DONE, 100 + n)
    trace.roles += [RoleSample("a", PRIMARY, t) for t in (0.0, 2.0, 4.0)]
    return trace


def test_clean_trace_counts_nothing() -> None:
    counts = count(clean(), 0.0, 4.0)
    assert counts.acknowledged == 3
    assert (counts.lost, counts.undrained, counts.delivered_twice) == (0, 0, 0)
    assert (counts.applied_twice, counts.stale_applied, counts.stale_refused) == (0, 0, 0)
    assert counts.no_primary_s == 0.0
    assert counts.ack_gap_s == pytest.approx(1.0)


def test_an_acknowledged_task_the_primary_does_not_know_is_lost() -> None:
    trace = clean()
    trace.finals["k1"] = Final("k1", UNKNOWN)
    del trace.finals["k2"]  # no final state read: lost too, never assumed fine
    assert count(trace, 0.0, 4.0).lost == 2


def test_a_task_not_finished_is_undrained_not_lost() -> None:
    trace = clean()
    trace.finals["k0"] = Final("k0", PENDING)
    counts = count(trace, 0.0, 4.0)
    assert (counts.lost, counts.undrained) == (0, 1)


def test_two_deliveries_of_one_key_count_once_as_delivered_twice() -> None:
    trace = clean()
    # Redelivered after a failover, even under another task id (a resubmitted key).
    trace.deliveries.append(Delivery("k0", 9, 200, 3.0))
    trace.deliveries.append(Delivery("k0", 9, 201, 3.5))
    trace.deliveries.append(Delivery("k1", 2, 101, 3.0))  # the same delivery seen again
    assert count(trace, 0.0, 4.0).delivered_twice == 1


def test_two_applied_outcomes_of_one_key_count_as_applied_twice() -> None:
    trace = clean()
    trace.deliveries.append(Delivery("k2", 3, 300, 5.0))
    trace.outcomes.append(Outcome("k2", 3, 300, 5.1, 5.2, APPLIED))
    trace.outcomes.append(Outcome("k1", 2, 400, 5.1, 5.2, STALE))  # refused: not applied
    counts = count(trace, 0.0, 6.0)
    assert (counts.applied_twice, counts.stale_refused) == (1, 1)


def test_a_late_outcome_of_a_superseded_delivery_that_was_applied_is_stale() -> None:
    trace = clean()
    # The zombie: k0's first delivery (token 100 at 1.1) was handed out again
    # (token 500 at 6.0) by the new primary; the zombie's worker ACKs 100 at
    # 8.0 and it is applied: a stale apply, though it was sent before 6.0.
    trace.deliveries.append(Delivery("k0", 1, 500, 6.0))
    trace.outcomes[0] = Outcome("k0", 1, 100, 1.2, 8.0, APPLIED)
    trace.outcomes.append(Outcome("k0", 1, 500, 6.1, 6.2, APPLIED))
    counts = count(trace, 0.0, 9.0)
    assert counts.stale_applied == 1
    assert counts.applied_twice == 1


def test_late_outcomes_refused_or_unanswered_are_no_stale_apply() -> None:
    trace = clean()
    trace.deliveries.append(Delivery("k0", 1, 500, 6.0))
    trace.outcomes[0] = Outcome("k0", 1, 100, 1.2, 8.0, STALE)
    trace.outcomes.append(Outcome("k1", 2, 101, 1.2, 8.0, REFUSED))
    trace.outcomes.append(Outcome("k2", 3, 102, 1.2, 8.0, UNANSWERED))
    assert count(trace, 0.0, 9.0).stale_applied == 0


def test_an_outcome_applied_before_the_redelivery_is_not_stale() -> None:
    # Applied, then lost in a crash, then delivered and applied again: a double, not stale.
    trace = clean()
    trace.deliveries.append(Delivery("k0", 1, 500, 6.0))
    trace.outcomes.append(Outcome("k0", 1, 500, 6.1, 6.2, APPLIED))
    counts = count(trace, 0.0, 9.0)
    assert (counts.stale_applied, counts.applied_twice, counts.delivered_twice) == (0, 1, 1)


def test_longest_gap_counts_the_edges() -> None:
    assert longest_gap([2.0, 3.0], 0.0, 10.0) == 7.0
    assert longest_gap([], 0.0, 10.0) == 10.0
    assert longest_gap([1.0, 6.5, 7.0], 0.0, 8.0) == 5.5


def test_seconds_without_a_primary_from_the_daemons_roles() -> None:
    samples = [
        RoleSample("a", PRIMARY, 0.0),
        RoleSample("b", "standby", 0.1),
        RoleSample("a", DOWN, 1.0),  # killed: no primary from here...
        RoleSample("b", "candidate", 1.1),
        RoleSample("a", DOWN, 2.0),
        RoleSample("b", PRIMARY, 4.5),  # ...to here
        RoleSample("a", "standby", 6.0),
    ]
    assert longest_spell(samples, 0) == pytest.approx(3.5)
    assert longest_spell(samples, 2) == 0.0


def test_two_primaries_at_once_are_measured() -> None:
    samples = [
        RoleSample("a", PRIMARY, 0.0),
        RoleSample("b", PRIMARY, 5.0),  # the zombie a still says primary
        RoleSample("a", "fenced", 5.5),
        RoleSample("b", PRIMARY, 6.0),
    ]
    assert longest_spell(samples, 2) == pytest.approx(0.5)
    assert longest_spell(samples, 0) == 0.0


def test_a_primary_that_never_comes_back_counts_to_the_last_sample() -> None:
    samples = [
        RoleSample("a", PRIMARY, 0.0),
        RoleSample("a", DOWN, 2.0),
        RoleSample("a", DOWN, 9.0),
    ]
    assert longest_spell(samples, 0) == pytest.approx(7.0)


def test_an_id_given_twice_belongs_to_the_later_key() -> None:
    # A daemon that forgot its journal numbers tasks from 1 again: k0's id 1 now names k9.
    acks = [Ack("k0", 1, 1.0), Ack("k1", 2, 1.1), Ack("k9", 1, 5.0), Ack("k1", 7, 6.0)]
    assert owned_ids(acks) == {"k0": [], "k1": [2, 7], "k9": [1]}
