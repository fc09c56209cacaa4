"""
A handler call the runner moved to the reactor and that runs for long is
logged, once, with the advice that fixes a handler waiting for the reactor.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import cast

import pytest
from twisted.internet.task import Clock
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher

from quicx.clients.stuck import StuckWatch
from quicx.clients.worker import Worker
from quicx.protocol import wire


@pytest.fixture
def errors() -> Iterator[list[str]]:
    """The text of every error logged meanwhile (from any thread)."""
    seen: list[str] = []

    def observe(event: dict) -> None:
        if event.get("log_level") is LogLevel.error:
            seen.append(formatEvent(event))

    globalLogPublisher.addObserver(cast(ILogObserver, observe))
    yield seen
    globalLogPublisher.removeObserver(cast(ILogObserver, observe))


def test_a_call_past_the_limit_is_logged_once(errors: list[str]) -> None:
    clock = Clock()
    watch = StuckWatch(after=10, clock=clock.seconds)
    watch.begin(b"resize")
    clock.advance(9.9)
    assert not watch.check()
    clock.advance(0.1)
    assert watch.check() and not watch.check()
    watch.end()
    assert not watch.check()
    watch.begin(b"resize")  # a new call: logged again when it is stuck in turn
    clock.advance(10)
    assert watch.check()
    assert len(errors) == 2 and "a handler for resize has run on the reactor" in errors[0]
    assert "register it with thread=True" in errors[0]


def test_a_handler_moved_to_the_reactor_that_blocks_is_logged_while_it_runs(
    errors: list[str],
) -> None:
    worker = Worker()
    worker.register("t", lambda payload: time.sleep(1.0))
    placement = worker._handlers[b"t"].placement
    assert placement is not None
    placement.inline = True  # as after 16 short calls in a thread
    worker.stuck.after = 0.1
    worker.stuck.start()
    try:
        assert worker.run(wire.Task(1, b"t", b"x")) is None
    finally:
        worker.stuck.stop()
    assert len(errors) == 1 and "a handler for t has run on the reactor for 0.1 s" in errors[0]


def test_a_handler_kept_on_the_reactor_by_its_user_is_not_watched(errors: list[str]) -> None:
    worker = Worker()
    worker.register("t", lambda payload: time.sleep(0.3), thread=False)
    worker.stuck.after = 0.1
    worker.stuck.start()
    try:
        worker.run(wire.Task(1, b"t", b"x"))
    finally:
        worker.stuck.stop()
    assert errors == []
