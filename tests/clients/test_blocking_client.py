"""The blocking client against a real daemon."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from quicx.clients.address import parse_address, split_addresses
from quicx.clients.blocking import QuicxClient
from quicx.clients.blocking_cluster import ClusterClient
from quicx.clients.cluster import TaskRef
from quicx.clients.requests import Options
from quicx.protocol import codec, link, taskflow, wire
from quicx.protocol.errors import (
    ConnectionLost,
    OutcomeUnknown,
    PayloadTooLarge,
    QueueFull,
    QuicxError,
    TaskFailed,
    UnknownTaskType,
)
from tests.conftest import DaemonProcess
from tests.peer import Peer


def address(daemon: DaemonProcess) -> str:
    return f"tcp:127.0.0.1:{daemon.port}"


def serve(
    daemon: DaemonProcess, count: int, fail: Collection[int] = frozenset()
) -> threading.Thread:
    """A raw worker in a thread that finishes C{count} tasks."""

    def work() -> None:
        with Peer(daemon.address) as worker:
            worker.send(wire.encode_ready())
            done = 0
            while done < count:
                message = worker.receive(timeout=30)
                if isinstance(message, wire.Wait):
                    continue
                if message.task_id in fail:
                    worker.send(wire.encode_failed(message.task_id, f"no {message.payload!r}"))
                else:
                    worker.send(wire.encode_done(message.task_id))
                done += 1

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_submit_wait_done_and_failed(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as client:
        first = client.submit("send_email", '{"to":"user@gmail.com"}')
        second = client.submit(b"send_email", b"x")
        worker = serve(daemon, 2, fail={second})
        client.wait(first, timeout=10)
        with pytest.raises(TaskFailed) as failed:
            client.wait(second, timeout=10)
        assert (failed.value.task_id, failed.value.reason) == (second, "no b'x'")
        worker.join(10)
        with pytest.raises(KeyError):
            client.wait(first)


def test_pipelined_ten_thousand_submits_on_one_connection(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as client:
        assert client.submit("t", b"first") == 1
        connection = client._sock
        ids = client.submit_many(("t", b"%d" % i) for i in range(10_000))
        assert ids == list(range(2, 10_002))
        assert client.stats().queue_depth == 10_001
        # Never reconnected: the same socket carried every SUBMIT.
        assert client._sock is connection
    with Peer(daemon.address) as worker:
        worker.send(wire.encode_ready())
        assert worker.receive().payload == b"first"


def test_submit_many_reports_refusals_in_place(tmp_path: Path, start_daemon) -> None:
    conf = tmp_path / "q.conf"
    conf.write_text("[allocator]\npool_size = 4096\nclass = 64,100\n")
    daemon = start_daemon(f"--config={conf}", "--listen=tcp:0:interface=127.0.0.1")
    with QuicxClient(address(daemon)) as client:
        results = client.submit_many((("t", b"p") for _ in range(100)), return_exceptions=True)
        accepted = [r for r in results if isinstance(r, int)]
        refused = [r for r in results if not isinstance(r, int)]
        assert accepted and refused
        assert all(isinstance(r, QueueFull) and r.code == 1 for r in refused)
        assert results == accepted + refused  # accepted until full, then refused
        with pytest.raises(QueueFull) as raised:
            client.submit_many([("t", b"p")])
        assert "queue full" in raised.value.message
        assert raised.value.results == [raised.value]


@pytest.mark.parametrize(("protocol", "limit"), [(1, 1280), (2, 1280 + 2 + 4096)])
def test_typed_errors(start_daemon, protocol: int, limit: int) -> None:
    daemon = start_daemon("--allow=send_email")
    with QuicxClient(address(daemon), protocol=protocol) as client:
        with pytest.raises(UnknownTaskType, match="unknown task type: mine"):
            client.submit("mine", b"")
        with pytest.raises(PayloadTooLarge, match="exceeds the largest size class"):
            client.submit("send_email", b"x" * 1100)
        with pytest.raises(
            PayloadTooLarge, match=r"its payload exceeds the largest size class \(1024"
        ):
            client.submit("send_email", b"x" * (limit + 1))
        assert client.submit("send_email", b"ok") == 1


def test_wait_times_out_and_can_wait_again(daemon: DaemonProcess) -> None:
    with QuicxClient(address(daemon)) as client:
        task_id = client.submit("t", b"p")
        with pytest.raises(TimeoutError):
            client.wait(task_id, timeout=0.3)
        serve(daemon, 1).join(10)
        client.wait(task_id, timeout=10)


def test_a_submit_many_cut_short_leaves_the_connection_in_step(daemon: DaemonProcess) -> None:
    def tasks() -> Iterator[tuple[str, bytes] | tuple[str, bytes, Options]]:
        yield from [("t", b"1"), ("t", b"2"), ("t", b"3")]
        yield ("t", b"4", Options(key=""))  # refused as it is encoded: an empty key

    with QuicxClient(address(daemon)) as client:
        with pytest.raises(ValueError, match="1 to 255 bytes, not 0"):
            # The first batch (1, 2) is sent, unread; the second is never sent.
            client.submit_many(tasks(), window=2)
        # Their OKs are not taken for this submit's; their outcomes still come.
        assert client.submit("t", b"5") == 3
        serve(daemon, 3).join(10)
        for task_id in (1, 2, 3):
            client.wait(task_id, timeout=10)


def test_an_answer_after_the_timeout_is_not_the_next_calls() -> None:
    """A raw daemon answers late: the first connection's HELLO, the second's SUBMIT."""
    listener = socket.create_server(("127.0.0.1", 0))
    late = threading.Event()

    def hello_late(peer: Peer) -> None:
        assert isinstance(peer.receive(), link.Hello)
        late.wait(5)
        with contextlib.suppress(OSError):  # the client gave up on this connection
            peer.send(link.encode_info({"server": "late"}))

    def submit_late(peer: Peer) -> None:
        assert isinstance(peer.receive(), link.Hello)
        peer.send(link.encode_info({"server": "slow"}))
        assert isinstance(peer.receive(), taskflow.Submit)
        late.wait(5)
        peer.send(taskflow.encode_ok(7))
        assert isinstance(peer.receive(), taskflow.Submit)
        peer.send(taskflow.encode_ok(8))

    def slow_daemon() -> None:
        threads = []
        for serve_one in (hello_late, submit_late):
            peer = Peer(listener.accept()[0])
            threads.append(threading.Thread(target=serve_one, args=(peer,), daemon=True))
            threads[-1].start()
        for thread in threads:
            thread.join(5)

    daemon = threading.Thread(target=slow_daemon, daemon=True)
    daemon.start()
    with QuicxClient(f"tcp:127.0.0.1:{listener.getsockname()[1]}", timeout=0.2) as client:
        with pytest.raises(TimeoutError):
            client.submit("t", b"first")  # HELLO unanswered: the connection is dropped
        with pytest.raises(TimeoutError):
            client.submit("t", b"second")  # on a new connection, unanswered in time
        late.set()
        client.timeout = 5
        assert client.submit("t", b"third") == 8
        assert client.server == {"server": "slow"}
    daemon.join(5)
    listener.close()


def test_a_malformed_answer_is_a_quicx_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))

    def garbling_daemon() -> None:
        with Peer(listener.accept()[0]) as peer:
            assert isinstance(peer.receive(), link.Hello)
            peer.send(codec.frame(codec.MessageType.INFO, b"{not json"))
            peer.wait_closed()

    thread = threading.Thread(target=garbling_daemon, daemon=True)
    thread.start()
    client = QuicxClient(f"tcp:127.0.0.1:{listener.getsockname()[1]}", timeout=5)
    with client, pytest.raises(QuicxError, match="sent a malformed message"):
        client.stats()
    thread.join(5)
    listener.close()


def test_daemon_restart_loses_outcomes_not_the_client(start_daemon) -> None:
    daemon = start_daemon()
    client = QuicxClient(address(daemon), timeout=5)
    task_id = client.submit("t", b"p")
    daemon.stop()
    with pytest.raises(OutcomeUnknown):
        client.wait(task_id)
    with pytest.raises(ConnectionLost, match="cannot connect"):
        client.submit("t", b"p")
    client.close()


def test_unreachable_daemon(tmp_path: Path) -> None:
    client = QuicxClient(f"unix:{tmp_path / 'nothing.sock'}", timeout=1)
    with pytest.raises(ConnectionLost, match="cannot connect to unix:"):
        client.stats()


def test_heartbeats_are_answered_while_waiting(start_daemon) -> None:
    daemon = start_daemon("--heartbeat-interval=0.2", "--heartbeat-timeout=0.6")
    with QuicxClient(address(daemon)) as client:
        # A monitor owes nothing, so only its PONGs keep it connected.
        for _ in range(3):
            stats = client.stats()
            with pytest.raises(TimeoutError):
                client.wait(client.submit("t", b"p"), timeout=0.5)
        assert stats.queue_depth == 2


def test_an_idle_client_the_daemon_dropped_sends_its_next_call_on_a_new_connection(
    start_daemon,
) -> None:
    daemon = start_daemon("--heartbeat-interval=0.1", "--heartbeat-timeout=0.3")
    cluster = ClusterClient([address(daemon)], timeout=5)
    with QuicxClient(address(daemon), timeout=5) as client, cluster:
        client.stats()  # a monitor owes nothing: silent, it is dropped
        cluster.clients[address(daemon)].stats()
        deadline = time.monotonic() + 5
        while daemon.log().count("silent for") < 2:
            assert time.monotonic() < deadline, daemon.log()
            time.sleep(0.05)
        assert client.submit("t", b"p") == 1  # never sent on the closed connection
        assert cluster.submit("t", b"p") == TaskRef(2, address(daemon))  # not NotAcknowledged
        assert client.stats().queue_depth == 2


def test_what_came_before_the_daemon_closed_is_kept_and_the_next_call_reconnects() -> None:
    """A raw daemon answers a SUBMIT, sends the task's outcome, and closes."""
    listener = socket.create_server(("127.0.0.1", 0))
    closed = threading.Event()

    def closing_daemon() -> None:
        for task_id in (7, 8):
            with Peer(listener.accept()[0]) as peer:
                assert isinstance(peer.receive(), link.Hello)
                peer.send(link.encode_info({"server": "raw"}))
                assert isinstance(peer.receive(), taskflow.Submit)
                peer.send(taskflow.encode_ok(task_id))
                peer.send(link.HEARTBEAT_FRAME + taskflow.encode_done(task_id))
            closed.set()

    thread = threading.Thread(target=closing_daemon, daemon=True)
    thread.start()
    with QuicxClient(f"tcp:127.0.0.1:{listener.getsockname()[1]}", timeout=5) as client:
        assert client.submit("t", b"p") == 7
        assert closed.wait(5)
        assert client.submit("t", b"q") == 8
        assert client.wait(7) is None  # its DONE, read before the close, is kept
    thread.join(5)
    listener.close()


def test_shared_by_threads(daemon: DaemonProcess) -> None:
    ids: list[int] = []
    with QuicxClient(address(daemon)) as client:

        def submit_some() -> None:
            for _ in range(200):
                ids.append(client.submit("t", b"p"))

        threads = [threading.Thread(target=submit_some) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(ids) == list(range(1, 801))


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("tcp:127.0.0.1:16381", ("127.0.0.1", 16381)),
        ("tcp:host=example.org:port=7", ("example.org", 7)),
        ("localhost:9", ("localhost", 9)),
        ("unix:/run/q.sock", "/run/q.sock"),
        ("unix:path=/run/q.sock", "/run/q.sock"),
    ],
)
def test_parse_address(text: str, parsed: object) -> None:
    assert parse_address(text)[1] == parsed


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tcp:host", "is not tcp:HOST:PORT"),
        ("tcp:h:port", "is not tcp:HOST:PORT"),
        ("unix:", "names no socket path"),
        ("nonsense", "is not tcp:HOST:PORT"),
        ("ssl:example.org:16381", "this client speaks tcp:, tls: and unix: addresses"),
        ("tls:example.org:16381:trustroots=x", "unknown tls: option trustroots"),
        ("tls:example.org", "is not tls:HOST:PORT"),
    ],
)
def test_parse_address_refuses(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_address(text)


def test_split_addresses_keeps_the_order_and_normalizes() -> None:
    assert split_addresses("tcp:h1:16381, h2:16381 ,unix:/run/q") == (
        "tcp:h1:16381",
        "tcp:h2:16381",
        "unix:/run/q",
    )
    assert split_addresses(["h1:1"]) == ("tcp:h1:1",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty address"),
        ("h1:1,,h2:2", "empty address"),
        ("h1:1,tcp:h1:1", "tcp:h1:1 named twice"),
        ([], "no daemon address"),
    ],
)
def test_split_addresses_refuses_empty_and_repeated(text: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_addresses(text)  # type: ignore[arg-type]
