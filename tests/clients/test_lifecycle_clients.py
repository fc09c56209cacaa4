"""
The clients, the worker runner and the C{quicx} command against a real
daemon, in this process's reactor (so it is this checkout's daemon): retries
with their backoff, the dead-letter set, leases and fencing tokens.  The
blocking client runs in a thread, the command as a child process.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import pytest
import pytest_twisted
from twisted.internet import defer, reactor, utils
from twisted.internet.address import IPv4Address
from twisted.internet.endpoints import connectProtocol
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.logger import ILogObserver, globalLogPublisher

from quicx.clients.blocking import QuicxClient
from quicx.clients.outcomes import RetryNotice
from quicx.clients.twisted_client import QuicxClientProtocol, connect, endpoint_for
from quicx.clients.worker import TaskContext, Unrecoverable, Worker
from quicx.daemon import service as service_module
from quicx.daemon import tap
from quicx.protocol import codec
from quicx.protocol.errors import Forbidden, NotFound, TaskFailed
from tests.clients.test_clients_v2 import until

QUICX = str(Path(sys.executable).with_name("quicx"))
ROOT = Path(__file__).resolve().parents[2]


class Daemon:
    """A daemon service in this reactor: its address and its control socket's."""

    def __init__(self, service: service_module.QuicxDaemon, control: Path) -> None:
        self.service = service
        self.control = control
        listener = next(s for s in service if isinstance(s, service_module.ListenerService))
        assert listener.port is not None
        host = listener.port.getHost()
        assert isinstance(host, IPv4Address)
        self.address = f"tcp:127.0.0.1:{host.port}"

    @property
    def admin_address(self) -> str:
        return f"unix:{self.control}"

    def counters(self) -> Any:
        return self.service.queue.counters()


@pytest_twisted.async_yield_fixture
async def start(tmp_path: Path) -> AsyncIterator[Callable[..., Daemon]]:
    """Start in-process daemons with the given flags; stop them after."""
    started: list[service_module.QuicxDaemon] = []

    def start_one(*flags: str) -> Daemon:
        control = tmp_path / f"c{len(started)}.sock"
        options = tap.Options()
        options.parseOptions(
            [
                "--listen=tcp:0:interface=127.0.0.1",
                f"--control={control}",
                "--drain-timeout=0",
                *flags,
            ]
        )
        service = cast(service_module.QuicxDaemon, tap.makeService(options, reactor))
        service.privilegedStartService()
        service.startService()
        started.append(service)
        return Daemon(service, control)

    yield start_one
    for service in started:
        await defer.maybeDeferred(service.stopService)


class Recorder(QuicxClientProtocol):
    """The producer client, noting the type of every message it receives."""

    def __init__(self) -> None:
        super().__init__()
        self.received: list[int] = []

    def frameReceived(self, message_type: int, payload: bytes) -> None:
        self.received.append(message_type)
        super().frameReceived(message_type, payload)


async def recording_producer(daemon: Daemon) -> Recorder:
    producer = Recorder()
    await connectProtocol(endpoint_for(reactor, daemon.address), producer)
    await producer.greeted()
    return producer


class Flaky:
    """A handler (on the reactor) that fails its first C{failures} runs, noting when each ran."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.runs: list[float] = []
        self.contexts: list[TaskContext] = []

    def __call__(self, payload: bytes, context: TaskContext) -> None:
        self.runs.append(time.monotonic())
        self.contexts.append(context)
        if len(self.runs) <= self.failures:
            raise RuntimeError(f"failure {len(self.runs)}")


def worker_for(handler: Callable[..., Any], **options: Any) -> Worker:
    worker = Worker(**options)
    worker.register("flaky", handler, thread=False)
    return worker


@pytest_twisted.ensureDeferred
async def test_two_failures_then_done_at_the_backoffs_spacing(start) -> None:
    daemon = start()
    handler = Flaky(failures=2)
    worker = worker_for(handler)
    worker.start(reactor, daemon.address)
    producer = await recording_producer(daemon)
    heard: list[RetryNotice] = []
    try:
        task_id = await producer.submit("flaky", b"x", retries=3, backoff="exponential:400ms:5s")
        await producer.outcome(task_id, heard.append)  # DONE: no exception
        await deferLater(reactor, 0.3, lambda: None)  # time for a second outcome, were one sent
    finally:
        await worker.stop()
    first_gap, second_gap = (b - a for a, b in zip(handler.runs, handler.runs[1:], strict=False))
    # 400 ms, then 800 ms, each after the failure's NACK reached the daemon.
    assert 0.39 <= first_gap <= 0.39 + 0.6, handler.runs
    assert 0.79 <= second_gap <= 0.79 + 0.6, handler.runs
    assert len(handler.runs) == 3
    assert [(c.attempt, c.failures, c.retries) for c in handler.contexts] == [
        (1, 0, 3),
        (2, 1, 3),
        (3, 2, 3),
    ]
    assert len({c.token for c in handler.contexts}) == 3
    # The exception, then the traceback of the handler's frames.
    assert [(n.task_id, n.attempt, n.reason.split("\n")[:2]) for n in heard] == [
        (task_id, 1, ["RuntimeError: failure 1", "Traceback (most recent call last):"]),
        (task_id, 2, ["RuntimeError: failure 2", "Traceback (most recent call last):"]),
    ]
    kinds = [codec.MessageType(t) for t in producer.received]
    assert kinds.count(codec.MessageType.DONE) == 1 and codec.MessageType.FAILED not in kinds
    assert kinds[-3:] == [
        codec.MessageType.RETRYING,
        codec.MessageType.RETRYING,
        codec.MessageType.DONE,
    ]
    producer.close()


def quicx_command(*args: str) -> defer.Deferred[tuple[bytes, bytes, int]]:
    """Run this checkout's C{quicx} without blocking the reactor: (stdout, stderr, status)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return utils.getProcessOutputAndValue(QUICX, args, env=env)


@pytest_twisted.ensureDeferred
async def test_always_failing_lands_in_the_dead_letters_and_replay_runs_it_again(start) -> None:
    daemon = start()
    handler = Flaky(failures=3)
    worker = worker_for(handler, queues=["mail"])
    worker.start(reactor, daemon.address)
    producer = await connect(reactor, daemon.address)
    try:
        task_id = await producer.submit(
            "flaky", b'{"to": "nobody"}', queue="mail", retries=2, backoff="fixed:100ms"
        )
        with pytest.raises(TaskFailed, match="failure 3"):
            await producer.outcome(task_id)
        assert len(handler.runs) == 3  # the first attempt and its two retries
        dead = await producer.dead()
        assert dead["total"] == 1
        (entry,) = dead["tasks"]
        assert (entry["id"], entry["queue"], entry["type"], entry["failures"]) == (
            task_id,
            "mail",
            "flaky",
            3,
        )
        assert entry["reason"].startswith("RuntimeError: failure 3\nTraceback")
        assert (await producer.dead(queue="default"))["tasks"] == []
        # quicx dlq list and show, over the wire; replay, over the control socket.
        out, err, status = await quicx_command("dlq", "list", f"--connect={daemon.address}")
        assert status == 0, err
        header, row = out.decode().splitlines()
        assert header.split() == ["id", "queue", "type", "failures", "dead", "for", "reason"]
        assert row.split()[:4] == [str(task_id), "mail", "flaky", "3"]
        assert row.endswith("RuntimeError: failure 3 ...")  # its first line
        out, err, status = await quicx_command("task", str(task_id), f"--connect={daemon.address}")
        lines = out.decode().splitlines()
        assert lines[1:3] == [
            "  dead after 3 failures: RuntimeError: failure 3",
            "    Traceback (most recent call last):",
        ]
        assert lines[-2].strip() == 'raise RuntimeError(f"failure {len(self.runs)}")'
        assert lines[-1] == (
            f"  quicx dlq show {task_id} shows its payload,"
            f" quicx dlq replay {task_id} runs it again"
        )
        out, err, status = await quicx_command("dlq", "show", str(task_id), "--payload",
                                               f"--connect={daemon.address}")  # fmt: skip
        assert (out, status) == (b'{"to": "nobody"}', 0), err
        out, err, status = await quicx_command(
            "dlq", "replay", str(task_id), f"--control={daemon.control}"
        )
        assert (out.decode(), status) == (
            f"task {task_id} replayed: queued again, its failures reset\n",
            0,
        ), err
        await until(lambda: len(handler.runs) == 4)
        await until(lambda: daemon.counters().completed == 1)
        assert handler.contexts[-1].failures == 0  # reset by the replay
        assert (await producer.dead())["total"] == 0
        out, err, status = await quicx_command("dlq", "replay", str(task_id),
                                               f"--control={daemon.control}")  # fmt: skip
        assert (status, err.decode()) == (1, f"quicx: task {task_id} is not in a dead-letter set\n")
    finally:
        producer.close()
        await worker.stop()


class Slow:
    """A handler on the reactor whose first run takes C{seconds}; later runs are quick."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.tokens: list[int] = []

    def __call__(self, payload: bytes, context: TaskContext) -> defer.Deferred[None] | None:
        self.tokens.append(context.token)
        if len(self.tokens) > 1:
            return None
        return deferLater(reactor, self.seconds, lambda: None)


@pytest_twisted.ensureDeferred
async def test_auto_extend_keeps_a_slow_task_past_its_lease(start) -> None:
    daemon = start("--task-timeout=1")
    handler = Slow(2.5)
    worker = worker_for(handler, auto_extend=True)
    worker.start(reactor, daemon.address)
    producer = await connect(reactor, daemon.address)
    try:
        await producer.outcome(await producer.submit("flaky", b"x"))
        counters = daemon.counters()
        assert (counters.completed, counters.timed_out, counters.stale_outcomes) == (1, 0, 0)
        assert len(handler.tokens) == 1
    finally:
        producer.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_a_report_after_the_lease_ran_out_is_stale_and_logged(start) -> None:
    daemon = start("--task-timeout=1")
    handler = Slow(1.6)
    worker = worker_for(handler)
    warnings: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        if "stale report" in event.get("log_format", ""):
            warnings.append(event["message"])

    observer = cast(ILogObserver, observe)
    globalLogPublisher.addObserver(observer)
    worker.start(reactor, daemon.address)
    producer = await recording_producer(daemon)
    try:
        task_id = await producer.submit("flaky", b"x")
        await producer.outcome(task_id)  # the second delivery's ACK
        await deferLater(reactor, 0.3, lambda: None)
    finally:
        globalLogPublisher.removeObserver(observer)
        producer.close()
        await worker.stop()
    first, second = handler.tokens
    assert second > first
    (warning,) = warnings
    assert f"task {task_id}" in warning, warning
    counters = daemon.counters()
    assert (counters.completed, counters.timed_out, counters.stale_outcomes) == (1, 1, 1)
    assert producer.received.count(codec.MessageType.DONE) == 1


def extend_by_hand(payload: bytes, context: TaskContext) -> None:
    """A threaded handler that needs 2 s of a 1 s lease: it asks for more."""
    assert context.lease == 1.0
    context.extend(5)
    time.sleep(2)


@pytest_twisted.ensureDeferred
async def test_a_threaded_handler_extends_its_lease(start) -> None:
    daemon = start("--task-timeout=1")
    worker = Worker({"slow": extend_by_hand})
    worker.start(reactor, daemon.address)
    producer = await connect(reactor, daemon.address)
    try:
        await producer.outcome(await producer.submit("slow", b"x"))
        counters = daemon.counters()
        assert (counters.completed, counters.timed_out, counters.stale_outcomes) == (1, 0, 0)
    finally:
        producer.close()
        await worker.stop()


def permanent(payload: bytes) -> None:
    raise Unrecoverable(f"cannot parse {payload!r}")


@pytest_twisted.ensureDeferred
async def test_the_blocking_client_delays_inspects_and_manages_dead_letters(start) -> None:
    daemon = start()
    ran: list[float] = []
    worker = Worker({"t": lambda payload: ran.append(time.time()), "bad": permanent})

    def delayed_then_run() -> dict[str, Any]:
        with QuicxClient(daemon.address) as client:
            submitted = time.time()
            task_id = client.submit("t", b"x", delay=0.6)
            state = client.task(task_id)
            assert (state["state"], state["why"][0]["reason"]) == ("delayed", "delayed")
            assert submitted + 0.5 <= state["due"] <= submitted + 0.7
            assert [q["delayed"] for q in client.queues()] == [1]
            client.wait(task_id, timeout=10)
            assert ran[0] >= submitted + 0.59
            bad = client.submit("bad", b"\xff", retries=5, backoff="fixed:1s")
            with pytest.raises(TaskFailed, match="cannot parse"):
                client.wait(bad, timeout=10)  # at once: an unrecoverable failure is not retried
            dead: dict[str, Any] = client.dead()
            assert [(t["id"], t["failures"]) for t in dead["tasks"]] == [(bad, 1)]
            shown = client.task(bad)
            assert (shown["state"], shown["payload_base64"]) == ("dead", "/w==")
            with pytest.raises(Forbidden):
                client.dead_purge()
        with QuicxClient(daemon.admin_address) as admin:
            with pytest.raises(NotFound):
                admin.replay(bad + 100)
            assert admin.dead_purge("default") == {"purged": 1}
            assert admin.dead() == {"total": 0, "tasks": []}
            return admin.replay()

    worker.start(reactor, daemon.address)
    try:
        assert await deferToThread(delayed_then_run) == {"replayed": []}
    finally:
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_cli_submit_waits_through_retries(start) -> None:
    daemon = start()
    handler = Flaky(failures=1)
    worker = worker_for(handler)
    worker.start(reactor, daemon.address)
    try:
        out, err, status = await quicx_command(
            "submit", "flaky", "x", "--retries=1", "--backoff=fixed:200ms", "--delay=0.1",
            "--wait", f"--connect={daemon.address}",
        )  # fmt: skip
    finally:
        await worker.stop()
    assert status == 0, err
    first, retry, done = out.decode().splitlines()
    assert (first, done) == ("1", "task 1 done")
    # The wait left of the 200 ms backoff, in tenths: never a bare "0s".
    assert re.fullmatch(
        r"task 1: attempt 1 failed: RuntimeError: failure 1; retrying in 0\.[0-2]s", retry
    ), retry


@pytest_twisted.ensureDeferred
async def test_a_schedule_added_by_the_command_fires_until_removed(start) -> None:
    daemon = start()
    ran: list[bytes] = []
    worker = Worker()
    worker.register("ping", ran.append, thread=False)
    worker.start(reactor, daemon.address)
    control, connect_to = f"--control={daemon.control}", f"--connect={daemon.address}"
    try:
        out, err, status = await quicx_command(
            "schedule", "add", "tick", "--every=1s", "ping", "hello", control
        )
        assert status == 0, err
        assert out.decode().startswith("schedule tick: every 1s (UTC), next fire 20")
        await until(lambda: len(ran) >= 1)
        assert ran[0] == b"hello"
        out, err, status = await quicx_command("schedules", connect_to)
        header, row = out.decode().splitlines()
        assert header.split() == ["name", "schedule", "zone", "type", "queue", "next", "fire",
                                  "last", "fire"]  # fmt: skip
        assert row.split()[:6] == ["tick", "every", "1s", "UTC", "ping", "(default)"]
        out, err, status = await quicx_command("schedules", "--json", connect_to)
        (listed,) = json.loads(out)
        assert (listed["every"], listed["source"]) == (1, "runtime")
        assert listed["fired"] >= 1 and listed["last_fire"] is not None
        out, err, status = await quicx_command("schedule", "remove", "tick", control)
        assert (out, status) == (b"schedule tick removed\n", 0), err
        out, err, status = await quicx_command("schedule", "remove", "tick", control)
        assert (err, status) == (b"quicx: no schedule named 'tick'\n", 1)
        out, err, status = await quicx_command("schedules", connect_to)
        assert out == b"no schedules\n"
    finally:
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_cli_shows_delayed_tasks(start) -> None:
    daemon = start()
    producer = await connect(reactor, daemon.address)
    connect_to = f"--connect={daemon.address}"
    try:
        task_id = await producer.submit("t", b"x", delay=3600)
        out, err, status = await quicx_command("task", str(task_id), connect_to)
        first, waiting, due = out.decode().splitlines()
        assert first.startswith(f"task {task_id} (t): delayed in queue default")
        assert waiting.startswith("  waiting: it is delayed for 359")
        assert re.fullmatch(r"  due 20\d\d-\d\d-\d\d \d\d:\d\d:\d\dZ, in 59m 5\ds", due), due
        out, err, status = await quicx_command("queues", connect_to)
        assert status == 0, err
        header, row = out.decode().splitlines()
        assert header.split()[:5] == ["queue", "queued", "running", "delayed", "dead"]
        assert row.split()[:5] == ["default", "0", "0", "1", "0"]
    finally:
        producer.close()
