"""
Schedules: cron and interval fire times (across daylight-saving changes),
the missed-fire policies, and the scheduler on a L{Clock}: one delayed call
at a time, re-armed by add, remove and each firing.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogEvent, Logger, LogLevel, formatEvent
from zope.interface import implementer

from quicx.daemon.queue.schedules import (
    Scheduler,
    ScheduleSpec,
    TooManySchedules,
    UnknownSchedule,
    check,
    missed_firings,
    next_fire,
    upcoming,
)
from quicx.protocol import admin, codec, registry
from quicx.protocol.admin import Missed


def at(text: str, zone: str = "UTC") -> float:
    """C{'2026-03-29T02:30'} in C{zone}, as Unix seconds (the first one, in an overlap)."""
    return datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp()


def utc(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def cron(expression: str, zone: str = "UTC", **changes: Any) -> ScheduleSpec:
    base = ScheduleSpec(name="c", cron=expression, timezone=zone, task_type=b"t")
    return attrs.evolve(base, **changes)


def every(seconds: float, **changes: Any) -> ScheduleSpec:
    return attrs.evolve(ScheduleSpec(name="e", every=seconds, task_type=b"t"), **changes)


def fires(spec: ScheduleSpec, after: float, count: int) -> list[str]:
    """The next C{count} fire times after C{after}, in UTC."""
    found = []
    for _ in range(count):
        after = next_fire(spec, after)
        found.append(utc(after))
    return found


# -- next fire times -------------------------------------------------------------------------


def test_a_cron_fires_strictly_after_the_time_given() -> None:
    spec = cron("*/15 * * * *")
    assert fires(spec, at("2026-01-01T00:07:30"), 2) == [
        "2026-01-01T00:15:00",
        "2026-01-01T00:30:00",
    ]
    assert utc(next_fire(spec, at("2026-01-01T00:15"))) == "2026-01-01T00:30:00"
    assert utc(next_fire(spec, at("2026-01-01T00:14:59.999"))) == "2026-01-01T00:15:00"


def test_a_cron_is_read_in_its_time_zone() -> None:
    assert fires(cron("0 9 * * 1-5", "Asia/Tokyo"), at("2026-01-02T12:00"), 2) == [
        "2026-01-05T00:00:00",  # Monday 09:00 in Tokyo
        "2026-01-06T00:00:00",
    ]


def test_an_interval_fires_every_seconds_after_the_time_given() -> None:
    assert next_fire(every(90), 1000.5) == 1090.5


@pytest.mark.parametrize(
    ("expression", "zone", "after", "expected"),
    [
        # 02:30 does not exist on the day clocks go forward: 03:00 local.
        ("30 2 * * *", "Europe/Paris", "2026-03-28T12:00", "2026-03-29T01:00 2026-03-30T00:30"),
        ("30 2 * * *", "America/New_York", "2026-03-07T12:00", "2026-03-08T07:00 2026-03-09T06:30"),
        # Two times in the gap fire once, at its end.
        ("0,30 2 * * *", "Europe/Paris", "2026-03-28T12:00", "2026-03-29T01:00 2026-03-30T00:00"),
        # A time that exists twice fires once, at its first occurrence (summer time).
        ("30 2 * * *", "Europe/Paris", "2026-10-24T12:00", "2026-10-25T00:30 2026-10-26T01:30"),
        ("30 1 * * *", "America/New_York", "2026-10-31T12:00", "2026-11-01T05:30 2026-11-02T06:30"),
        # On real time: nothing to fire in the gap, both instants of the overlap.
        ("30 * * * *", "Europe/Paris", "2026-03-29T01:00", "2026-03-29T00:30 2026-03-29T01:30"),
        ("0 * * * *", "Europe/Paris", "2026-10-25T01:30",
         "2026-10-25T00:00 2026-10-25T01:00 2026-10-25T02:00"),
    ],
)  # fmt: skip
def test_daylight_saving_changes(expression: str, zone: str, after: str, expected: str) -> None:
    times = fires(cron(expression, zone), at(after, zone), len(expected.split()))
    assert [t[:16] for t in times] == expected.split()


def test_from_the_second_hour_of_an_overlap_a_fixed_time_does_not_fire_again() -> None:
    # 01:10 EST, in the repeated hour: 01:30 EDT has fired already.
    after = at("2026-11-01T06:10", "UTC")
    assert utc(next_fire(cron("30 1 * * *", "America/New_York"), after)) == "2026-11-02T06:30:00"


# -- what fires next, given the last fire --------------------------------------------------------


def test_a_schedule_that_never_fired_fires_first_after_now() -> None:
    assert upcoming(every(10), None, 105) == 115
    assert utc(upcoming(cron("0 * * * *"), None, at("2026-01-01T05:59"))) == "2026-01-01T06:00:00"


def test_an_interval_stays_anchored_to_its_last_fire() -> None:
    assert upcoming(every(10), 100, 135) == 140
    assert upcoming(every(10), 100, 140) == 150
    assert upcoming(every(10), 100, 100) == 110


def test_a_clock_set_back_never_fires_a_time_before_the_last_fire() -> None:
    assert upcoming(every(10), 1000, 500) == 1010
    last = at("2026-01-01T06:00")
    assert utc(upcoming(cron("0 * * * *"), last, last - 7200)) == "2026-01-01T07:00:00"


# -- missed firings ---------------------------------------------------------------------------


@pytest.mark.parametrize("policy", list(Missed))
def test_a_schedule_that_never_fired_missed_nothing(policy: Missed) -> None:
    assert missed_firings(every(1, missed=policy), None, 1e9) == []


def test_missed_firings_by_policy() -> None:
    last, now = 100.0, 135.0  # missed 110, 120, 130
    assert missed_firings(every(10, missed=Missed.SKIP), last, now) == []
    assert missed_firings(every(10, missed=Missed.ONCE), last, now) == [130]
    assert missed_firings(every(10, missed=Missed.ALL), last, now) == [110, 120, 130]
    assert missed_firings(every(10, missed=Missed.ALL, catch_up=2), last, now) == [120, 130]
    assert missed_firings(every(10, missed=Missed.ALL, catch_up=0), last, now) == []


def test_a_time_equal_to_now_is_missed_and_one_equal_to_the_last_fire_is_not() -> None:
    assert missed_firings(every(10, missed=Missed.ALL), 100, 130) == [110, 120, 130]
    assert missed_firings(every(10, missed=Missed.ALL), 100, 109.9) == []


def test_missed_cron_firings_by_policy() -> None:
    spec = cron("0 */6 * * *", missed=Missed.ALL, catch_up=3)
    last, now = at("2026-01-01T00:00"), at("2026-01-02T13:00")
    assert [utc(t) for t in missed_firings(spec, last, now)] == [
        "2026-01-02T00:00:00",
        "2026-01-02T06:00:00",
        "2026-01-02T12:00:00",
    ]
    assert [utc(t) for t in missed_firings(attrs.evolve(spec, catch_up=100), last, now)] == [
        "2026-01-01T06:00:00",
        "2026-01-01T12:00:00",
        "2026-01-01T18:00:00",
        "2026-01-02T00:00:00",
        "2026-01-02T06:00:00",
        "2026-01-02T12:00:00",
    ]
    once = attrs.evolve(spec, missed=Missed.ONCE)
    assert [utc(t) for t in missed_firings(once, last, now)] == ["2026-01-02T12:00:00"]


def test_a_huge_backlog_is_not_walked() -> None:
    started = time.perf_counter()
    # Every second for a thousand years: a list of them would not fit in memory.
    ones = missed_firings(every(1, missed=Missed.ALL, catch_up=65535), 0.5, 3.2e10)
    assert (len(ones), ones[0], ones[-1]) == (65535, 3.2e10 - 65534.5, 3.2e10 - 0.5)
    assert missed_firings(every(1), 0.5, 3.2e10) == [3.2e10 - 0.5]
    # Every minute for 49 years: 26 million times, a minute or more to walk.
    last, now = at("2000-01-01T00:00"), at("2049-01-01T00:00:30")
    minutes = missed_firings(cron("* * * * *", missed=Missed.ALL), last, now)
    assert [utc(t) for t in (minutes[0], minutes[-1])] == [
        "2048-12-31T22:21:00",
        "2049-01-01T00:00:00",
    ]
    assert len(minutes) == 100
    assert time.perf_counter() - started < 5


def brute_force(spec: ScheduleSpec, last: float, now: float) -> list[float]:
    """Every fire time in (last, now], one L{next_fire} at a time."""
    found = []
    while (last := next_fire(spec, last)) <= now:
        found.append(last)
    return found


@settings(max_examples=300, deadline=None)
@given(
    expression=st.sampled_from(
        ["30 2 * * *", "0,30 2 * * *", "0 * * * *", "*/20 * * * *", "15 0-3 * * *", "0 3 * * 0"]
    ),
    zone=st.sampled_from(["Europe/Paris", "America/New_York", "Australia/Lord_Howe"]),
    change=st.sampled_from(
        ["2026-03-29", "2026-10-25", "2026-03-08", "2026-11-01", "2026-04-05", "2026-10-04"]
    ),
    start=st.integers(-86400, 86400),
    length=st.integers(0, 2 * 86400),
    catch_up=st.sampled_from([1, 3, 100]),
)
def test_missed_cron_firings_are_the_latest_of_all_times_across_dst(
    expression: str, zone: str, change: str, start: int, length: int, catch_up: int
) -> None:
    last = at(change, zone) + start
    now = last + length
    spec = cron(expression, zone, missed=Missed.ALL, catch_up=catch_up)
    assert missed_firings(spec, last, now) == brute_force(spec, last, now)[-catch_up:]


# -- checks -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"cron": "* * * *"}, "'* * * *' is not a cron expression: 4 fields, not 5"),
        ({"cron": "0 30 2 * * *"}, "'0 30 2 * * *' is not a cron expression: 6 fields, not 5"),
        ({"cron": "61 2 * * *"}, "'61 2 * * *' is not a cron expression: bad minute"),
        ({"cron": "0 0 31 4 *"}, "'0 0 31 4 *' is not a cron expression: bad day-of-month"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus' (an IANA name"),
        ({"timezone": "../etc/passwd"}, "unknown time zone '../etc/passwd'"),
        ({"timezone": "Europe"}, "unknown time zone 'Europe'"),
        ({"every": 60}, "a schedule has a cron expression or an interval (every), not both"),
        ({"cron": ""}, "a schedule needs a cron expression or an interval (every)"),
        ({"cron": "", "every": 0.5}, "an interval is 1 to 4294967295 seconds, not 0.5"),
        ({"catch_up": -1}, "catch_up is 0 to 65535, not -1"),
        ({"catch_up": 65536}, "catch_up is 0 to 65535, not 65536"),
        ({"name": "a b"}, "a schedule name is 1 to 64 letters, digits or '_.:-', not 'a b'"),
    ],
)
def test_check_gives_one_line_why(changes: dict[str, Any], reason: str) -> None:
    with pytest.raises(ValueError) as raised:
        check(attrs.evolve(cron("0 * * * *"), **changes))
    assert str(raised.value).startswith(reason), raised.value
    assert "\n" not in str(raised.value)


def test_check_accepts_good_schedules() -> None:
    check(cron("0 9-17/2 * JAN-MAR MON-FRI", "America/Argentina/Buenos_Aires"))
    check(every(4294967295, catch_up=65535))


def test_a_schedule_message_becomes_a_runtime_spec() -> None:
    message = admin.Schedule(
        "hourly", b"sync", b"{}", interval=3600, queue="q", priority=3, missed=Missed.ALL
    )
    frame = admin.encode_schedule(message)
    _, kind, _ = codec.HEADER.unpack_from(frame)
    decoded = registry.decode(kind, frame[codec.HEADER_SIZE :])
    assert isinstance(decoded, admin.Schedule)
    assert ScheduleSpec.from_message(decoded) == ScheduleSpec(
        name="hourly",
        every=3600,
        task_type=b"sync",
        payload=b"{}",
        queue="q",
        priority=3,
        missed=Missed.ALL,
        source="runtime",
    )


# -- the scheduler ----------------------------------------------------------------------------


class Fired(list[tuple[str, float]]):
    """What the scheduler fired: (name, fire time), in order."""

    def __call__(self, spec: ScheduleSpec, when: float) -> None:
        self.append((spec.name, when))


@implementer(ILogObserver)
class Logged(list[LogEvent]):
    """What the scheduler logged."""

    def __call__(self, event: LogEvent) -> None:
        self.append(event)


def a_scheduler(start: float = 0, max_schedules: int = 100) -> tuple[Scheduler, Clock, Fired]:
    clock = Clock()
    clock.advance(start)
    fired = Fired()
    return Scheduler(clock, fired, max_schedules), clock, fired


def armed(clock: Clock) -> list[float]:
    return [call.getTime() for call in clock.getDelayedCalls()]


def test_one_call_is_armed_for_the_earliest_fire() -> None:
    scheduler, clock, fired = a_scheduler(start=5)
    scheduler.add(every(10, name="a"))
    scheduler.add(every(3, name="b"))
    scheduler.add(every(7, name="c"))
    assert armed(clock) == []
    scheduler.start()
    assert armed(clock) == [8]
    clock.advance(3)
    assert fired == [("b", 8)]
    assert armed(clock) == [11]


def test_firings_across_schedules_come_in_time_order_then_name_order() -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(3, name="b"))
    scheduler.add(every(2, name="a"))
    scheduler.start()
    for _ in range(6):
        clock.advance(1)
        assert len(armed(clock)) == 1
    assert fired == [("a", 2), ("b", 3), ("a", 4), ("a", 6), ("b", 6)]


def test_a_late_clock_fires_everything_due_in_order() -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(3, name="b", missed=Missed.ALL))
    scheduler.add(every(2, name="a", missed=Missed.ALL))
    scheduler.start()
    clock.advance(6)
    assert fired == [("a", 2), ("b", 3), ("a", 4), ("a", 6), ("b", 6)]
    assert armed(clock) == [8]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (Missed.SKIP, [10]),
        (Missed.ONCE, [10, 100]),
        (Missed.ALL, [10, 80, 90, 100]),
    ],
)
def test_times_a_late_timer_ran_past_are_missed(policy: Missed, expected: list[float]) -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(10, missed=policy, catch_up=3))
    scheduler.start()
    clock.advance(105)  # the host slept: due at 10, woken at 105
    assert [when for _, when in fired] == expected
    assert armed(clock) == [110]


def test_add_while_running_rearms_for_an_earlier_fire() -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(100, name="slow"))
    scheduler.start()
    assert armed(clock) == [100]
    clock.advance(10)
    scheduler.add(every(5, name="fast"))
    assert armed(clock) == [15]
    clock.advance(5)
    assert fired == [("fast", 15)]


def test_remove_rearms_for_the_next_or_none() -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(5, name="fast"))
    scheduler.add(every(100, name="slow"))
    scheduler.start()
    assert scheduler.remove("fast") == every(5, name="fast")
    assert armed(clock) == [100]
    scheduler.remove("slow")
    assert armed(clock) == []
    clock.advance(1000)
    assert fired == []


def test_a_replaced_schedule_keeps_its_history_and_takes_its_new_times() -> None:
    scheduler, clock, _ = a_scheduler()
    scheduler.add(every(10, name="a"))
    scheduler.start()
    clock.advance(20)
    scheduler.add(every(50, name="a", task_type=b"new"))
    assert armed(clock) == [70]  # anchored to its last fire, 20
    (info,) = scheduler.describe()
    assert (info["type"], info["every"], info["last_fire"], info["fired"]) == ("new", 50, 20, 2)
    scheduler.add(every(50, name="a"), last_fire=45)
    assert armed(clock) == [95]


def test_max_schedules_counts_additions_not_replacements() -> None:
    scheduler, _, _ = a_scheduler(max_schedules=2)
    scheduler.add(every(1, name="a"))
    scheduler.add(every(1, name="b"))
    scheduler.add(every(2, name="b"))
    with pytest.raises(TooManySchedules, match=r"^2 schedules already \(max_schedules = 2\)$"):
        scheduler.add(every(1, name="c"))
    scheduler.remove("a")
    scheduler.add(every(1, name="c"))


def test_unknown_names_and_bad_specs_are_refused() -> None:
    scheduler, _, _ = a_scheduler()
    for call in (scheduler.remove, scheduler.get, scheduler.info):
        with pytest.raises(UnknownSchedule, match=r"^no schedule named 'nope'$"):
            call("nope")
    with pytest.raises(ValueError, match="bad minute"):
        scheduler.add(cron("99 * * * *"))
    assert scheduler.describe() == []


def test_start_fires_what_was_missed_in_time_order_then_arms() -> None:
    scheduler, clock, fired = a_scheduler(start=1000)
    logged = Logged()
    scheduler.log = Logger(observer=logged)
    scheduler.add(every(100, name="all", missed=Missed.ALL, catch_up=2), last_fire=650)
    scheduler.add(every(100, name="once", missed=Missed.ONCE), last_fire=620)
    scheduler.add(every(100, name="skip", missed=Missed.SKIP), last_fire=690)
    scheduler.add(every(100, name="new"))
    scheduler.start()
    assert fired == [("all", 850), ("once", 920), ("all", 950)]
    assert scheduler.get("all").catch_up == 2
    assert [(i["name"], i["last_fire"], i["next_fire"]) for i in scheduler.describe()] == [
        ("all", 950, 1050),
        ("new", None, 1100),
        ("once", 920, 1020),
        ("skip", 690, 1090),
    ]
    assert armed(clock) == [1020]
    assert [formatEvent(event) for event in logged] == [
        "schedule all missed its firings after 1970-01-01T00:10:50+00:00 (missed = all): firing 2",
        "schedule once missed its firings after 1970-01-01T00:10:20+00:00 (missed = once):"
        " firing 1",
        "schedule skip missed its firings after 1970-01-01T00:11:30+00:00 (missed = skip):"
        " firing 0",
    ]


def test_stop_disarms_and_start_fires_what_was_missed_meanwhile() -> None:
    scheduler, clock, fired = a_scheduler()
    scheduler.add(every(10, missed=Missed.ONCE))
    scheduler.start()
    clock.advance(10)
    scheduler.stop()
    assert armed(clock) == []
    clock.advance(45)
    scheduler.start()
    assert fired == [("e", 10), ("e", 50)]
    assert armed(clock) == [60]


def test_describe_is_sorted_by_name_and_json_ready() -> None:
    scheduler, clock, _ = a_scheduler(start=at("2026-01-01T00:00"))
    scheduler.add(every(60, name="b", queue="q", priority=4, missed=Missed.SKIP))
    scheduler.add(cron("0 3 * * *", "Europe/Paris", name="a", task_type=b"r\xff", source="config"))
    scheduler.start()
    clock.advance(60)
    assert json.loads(json.dumps(scheduler.describe())) == [
        {
            "name": "a",
            "cron": "0 3 * * *",
            "timezone": "Europe/Paris",
            "type": "r\N{REPLACEMENT CHARACTER}",
            "queue": None,
            "priority": None,
            "missed": "once",
            "catch_up": 100,
            "source": "config",
            "next_fire": at("2026-01-01T02:00"),
            "last_fire": None,
            "fired": 0,
        },
        {
            "name": "b",
            "every": 60,
            "timezone": "UTC",
            "type": "t",
            "queue": "q",
            "priority": 4,
            "missed": "skip",
            "catch_up": 100,
            "source": "runtime",
            "next_fire": at("2026-01-01T00:02"),
            "last_fire": at("2026-01-01T00:01"),
            "fired": 1,
        },
    ]


def test_a_firing_that_raises_is_logged_and_the_others_go_on() -> None:
    logged = Logged()
    fired = Fired()

    def fire(spec: ScheduleSpec, when: float) -> None:
        if spec.name == "bad":
            raise RuntimeError("pool full")
        fired(spec, when)

    clock = Clock()
    scheduler = Scheduler(clock, fire, 10)
    scheduler.log = Logger(observer=logged)
    scheduler.add(every(5, name="bad"))
    scheduler.add(every(5, name="good"))
    scheduler.start()
    clock.advance(5)
    clock.advance(5)
    assert fired == [("good", 5), ("good", 10)]
    assert [event["log_level"] for event in logged] == [LogLevel.critical] * 2
    assert scheduler.info("bad")["fired"] == 2
    assert armed(clock) == [15]


def test_interval_fire_times_do_not_drift() -> None:
    scheduler, clock, fired = a_scheduler(start=1_700_000_000.3)
    scheduler.add(every(1.1))
    scheduler.start()
    for _ in range(1000):
        clock.advance(1.1)
        assert len(armed(clock)) == 1
    clock.advance(0.5)  # the clock's own sum of 1.1s has drifted
    assert [when for _, when in fired[-2:]] == [1_700_001_099.2, 1_700_001_100.3]
    assert len(fired) == 1000


def test_a_cron_schedule_fires_on_the_clock_across_a_dst_change() -> None:
    scheduler, clock, fired = a_scheduler(start=at("2026-03-28T12:00", "Europe/Paris"))
    scheduler.add(cron("30 2 * * *", "Europe/Paris"))
    scheduler.start()
    for _ in range(3 * 24):
        clock.advance(3600)
    assert [utc(when) for _, when in fired] == [
        "2026-03-29T01:00:00",
        "2026-03-30T00:30:00",
        "2026-03-31T00:30:00",
    ]
