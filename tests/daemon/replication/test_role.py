"""
The role state machine (quicx/daemon/replication/role.py) in-process: daemons
of one shard on a fake lease store (tests/replication_fakes.py) and a
L{task.Clock}, through every transition.
"""

from __future__ import annotations

import pytest
from attrs import define
from twisted.internet.task import Clock

from quicx.daemon.replication.interfaces import History, Leader, RoleState
from quicx.daemon.replication.role import RoleManager, RoleOptions, eligible
from tests.replication_fakes import FakeEtcd, FakeLeaseStore, RecordingListener

TTL = 3.0
OPTIONS = RoleOptions(TTL)  # renew and poll every 1 s, fence 0.6 s before the lease lapses
STEP = 0.05


@define
class Daemon:
    role: RoleManager
    store: FakeLeaseStore
    listener: RecordingListener

    @property
    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.listener.events]


def leader(name: str, epoch: int = 0) -> Leader:
    return Leader(name, f"{name}:1", f"{name}:2", epoch)


@pytest.fixture
def etcd() -> FakeEtcd:
    return FakeEtcd(Clock())


def start(etcd: FakeEtcd, name: str) -> Daemon:
    store = FakeLeaseStore(etcd)
    listener = RecordingListener(etcd.clock, lambda: etcd.key)
    role = RoleManager(store, leader(name), OPTIONS, listener, etcd.clock)
    role.startService()
    etcd.clock.advance(0)
    return Daemon(role, store, listener)


def run(etcd: FakeEtcd, seconds: float) -> None:
    """Let C{seconds} pass, in small steps."""
    for _ in range(round(seconds / STEP)):
        etcd.clock.advance(STEP)


def run_until(etcd: FakeEtcd, done: object, within: float) -> float:
    """Let time pass until C{done()}: how long it took."""
    started = etcd.clock.seconds()
    while not done():  # type: ignore[operator]
        assert etcd.clock.seconds() - started < within, "not within the deadline"
        etcd.clock.advance(STEP)
    return etcd.clock.seconds() - started


def primary_with_standby(etcd: FakeEtcd, in_sync: bool = True) -> tuple[Daemon, Daemon]:
    a, b = start(etcd, "a"), start(etcd, "b")
    if in_sync:
        result = a.role.in_sync(frozenset({"b"}))
        assert result.called and result.result is True
    return a, b


def test_options_derive_from_the_ttl_and_refuse_a_lease_never_renewed_in_time() -> None:
    assert (OPTIONS.renew_interval, OPTIONS.poll_interval) == (1.0, 1.0)
    assert OPTIONS.margin == pytest.approx(0.6) and OPTIONS.call_timeout == pytest.approx(0.6)
    for bad in ({"ttl": 0}, {"ttl": 3, "margin": 3}, {"ttl": 3, "renew_interval": 2.5}):
        with pytest.raises(ValueError):
            RoleOptions(**bad)


def test_who_may_take_the_key() -> None:
    history = History(7, "a", frozenset({"b"}))
    assert eligible(None, "z")
    assert eligible(history, "a") and eligible(history, "b")
    assert not eligible(history, "c")


def test_the_first_daemon_wins_writes_history_and_keeps_the_key(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    assert a.role.state == RoleState("primary", 1, "")
    assert a.listener.events == [("primary", 1)]
    assert etcd.history == History(1, "a", frozenset())
    run(etcd, 10 * TTL)
    assert a.listener.events == [("primary", 1)]
    assert a.store.calls.count("renew") >= 29


def test_the_second_follows_the_first(etcd: FakeEtcd) -> None:
    a, b = start(etcd, "a"), start(etcd, "b")
    assert b.role.state == RoleState("standby", 1, "a:1")
    assert b.listener.events == [("standby", leader("a", 1))]
    assert "campaign" not in b.store.calls
    run(etcd, 5 * TTL)
    assert b.listener.events == [("standby", leader("a", 1))]
    assert a.role.state.role == "primary"


def test_in_sync_is_written_by_the_primary_only(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd)
    assert etcd.history == History(1, "a", frozenset({"b"}))
    assert b.role.in_sync(frozenset({"a"})).result is False
    a.store.mode = "down"
    assert a.role.in_sync(frozenset()).result is False
    assert etcd.history == History(1, "a", frozenset({"b"}))


def test_an_in_sync_standby_takes_over_when_the_primarys_lease_lapses(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd)
    a.store.mode = "down"  # a is cut off from the lease store (its lease no longer renewed)
    took = run_until(etcd, lambda: b.role.state.role == "primary", within=3 * TTL)
    assert took <= TTL + OPTIONS.poll_interval + STEP
    epoch = b.role.state.epoch
    assert epoch > 1 and b.listener.events[-1] == ("primary", epoch)
    assert etcd.history == History(epoch, "b", frozenset())
    # a fenced itself before its lease lapsed: never two primaries.
    assert a.kinds == ["primary", "fenced"]
    assert a.listener.times[1] < b.listener.times[-1]
    assert a.listener.keys[1] == leader("a", 1)
    a.store.mode = "up"
    run_until(etcd, lambda: a.role.state.role == "standby", within=2 * TTL)
    assert a.listener.events[-1] == ("standby", leader("b", epoch))


def test_a_standby_not_in_sync_never_campaigns(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd, in_sync=False)
    a.store.mode = "down"
    run(etcd, 10 * TTL)
    assert etcd.key is None
    assert "campaign" not in b.store.calls
    assert b.role.state == RoleState("standby", 1, "a:1")  # still following what it knew
    # The last primary comes back: it may take the key again (a new epoch), and b follows.
    a.store.mode = "up"
    run_until(etcd, lambda: b.role.state.epoch > 1, within=3 * TTL)
    assert a.role.state.role == "primary"
    assert b.listener.events[-1] == ("standby", leader("a", a.role.state.epoch))


def fenced_within_its_lease(daemon: Daemon, etcd: FakeEtcd) -> float:
    """Let time pass until C{daemon} fences itself: when, checked to be before its lease lapsed."""
    lapses = max(until for _, until in etcd.leases.values())
    run_until(etcd, lambda: "fenced" in daemon.kinds, within=2 * TTL)
    fenced = daemon.listener.times[daemon.kinds.index("fenced")]
    assert fenced <= lapses - OPTIONS.margin + STEP
    return fenced


def test_a_primary_whose_renewals_fail_fences_itself_at_its_deadline(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    run(etcd, 1.5)
    a.store.renewals = False
    fenced_within_its_lease(a, etcd)
    assert a.listener.events[1] == ("fenced", a.listener.events[1][1])
    assert "deadline" in a.listener.events[1][1]
    assert a.role.state.role == "candidate" and etcd.key is None  # it resigned
    # It takes the key again (a new epoch), after one ttl left to the standbys.
    a.store.renewals = True
    fenced = a.listener.times[1]
    run_until(etcd, lambda: a.role.state.role == "primary", within=2 * TTL)
    assert a.listener.times[2] >= fenced + TTL
    assert a.listener.events[2] == ("primary", a.role.state.epoch) and a.role.state.epoch > 1


def test_a_primary_whose_renewals_hang_fences_itself_at_its_deadline(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    run(etcd, 1.5)
    a.store.mode = "silent"
    fenced_within_its_lease(a, etcd)
    run(etcd, 2 * TTL)
    assert a.kinds == ["primary", "fenced"]
    assert a.role.state.role == "candidate"  # each silent call timed out, resign too
    assert len([call for call in a.store.pending if not call.called]) <= 1  # timed out


def test_a_primary_cut_off_from_renewing_only_leaves_the_key_to_its_standby(
    etcd: FakeEtcd,
) -> None:
    a, b = primary_with_standby(etcd)
    a.store.renewals = False  # it can campaign, resign, record: only its renewals fail
    run_until(etcd, lambda: b.role.state.role == "primary", within=3 * TTL)
    run_until(etcd, lambda: a.role.state.role == "standby", within=OPTIONS.poll_interval + STEP)
    assert a.kinds == ["primary", "fenced", "standby"]


def test_a_lease_gone_fences_at_once(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    assert a.store.lease is not None
    etcd.revoke(a.store.lease)
    run_until(etcd, lambda: a.kinds[-1:] == ["fenced"], within=OPTIONS.renew_interval + STEP)
    assert "lease is gone" in a.listener.events[-1][1]


def test_a_primary_stopped_past_its_deadline_fences_itself_before_anything_else(
    etcd: FakeEtcd,
) -> None:
    a = start(etcd, "a")
    run(etcd, 1.0)
    a.store.mode = "silent"
    run(etcd, OPTIONS.renew_interval)  # a renewal is on its way...
    renewal = a.store.pending[-1]
    a.store.mode = "up"
    etcd.clock.rightNow += 10 * TTL  # ... when the process is stopped; it wakes, no timer run yet
    assert a.role.state.role != "primary"  # its first read of its role: fenced, listener told
    assert a.kinds == ["primary", "fenced"]
    renewal.callback(True)  # the renewal's answer, late: no primary again for it
    assert a.role.state.role != "primary"
    assert a.kinds == ["primary", "fenced"]


def test_a_renewal_confirmed_past_the_deadline_fences(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    a.store.mode = "silent"
    run(etcd, OPTIONS.renew_interval)
    renewal = a.store.pending[-1]
    etcd.clock.rightNow += 10 * TTL
    renewal.callback(True)  # before any timer or read of its state
    assert a.kinds == ["primary", "fenced"]


def test_a_primary_stepping_down_is_fenced_first_and_waits_one_ttl(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    done = a.role.step_down()
    assert done.called
    assert a.listener.events[-1] == ("fenced", "stepped down")
    assert a.listener.keys[-1] == leader("a", 1)  # told before the key was given up
    assert etcd.key is None and a.role.state.role == "candidate"
    run(etcd, TTL - 2 * STEP)
    assert a.store.calls.count("campaign") == 1
    run_until(etcd, lambda: a.role.state.role == "primary", within=OPTIONS.poll_interval + 2 * STEP)


def test_a_standby_asked_to_campaign_takes_over_at_once(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd)
    a.role.step_down()
    b.role.campaign_now()
    assert b.role.state == RoleState("primary", b.role.state.epoch, "")
    assert b.role.state.epoch > 1
    etcd.clock.advance(OPTIONS.poll_interval)
    assert a.role.state == RoleState("standby", b.role.state.epoch, "b:1")


def test_campaign_now_does_not_make_an_ineligible_standby_campaign(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd, in_sync=False)
    a.role.step_down()
    b.role.campaign_now()
    assert "campaign" not in b.store.calls
    assert b.role.state.role == "standby"


def test_a_candidate_with_no_lease_store_stays_a_candidate(etcd: FakeEtcd) -> None:
    store = FakeLeaseStore(etcd)
    store.mode = "down"
    listener = RecordingListener(etcd.clock, lambda: etcd.key)
    role = RoleManager(store, leader("a"), OPTIONS, listener, etcd.clock)
    role.startService()
    run(etcd, 5 * TTL)
    assert role.state == RoleState("candidate", 0, "")
    assert listener.events == []
    assert store.calls.count("leader") >= 14
    store.mode = "up"
    run_until(etcd, lambda: role.state.role == "primary", within=OPTIONS.poll_interval + STEP)


def test_a_restarted_primary_waits_for_its_former_lease_to_lapse(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    a.store.mode = "down"  # the process is gone (its lease no longer renewed)
    again = start(etcd, "a")
    assert again.role.state.role == "candidate"
    assert "campaign" not in again.store.calls and again.listener.events == []
    run_until(etcd, lambda: again.role.state.role == "primary", within=2 * TTL)
    assert again.role.state.epoch > 1


def test_stopping_a_primary_fences_it_and_resigns(etcd: FakeEtcd) -> None:
    a = start(etcd, "a")
    stopped = a.role.stopService()
    assert stopped is not None and stopped.called
    assert a.kinds == ["primary", "fenced"] and etcd.key is None
    run(etcd, 2 * TTL)
    assert a.store.calls.count("campaign") == 1


def test_a_shard_with_no_standby_in_sync_waits_until_an_operator_names_one(etcd: FakeEtcd) -> None:
    a, b = primary_with_standby(etcd, in_sync=False)
    a.role.stopService()  # the primary is gone for good
    run(etcd, 5 * TTL)
    assert etcd.key is None and "campaign" not in b.store.calls
    # docs/operations.md's forcing: a History that names b (etcdctl put .../history)
    etcd.history = History(0, "b", frozenset())
    run_until(etcd, lambda: b.role.state.role == "primary", within=OPTIONS.poll_interval + STEP)
    assert etcd.history == History(b.role.state.epoch, "b", frozenset())
