"""
Integration tests: a real C{twistd -n quicx} process on a loopback port,
driven over real sockets.
"""

from __future__ import annotations

import socket
import struct
import time
from pathlib import Path

import pytest

from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode
from tests.conftest import DaemonProcess, config_option
from tests.peer import Peer

SMALL_POOL = """\
[allocator]
pool_size = 4096
class = 64,50
class = 128,50
"""


def small_pool(tmp_path: Path) -> str:
    path = tmp_path / "small.conf"
    path.write_text(SMALL_POOL + "[server]\nlisten = tcp:0:interface=127.0.0.1\n")
    return str(path)


def expect_error(reply: wire.Message, code: ErrorCode, fragment: str = "") -> None:
    assert isinstance(reply, wire.Error), reply
    assert reply.code == code, reply
    assert fragment in reply.message, reply


# -- the task life cycle ---------------------------------------------------------


def test_submit_dispatch_done_is_forwarded_to_the_producer(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"send_email", b'{"to":"user@gmail.com"}')
        assert isinstance(ok, wire.Ok)
        assert worker.request(wire.encode_ready()) == wire.Task(
            ok.task_id, b"send_email", b'{"to":"user@gmail.com"}'
        )
        worker.send(wire.encode_done(ok.task_id))
        assert producer.receive() == wire.Done(ok.task_id)


def test_failed_reason_is_forwarded_verbatim(daemon: DaemonProcess) -> None:
    reason = "SMTP 550: mailbox ünavailable ✉"
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"send_email", b"x")
        task = worker.request(wire.encode_ready())
        assert task.task_id == ok.task_id
        worker.send(wire.encode_failed(task.task_id, reason))
        assert producer.receive() == wire.Failed(ok.task_id, reason)
    # In the failure summary, within [log] summary_interval (5 s).
    line = daemon.wait_for_log(reason).splitlines()[-1]
    assert "1 send_email task(s) failed in the last 5 s: " + reason in line


def test_tasks_are_fifo_and_ids_increase(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        producer.send(b"".join(wire.encode_submit(b"t", b"%d" % i) for i in range(200)))
        ids = [producer.receive().task_id for _ in range(200)]
        assert ids == sorted(ids) and len(set(ids)) == 200
        worker.send(wire.encode_ready())
        for i, task_id in enumerate(ids):
            task = worker.receive()
            assert (task.task_id, task.payload) == (task_id, b"%d" % i)
            worker.send(wire.encode_done(task_id))
        assert [producer.receive() for _ in ids] == [wire.Done(i) for i in ids]


def test_worker_disconnect_requeues_at_the_head(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer:
        first = producer.submit(b"t", b"first")
        second = producer.submit(b"t", b"second")
        doomed = Peer(daemon.address)
        assert doomed.request(wire.encode_ready()).task_id == first.task_id
        doomed.close()
        with Peer(daemon.address) as rescuer:
            # The lost task comes back before the one queued behind it.
            assert rescuer.request(wire.encode_ready()) == wire.Task(first.task_id, b"t", b"first")
            rescuer.send(wire.encode_done(first.task_id))
            assert producer.receive() == wire.Done(first.task_id)
            assert rescuer.receive().task_id == second.task_id


def test_empty_payload_and_binary_payload(daemon: DaemonProcess) -> None:
    blob = bytes(range(256)) * 3 + b"\x00" * 255
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        empty = producer.submit(b"ping", b"")
        binary = producer.submit(b"blob", blob)
        assert worker.request(wire.encode_ready()) == wire.Task(empty.task_id, b"ping", b"")
        worker.send(wire.encode_done(empty.task_id))
        assert worker.receive() == wire.Task(binary.task_id, b"blob", blob)


# -- heartbeats ---------------------------------------------------------------------


def test_heartbeat_from_any_connection_gets_pong(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as fresh, Peer(daemon.address) as producer:
        assert fresh.request(wire.encode_heartbeat()) == wire.Pong()
        producer.submit(b"t", b"p")
        assert producer.request(wire.encode_heartbeat()) == wire.Pong()
        # A PONG is accepted silently.
        producer.send(wire.encode_pong())
        assert producer.nothing_for(0.2)


def test_silent_peers_get_heartbeats_and_are_dropped(start_daemon) -> None:
    daemon = start_daemon("--heartbeat-interval=0.2", "--heartbeat-timeout=0.8")
    with Peer(daemon.address) as answering, Peer(daemon.address) as silent:
        assert answering.request(wire.encode_ready()) == wire.Wait()
        assert silent.request(wire.encode_ready()) == wire.Wait()
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            assert answering.receive(timeout=1) == wire.Heartbeat()
            answering.send(wire.encode_pong())
        silent.wait_closed(timeout=1)
        assert answering.stats().workers_total == 1
    assert "silent for" in daemon.log()


def test_waiting_producer_is_kept_and_a_silent_busy_worker_is_not(start_daemon) -> None:
    daemon = start_daemon("--heartbeat-interval=0.2", "--heartbeat-timeout=0.6")
    with (
        Peer(daemon.address) as producer,
        Peer(daemon.address) as vanished,
        Peer(daemon.address) as worker,
    ):
        ok = producer.submit(b"long", b"p")
        assert vanished.request(wire.encode_ready()).task_id == ok.task_id
        assert worker.request(wire.encode_ready()) == wire.Wait()
        # The first worker is cut off without a FIN: it holds the task and
        # answers nothing.  The producer, blocked on the outcome, reads nothing.
        # The second worker answers its heartbeats and gets the task back.
        deadline = time.monotonic() + 3
        while (reply := worker.receive(timeout=3)) == wire.Heartbeat():
            worker.send(wire.encode_pong())
            assert time.monotonic() < deadline
        assert reply == wire.Task(ok.task_id, b"long", b"p")
        # The producer has been silent longer than the timeout, and stays.
        worker.send(wire.encode_done(ok.task_id))
        while (reply := producer.receive()) == wire.Heartbeat():
            pass
        assert reply == wire.Done(ok.task_id)
        # Owed nothing now, the silent producer is dropped.
        producer.wait_closed(timeout=3)
        vanished.wait_closed(timeout=1)
    assert "silent for" in daemon.log()
    # The failure summary: at the latest when the daemon stops.
    daemon.stop()
    assert "1 long task(s) requeued in the last 5 s: its worker disconnected" in daemon.log()


def test_spare_busy_workers_keeps_a_silent_worker_holding_a_task(
    tmp_path: Path, start_daemon
) -> None:
    daemon = start_daemon(
        config_option(
            tmp_path,
            "heartbeat_interval = 0.2\nheartbeat_timeout = 0.6\nspare_busy_workers = yes\n",
        )
    )
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"long", b"p")
        assert worker.request(wire.encode_ready()).task_id == ok.task_id
        time.sleep(1.5)  # a reference-style worker, deaf while its handler runs
        worker.send(wire.encode_done(ok.task_id))
        while (reply := producer.receive()) == wire.Heartbeat():
            pass
        assert reply == wire.Done(ok.task_id)


# -- stats ----------------------------------------------------------------------------


def test_stats_track_queue_workers_and_pool(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as monitor, Peer(daemon.address) as producer:
        empty = monitor.stats()
        assert empty == wire.StatsResponse(0, 0, 0, 80, 8 * 1024 * 1024)
        for size in (10, 20, 100):
            producer.submit(b"t", b"x" * size)
        # Blocks of 16, 32 and 112 bytes, each with a 16-byte header.
        assert monitor.stats() == wire.StatsResponse(3, 0, 0, 80 + 32 + 48 + 128, 8 << 20)
        idle, busy = Peer(daemon.address), Peer(daemon.address)
        assert busy.request(wire.encode_ready()).payload == b"x" * 10
        assert monitor.stats() == wire.StatsResponse(2, 1, 0, 80 + 32 + 48 + 128, 8 << 20)
        busy.send(wire.encode_done(1))
        assert busy.receive().payload == b"x" * 20
        assert producer.receive() == wire.Done(1)
        assert monitor.stats() == wire.StatsResponse(1, 1, 0, 80 + 48 + 128, 8 << 20)
        busy.close()
        assert idle.request(wire.encode_ready()).payload == b"x" * 20
        assert idle.stats() == wire.StatsResponse(1, 1, 0, 80 + 48 + 128, 8 << 20)
        idle.close()


def test_producer_and_worker_may_ask_for_stats(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        producer.submit(b"t", b"p")
        assert producer.stats().queue_depth == 1
        worker.request(wire.encode_ready())
        assert worker.stats().workers_total == 1


# -- errors ----------------------------------------------------------------------------


def test_payload_too_large_keeps_the_connection(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer:
        # Fits the frame limit (1024 + 256) but not the largest class.
        expect_error(
            producer.submit(b"t", b"x" * 1025),
            ErrorCode.PAYLOAD_TOO_LARGE,
            "exceeds the largest size class (1024 bytes)",
        )
        ok = producer.submit(b"t", b"x" * 1024)
        assert isinstance(ok, wire.Ok)
        # A huge length prefix: refused at the header, the payload skipped.
        producer.send(struct.pack(">BBI", 1, 1, 50_000_000))
        expect_error(
            producer.receive(),
            ErrorCode.PAYLOAD_TOO_LARGE,
            "a SUBMIT of 50,000,000 bytes: its payload exceeds the largest size class (1024 bytes);"
            " a larger [allocator] class takes it",
        )
        chunk = b"\x00" * (1 << 20)
        for _ in range(47):
            producer.send(chunk)
        producer.send(b"\x00" * (50_000_000 - 47 * len(chunk)))
        assert isinstance(producer.submit(b"t", b"after"), wire.Ok)


def test_unknown_task_type_with_an_allow_list(start_daemon) -> None:
    daemon = start_daemon("--allow=send_email", "--allow=resize")
    with Peer(daemon.address) as producer:
        expect_error(
            producer.submit(b"mine_bitcoin", b"p"),
            ErrorCode.UNKNOWN_TASK_TYPE,
            "unknown task type: mine_bitcoin",
        )
        assert isinstance(producer.submit(b"send_email", b"p"), wire.Ok)
        assert producer.stats().queue_depth == 1


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (struct.pack(">BBI", 0, 11, 0), "unsupported protocol version 0"),
        (struct.pack(">BBI", 3, 11, 4) + b"abcd", "unsupported protocol version 3"),
        (struct.pack(">BBI", 1, 0x0D, 2) + b"zz", "unknown message type 0x0d"),
        (wire.frame(1, b"\x09abc"), "runs past"),
        (wire.frame(1, b""), "no task type length"),
        (wire.frame(4, b"x"), "READY payload must be empty or a 2-byte credit count"),
        (wire.frame(4, b"\x00\x00"), "READY credits must be at least 1"),
        (wire.frame(6, b"\x00\x00\x01"), "DONE payload must be 4 bytes"),
        (wire.frame(9, b"?"), "HEARTBEAT payload must be 0 bytes"),
        (wire.frame(10, b"?"), "PONG payload must be 0 bytes"),
        (wire.frame(11, b"?"), "STATS payload must be 0 bytes"),
        (wire.encode_ok(1), "OK is sent by the daemon"),
        (wire.encode_error(1, "x"), "ERROR is sent by the daemon"),
        (wire.encode_task(1, b"t", b""), "TASK is sent by the daemon"),
        (wire.encode_wait(), "WAIT is sent by the daemon"),
        (wire.encode_stats_response(wire.StatsResponse(0, 0, 0, 0, 0)), "STATS_RESPONSE is sent"),
    ],
)
def test_invalid_messages_get_error_2_and_the_connection_survives(
    module_daemon: DaemonProcess, data: bytes, fragment: str
) -> None:
    with Peer(module_daemon.address) as peer:
        expect_error(peer.request(data), ErrorCode.INVALID_MESSAGE, fragment)
        assert isinstance(peer.submit(b"t", b"p"), wire.Ok)


def test_failed_reason_that_is_not_utf8(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"t", b"p")
        worker.request(wire.encode_ready())
        worker.send(wire.encode_failed(ok.task_id, b"\xff\xfe"))
        expect_error(worker.receive(), ErrorCode.INVALID_MESSAGE, "not UTF-8")
        # The task is still the worker's to finish.
        worker.send(wire.encode_done(ok.task_id))
        assert producer.receive() == wire.Done(ok.task_id)


def test_roles_are_enforced(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"t", b"p")
        expect_error(
            producer.request(wire.encode_ready()),
            ErrorCode.INVALID_MESSAGE,
            "a producer connection cannot act as a worker",
        )
        expect_error(
            producer.request(wire.encode_done(ok.task_id)),
            ErrorCode.INVALID_MESSAGE,
            "a producer connection reported task",
        )
        task = worker.request(wire.encode_ready())
        expect_error(
            worker.request(wire.encode_submit(b"t", b"p")),
            ErrorCode.INVALID_MESSAGE,
            "a worker connection cannot act as a producer",
        )
        expect_error(
            worker.request(wire.encode_done(task.task_id + 1)),
            ErrorCode.INVALID_MESSAGE,
            f"task {task.task_id + 1} is not held by this worker (task {task.task_id})",
        )
        worker.send(wire.encode_done(task.task_id))
        assert producer.receive() == wire.Done(task.task_id)
        expect_error(
            worker.request(wire.encode_done(task.task_id)),
            ErrorCode.INVALID_MESSAGE,
            "is not held by this worker (no task)",
        )
    with Peer(daemon.address) as monitor:
        # STATS fixes no role: a client may look before it submits.
        monitor.stats()
        assert isinstance(monitor.submit(b"t", b"p"), wire.Ok)
        expect_error(
            monitor.request(wire.encode_ready()),
            ErrorCode.INVALID_MESSAGE,
            "a producer connection cannot act as a worker",
        )


def test_garbage_does_not_hurt_other_connections(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer:
        ok = producer.submit(b"t", b"precious")
        with Peer(daemon.address) as vandal:
            vandal.send(bytes(range(256)) * 64)
            vandal.send(b"\xff" * 6)
        with Peer(daemon.address) as worker:
            assert worker.request(wire.encode_ready()) == wire.Task(ok.task_id, b"t", b"precious")


# -- process life ----------------------------------------------------------------------


def test_startup_log_and_clean_sigterm(daemon: DaemonProcess) -> None:
    with Peer(daemon.address) as producer:
        producer.submit(b"t", b"p")
        producer.submit(b"t", b"q")
    log = daemon.log()
    assert "Quicx 0.1.0 (protocol v1 and v2); config: built-in default" in log
    assert "pool 8.0 MiB: 64 size classes from 16 to 1024 bytes, 37,843 blocks" in log
    assert "no journal: queued tasks are lost when the daemon stops" in log
    # A handful of lines up to "listening" (twistd's own included, and busy
    # polling's, on by default).
    assert len(log[: log.index("listening on")].splitlines()) <= 10, log
    assert daemon.stop() == 0  # a clean stop exits 0, not "killed by SIGTERM"
    log = daemon.log()
    assert "stopping with 2 queued, 0 delayed and 0 running tasks" in log
    assert "Server Shut Down." in log


def test_reference_config_file_unchanged(tmp_path: Path, start_daemon) -> None:
    conf = tmp_path / "quicx.conf"
    conf.write_text(
        "[server]\nport = 0\n\n[allocator]\npool_size = 1048576\n"
        "class = 16,10\nclass = 64,40\nclass = 1024,50\n"
    )
    daemon = start_daemon(f"--config={conf}")
    assert f"config: {conf}" in daemon.log()
    with Peer(daemon.address) as monitor:
        assert monitor.stats().pmad_bytes_total == 1048576


@pytest.mark.parametrize(
    ("conf", "args", "message"),
    [
        ("[allocator]\nclass = 16,50\nclass = 32,40\n", (), ":2: class percentages sum to 90"),
        ("[server]\nport = x\n", (), ":2: port: 'x' is not a port number"),
        ("", ("--listen=bogus:1",), "bad listen address 'bogus:1'"),
        ("", ("--pool-size=64",), "command line: pool of 64 bytes is smaller"),
    ],
)
def test_bad_configuration_refuses_to_start(
    tmp_path: Path, conf: str, args: tuple[str, ...], message: str
) -> None:
    path = tmp_path / "bad.conf"
    path.write_text(conf)
    daemon = DaemonProcess(tmp_path, [f"--config={path}", *args])
    with pytest.raises(RuntimeError, match="quicx exited with 1") as raised:
        daemon.start()
    assert message in str(raised.value)
    assert "Traceback" not in str(raised.value)


def test_port_in_use_is_one_clear_line(daemon: DaemonProcess, tmp_path: Path) -> None:
    other = DaemonProcess(tmp_path, [f"--listen=tcp:{daemon.port}:interface=127.0.0.1"])
    with pytest.raises(RuntimeError, match=f"cannot listen on tcp:{daemon.port}"):
        other.start()


def test_unix_endpoint(start_daemon, tmp_path: Path) -> None:
    sock = tmp_path / "q.sock"
    start_daemon(f"--listen=unix:{sock}", "--listen=tcp:0:interface=127.0.0.1")
    raw = socket.socket(socket.AF_UNIX)
    raw.connect(str(sock))
    raw.sendall(wire.encode_stats())
    assert raw.recv(100)[:2] == b"\x01\x0c"
    raw.close()


def test_replies_survive_a_reader_that_falls_behind(daemon: DaemonProcess) -> None:
    # The daemon sends directly while the socket takes data and queues in
    # Twisted once the kernel is full: every reply still arrives, in order.
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(daemon.address)
    count = 100_000
    requests = wire.encode_stats() * 1000
    for _ in range(count // 1000):
        sock.sendall(requests)
    with Peer(sock) as peer:
        for _ in range(count):
            assert isinstance(peer.receive(10), wire.StatsResponse)
        assert peer.nothing_for(0.2)
