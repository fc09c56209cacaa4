"""
How the worker runner adapts to its handlers: where a plain function runs
(L{Placement}) and the credits a connection chooses (L{AutoCredits}), first
with made-up durations, then on a worker connection to a fake daemon.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactor
from twisted.python.threadpool import ThreadPool
from twisted.test import iosim

from quicx.clients.adaptive import (
    AUTO_MAX,
    MAX_PROBATION,
    PROBATION,
    SHORT,
    TOO_LONG,
    AutoCredits,
    Placement,
)
from quicx.clients.worker import Worker, WorkerProtocol
from quicx.daemon.config import Limits
from quicx.daemon.server import QuicxServerFactory
from quicx.protocol import outcomes, taskflow, wire
from quicx.protocol.wire import ErrorCode
from tests.clients.test_worker_leases import FakeDaemon
from tests.fakes import make_queue, producer_of, submit_to

NOOP = 5e-6


def short_calls(placement: Placement, count: int, inline: bool = False) -> None:
    for _ in range(count):
        placement.ran(SHORT / 2, inline)


# -- Placement -------------------------------------------------------------------------


def test_a_handler_moves_to_the_reactor_after_a_probation_of_short_calls() -> None:
    placement = Placement()
    short_calls(placement, PROBATION - 1)
    assert not placement.inline
    placement.ran(SHORT, False)  # as long as "short" goes
    assert placement.inline


def test_one_long_call_in_a_thread_starts_the_probation_again() -> None:
    placement = Placement()
    short_calls(placement, PROBATION - 1)
    placement.ran(SHORT * 1.01, False)
    short_calls(placement, PROBATION - 1)
    assert not placement.inline
    short_calls(placement, 1)
    assert placement.inline


def test_a_call_too_long_for_the_reactor_sends_it_back_with_a_doubled_probation() -> None:
    placement = Placement()
    short_calls(placement, PROBATION)
    for _ in range(100):
        placement.ran(NOOP, True)
    placement.ran(TOO_LONG / 2, True)  # slow, but once: the running mean stays short
    assert placement.inline
    placement.ran(TOO_LONG * 1.01, True)
    assert (placement.inline, placement.demotions) == (False, 1)
    short_calls(placement, 2 * PROBATION - 1)
    assert not placement.inline
    short_calls(placement, 1)
    assert placement.inline


def test_calls_that_grow_slower_on_the_reactor_send_it_back() -> None:
    placement = Placement()
    short_calls(placement, PROBATION)
    calls = 0
    while placement.inline:
        placement.ran(SHORT * 1.5, True)  # each one under TOO_LONG
        calls += 1
    assert 1 < calls < 20 and placement.demotions == 1


def test_the_probation_stops_doubling_at_its_maximum() -> None:
    placement = Placement()
    for _ in range(20):
        short_calls(placement, MAX_PROBATION)
        assert placement.inline
        placement.ran(TOO_LONG * 2, True)
    short_calls(placement, MAX_PROBATION - 1)
    assert not placement.inline
    short_calls(placement, 1)
    assert placement.inline


# -- AutoCredits -----------------------------------------------------------------------


def grow(credits: AutoCredits, seconds: float, lease: float | None = None) -> list[int]:
    """Full reads of tasks that take C{seconds} until the credits stop changing."""
    asked: list[Any] = []
    while True:
        for _ in range(credits.credits):
            credits.ran(seconds, True)
        wanted = credits.after_read(credits.credits, lease)
        if wanted is None:
            return asked
        asked.append(wanted)


def test_credits_double_while_reads_fill_them_up_to_the_maximum_for_no_op_handlers() -> None:
    credits = AutoCredits()
    assert credits.credits == 1
    assert grow(credits, NOOP) == [2, 4, 8, 16, 32, 64, 128, AUTO_MAX]


def test_credits_do_not_grow_while_the_daemon_sends_fewer_than_they_allow() -> None:
    credits = AutoCredits()
    grow(credits, NOOP)
    credits.credits = 8
    for received in (1, 7):
        assert credits.after_read(received, None) is None
    assert credits.after_read(8, None) == 16


def test_credits_stop_at_two_milliseconds_of_work() -> None:
    credits = AutoCredits()
    assert grow(credits, 100e-6) == [2, 4, 8, 16, 20]


def test_credits_fall_at_once_when_handlers_get_slower() -> None:
    credits = AutoCredits()
    grow(credits, NOOP)
    for _ in range(50):
        credits.ran(1e-3, True)
    assert credits.after_read(1, None) == 2


def test_a_wavering_pace_sends_no_ready_on_every_read() -> None:
    credits = AutoCredits()
    grow(credits, 100e-6)
    assert credits.credits == 20
    for seconds in (95e-6, 105e-6, 90e-6, 110e-6) * 10:
        credits.ran(seconds, True)
        assert credits.after_read(20, None) is None


def test_a_task_in_a_thread_holds_the_only_credit() -> None:
    credits = AutoCredits()
    grow(credits, NOOP)
    credits.ran(0.0, False)
    assert credits.after_read(1, None) == 1
    assert grow(credits, NOOP) == [2, 4, 8, 16, 32, 64, 128, AUTO_MAX]


def test_credits_hold_no_more_than_half_a_lease_of_work() -> None:
    credits = AutoCredits()
    assert grow(credits, 100e-6, lease=0.002) == [2, 4, 8, 10]


# -- on a worker connection --------------------------------------------------------------


def no_time() -> float:
    """A clock that stands still: every call takes no time, however loaded the machine."""
    return 0.0


def test_a_connection_asks_for_more_credits_as_its_short_handler_keeps_up() -> None:
    worker = Worker()
    worker.register("t", lambda payload: None, thread=False)
    worker.timer = no_time
    daemon = FakeDaemon(worker)
    daemon.task(1, token=71)
    assert daemon.sent() == [taskflow.Ready(2, ()), outcomes.Ack(1, 71)]
    daemon.task(2, token=72)  # one of the two credits: no change
    assert daemon.sent() == [outcomes.Ack(2, 72)]
    context = taskflow.task_context(None, None, 73, 10_000)
    two = b"".join(
        taskflow.encode_task(task_id, b"t", b"x", b"\x07default", 0, 1, 0, context)
        for task_id in (3, 4)
    )
    daemon.feed(two)
    assert daemon.sent() == [taskflow.Ready(4, ()), outcomes.Ack(3, 73), outcomes.Ack(4, 73)]


def test_credits_given_by_the_user_never_change() -> None:
    worker = Worker(credits=1)
    worker.register("t", lambda payload: None, thread=False)
    daemon = FakeDaemon(worker)
    for task_id in (1, 2, 3):
        daemon.task(task_id, token=70 + task_id)
    assert daemon.sent() == [outcomes.Ack(task_id, 70 + task_id) for task_id in (1, 2, 3)]


def test_a_version_1_connection_asks_for_one_credit_and_falls_back_when_refused() -> None:
    worker = Worker(protocol=1)
    worker.register("t", lambda payload: None, thread=False)
    daemon = FakeDaemon(worker)  # its READY said credits 1, in the extension's form
    assert daemon.transport.value() == b""
    # The reference daemon refuses any READY payload: the connection asks
    # again the page's way, and never for credits again.
    daemon.feed(wire.encode_error(ErrorCode.INVALID_MESSAGE, "READY takes no payload"))
    assert daemon.transport.value() == wire.encode_ready()
    daemon.transport.clear()
    for task_id in (1, 2):
        daemon.feed(wire.encode_task(task_id, b"t", b"x"))
    assert daemon.sent() == [wire.Done(1), wire.Done(2)]


def test_a_version_1_connection_to_a_quicx_daemon_grows_its_credits() -> None:
    worker = Worker(protocol=1)
    worker.register("t", lambda payload: None, thread=False)
    worker.timer = no_time
    daemon = FakeDaemon(worker)
    daemon.feed(wire.encode_task(1, b"t", b"x"))
    assert daemon.sent() == [wire.Ready(2), wire.Done(1)]


@pytest.fixture
def pool() -> Iterator[ThreadPool]:
    """One thread for a worker's handlers."""
    threads = ThreadPool(minthreads=0, maxthreads=1)
    threads.start()
    yield threads
    threads.stop()


@pytest.fixture
def blocked() -> Iterator[threading.Event]:
    """What a slow handler waits for: set when the test ends."""
    release = threading.Event()
    yield release
    release.set()


def test_a_connection_asks_for_no_more_credits_while_its_first_task_runs_in_a_thread(
    pool: ThreadPool, blocked: threading.Event
) -> None:
    worker = Worker()
    worker.register("t", lambda payload: blocked.wait(10))  # a plain function: in a thread
    worker._threads = pool
    daemon = FakeDaemon(worker)
    daemon.task(1, token=71)
    # Asking for a second task now would hold it behind the first, in the
    # pool's queue, with its lease running.
    assert daemon.sent() == []


def test_a_task_running_in_a_thread_holds_its_connections_only_credit_among_short_ones(
    pool: ThreadPool, blocked: threading.Event
) -> None:
    worker = Worker()
    worker.register("t", lambda payload: None, thread=False)
    worker.register("slow", lambda payload: blocked.wait(10), thread=True)
    worker._threads = pool
    worker.timer = no_time
    daemon = FakeDaemon(worker)
    daemon.task(1, token=71)
    assert daemon.sent() == [taskflow.Ready(2, ()), outcomes.Ack(1, 71)]
    context = taskflow.task_context(None, None, 73, 10_000)
    daemon.feed(
        taskflow.encode_task(2, b"slow", b"x", b"\x07default", 0, 1, 0, context)
        + taskflow.encode_task(3, b"t", b"x", b"\x07default", 0, 1, 0, context)
    )
    # The short handler's pace would have asked for 4.
    assert daemon.sent() == [taskflow.Ready(1, ()), outcomes.Ack(3, 73)]


def test_credits_cut_take_effect_at_once_with_a_real_daemon() -> None:
    """
    When its handlers get slower, a connection is sent no more tasks than
    the credits it now asks for: its READY goes before the read's outcomes,
    else the daemon would refill the old credits on each outcome first, and
    the next read would bring as many slow tasks again.
    """
    clock = Clock()
    queue = make_queue(clock)
    server = QuicxServerFactory(queue, clock, Limits(max_credits=16)).buildProtocol(None)
    pause = [0.0]
    worker = Worker()
    worker.register("t", lambda payload: pause[0] and time.sleep(pause[0]), thread=False)
    worker._reactor = clock
    slot = WorkerProtocol(worker)
    reads: list[int] = []  # the TASKs each read brought
    receive = slot.dataReceived

    def counted(data: bytes) -> None:
        receive(data)
        reads.append(slot._received)

    slot.dataReceived = counted  # type: ignore[method-assign]
    pump = iosim.connect(
        server, iosim.FakeTransport(server, True), slot, iosim.FakeTransport(slot, False)
    )
    producer = producer_of(queue)
    for _ in range(200):
        submit_to(queue, producer.session, b"t", b"x")

    def next_read() -> int:
        count = len(reads)
        for _ in range(10):
            clock.advance(0)  # the daemon's writes go out
            pump.pump()
            if len(reads) > count:
                return reads[-1]
        raise AssertionError("no read")

    while next_read() < 16:  # no-op handlers: up to the daemon's 16 credits
        pass
    pause[0] = 0.001
    # 16 tasks of a millisecond or more: 2 ms of work is 2 of them at most.
    assert next_read() == 16
    cut = slot.credits
    assert cut <= 2
    assert next_read() <= cut


def test_tasks_held_when_their_handler_goes_back_to_the_threads_run_at_once() -> None:
    """
    A read of several tasks whose handler turns slow on the reactor: the
    first call sends it back to the threads, and the others, already held,
    each get a thread, as with credits given (none waits behind another).
    """
    started: list[int] = []
    release = threading.Event()

    def handler(payload: bytes) -> None:
        if payload == b"slow":
            time.sleep(TOO_LONG * 2)  # on the reactor: back to the threads
        elif payload == b"blocks":
            started.append(1)
            release.wait(10)

    worker = Worker()
    worker.register("t", handler)
    short_calls(worker._handlers[b"t"].placement, PROBATION)  # type: ignore[arg-type]
    worker.start(MemoryReactor(), "tcp:127.0.0.1:1")  # its thread pool; no connection
    try:
        daemon = FakeDaemon(worker)
        context = taskflow.task_context(None, None, 73, 10_000)
        worker.timer = no_time
        for count in (1, 2):  # grow to 4 credits
            daemon.feed(
                taskflow.encode_task(1, b"t", b"", b"\x07default", 0, 1, 0, context) * count
            )
        assert daemon.slot.credits == 4
        worker.timer = time.perf_counter
        daemon.feed(
            taskflow.encode_task(5, b"t", b"slow", b"\x07default", 0, 1, 0, context)
            + taskflow.encode_task(6, b"t", b"blocks", b"\x07default", 0, 1, 0, context) * 3
        )
        deadline = time.monotonic() + 5
        while len(started) < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(started) == 3
    finally:
        release.set()
        assert worker._threads is not None
        worker._threads.stop()  # waits for its threads
