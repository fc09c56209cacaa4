"""
The clients' side of results, waits from anywhere, progress, shared data and
groups: against fakes, the sans-I/O parts (waits, progress callbacks,
options), the worker runner on a string transport (the fake daemon of
L{tests.clients.test_worker_leases}), and both producers against a raw daemon in a
thread that answers where it is most awkward; then end to end, against a
real daemon, with the C{quicx} command and workers of both kinds.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import succeed
from twisted.internet.threads import deferToThread
from twisted.logger import ILogObserver, LogLevel, formatEvent, globalLogPublisher

from quicx.clients import awaits, timing
from quicx.clients.blocking import QuicxClient
from quicx.clients.progress import ProgressListeners, ProgressReport, ten_thousandths
from quicx.clients.requests import Options
from quicx.clients.twisted_client import connect
from quicx.clients.worker import TaskContext, Worker
from quicx.protocol import codec, link, outcomes, shared_data, taskflow, wire
from quicx.protocol.errors import (
    ConnectionLost,
    GroupUnknown,
    NotFinished,
    OutcomeForgotten,
    PayloadTooLarge,
    QueueFull,
    TaskCancelled,
    TaskDead,
    TaskFailed,
    TaskUnknown,
)
from quicx.protocol.outcomes import GroupOp, GroupPhase, GroupState, OutcomeState
from quicx.protocol.taskflow import Result, ResultKind
from tests.cli import test_cli
from tests.cli.test_cli import ROOT, env_for, quicx
from tests.clients.test_client_options import submitted
from tests.clients.test_twisted_clients import eventually
from tests.clients.test_worker_leases import FakeDaemon, Handler, worker_with
from tests.conftest import DaemonProcess
from tests.peer import Peer

# -- the sans-I/O parts ----------------------------------------------------------------


def outcome(task_id: int, state: OutcomeState, result: object = None, reason: str = "") -> Any:
    return outcomes.Outcome(task_id, state, None if result is None else Result.of(result), reason)


PENDING = OutcomeState.PENDING


def test_a_final_answer_ends_every_wait_a_pending_one_the_first_to_time_out() -> None:
    waits = awaits.outcome_waits()
    heard: list[object] = []
    late = waits.add(5, deadline=30, then=heard.append)
    soon = waits.add(5, deadline=10)
    other = waits.add(6, deadline=1)
    assert waits.answer(5, outcome(5, PENDING))
    assert (soon.answer, late.answer, heard) == (outcome(5, PENDING), None, [])
    again = waits.add(5, deadline=40)
    done = outcome(5, OutcomeState.DONE, "ok")
    assert waits.answer(5, done)
    assert late.answer == again.answer == done and heard == [done]
    # The answer the ended wait still owes is absorbed; then nothing is owed.
    assert waits.answer(5, done)
    assert not waits.answer(5, done)
    assert other.answer is None
    assert waits.clear() == [other]
    assert not waits.answer(6, outcome(6, PENDING))


def test_a_refused_wait_owes_nothing() -> None:
    waits = awaits.group_waits()
    first = waits.add(7, deadline=1)
    waits.refused(7, first)
    assert not waits.answer(7, GroupState(7, GroupPhase.FINISHED))
    second = waits.add(7, deadline=1)
    finished = GroupState(7, GroupPhase.FINISHED, 3, 3)
    assert waits.answer(7, finished) and second.answer == finished
    waits.refused(7, second)  # an ERROR after a final answer ended it anyway
    assert not waits.answer(7, finished)


@pytest.mark.parametrize(
    ("answer", "error", "message"),
    [
        (outcome(7, OutcomeState.FAILED, reason="boom"), TaskFailed, "task 7 failed: boom"),
        (outcome(7, OutcomeState.DEAD, reason="boom"), TaskDead, "task 7 is dead: boom"),
        (outcome(7, OutcomeState.CANCELLED, reason="admin"), TaskCancelled, "cancelled"),
        (outcome(7, OutcomeState.FORGOTTEN), OutcomeForgotten, "is forgotten"),
        (
            outcome(7, OutcomeState.FORGOTTEN, reason="evicted: the pool is full"),
            OutcomeForgotten,
            "task 7 was kept, and was evicted: the pool is full",
        ),
        (outcome(7, OutcomeState.UNKNOWN), TaskUnknown, "no task 7"),
        (outcome(7, PENDING), NotFinished, "task 7 has not finished yet"),
    ],
)
def test_what_an_outcome_raises(answer: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        awaits.awaited_value(answer)


def test_a_dead_task_is_a_failed_one_and_not_finished_is_a_timeout() -> None:
    assert issubclass(TaskDead, TaskFailed) and issubclass(NotFinished, TimeoutError)
    assert awaits.awaited_value(outcome(7, OutcomeState.DONE)) is None
    assert awaits.awaited_value(outcome(7, OutcomeState.DONE, {"a": [1, None]})) == {"a": [1, None]}


def test_a_groups_end() -> None:
    finished = GroupState(7, GroupPhase.FINISHED, 10, 7, 2, 1, 0)
    assert awaits.finished_group(finished) == {
        "group": 7,
        "state": "finished",
        "members": 10,
        "done": 7,
        "failed": 2,
        "cancelled": 1,
        "pending": 0,
    }
    with pytest.raises(NotFinished, match=r"closed, 4 of 10 tasks to finish") as caught:
        awaits.finished_group(GroupState(7, GroupPhase.CLOSED, 10, 6, 0, 0, 4))
    assert caught.value.state is not None and caught.value.state["pending"] == 4
    with pytest.raises(GroupUnknown, match="no group 7"):
        awaits.finished_group(GroupState(7, GroupPhase.UNKNOWN))


def test_wait_milliseconds() -> None:
    waits = [awaits.wait_ms(awaits.wait_seconds(s)) for s in (0, 0.0004, 1.5, 1e12, 10**12)]
    assert waits == [0, 0, 1500, 0xFFFFFFFF, 0xFFFFFFFF]
    for bad in (-1, float("nan"), "abc", True, None):
        with pytest.raises(ValueError, match="0 seconds or more"):
            awaits.wait_seconds(bad)


def progress(task_id: int, fraction: int, message: str = "") -> outcomes.Progress:
    return outcomes.Progress(task_id, 99, fraction, message)


def test_progress_reports_before_their_callback_are_kept_bounded() -> None:
    listeners = ProgressListeners(keep=3)
    assert listeners.report(progress(1, 1000, "a")) is None
    assert listeners.report(progress(2, 2000)) is None
    assert listeners.report(progress(1, 3000, "b")) is None
    assert listeners.report(progress(3, 10_000)) is None  # past the bound: task 1's go
    assert listeners.listen(1, print) == []
    assert listeners.listen(2, print) == [ProgressReport(2, 0.2, "")]
    assert listeners.report(progress(2, 2500)) == (print, ProgressReport(2, 0.25, ""))
    listeners.forget(2)
    assert listeners.report(progress(2, 3000)) is None  # kept, in case: nothing comes after
    assert listeners.listen(3, print) == [ProgressReport(3, 1.0, "")]


def test_fractions_and_result_ttls_as_the_wire_carries_them() -> None:
    assert [ten_thousandths(f) for f in (0, 0.4, 0.12345, 1)] == [0, 4000, 1234, 10_000]
    for bad in (-0.1, 1.01, float("nan")):
        with pytest.raises(ValueError, match="fraction is 0 to 1"):
            ten_thousandths(bad)
    assert [timing.ttl_seconds(v) for v in (1, 0.2, "1h", "90", "1.5m")] == [1, 1, 3600, 90, 90]
    for bad_ttl in (0, -1, 2**32, "soon"):
        with pytest.raises(ValueError):
            timing.ttl_seconds(bad_ttl)


def test_options_carry_results_progress_and_groups() -> None:
    def fields(options: Options) -> tuple[object, ...]:
        sent = submitted(options)
        return sent.result_ttl, sent.progress, sent.group

    assert fields(Options()) == (None, False, None)
    assert fields(Options(keep_result=True)) == (0, False, None)  # the daemon's TTL
    assert fields(Options(result_ttl="1h")) == (3600, False, None)
    assert fields(Options(keep_result=True, result_ttl=2.5, progress=True, group=9)) == (3, True, 9)
    with pytest.raises(ValueError, match="result TTL"):
        Options(result_ttl=0)
    with pytest.raises(ValueError, match="a group id"):
        Options(group=0).encode()


# -- the worker runner -----------------------------------------------------------------

PART_3 = {"server": "quicx", "capabilities": ["leases", "results", "progress", "shared"]}
"""The answer to HELLO of a daemon with results, progress and shared data."""


def test_a_handlers_return_value_is_its_acks_result() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler), PART_3)
    for task_id in (1, 2, 3, 4):
        daemon.task(task_id, token=70 + task_id)
    for index, value in enumerate((b"\x00raw", "näive", {"sizes": [1, 2]}, None)):
        handler.outcomes[index].callback(value)
    assert daemon.sent() == [
        outcomes.Ack(1, 71, Result(ResultKind.BYTES, b"\x00raw")),
        outcomes.Ack(2, 72, Result(ResultKind.TEXT, "näive".encode())),
        outcomes.Ack(3, 73, Result(ResultKind.JSON, b'{"sizes":[1,2]}')),
        outcomes.Ack(4, 74),
    ]


def test_a_plain_handler_on_the_reactor_returns_its_result_too() -> None:
    worker = Worker(credits=1)
    worker.register("t", lambda payload: payload.upper(), thread=False)
    daemon = FakeDaemon(worker, PART_3)
    daemon.task(1, token=71)
    assert daemon.sent() == [outcomes.Ack(1, 71, Result(ResultKind.BYTES, b"X"))]


def test_a_result_that_cannot_be_sent_fails_the_task_for_good() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler), PART_3)
    daemon.task(1, token=71)
    handler.outcomes[0].callback({1, 2})
    (nack,) = daemon.sent()
    assert (nack.task_id, nack.token, nack.permanent) == (1, 71, True)
    assert nack.reason.startswith("no result: a result is bytes, a string or JSON-serialisable")
    assert "not set" in nack.reason


def test_text_that_is_not_valid_unicode_never_leaves_a_task_held() -> None:
    # Lone surrogates come from os.fsdecode() of a file name that is not UTF-8.
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, credits=3), PART_3)
    for n in (1, 2, 3):
        daemon.task(n, token=70 + n)
    handler.contexts[2].progress(0.5, "file \udcff")
    daemon.clock.advance(0)
    handler.outcomes[0].callback("name \ud800")
    handler.outcomes[1].errback(RuntimeError("bad name \udcff"))
    handler.outcomes[2].callback(None)
    progress, first, second, third = daemon.sent()
    assert progress == outcomes.Progress(3, 73, 5000, "file ?")
    assert (first.task_id, first.permanent) == (1, True)
    assert first.reason.startswith("no result: a text result must be valid Unicode")
    assert (second.task_id, second.reason, second.permanent) == (2, "bad name ?", False)
    assert third == outcomes.Ack(3, 73)


def test_a_result_over_the_daemons_limit_is_not_sent() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler), {**PART_3, "limits": {"max_result": 8}})
    assert daemon.slot.max_result == 8
    daemon.task(1, token=71)
    daemon.task(2, token=72)
    handler.outcomes[0].callback(b"12345678")
    handler.outcomes[1].callback("123456789")
    assert daemon.sent() == [
        outcomes.Ack(1, 71, Result(ResultKind.BYTES, b"12345678")),
        outcomes.Nack(
            2,
            72,
            "the result is 9 bytes, more than the daemon takes (8: the daemon's"
            " [results] max_size, or its largest [allocator] class if that is smaller)",
            permanent=True,
        ),
    ]


def test_a_result_the_daemon_refuses_fails_the_task_for_good() -> None:
    # A daemon whose HELLO gives no limit: its ERROR 0x03 refuses the largest result.
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler), PART_3)
    for task_id in (1, 2, 3):
        daemon.task(task_id, token=70 + task_id)
    handler.outcomes[0].callback(b"x" * 10)
    handler.outcomes[1].callback(b"x" * 100_000)
    handler.outcomes[2].callback(None)
    assert [len(ack.result.data) if ack.result else 0 for ack in daemon.sent()] == [10, 100_000, 0]
    refusal = "a result of 100000 bytes is over [results] max_size (65536)"
    daemon.feed(link.encode_error(codec.ErrorCode.PAYLOAD_TOO_LARGE, refusal))
    assert daemon.sent() == [
        outcomes.Nack(2, 72, f"the result is larger than the daemon takes: {refusal}", True)
    ]
    assert not daemon.transport.disconnecting


def test_progress_goes_out_quoting_the_token_until_the_outcome() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler), PART_3)
    daemon.task(1, token=71)
    (context,) = handler.contexts
    context.progress(0.4, "resized 40 of 100")  # sent by the reactor thread
    assert daemon.sent() == []
    daemon.clock.advance(0)
    assert daemon.sent() == [outcomes.Progress(1, 71, 4000, "resized 40 of 100")]
    with pytest.raises(ValueError, match="fraction is 0 to 1"):
        context.progress(1.5)
    context.progress(1.0)
    handler.outcomes[0].callback(None)
    daemon.clock.advance(0)  # asked for before the outcome, too late to go
    assert daemon.sent() == [outcomes.Ack(1, 71)]


def test_a_daemon_without_results_progress_or_shared_data_is_sent_none() -> None:
    events: list[dict[str, Any]] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    try:
        handler = Handler()
        daemon = FakeDaemon(worker_with(handler, follow=["model"]), {"capabilities": ["leases"]})
        daemon.task(1, token=71)
        handler.contexts[0].progress(0.5)
        daemon.clock.advance(0)
        handler.outcomes[0].callback("a result")
    finally:
        globalLogPublisher.removeObserver(observer)
    assert daemon.before_ready == []  # no FOLLOW
    assert daemon.sent() == [outcomes.Ack(1, 71)]
    (error,) = [e for e in events if e.get("log_level") == LogLevel.error]
    assert formatEvent(error) == "the daemon has no shared data: handlers see none of model"


def test_without_a_token_progress_sends_nothing() -> None:
    handler = Handler()
    daemon = FakeDaemon(worker_with(handler, protocol=1))
    daemon.feed(wire.encode_task(5, b"t", b"x"))
    handler.contexts[0].progress(0.5, "half")
    daemon.clock.advance(0)
    assert daemon.sent() == []


def test_a_worker_follows_shared_data_before_it_takes_tasks() -> None:
    handler = Handler()
    worker = worker_with(handler, follow=["model", "rates"], credits=4)
    daemon = FakeDaemon(worker, PART_3)
    assert daemon.before_ready == [shared_data.Follow(("model", "rates"))]
    daemon.feed(
        shared_data.encode_shared("model", 3, b"weights v3")
        + link.encode_info({"following": {"model": 3, "rates": 0}})
    )
    daemon.task(1, token=71)
    (context,) = handler.contexts
    assert dict(context.shared) == {"model": b"weights v3"}
    daemon.feed(shared_data.encode_shared("rates", 1, b"1.1"))
    daemon.feed(shared_data.encode_shared("model", 4, b"weights v4"))
    assert dict(context.shared) == {"model": b"weights v4", "rates": b"1.1"}  # while it runs
    daemon.feed(shared_data.encode_shared("rates", 0))
    assert dict(worker.shared) == {"model": b"weights v4"}
    # Versions count again from 1 after a delete (or a restart without a
    # journal): what comes is the newest, whatever its number.
    daemon.feed(
        shared_data.encode_shared("model", 0) + shared_data.encode_shared("model", 1, b"new")
    )
    assert dict(worker.shared) == {"model": b"new"}
    with pytest.raises(TypeError):
        cast(Any, context.shared)["model"] = b"mine"
    assert daemon.sent() == []


def test_a_refused_follow_is_logged_and_the_credits_stand() -> None:
    events: list[dict[str, Any]] = []
    observer = cast(ILogObserver, events.append)
    globalLogPublisher.addObserver(observer)
    try:
        daemon = FakeDaemon(worker_with(Handler(), follow=["model"], credits=4), PART_3)
        daemon.feed(link.encode_error(codec.ErrorCode.INVALID_MESSAGE, "unknown message type 0x26"))
    finally:
        globalLogPublisher.removeObserver(observer)
    assert daemon.sent() == []  # no READY again with one credit
    assert daemon.slot.credits == 4
    (error,) = [e for e in events if e.get("log_level") == LogLevel.error]
    assert formatEvent(error) == (
        "the daemon refuses to send shared data model (unknown message type 0x26):"
        " handlers see none"
    )


def test_follow_needs_good_names_and_version_2() -> None:
    with pytest.raises(ValueError, match="1 without queues or shared data"):
        Worker(protocol=1, follow=["model"])
    with pytest.raises(ValueError):
        Worker(follow=["no spaces"])
    with pytest.raises(ValueError, match="twice"):
        Worker(follow=["a", "a"])


def test_a_context_made_outside_a_worker_has_no_shared_data() -> None:
    task = taskflow.Task(1, b"t", b"", "default", 0, 1, 0)
    assert dict(TaskContext.of(task).shared) == {}


# -- the producers, against a raw daemon --------------------------------------------------


class RawDaemon:
    """
    Takes one connection, answers its HELLO, then runs C{script} with it in
    a thread, and waits for the client to close.  L{join} raises what the
    script raised.
    """

    def __init__(self, script: Callable[[Peer], None]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp:127.0.0.1:{self.listener.getsockname()[1]}"
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, args=(script,), daemon=True)
        self.thread.start()

    def _serve(self, script: Callable[[Peer], None]) -> None:
        try:
            with Peer(self.listener.accept()[0]) as peer:
                assert isinstance(peer.receive(), link.Hello)
                peer.send(link.encode_info({"server": "raw"}))
                script(peer)
                with contextlib.suppress(OSError, AssertionError):  # closed, by either
                    peer.wait_closed(10)
        except BaseException as e:
            self.error = e

    def join(self) -> None:
        self.thread.join(15)
        self.listener.close()
        assert not self.thread.is_alive(), "the raw daemon's script did not end"
        error, self.error = self.error, None
        if error is not None:
            raise error


@pytest.fixture
def raw() -> Iterator[Callable[[Callable[[Peer], None]], RawDaemon]]:
    started: list[RawDaemon] = []

    def start(script: Callable[[Peer], None]) -> RawDaemon:
        started.append(RawDaemon(script))
        return started[-1]

    yield start
    for daemon in started:
        daemon.join()


def received(peer: Peer, kind: type) -> Any:
    message = peer.receive()
    assert isinstance(message, kind), message
    return message


def test_blocking_submit_with_a_result_progress_and_a_group(raw) -> None:
    submits: list[taskflow.Submit] = []

    def script(peer: Peer) -> None:
        submits.append(received(peer, taskflow.Submit))
        # A report before the OK, one after it, and the outcome with its result.
        peer.send(
            outcomes.encode_progress(1, 71, 2500, "a quarter")
            + taskflow.encode_ok(1)
            + outcomes.encode_progress(1, 71, 5000, "half")
            + taskflow.encode_done(1, Result.of({"size": 3}))
        )
        submits.append(received(peer, taskflow.Submit))
        peer.send(taskflow.encode_ok(2) + taskflow.encode_done(2))

    daemon = raw(script)
    heard: list[ProgressReport] = []
    with QuicxClient(daemon.address, timeout=10) as client:
        task_id = client.submit("t", b"x", keep_result=True, progress=heard.append, group=7)
        assert heard == [ProgressReport(1, 0.25, "a quarter")]
        assert client.wait(task_id) == {"size": 3}
        assert heard == [ProgressReport(1, 0.25, "a quarter"), ProgressReport(1, 0.5, "half")]
        assert client.wait(client.submit("t", b"y", result_ttl="1h")) is None
    daemon.join()
    assert [(s.options.result_ttl, s.options.progress, s.options.group) for s in submits] == [
        (0, True, 7),
        (3600, False, None),
    ]


def test_a_progress_callback_that_raises_is_logged(raw, caplog) -> None:
    def script(peer: Peer) -> None:
        received(peer, taskflow.Submit)
        peer.send(
            taskflow.encode_ok(1) + outcomes.encode_progress(1, 71, 1, "") + taskflow.encode_done(1)
        )

    def broken(report: ProgressReport) -> None:
        raise RuntimeError("callback bug")

    daemon = raw(script)
    with QuicxClient(daemon.address, timeout=10) as client:
        assert client.wait(client.submit("t", b"x", progress=broken)) is None
    assert "the progress callback of task 1 raised" in caplog.text


def test_blocking_result_answers_and_refusals(raw) -> None:
    asked: list[outcomes.Await] = []

    def script(peer: Peer) -> None:
        asked.append(received(peer, outcomes.Await))
        peer.send(outcomes.encode_outcome(5, PENDING))
        asked.append(received(peer, outcomes.Await))
        peer.send(outcomes.encode_outcome(5, OutcomeState.DONE, Result.of("thumb.png")))
        asked.append(received(peer, outcomes.Await))
        peer.send(link.encode_error(codec.ErrorCode.QUEUE_FULL, "too many waits"))
        for task_id, state in ((7, OutcomeState.DEAD), (8, OutcomeState.FORGOTTEN)):
            asked.append(received(peer, outcomes.Await))
            peer.send(outcomes.encode_outcome(task_id, state, reason="boom"))

    daemon = raw(script)
    with QuicxClient(daemon.address, timeout=10) as client:
        with pytest.raises(NotFinished):
            client.result(5, timeout=0)
        assert client.result(5, timeout=2.5) == "thumb.png"
        with pytest.raises(QueueFull, match="too many waits"):
            client.result(6)
        with pytest.raises(TaskDead, match="boom"):
            client.result(7)
        with pytest.raises(OutcomeForgotten):
            client.result(8)
    daemon.join()
    assert asked == [
        outcomes.Await(5, 0),
        outcomes.Await(5, 2500),
        outcomes.Await(6, 10_000),
        outcomes.Await(7, 10_000),
        outcomes.Await(8, 10_000),
    ]


def test_a_late_outcome_is_not_the_next_waits_answer(raw) -> None:
    late = threading.Event()

    def script(peer: Peer) -> None:
        assert received(peer, outcomes.Await) == outcomes.Await(5, 100)
        late.wait(5)  # the client gave up on it
        received(peer, taskflow.Submit)
        peer.send(outcomes.encode_outcome(5, PENDING) + taskflow.encode_ok(3))
        assert received(peer, outcomes.Await) == outcomes.Await(5, 1000)
        peer.send(outcomes.encode_outcome(5, OutcomeState.DONE, Result.of(b"\x00")))

    daemon = raw(script)
    with QuicxClient(daemon.address, timeout=0.2) as client:
        with pytest.raises(TimeoutError) as caught:
            client.result(5, timeout=0.1)
        assert not isinstance(caught.value, NotFinished)  # no answer: not the daemon's
        late.set()
        client.timeout = 5
        assert client.submit("t", b"x") == 3
        assert client.result(5, timeout=1) == b"\x00"
    daemon.join()


def test_blocking_groups(raw) -> None:
    state = {"group": 7, "state": "open", "members": 0, "done": 0, "failed": 0}
    submits: list[taskflow.Submit] = []

    def script(peer: Peer) -> None:
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.OPEN)
        peer.send(link.encode_info(state))
        submits.extend(received(peer, taskflow.Submit) for _ in range(3))
        peer.send(taskflow.encode_ok(1) + taskflow.encode_ok(2) + taskflow.encode_ok(3))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.CLOSE, 7)
        peer.send(link.encode_info({**state, "state": "closed", "members": 3}))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.WAIT, 7, 5000)
        # The opener's notice of the end, then the wait's own answer.
        finished = outcomes.encode_group_state(GroupState(7, GroupPhase.FINISHED, 3, 2, 1, 0, 0))
        peer.send(finished + finished)
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.WAIT, 8, 0)
        peer.send(outcomes.encode_group_state(GroupState(8, GroupPhase.OPEN, 5, 1, 0, 0, 4)))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.WAIT, 9, 0)
        peer.send(outcomes.encode_group_state(GroupState(9, GroupPhase.UNKNOWN)))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.STATE, 7)
        peer.send(link.encode_info({**state, "state": "finished", "members": 3}))

    daemon = raw(script)
    with QuicxClient(daemon.address, timeout=10) as client:
        tasks = [("t", b"1"), ("t", b"2", Options(queue="q", keep_result=True)), ("t", b"3")]
        assert client.submit_group(tasks) == 7
        assert client.wait_group(7, timeout=5) == {
            "group": 7,
            "state": "finished",
            "members": 3,
            "done": 2,
            "failed": 1,
            "cancelled": 0,
            "pending": 0,
        }
        with pytest.raises(NotFinished) as caught:
            client.wait_group(8, timeout=0)
        assert caught.value.state is not None and caught.value.state["pending"] == 4
        with pytest.raises(GroupUnknown):
            client.wait_group(9, timeout=0)
        assert client.group(7)["state"] == "finished"
    daemon.join()
    assert [(s.options.group, s.options.queue, s.options.result_ttl) for s in submits] == [
        (7, None, None),
        (7, "q", 0),
        (7, None, None),
    ]


def test_blocking_publish_and_unpublish(raw) -> None:
    def script(peer: Peer) -> None:
        assert received(peer, shared_data.Publish) == shared_data.Publish("model", b"\x01\x02")
        peer.send(link.encode_info({"name": "model", "version": 1, "size": 2, "followers": 0}))
        assert received(peer, shared_data.Publish) == shared_data.Publish("model", b"", delete=True)
        peer.send(link.encode_info({"name": "model", "deleted": True}))

    daemon = raw(script)
    with QuicxClient(daemon.address, timeout=10) as client:
        assert client.publish("model", b"\x01\x02")["version"] == 1
        assert client.unpublish("model")["deleted"] is True
        with pytest.raises(ValueError):
            client.publish("no spaces", b"")
    daemon.join()


@pytest_twisted.ensureDeferred
async def test_twisted_waits_are_fenced_from_the_requests_after_them(raw) -> None:
    go = threading.Event()

    def script(peer: Peer) -> None:
        assert received(peer, outcomes.Await) == outcomes.Await(5, 10_000)
        received(peer, wire.Heartbeat)
        peer.send(link.encode_error(codec.ErrorCode.QUEUE_FULL, "too many waits") + link.PONG_FRAME)
        assert received(peer, outcomes.Await) == outcomes.Await(6, 10_000)
        received(peer, wire.Heartbeat)
        peer.send(link.PONG_FRAME)  # taken: it is answered later
        received(peer, taskflow.Submit)
        peer.send(link.encode_error(codec.ErrorCode.UNKNOWN_TASK_TYPE, "unknown task type: t"))
        assert received(peer, outcomes.Await) == outcomes.Await(6, 0)
        received(peer, wire.Heartbeat)
        peer.send(outcomes.encode_outcome(6, PENDING) + link.PONG_FRAME)  # at once
        go.wait(5)
        peer.send(outcomes.encode_outcome(6, OutcomeState.DONE, Result.of([1, 2])))

    daemon = raw(script)
    client = await connect(reactor, daemon.address)
    try:
        refused = client.result(5, timeout=10)
        later = client.result(6, timeout=10)
        submit = client.submit("t", b"x")
        now = client.result(6)
        with pytest.raises(QueueFull, match="too many waits"):
            await refused
        with pytest.raises(Exception, match="unknown task type"):
            await submit
        with pytest.raises(NotFinished):
            await now
        assert not later.called
        go.set()
        assert await later == [1, 2]
    finally:
        client.close()
    await deferToThread(daemon.join)  # the reactor closes the connection meanwhile


@pytest_twisted.ensureDeferred
async def test_twisted_results_progress_and_groups(raw) -> None:
    def script(peer: Peer) -> None:
        received(peer, taskflow.Submit)
        peer.send(
            taskflow.encode_ok(1)
            + outcomes.encode_progress(1, 71, 5000, "half")
            + taskflow.encode_done(1, Result.of("done!"))
        )
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.OPEN)
        peer.send(link.encode_info({"group": 4, "state": "open"}))
        submits = [received(peer, taskflow.Submit) for _ in range(2)]
        assert [s.options.group for s in submits] == [4, 4]
        peer.send(taskflow.encode_ok(2) + taskflow.encode_ok(3))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.CLOSE, 4)
        peer.send(link.encode_info({"group": 4, "state": "closed"}))
        assert received(peer, outcomes.Group) == outcomes.Group(GroupOp.WAIT, 4, 5000)
        received(peer, wire.Heartbeat)
        finished = outcomes.encode_group_state(GroupState(4, GroupPhase.FINISHED, 2, 2, 0, 0, 0))
        peer.send(link.PONG_FRAME + finished + finished)

    daemon = raw(script)
    heard: list[ProgressReport] = []
    client = await connect(reactor, daemon.address)
    try:
        task_id = await client.submit("t", b"x", keep_result=True, progress=heard.append)
        assert await client.outcome(task_id) == "done!"
        assert heard == [ProgressReport(1, 0.5, "half")]
        group = await client.submit_group([("t", b"a"), ("t", b"b", Options(priority=3))])
        assert group == 4
        assert (await client.wait_group(group, timeout=5))["done"] == 2
    finally:
        client.close()
    await deferToThread(daemon.join)  # the reactor closes the connection meanwhile


@pytest_twisted.ensureDeferred
async def test_twisted_waits_end_with_the_connection(raw) -> None:
    def script(peer: Peer) -> None:
        received(peer, outcomes.Await)
        received(peer, wire.Heartbeat)
        peer.send(link.PONG_FRAME)
        peer.close()

    daemon = raw(script)
    client = await connect(reactor, daemon.address)
    with pytest.raises(ConnectionLost):
        await client.result(5, timeout=30)
    with pytest.raises(ConnectionLost):
        await client.wait_group(5, timeout=30)
    await deferToThread(daemon.join)


# -- against a real daemon ---------------------------------------------------------------

background = test_cli.background  # the fixture: quicx commands that run until stopped

HANDLERS = """
from quicx import Unrecoverable

def resize(payload, context):
    for step in (1, 2, 3):
        context.progress(step / 4, f"step {step}")
    return {"size": len(payload)}

def fail(payload):
    raise Unrecoverable("bad " + payload.decode())

def big(payload):
    return b"x" * int(payload)

def rates(payload, context):
    return context.shared.get("rates")

handlers = {"resize": resize, "fail": fail, "big": big, "rates": rates}
"""


@pytest.fixture
def handlers(tmp_path: Path) -> Callable[[DaemonProcess], dict[str, str]]:
    """The environment of C{quicx} commands that can import C{handlers:handlers}."""
    (tmp_path / "handlers.py").write_text(HANDLERS)

    def environment(daemon: DaemonProcess) -> dict[str, str]:
        return {**env_for(daemon), "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}

    return environment


def test_a_result_reaches_submit_wait_and_any_connection(daemon, background, handlers) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", env=env)
    done = quicx("submit", "resize", "abc", "--keep-result", "--wait", env=env)
    assert done.returncode == 0, done.stderr
    task_id, said, value = done.stdout.splitlines()
    assert (said, value) == (f"task {task_id} done", '{"size": 3}')
    with QuicxClient(env["QUICX_ADDRESS"]) as other:
        assert other.result(int(task_id), timeout=0) == {"size": 3}
    shown = quicx("result", task_id, env=env)
    assert (shown.returncode, shown.stdout) == (0, '{"size": 3}\n')

    # Its producer heard it, and it was not kept.
    plain = quicx("submit", "resize", "abcd", "--wait", env=env).stdout.split()[0]
    unknown = quicx("result", plain, env=env)
    assert (unknown.returncode, unknown.stderr) == (
        1,
        f"quicx: no task {plain}, or its outcome was not kept\n",
    )
    # Its producer went away before it ran (a second later): kept anyway. (Without
    # the delay, a fast worker can fail it while the producer is still connected:
    # then the producer is told, and nothing is kept.)
    failing = quicx("submit", "fail", "x", "--delay", "1", env=env).stdout.strip()
    failed = quicx("result", failing, "--wait", env=env)
    # The reason (an Unrecoverable's message), then the handler's traceback.
    assert failed.returncode == 1
    assert failed.stdout.splitlines()[:2] == [
        f"task {failing} failed: bad x",
        "Traceback (most recent call last):",
    ]
    assert (
        failed.stdout.splitlines()[-1].strip() == 'raise Unrecoverable("bad " + payload.decode())'
    )
    parked = quicx("submit", "resize", "x", "--queue", "parked", env=env).stdout.strip()
    pending = quicx("result", parked, env=env)
    assert (pending.returncode, pending.stderr) == (
        1,
        f"quicx: task {parked} has not finished yet (--wait waits for it)\n",
    )
    waited = quicx("result", parked, "--wait", "--timeout", "0.3", env=env)
    assert waited.stderr == f"quicx: task {parked} has not finished within 0.3 s\n"


def test_progress_reaches_the_callback_in_order(start_daemon, background, handlers) -> None:
    daemon = start_daemon("--progress-interval=0")
    env = handlers(daemon)
    background("worker", "handlers:handlers", env=env)
    heard: list[ProgressReport] = []
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        task_id = client.submit("resize", b"abcd", progress=heard.append)
        assert client.wait(task_id, timeout=30) == {"size": 4}
    assert heard == [
        ProgressReport(task_id, 0.25, "step 1"),
        ProgressReport(task_id, 0.5, "step 2"),
        ProgressReport(task_id, 0.75, "step 3"),
    ]


def test_a_worker_sees_what_is_published(daemon, background, handlers, tmp_path: Path) -> None:
    env = handlers(daemon)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        assert client.publish("rates", b"v1")["version"] == 1
        # It follows after the publish: the current version comes before any task.
        background("worker", "handlers:handlers", "-n3", "--follow", "rates", env=env)
        assert client.wait(client.submit("rates", b""), timeout=30) == b"v1"
        (tmp_path / "rates.bin").write_bytes(b"v2")
        published = quicx("publish", "rates", str(tmp_path / "rates.bin"), env=env)
        assert published.stdout == "shared data rates version 2: 2 bytes, 1 worker follows it\n"
        assert client.wait(client.submit("rates", b""), timeout=30) == b"v2"
        deleted = quicx("publish", "rates", "--delete", env=env)
        assert deleted.stdout == "shared data rates deleted\n"
        assert client.wait(client.submit("rates", b""), timeout=30) is None
        # Published again, it counts from version 1: the workers take it.
        assert client.publish("rates", b"v3")["version"] == 1
        assert client.wait(client.submit("rates", b""), timeout=30) == b"v3"
        client.unpublish("rates")
    gone = quicx("publish", "rates", "--delete", env=env)
    assert gone.returncode == 1 and gone.stderr.startswith("quicx: ")


def test_a_group_of_a_thousand_finishes_with_its_counts(daemon, background, handlers) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", "--credits", "16", env=env)
    tasks: list[Any] = [("resize", b"x")] * 990 + [("fail", b"y")] * 8
    tasks += [("resize", b"z", Options(queue="parked"))] * 2
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        group = client.submit_group(tasks)
        with QuicxClient(f"unix:{daemon.control_path}") as admin:
            assert admin.purge("parked")["purged"] == 2
    with QuicxClient(env["QUICX_ADDRESS"]) as other:
        assert other.wait_group(group, timeout=60) == {
            "group": group,
            "state": "finished",
            "members": 1000,
            "done": 990,
            "failed": 8,
            "cancelled": 2,
            "pending": 0,
        }
        assert other.group(group)["finished_at"] is not None
    line = f"group {group}: finished, 1,000 tasks: 990 done, 8 failed, 2 cancelled, 0 pending\n"
    shown = quicx("group", str(group), env=env)
    assert (shown.returncode, shown.stdout) == (0, line)
    waited = quicx("group", str(group), "--wait", env=env)
    assert (waited.returncode, waited.stdout) == (1, line)  # not every task is done
    unknown = quicx("group", "999999", env=env)
    assert (unknown.returncode, unknown.stderr) == (
        1,
        "quicx: no group 999999, or it finished too long ago to be remembered\n",
    )


def test_a_result_larger_than_the_daemon_takes_fails_its_task(daemon, background, handlers) -> None:
    env = handlers(daemon)
    background("worker", "handlers:handlers", env=env)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        assert client.wait(client.submit("big", b"1024"), timeout=30) == b"x" * 1024
        with pytest.raises(TaskFailed) as caught:
            client.wait(client.submit("big", b"1025"), timeout=30)
    assert caught.value.reason == (
        "the result is 1,025 bytes, more than the daemon takes (1,024: the daemon's"
        " [results] max_size, or its largest [allocator] class if that is smaller)"
    )


@pytest_twisted.ensureDeferred
async def test_twisted_results_from_a_worker_in_the_same_reactor(daemon: DaemonProcess) -> None:
    release = threading.Event()

    def slow(payload: bytes, context: TaskContext) -> str:
        context.progress(0.5, "half")
        release.wait(10)
        return payload.decode()

    address = daemon.client_address
    worker = Worker({"slow": slow})
    worker.start(reactor, address)
    producer = await connect(reactor, address)
    other = await connect(reactor, address)
    try:
        heard: list[ProgressReport] = []
        task_id = await producer.submit("slow", b"hi", progress=heard.append)
        # Waited for before it finishes: answered though its outcome is not kept.
        waiting = other.result(task_id, timeout=30)
        with pytest.raises(NotFinished):
            await other.result(task_id)
        await eventually(lambda: succeed(bool(heard)))
        release.set()
        assert await waiting == "hi"
        assert await producer.outcome(task_id) == "hi"
        assert heard == [ProgressReport(task_id, 0.5, "half")]
        group = await producer.submit_group([("slow", b"a"), ("slow", b"b")])
        assert (await other.wait_group(group, timeout=30))["done"] == 2
    finally:
        producer.close()
        other.close()
        await worker.stop()


def test_shared_data_past_the_daemons_limit_is_refused_in_its_words(
    start_daemon, tmp_path: Path
) -> None:
    daemon = start_daemon("--shared-max-size=8")
    env = env_for(daemon)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        with pytest.raises(PayloadTooLarge, match=r"shared data of 2,000,000 bytes exceeds"):
            client.publish("rates", bytes(2_000_000))  # past the frame limit too
        assert client.publish("rates", bytes(8))["version"] == 1
    (tmp_path / "big.bin").write_bytes(bytes(9))
    published = quicx("publish", "rates", str(tmp_path / "big.bin"), env=env)
    assert (published.returncode, published.stderr) == (
        1,
        "quicx: shared data of 9 bytes exceeds the daemon's [shared] max_size (8)\n",
    )
