"""
Schedules: repeatable tasks, fired on a cron expression or every N seconds.

A L{ScheduleSpec} says what to submit and when; L{next_fire},
L{missed_firings} and L{upcoming} say when, as pure functions of Unix
seconds; L{Scheduler} keeps the schedules of one daemon and calls its
C{fire} at each of their times, on the daemon's clock (the reactor, or a
L{twisted.internet.task.Clock} in tests).  What a firing submits, and the
journal of last fire times, are the queue core's.

B{Cron} expressions have 5 fields (minute, hour, day of month, month, day
of week) and are read by U{cronsim<https://github.com/cuu508/cronsim>} in
the schedule's IANA time zone.  Across a daylight-saving change it does as
Debian's cron does:

  - An expression with a fixed minute and hour (C{30 2 * * *}, C{0 9-17 * *
    1-5}: neither field starts with C{*}) runs on the wall clock.  A time in
    the spring-forward gap, which does not exist that day, fires at the
    first instant after the gap: C{30 2 * * *} in Europe/Paris fires at
    03:00 CEST on 2026-03-29 (01:00 UTC), and C{0,30 2 * * *} fires once
    there, not twice.  A time in the fall-back overlap, which exists twice,
    fires once, at its first occurrence (still summer time): C{30 2 * * *}
    fires at 02:30 CEST on 2026-10-25 (00:30 UTC), not again an hour later.
  - An expression whose minute or hour starts with C{*} (C{*/15 * * * *},
    C{0 * * * *}) runs on real time: the gap has no times to fire, and the
    overlap's times fire at each of their instants (C{0 * * * *} fires at
    02:00 CEST and again at 02:00 CET on 2026-10-25).

Cron fire times are whole seconds.  B{Intervals} are anchored to the last
fire: the next is C{last + every}, and a schedule that never fired fires
first C{every} seconds after it is added (or the scheduler starts).  Their
fire times are rounded to the millisecond (the resolution of a firing's
idempotency key), so that adding C{every} again and again does not drift.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, Literal
from zoneinfo import ZoneInfo

from attrs import define, frozen
from cronsim import CronSim, CronSimError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger

from quicx.protocol import admin
from quicx.protocol.admin import MAX_INTERVAL, Missed
from quicx.protocol.codec import MAX_QUEUE_NAME, QUEUE_NAME

MAX_CATCH_UP = 0xFFFF
"""The most missed firings a schedule fires at start-up (C{catch_up} is a u16 on the wire)."""

Source = Literal["config", "runtime"]


@frozen(kw_only=True)
class ScheduleSpec:
    """
    One schedule: submit a task of C{task_type} with C{payload} into
    C{queue} on C{cron} (in C{timezone}) or C{every} seconds.

    @ivar cron: a 5-field cron expression; C{""} for an interval schedule.
    @ivar every: seconds between firings; C{0} for a cron schedule.
    @ivar timezone: the IANA zone C{cron} is read in.
    @ivar queue: C{None} for the default queue.
    @ivar priority: C{None} for the queue's.
    @ivar missed: what to do, at start-up, about the firings missed while
        the daemon was down (see L{missed_firings}).
    @ivar catch_up: with L{Missed.ALL}, the most of them fired.
    @ivar source: C{config} for a C{[schedule NAME]} section, C{runtime} for
        one added with SCHEDULE.
    """

    name: str
    cron: str = ""
    every: float = 0.0
    timezone: str = "UTC"
    task_type: bytes
    payload: bytes = b""
    queue: str | None = None
    priority: int | None = None
    missed: Missed = Missed.ONCE
    catch_up: int = 100
    source: Source = "runtime"

    @classmethod
    def from_message(cls, message: admin.Schedule) -> ScheduleSpec:
        """The run-time schedule a decoded SCHEDULE asks for (not yet L{check}ed)."""
        return cls(
            name=message.name,
            cron=message.cron,
            every=float(message.interval),
            timezone=message.timezone,
            task_type=message.task_type,
            payload=message.payload,
            queue=message.queue,
            priority=message.priority,
            missed=message.missed,
            catch_up=message.catch_up,
        )


# -- checks --------------------------------------------------------------------------------


def check_name(name: str) -> None:
    """@raise ValueError: C{name} does not follow the rules of queue names."""
    if not QUEUE_NAME.match(name.encode("utf-8")):
        raise ValueError(
            f"a schedule name is 1 to {MAX_QUEUE_NAME} letters, digits or '_.:-', not {name!r}"
        )


def check_cron(expression: str) -> None:
    """@raise ValueError: C{expression} is not a 5-field cron expression; the message says why."""
    fields = len(expression.split())
    if fields != 5:
        raise ValueError(f"{expression!r} is not a cron expression: {fields} fields, not 5")
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as e:
        raise ValueError(f"{expression!r} is not a cron expression: {str(e).lower()}") from None


def check_timezone(name: str) -> None:
    """@raise ValueError: C{name} is no IANA time zone this host knows."""
    try:
        ZoneInfo(name)
    except (KeyError, ValueError, OSError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name, like Europe/Paris)") from None


def check(spec: ScheduleSpec) -> None:
    """
    Check what the codec and the configuration's syntax do not.

    @raise ValueError: with a one-line reason: a bad name, cron expression,
        interval, time zone or catch-up cap, or both or neither of C{cron}
        and C{every}.
    """
    check_name(spec.name)
    if spec.cron and spec.every:
        raise ValueError("a schedule has a cron expression or an interval (every), not both")
    if not (spec.cron or spec.every):
        raise ValueError("a schedule needs a cron expression or an interval (every)")
    if spec.cron:
        check_cron(spec.cron)
    elif not 1 <= spec.every <= MAX_INTERVAL:
        raise ValueError(f"an interval is 1 to {MAX_INTERVAL} seconds, not {spec.every:g}")
    check_timezone(spec.timezone)
    if not 0 <= spec.catch_up <= MAX_CATCH_UP:
        raise ValueError(f"catch_up is 0 to {MAX_CATCH_UP}, not {spec.catch_up}")


# -- fire times ----------------------------------------------------------------------------


def _cron_after(spec: ScheduleSpec, after: float) -> Iterator[float]:
    """The cron's fire times strictly after C{after}, in order."""
    start = datetime.fromtimestamp(after, ZoneInfo(spec.timezone))
    for moment in CronSim(spec.cron, start):
        when = moment.timestamp()
        # From a wall-clock time in the fall-back overlap's second hour,
        # cronsim gives the first hour's times too: those are past.
        if when > after:
            yield when


def _cron_before(spec: ScheduleSpec, until: float) -> Iterator[float]:
    """
    The cron's fire times at or before C{until}, latest first.  From the
    fall-back overlap's second hour it may miss the times of the first
    (cronsim goes back on the wall clock); it never gives a time that
    L{_cron_after} would not.
    """
    start = datetime.fromtimestamp(math.floor(until) + 1, ZoneInfo(spec.timezone))
    for moment in CronSim(spec.cron, start, reverse=True):
        yield moment.timestamp()


def _interval(spec: ScheduleSpec, anchor: float, count: int) -> float:
    """The C{count}th fire time after C{anchor}, to the millisecond."""
    return round(anchor + count * spec.every, 3)


def _intervals(spec: ScheduleSpec, anchor: float, until: float) -> int:
    """How many of C{anchor + i * every} (i >= 1) are at or before C{until}."""
    count = max(0, math.floor((until - anchor) / spec.every))
    # The division may round either way: settle on the exact count.
    while _interval(spec, anchor, count + 1) <= until:
        count += 1
    while count and _interval(spec, anchor, count) > until:
        count -= 1
    return count


def next_fire(spec: ScheduleSpec, after: float) -> float:
    """
    The first fire time strictly after C{after} (Unix seconds): the cron's
    next time in the schedule's zone, or C{after + every}.
    """
    if spec.every:
        return _interval(spec, after, 1)
    # Every expression check_cron accepts has a time within cronsim's
    # 50 years: its day fields can only name days that some month has.
    return next(_cron_after(spec, after))


def upcoming(spec: ScheduleSpec, last_fire: float | None, now: float) -> float:
    """
    When a schedule that last fired at C{last_fire} (C{None}: never) fires
    next: its first time after C{now} and after C{last_fire} (a clock set
    back never fires a time twice).  An interval stays on C{last_fire +
    i * every}.
    """
    if last_fire is None:
        return next_fire(spec, now)
    if spec.every:
        return _interval(spec, last_fire, _intervals(spec, last_fire, max(now, last_fire)) + 1)
    return next_fire(spec, max(now, last_fire))


def missed_firings(spec: ScheduleSpec, last_fire: float | None, now: float) -> list[float]:
    """
    The fire times after C{last_fire} and at or before C{now} to fire at
    once, oldest first, as C{spec.missed} says: L{Missed.SKIP}, none;
    L{Missed.ONCE}, the latest; L{Missed.ALL}, the latest C{catch_up} (older
    ones are dropped).  A schedule that never fired has missed none.

    The work is in proportion to what is returned, however many were missed.
    """
    if last_fire is None or spec.missed is Missed.SKIP:
        return []
    count = 1 if spec.missed is Missed.ONCE else spec.catch_up
    if not count:
        return []
    if spec.every:
        total = _intervals(spec, last_fire, now)
        first = max(1, total - count + 1)
        return [_interval(spec, last_fire, i) for i in range(first, total + 1)]
    latest: list[float] = []
    for when in _cron_before(spec, now):
        if when <= last_fire or len(latest) == count:
            break
        latest.append(when)
    # Going back may have missed some (see _cron_before): gather them going
    # forward from the oldest found, or from the last fire.
    start = latest[-1] - 1 if len(latest) == count else last_fire
    window: deque[float] = deque(maxlen=count)
    for when in _cron_after(spec, start):
        if when > now:
            break
        window.append(when)
    return list(window)


# -- the scheduler -------------------------------------------------------------------------


class TooManySchedules(Exception):
    """Adding the schedule would pass C{max_schedules}."""


class UnknownSchedule(LookupError):
    """No schedule has that name."""

    def __str__(self) -> str:
        return f"no schedule named {self.args[0]!r}"


@define
class _Entry:
    """
    A schedule and its state.

    @ivar last_fire: its latest fire time, C{None} if it never fired.
    @ivar fired: how many times it fired since the daemon started.
    @ivar next_fire: when it fires next, C{None} while the scheduler is stopped.
    """

    spec: ScheduleSpec
    last_fire: float | None
    fired: int = 0
    next_fire: float | None = None


def _stamp(when: float) -> str:
    return datetime.fromtimestamp(when, UTC).isoformat(timespec="seconds")


class Scheduler:
    """
    The daemon's schedules, fired on its clock: C{fire(spec, fire_time)} once
    per fire time, in the order of the times (schedules due at the same time
    in the order of their names), with C{last_fire} and C{fired} updated
    first.  One delayed call is armed at a time, for the earliest next fire.

    A firing missed while the daemon was down is the schedule's policy's
    business (L{missed_firings}), applied by L{start}; so are those a late
    timer overran (the reactor was blocked, the host asleep, the clock set
    forward): the time it was armed for fires, and the ones after it up to
    now are missed.  C{fire} must not add or remove schedules; an exception
    it raises is logged and the other firings go on.

    @ivar max_schedules: the most schedules it holds.
    @ivar running: between L{start} and L{stop}.
    """

    log = Logger()

    def __init__(
        self,
        reactor: IReactorTime,
        fire: Callable[[ScheduleSpec, float], None],
        max_schedules: int,
    ) -> None:
        self._reactor = reactor
        self._fire = fire
        self.max_schedules = max_schedules
        self.running = False
        self._entries: dict[str, _Entry] = {}
        self._heap: list[tuple[float, str]] = []
        self._call: IDelayedCall | None = None
        self._armed_for = 0.0

    def add(self, spec: ScheduleSpec, last_fire: float | None = None) -> None:
        """
        Add C{spec}, or replace the schedule of its name, which then keeps
        its last fire time (unless C{last_fire} is given) and its count.
        Missed firings are only fired by L{start}: one added while running
        fires next at its first time after now.

        @raise ValueError: L{check} refuses C{spec}.
        @raise TooManySchedules: there are C{max_schedules} already.
        """
        check(spec)
        old = self._entries.get(spec.name)
        if old is None and len(self._entries) >= self.max_schedules:
            raise TooManySchedules(
                f"{len(self._entries)} schedules already (max_schedules = {self.max_schedules})"
            )
        entry = _Entry(spec, last_fire)
        if old is not None:
            self._unqueue(old)
            entry.fired = old.fired
            if last_fire is None:
                entry.last_fire = old.last_fire
        self._entries[spec.name] = entry
        if self.running:
            self._queue(entry, self._reactor.seconds())
            self._arm()

    def remove(self, name: str) -> ScheduleSpec:
        """
        Remove the schedule C{name} and return it.

        @raise UnknownSchedule: there is none.
        """
        entry = self._entry(name)
        del self._entries[name]
        self._unqueue(entry)
        self._arm()
        return entry.spec

    def get(self, name: str) -> ScheduleSpec:
        """@raise UnknownSchedule: there is no schedule C{name}."""
        return self._entry(name).spec

    def info(self, name: str) -> dict[str, Any]:
        """
        The schedule C{name} as SCHEDULES shows it.

        @raise UnknownSchedule: there is none.
        """
        entry = self._entry(name)
        spec = entry.spec
        timing: dict[str, Any] = {"cron": spec.cron} if spec.cron else {"every": spec.every}
        return {
            "name": spec.name,
            **timing,
            "timezone": spec.timezone,
            "type": spec.task_type.decode("utf-8", "replace"),
            "queue": spec.queue,
            "priority": spec.priority,
            "missed": spec.missed.name.lower(),
            "catch_up": spec.catch_up,
            "source": spec.source,
            "next_fire": entry.next_fire,
            "last_fire": entry.last_fire,
            "fired": entry.fired,
        }

    def describe(self) -> list[dict[str, Any]]:
        """Every schedule as SCHEDULES shows it, sorted by name."""
        return [self.info(name) for name in sorted(self._entries)]

    def start(self) -> None:
        """Fire each schedule's missed firings at once, as its policy says, then arm."""
        now = self._reactor.seconds()
        self.running = True
        due = [
            (when, name)
            for name, entry in self._entries.items()
            if entry.last_fire is not None
            for when in self._missed(entry, entry.last_fire, now)
        ]
        self._run(sorted(due))
        self._heap = []
        for entry in self._entries.values():
            self._queue(entry, now)
        self._arm()

    def stop(self) -> None:
        """Disarm; the schedules are kept, and L{start} fires what was missed meanwhile."""
        self.running = False
        self._heap = []
        for entry in self._entries.values():
            entry.next_fire = None
        self._arm()

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownSchedule(name) from None

    def _missed(self, entry: _Entry, since: float, now: float) -> list[float]:
        """L{missed_firings} after C{since}, logged when there were any."""
        spec = entry.spec
        if next_fire(spec, since) > now:
            return []
        times = missed_firings(spec, since, now)
        self.log.info(
            "schedule {name} missed its firings after {since} (missed = {policy}): firing {count}",
            log_id="schedule.missed",
            name=spec.name,
            since=_stamp(since),
            policy=spec.missed.name.lower(),
            count=len(times),
        )
        return times

    def _run(self, due: list[tuple[float, str]]) -> None:
        for when, name in due:
            entry = self._entries[name]
            entry.last_fire = when
            entry.fired += 1
            try:
                self._fire(entry.spec, when)
            except Exception:
                self.log.failure(
                    "schedule {name}: firing at {when} failed",
                    log_id="schedule.failed",
                    name=name,
                    when=_stamp(when),
                )

    def _queue(self, entry: _Entry, now: float) -> None:
        entry.next_fire = upcoming(entry.spec, entry.last_fire, now)
        heapq.heappush(self._heap, (entry.next_fire, entry.spec.name))

    def _unqueue(self, entry: _Entry) -> None:
        if entry.next_fire is not None:
            self._heap.remove((entry.next_fire, entry.spec.name))
            heapq.heapify(self._heap)

    def _arm(self) -> None:
        """Arm the one delayed call for the earliest next fire, or none."""
        if not (self.running and self._heap):
            if self._call is not None:
                self._call.cancel()
                self._call = None
            return
        when = self._heap[0][0]
        delay = max(0.0, when - self._reactor.seconds())
        if self._call is None:
            self._call = self._reactor.callLater(delay, self._wake)
        elif when != self._armed_for:
            self._call.reset(delay)
        self._armed_for = when

    def _wake(self) -> None:
        self._call = None
        # The call ran for _armed_for: what is due then is due, whatever
        # the float arithmetic of the clock says.
        now = max(self._reactor.seconds(), self._armed_for)
        due: list[tuple[float, str]] = []
        while self._heap and self._heap[0][0] <= now:
            when, name = heapq.heappop(self._heap)
            entry = self._entries[name]
            due.append((when, name))
            due += [(late, name) for late in self._missed(entry, when, now)]
        due.sort()
        self._run(due)
        for name in dict.fromkeys(name for _, name in due):
            self._queue(self._entries[name], now)
        self._arm()
