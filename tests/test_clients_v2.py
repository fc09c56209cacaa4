"""
The clients and the command line in protocol version 2, against a real
daemon: queues, priorities, keys, cancel, pause, introspection, the worker's
queues and context, and the fallback to version 1.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer, reactor

from quicx.clients.blocking import QuicxClient
from quicx.clients.requests import Options
from quicx.clients.twisted_client import ProducerService, connect
from quicx.clients.worker import TaskContext, Worker
from quicx.protocol import v2
from quicx.protocol.errors import (
    Conflict,
    Forbidden,
    NeedsVersion2,
    NotFound,
    QueueFull,
    TaskCancelled,
)
from tests.conftest import DaemonProcess
from tests.peer import Peer
from tests.test_cli import env_for, quicx

ROOT = Path(__file__).resolve().parent.parent


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
        task = worker.request(v2.encode_ready())
        assert task.task_id == task_id
        with pytest.raises(Conflict, match="not interrupted"):
            client.cancel(task_id)
        worker.send(v2.encode_done(task_id))
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
    assert "no worker is subscribed" in quicx("task", str(task_id), env=env).stdout
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
