"""
What the clients send for version 2's delays, retries, dead letters and
schedules, and how they read times and backoffs: the shared, sans-I/O part
(L{quicx.clients.requests}, L{quicx.clients.timing}, the outcome book).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from quicx.clients import requests, timing
from quicx.clients.outcomes import OutcomeBook, RetryNotice
from quicx.clients.requests import Options
from quicx.protocol import admin, codec, outcomes, taskflow
from quicx.protocol.errors import NeedsVersion2, TaskFailed
from quicx.protocol.taskflow import Backoff, BackoffKind


def submitted(options: Options) -> taskflow.SubmitOptions:
    """The options of the SUBMIT they make, as the daemon decodes it."""
    frame = requests.encode_submit(2, "t", b"x", options)
    return taskflow.decode_submit(frame[codec.HEADER.size :]).options


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("2026-12-01T09:00:00Z", 1796115600.0),
        ("2026-12-01 10:00:00+01:00", 1796115600.0),
        ("2026-12-01T09:00:00.250+00:00", 1796115600.25),
        ("1796115600", 1796115600.0),
        (" 1796115600.5 ", 1796115600.5),
    ],
)
def test_parse_time(text: str, seconds: float) -> None:
    assert timing.parse_time(text) == seconds


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2026-12-01T09:00:00", "has no time zone"),
        ("tomorrow", "is not a time"),
        ("-5", "is not a time"),
        ("", "is not a time"),
    ],
)
def test_parse_time_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        timing.parse_time(text)


def test_options_carry_delay_retries_and_backoff() -> None:
    backoff = Backoff(BackoffKind.EXPONENTIAL, 1000, 300_000, 20)
    sent = submitted(Options(delay=1.5, retries=4, backoff="exponential:1s:5m:20%"))
    assert (sent.delay_ms, sent.run_at_ms, sent.retries, sent.backoff) == (1500, None, 4, backoff)
    fixed = submitted(Options(queue="mail", backoff=Backoff(BackoffKind.FIXED, 10_000, 10_000)))
    assert (fixed.queue, fixed.backoff) == ("mail", Backoff(BackoffKind.FIXED, 10_000, 10_000, 0))
    assert (
        submitted(Options(retries=0)).retries == 0
    )  # 0 is an option: no retries, whatever the queue's


def test_run_at_is_a_datetime_with_its_zone_or_unix_seconds() -> None:
    paris = timezone(timedelta(hours=1))
    moment = datetime(2026, 12, 1, 10, 0, tzinfo=paris)
    assert submitted(Options(run_at=moment)).run_at_ms == 1796115600_000
    assert submitted(Options(run_at=1796115600.123)).run_at_ms == 1796115600_123
    assert submitted(Options(run_at=datetime(2026, 12, 1, 9, tzinfo=UTC))).delay_ms is None
    with pytest.raises(ValueError, match="no time zone"):
        Options(run_at=datetime(2026, 12, 1, 9)).encode()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (lambda: Options(delay=1, run_at=2), "not both"),
        (lambda: Options(delay=-1), "a delay is 0 to"),
        (lambda: Options(delay=float("inf")), "not a number of seconds"),
        (lambda: Options(retries=70_000), "retries are 0 to 65535"),
        (lambda: Options(backoff="linear:1s"), "is not a backoff"),
        (lambda: Options(backoff="exponential:5m:1s"), "longer than the cap"),
    ],
)
def test_bad_options_are_value_errors(options, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        options().encode()


def test_every_new_option_needs_version_2() -> None:
    for options in (
        Options(delay=1),
        Options(run_at=1.0),
        Options(retries=0),
        Options(backoff="fixed:1s"),
        Options(keep_result=True),
        Options(result_ttl="1h"),
        Options(progress=True),
        Options(group=7),
    ):
        assert options.any
        with pytest.raises(NeedsVersion2, match="groups, debounce and expiry need protocol"):
            requests.encode_submit(1, "t", b"x", options)
    assert not Options().any


def test_replay_names_a_task_or_a_queue() -> None:
    assert admin.decode_replay(admin.encode_replay(7)[6:]) == admin.Replay(7)
    assert admin.decode_replay(admin.encode_replay(0, "mail")[6:]) == admin.Replay(0, "mail")
    with pytest.raises(ValueError, match="not both"):
        admin.encode_replay(7, "mail")


def test_schedule_fields() -> None:
    frame = requests.encode_schedule(
        "nightly",
        "report",
        b"{}",
        cron="0 3 * * *",
        timezone="Europe/Paris",
        queue="reports",
        priority=3,
        missed="all",
        catch_up=5,
    )
    assert admin.decode_schedule(frame[6:]) == admin.Schedule(
        "nightly", b"report", b"{}", "0 3 * * *", 0, "Europe/Paris", "reports", 3,
        admin.Missed.ALL, 5,
    )  # fmt: skip
    every = admin.decode_schedule(requests.encode_schedule("tick", "ping", every=600)[6:])
    assert (every.interval, every.cron, every.timezone, every.missed) == (
        600,
        "",
        "UTC",
        admin.Missed.ONCE,
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "not both"),
        ({"cron": "* * * * *", "every": 60}, "not both"),
        ({"every": 1.5}, "whole seconds"),
        ({"every": 0}, "whole seconds"),
        ({"every": float("inf")}, "whole seconds"),
        ({"every": 60, "missed": "never"}, "skip, once or all"),
        ({"every": 60, "priority": 256}, "priority is 0 to 255"),
    ],
)
def test_bad_schedules_are_value_errors(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        requests.encode_schedule("s", "t", **fields)


def notice(task_id: int, attempt: int) -> RetryNotice:
    return RetryNotice.of(outcomes.Retrying(task_id, attempt, 1_800_000_000_500, f"try {attempt}"))


def test_the_book_keeps_retry_notices_of_pending_tasks_only() -> None:
    book = OutcomeBook(keep=1)
    book.expect(1)
    book.expect(2)
    book.notice(notice(1, 1))
    book.notice(notice(1, 2))
    book.notice(notice(3, 1))  # not submitted here: dropped
    assert notice(1, 1) == RetryNotice(1, 1, 1_800_000_000.5, "try 1")
    assert book.notices(1) == [notice(1, 1), notice(1, 2)]
    assert book.notices(1) == [] and book.notices(3) == []
    book.notice(notice(2, 1))
    book.arrived(2, TaskFailed(2, "no"))
    book.notice(notice(2, 2))  # after the outcome: dropped
    book.expect(4)
    book.notice(notice(4, 1))
    book.arrived(4, None)  # keep=1: task 2's outcome is forgotten, and its notices
    assert book.notices(2) == []
    book.expect(5)
    book.notice(notice(5, 1))
    book.arrived(5, None)
    assert book.take(5) is None and book.notices(5) == []  # taken with the outcome
