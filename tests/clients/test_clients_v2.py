"""
The clients and the command line in protocol version 2, against a real
daemon: queues, priorities, keys, cancel, pause, introspection, the worker's
queues and context, and the fallback to version 1.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import cast

import pytest
import pytest_twisted
from twisted.internet import defer, reactor
from twisted.internet.task import deferLater
from twisted.logger import ILogObserver, globalLogPublisher

from quicx import __version__
from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.clients.twisted_client import ProducerService, connect
from quicx.clients.worker import TaskContext, Worker
from quicx.daemon.control import fetch_status
from quicx.protocol import codec, outcomes, taskflow, wire
from quicx.protocol.errors import (
    Conflict,
    Forbidden,
    NeedsVersion2,
    NotFound,
    QueueFull,
    TaskCancelled,
)
from quicx.protocol.frames import Frame, FrameParser
from tests.cli.test_cli import env_for, quicx
from tests.conftest import DaemonProcess
from tests.peer import Peer

ROOT = Path(__file__).resolve().parents[2]


def address(daemon: DaemonProcess) -> str:
    return daemon.client_address


def admin(daemon: DaemonProcess) -> QuicxClient:
    return QuicxClient(f"unix:{daemon.control_path}")


def test_submit_options_cancel_and_introspection(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as client, admin(daemon) as root:
        low = client.submit("mail", b"low", queue="mail", priority=1, fairness_key="acme")
        high = client.submit("mail", b"high", queue="mail", priority=9)
        assert client.version == 2 and client.server["server"] == "quicx"
        assert client.submit("mail", b"again", queue="mail", key="k") == client.submit(
            "mail", b"again", queue="mail", key="k"
        )
        peeked = client.peek("mail", 10)
        assert [(t["id"], t["priority"], t["state"]) for t in peeked][:2] == [
            (high, 9, "queued"),
            (low, 1, "queued"),
        ]
        (mail,) = [q for q in client.queues() if q["name"] == "mail"]
        assert (mail["depth"], mail["paused"], mail["workers"]) == (3, False, 0)
        why = {r["reason"] for r in client.task(low)["why"]}
        assert why == {"no_workers", "ahead"}
        assert client.cancel(low)["state"] == "cancelled"
        with pytest.raises(TaskCancelled):
            client.wait(low, timeout=5)
        with pytest.raises(NotFound):
            client.cancel(low)
        with pytest.raises(Forbidden):
            client.pause("mail")
        assert root.pause("mail") == {"queue": "mail", "paused": True}
        assert client.queues()[-1]["paused"] is True
        assert root.purge("mail") == {"queue": "mail", "purged": 2}
        with pytest.raises(NotFound):
            client.peek("nowhere")


def test_hello_names_the_client_on_every_connection(daemon: DaemonProcess) -> None:
    def clients() -> set[str]:
        return {c["client"] for c in fetch_status(str(daemon.control_path))["clients"]}

    with QuicxClient(address(daemon)) as client:
        client.stats()
        assert clients() == {f"quicx-python {__version__}"}
        answer = client.hello("billing", "2.3", ["queues", "teleport"])
        assert answer["missing"] == ["teleport"] and client.server == answer
        assert clients() == {"billing 2.3"}
        client.close()
        client.stats()  # a new connection: it says the same
        assert clients() == {"billing 2.3"}


@pytest_twisted.ensureDeferred
async def test_twisted_hello(daemon: DaemonProcess) -> None:
    client = await connect(reactor, address(daemon))
    try:
        assert client.server["server"] == "quicx"
        answer = await client.hello("svc", "1.0", ["cancel"])
        assert answer["missing"] == [] and client.server is answer
        statuses = fetch_status(str(daemon.control_path))["clients"]
        assert [c["client"] for c in statuses] == ["svc 1.0"]
    finally:
        client.close()


def test_another_clients_task_needs_the_admin_role(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as owner, QuicxClient(address(daemon)) as other:
        task_id = owner.submit("t", b"x")
        with pytest.raises(Forbidden):
            other.cancel(task_id)
        with admin(daemon) as root:
            assert root.cancel(task_id)["id"] == task_id


def test_a_running_task_is_not_cancelled(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as client, Peer(daemon.address) as worker:
        task_id = client.submit("slow", b"")
        task = worker.request(taskflow.encode_ready())
        assert task.task_id == task_id
        with pytest.raises(Conflict, match="not interrupted"):
            client.cancel(task_id)
        worker.send(outcomes.encode_ack(task_id, task.token))
        client.wait(task_id, timeout=10)


def test_an_ack_of_task_0_is_malformed(daemon: DaemonProcess) -> None:
    """The short ACK's fast path still sends task 0 to the decoder's refusal."""
    with QuicxClient(address(daemon)) as client, Peer(daemon.address) as worker:
        task_id = client.submit("t", b"")
        task = worker.request(taskflow.encode_ready())
        worker.send(outcomes.encode_ack(0, task.token))
        error = worker.receive()
        assert error == wire.Error(codec.ErrorCode.INVALID_MESSAGE, "ACK names task 0")
        worker.send(outcomes.encode_ack(task_id, task.token))
        client.wait(task_id, timeout=10)


def test_a_version_1_daemon_gets_version_1_and_options_are_refused(start_daemon) -> None:
    daemon = start_daemon("--protocol-versions=1")
    with QuicxClient(address(daemon)) as client:
        task_id = client.submit("t", b"x")
        assert client.version == 1
        with pytest.raises(NeedsVersion2):
            client.submit("t", b"x", queue="mail")
        with pytest.raises(NeedsVersion2):
            client.queues()
        assert client.stats().queue_depth == 1
        assert task_id == 1


def test_the_fallback_to_version_1_is_logged_once(start_daemon, caplog) -> None:
    daemon = start_daemon("--protocol-versions=1")
    with QuicxClient(address(daemon)) as client:
        client.submit("t", b"x")
        client.close()  # the next call connects again, and falls back again
        client.submit("t", b"x")
    assert [r.getMessage() for r in caplog.records] == [
        f"{address(daemon)} speaks protocol version 1 only: this client speaks version 1"
        " to it (queues, priorities, keys, cancel and introspection are unavailable)"
    ]


@pytest_twisted.ensureDeferred
async def test_twisted_clients_against_a_version_1_daemon(start_daemon) -> None:
    daemon = start_daemon("--protocol-versions=1")
    logged: list[str] = []

    def observe(event: dict) -> None:
        if event.get("log_level") is not None and "version 1 only" in event.get("log_format", ""):
            logged.append(event["log_format"])

    globalLogPublisher.addObserver(cast(ILogObserver, observe))
    service = ProducerService(reactor, address(daemon))
    service.startService()
    try:
        client = await connect(reactor, address(daemon))
        assert (client.version, client.server) == (1, {})
        with pytest.raises(NeedsVersion2):
            await client.queues()
        # The service's own idempotency key is left out; one given is refused.
        assert await service.submit("t", b"x") == 1
        with pytest.raises(NeedsVersion2):
            await service.submit("t", b"x", key="order-7")
        assert await client.submit("t", b"y") == 2
        assert len(logged) == 2  # one per connection
        client.close()
    finally:
        globalLogPublisher.removeObserver(cast(ILogObserver, observe))
        await service.stopService()


@pytest_twisted.ensureDeferred
async def test_worker_falls_back_to_the_default_queue_of_a_version_1_daemon(start_daemon) -> None:
    daemon = start_daemon("--protocol-versions=1")
    seen: list[tuple[bytes, TaskContext]] = []
    worker = Worker(queues=["mail"])

    @worker.handler("t")
    def handle(payload: bytes, context: TaskContext) -> None:
        seen.append((payload, context))

    worker.start(reactor, address(daemon))
    try:
        with QuicxClient(address(daemon)) as client:
            task_id = client.submit("t", b"x")
            await until(lambda: bool(seen))
            client.wait(task_id, timeout=10)
        ((payload, context),) = seen
        assert payload == b"x"
        assert (context.task_id, context.task_type, context.queue) == (task_id, "t", None)
        assert (context.priority, context.attempt, context.key, context.fairness_key) == (
            0,
            1,
            None,
            None,
        )
        assert abs(context.enqueued_at - time.time()) < 30
    finally:
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_twisted_admin_actions_on_the_control_socket(daemon: DaemonProcess) -> None:
    producer = await connect(reactor, address(daemon))
    root = await connect(reactor, f"unix:{daemon.control_path}")
    try:
        task_id = await producer.submit("t", b"x", queue="mail")
        with pytest.raises(Forbidden):
            await producer.pause("mail")
        assert await root.pause("mail") == {"queue": "mail", "paused": True}
        assert await root.resume("mail") == {"queue": "mail", "paused": False}
        assert await root.purge("mail") == {"queue": "mail", "purged": 1}
        with pytest.raises(TaskCancelled):
            await producer.outcome(task_id)
        with pytest.raises(NotFound):
            await root.resume("nowhere")
        with pytest.raises(ValueError, match="queue name"):
            await root.pause("no such name")
    finally:
        producer.close()
        root.close()


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    """Let the reactor run until C{condition()} holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached in time"
        await deferLater(reactor, 0.05, lambda: None)


class CuttingProxy:
    """
    A TCP proxy to the daemon that, on its first connection, drops both ends
    when the daemon's first OK comes, instead of passing it on: a SUBMIT the
    daemon accepted whose answer the producer never hears.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp:127.0.0.1:{self.listener.getsockname()[1]}"
        self.cut = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                downstream, _ = self.listener.accept()
            except OSError:
                return  # closed
            upstream = socket.create_connection(self.target)
            watch = (
                None
                if self.cut.is_set()
                else FrameParser(1 << 20, check_types=False, v2_max_length=1 << 20)
            )
            for source, sink, parser in (
                (downstream, upstream, None),
                (upstream, downstream, watch),
            ):
                threading.Thread(
                    target=self._pipe, args=(source, sink, parser), daemon=True
                ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, watch: FrameParser | None) -> None:
        try:
            while data := source.recv(1 << 16):
                if watch is not None and any(
                    isinstance(e, Frame) and e.message_type == wire.MessageType.OK
                    for e in watch.feed(data)
                ):
                    self.cut.set()
                    break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):  # shutdown: it wakes the other thread's recv
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()

    def close(self) -> None:
        self.listener.close()


@pytest_twisted.ensureDeferred
async def test_producer_service_resubmits_a_submit_whose_answer_was_lost(
    daemon: DaemonProcess,
) -> None:
    proxy = CuttingProxy(daemon.address)
    service = ProducerService(reactor, proxy.address)
    service.startService()
    try:
        waiting = defer.ensureDeferred(service.submit_and_wait("t", b"once"))
        await until(proxy.cut.is_set)
        with Peer(daemon.address) as worker:
            task = worker.request(taskflow.encode_ready(1), timeout=10)
            assert task.payload == b"once" and len(task.key) == 32  # the service's own key
            # The service resubmits under that key: the daemon answers the
            # running task's id, queues no copy, and makes it the producer.
            await until(lambda: fetch_status(str(daemon.control_path))["tasks"]["duplicates"] == 1)
            worker.send(outcomes.encode_ack(task.task_id, task.token))
            assert await waiting == task.task_id
            assert worker.nothing_for(0.3)
    finally:
        proxy.close()
        await service.stopService()


def test_max_depth_is_queue_full(start_daemon, tmp_path: Path) -> None:
    config = tmp_path / "quicx.conf"
    config.write_text("[queue small]\nmax_depth = 1\n")
    daemon = start_daemon(f"--config={config}", "--listen=tcp:0:interface=127.0.0.1")
    with QuicxClient(address(daemon)) as client:
        client.submit("t", b"x", queue="small")
        with pytest.raises(QueueFull, match="max_depth = 1"):
            client.submit("t", b"x", queue="small")
        results = client.submit_many(
            [("t", b"a", Options(queue="other", priority=3)), ("t", b"b")],
            return_exceptions=True,
        )
        assert all(isinstance(r, int) for r in results)


class Recorder:
    """Handlers of every shape, each noting the context it was given (or None)."""

    def __init__(self) -> None:
        self.contexts: list[TaskContext | None] = []

    def plain(self, payload: bytes) -> None:
        self.contexts.append(None)

    def with_context(self, payload: bytes, context: TaskContext) -> None:
        self.contexts.append(context)

    def optional_context(self, payload: bytes, context: TaskContext | None = None) -> None:
        self.contexts.append(context)

    def keyword_only(self, payload: bytes, *, context: TaskContext | None = None) -> None:
        self.contexts.append(context)

    def star(self, *args: TaskContext) -> None:
        self.contexts.append(args[1] if len(args) > 1 else None)

    def __call__(self, payload: bytes, context: TaskContext) -> None:
        self.contexts.append(context)


@pytest.mark.parametrize(
    ("shape", "gets_context"),
    [
        ("plain", False),
        ("with_context", True),
        ("optional_context", True),
        ("keyword_only", False),
        ("star", True),
        ("__call__", True),
    ],
)
def test_a_handler_gets_the_context_if_its_signature_takes_a_second_argument(
    shape: str, gets_context: bool
) -> None:
    recorder = Recorder()
    worker = Worker()
    worker.register(
        "t", recorder if shape == "__call__" else getattr(recorder, shape), thread=False
    )
    task = taskflow.Task(7, b"t", b"x", "mail", 9, 2, 1_700_000_000_500, b"k", b"acme")
    assert worker.run(task) is None  # done
    context = TaskContext(7, "t", "mail", 9, 2, 1_700_000_000.5, b"k", b"acme")
    assert recorder.contexts == [context if gets_context else None]


@pytest_twisted.ensureDeferred
async def test_worker_queues_in_order_and_context(daemon: DaemonProcess) -> None:
    seen: list[TaskContext] = []
    done = defer.Deferred()
    worker = Worker(queues=["urgent", "bulk"], credits=1)

    @worker.handler("job")
    def job(payload: bytes, context: TaskContext) -> None:
        seen.append(context)
        if len(seen) == 3:
            reactor.callFromThread(done.callback, None)

    client = await connect(reactor, address(daemon))
    ids = [
        await client.submit("job", b"1", queue="bulk", priority=9),
        await client.submit("job", b"2", queue="urgent", priority=0, key="k-2"),
        await client.submit("job", b"3", queue="urgent", priority=5, fairness_key="acme"),
    ]
    worker.start(reactor, address(daemon))
    try:
        await done
        assert [c.task_id for c in seen] == [ids[2], ids[1], ids[0]]
        assert [(c.queue, c.priority, c.attempt) for c in seen] == [
            ("urgent", 5, 1),
            ("urgent", 0, 1),
            ("bulk", 9, 1),
        ]
        assert seen[1].key == b"k-2" and seen[0].fairness_key == b"acme"
        assert abs(seen[0].enqueued_at - time.time()) < 30
    finally:
        client.close()
        await worker.stop()


@pytest_twisted.ensureDeferred
async def test_producer_service_resubmits_under_its_key_after_a_restart(
    start_daemon, tmp_path: Path
) -> None:
    journal = tmp_path / "j"
    daemon = start_daemon(f"--journal={journal}", "--fsync=always")
    service = ProducerService(reactor, address(daemon))
    service.startService()
    try:
        first = await service.submit("t", b"x", key="order-7")
        port = daemon.port
        daemon.stop()
        again = start_daemon(f"--journal={journal}", f"--listen=tcp:{port}:interface=127.0.0.1")
        second = await service.submit("t", b"x", key="order-7")
        assert second == first
        with QuicxClient(again.client_address) as client:
            assert [q["depth"] for q in client.queues() if q["name"] == "default"] == [1]
    finally:
        await service.stopService()


def test_cli_queues_peek_task_and_admin_commands(daemon: DaemonProcess) -> None:
    env = env_for(daemon)
    control = f"--control={daemon.control_path}"
    first = quicx("submit", "t", "a", "--queue", "mail", "--priority", "7", env=env)
    assert first.returncode == 0, first.stderr
    task_id = int(first.stdout)
    listed = json.loads(quicx("queues", "--json", env=env).stdout)
    assert {"name", "depth", "paused", "workers"} <= listed[-1].keys()
    peeked = json.loads(quicx("peek", "mail", "--json", env=env).stdout)
    assert {k: peeked[0][k] for k in ("id", "type", "queue", "priority", "state")} == {
        "id": task_id,
        "type": "t",
        "queue": "mail",
        "priority": 7,
        "state": "queued",
    }
    explained = quicx("task", str(task_id), env=env).stdout.splitlines()
    assert explained[0].startswith(f"task {task_id} (t): queued in queue mail, priority 7")
    assert explained[0].endswith("not yet delivered to a worker")
    assert explained[1:] == [
        "  waiting: no worker is subscribed to queue mail",
        "  estimated start: unknown (nothing has finished in this queue lately)",
    ]
    header, row = quicx("peek", "mail", env=env).stdout.splitlines()
    assert header.split("  ")[:2] == ["id", "type"] and row.split()[:4] == [
        str(task_id),
        "t",
        "7",
        "queued",
    ]
    assert quicx("pause", "mail", control, env=env).stdout == "queue mail paused\n"
    refused = quicx("purge", "mail", control, env=env)
    assert (refused.returncode, refused.stderr.count("\n")) == (2, 1)
    assert "--yes" in refused.stderr
    purged = quicx("purge", "mail", "--yes", control, env=env)
    assert purged.stdout == "queue mail: 1 queued tasks cancelled\n"
    missing = quicx("cancel", str(task_id), control, env=env)
    assert missing.returncode == 1
    assert missing.stderr == f"quicx: no queued or running task {task_id}\n"
    bad = quicx("submit", "t", "a", "--priority", "256", env=env)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_cli_shows_a_task_types_control_characters_escaped(daemon: DaemonProcess) -> None:
    """A producer names its task types: peek and task must not write its escape codes."""
    env = env_for(daemon)
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        task_id = client.submit("\x1b]0;owned\x07\x1b[2J", b"", queue="escapes")
    peeked = quicx("peek", "escapes", env=env)
    shown = quicx("task", str(task_id), env=env)
    for result in (peeked, shown):
        assert (result.returncode, result.stderr) == (0, "")
        assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert "\\x1b]0;owned\\x07\\x1b[2J" in peeked.stdout
    assert shown.stdout.startswith(f"task {task_id} (\\x1b]0;owned\\x07\\x1b[2J): queued")
