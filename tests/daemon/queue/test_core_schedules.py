"""
Schedules firing into the queue core, on a L{task.Clock}: each firing is a
task with the key C{schedule:NAME:FIRE_MS}, journaled with its fire time; a
restart never fires a time twice, and the admin's schedules are journaled.
"""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from quicx.daemon.queue.core import QueueService
from quicx.daemon.queue.model import Refused
from quicx.daemon.queue.policy import QueueLimits
from quicx.daemon.queue.schedule_book import ScheduleBook
from quicx.daemon.queue.schedules import ScheduleSpec
from quicx.protocol import admin, taskflow
from quicx.protocol.admin import Missed
from quicx.protocol.codec import ErrorCode
from tests.fakes import FakeJournal, fire_to, make_queue, v2_worker_of

START = 1_800_000_000.0  # a whole minute
EVERY_MINUTE = ScheduleSpec(
    name="tick", cron="* * * * *", task_type=b"tick", payload=b"{}", queue="cron", source="config"
)


def setup(
    clock: Clock, declared: dict[str, ScheduleSpec], journal: FakeJournal | None = None
) -> tuple[QueueService, ScheduleBook]:
    queue = make_queue(clock, journal)
    book = ScheduleBook(queue, clock, declared, max_schedules=3)
    queue.plug(schedules=book)
    return queue, book


def clock_at(when: float) -> Clock:
    clock = Clock()
    clock.advance(when)
    return clock


def test_a_schedule_fires_tasks_with_its_key_and_journals_each_fire() -> None:
    clock = clock_at(START + 1)
    journal = FakeJournal(waits=False)
    queue, book = setup(clock, {"tick": EVERY_MINUTE}, journal)
    book.restore({}, {})
    book.startService()
    worker = v2_worker_of(queue, credits=10, queues=("cron",))
    worker.take()
    clock.advance(59)
    clock.advance(60)
    got = [m for m in worker.take() if isinstance(m, taskflow.Task)]
    assert [(t.task_type, t.payload, t.key) for t in got] == [
        (b"tick", b"{}", b"schedule:tick:%d" % ((START + 60) * 1000)),
        (b"tick", b"{}", b"schedule:tick:%d" % ((START + 120) * 1000)),
    ]
    assert journal.fired == [("tick", START + 60), ("tick", START + 120)]
    assert book.last_fires() == [("tick", START + 120)]


def test_a_restart_fires_a_missed_time_once_and_never_one_already_fired() -> None:
    clock = clock_at(START + 150.5)
    queue, book = setup(clock, {"tick": EVERY_MINUTE})
    # The journal said: last fired at +60; +120 was missed while down (policy once).
    book.restore({"tick": START + 60}, {})
    book.startService()
    (task,) = queue.queues["cron"].tasks()
    assert queue.pool.read(task.block) == b"{}"
    assert task.key == b"schedule:tick:%d" % ((START + 120) * 1000)
    # The same firing again (a journal that lost its FIRED record): the key answers.
    fire_to(queue, "tick", START + 120, EVERY_MINUTE)
    assert queue.queues["cron"].depth == 1


def test_missed_all_fires_each_missed_time_oldest_first() -> None:
    clock = clock_at(START + 200)
    spec = ScheduleSpec(
        name="tick", cron="* * * * *", task_type=b"t", queue="cron", missed=Missed.ALL
    )
    queue, book = setup(clock, {"tick": spec})
    book.restore({"tick": START}, {})
    book.startService()
    keys = [t.key for t in queue.queues["cron"].tasks()]
    assert keys == [b"schedule:tick:%d" % ((START + n) * 1000) for n in (60, 120, 180)]


def test_admin_schedules_are_journaled_and_come_back() -> None:
    clock = clock_at(START)
    journal = FakeJournal(waits=False)
    _queue, book = setup(clock, {"tick": EVERY_MINUTE}, journal)
    book.restore({}, {})
    book.startService()
    message = admin.Schedule("hourly", b"report", b"x", cron="0 * * * *", queue="r")
    payload = admin.encode_schedule(message)[6:]
    info = book.add(message, payload)
    assert (info["name"], info["cron"], info["source"]) == ("hourly", "0 * * * *", "runtime")
    assert info["next_fire"] == START + 3600
    assert journal.schedules == [("hourly", payload)]
    assert book.definitions() == [("hourly", payload)]
    # A restart: the journal's definitions come back as run-time schedules.
    _again_queue, again = setup(clock_at(START), {"tick": EVERY_MINUTE})
    again.restore({}, dict(book.definitions()))
    assert [s["name"] for s in again.describe()] == ["hourly", "tick"]
    assert book.remove("hourly") == {"name": "hourly", "removed": True}
    assert journal.schedules[-1] == ("hourly", None)


@pytest.mark.parametrize(
    ("message", "code"),
    [
        (admin.Schedule("tick", b"t", cron="* * * * *"), ErrorCode.CONFLICT),
        (admin.Schedule("bad", b"t", cron="61 * * * *"), ErrorCode.INVALID_MESSAGE),
        (admin.Schedule("bad", b"t", cron="* * * * *", timezone="Mars/Base"), 0x02),
    ],
)
def test_a_schedule_the_book_cannot_take_is_refused(message: admin.Schedule, code: int) -> None:
    _queue, book = setup(clock_at(START), {"tick": EVERY_MINUTE})
    book.restore({}, {})
    with pytest.raises(Refused) as refused:
        book.add(message, b"")
    assert refused.value.code == code


def test_max_schedules_and_unknown_or_declared_removals() -> None:
    _queue, book = setup(clock_at(START), {"tick": EVERY_MINUTE})
    book.restore({}, {})
    for name in ("a", "b"):
        book.add(admin.Schedule(name, b"t", interval=60), b"")
    with pytest.raises(Refused) as refused:
        book.add(admin.Schedule("c", b"t", interval=60), b"")
    assert refused.value.code == ErrorCode.QUEUE_FULL
    with pytest.raises(Refused) as refused:
        book.remove("nope")
    assert refused.value.code == ErrorCode.NOT_FOUND
    with pytest.raises(Refused) as refused:
        book.remove("tick")
    assert refused.value.code == ErrorCode.CONFLICT


def test_a_firing_the_queue_refuses_is_counted_and_logged_not_silent() -> None:
    clock = clock_at(START + 1)
    queue = make_queue(clock, limits=QueueLimits(max_queues=1))  # only the default queue
    book = ScheduleBook(queue, clock, {"tick": EVERY_MINUTE}, 3)
    queue.plug(schedules=book)
    book.restore({}, {})
    book.startService()
    clock.advance(60)
    assert queue.counters().rejected == 1
    assert book.last_fires() == [("tick", START + 60)]
