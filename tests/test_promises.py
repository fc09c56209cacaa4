"""
The promises the docs make, each against a real daemon process on loopback:
replies leave in request order whatever the fsync mode, a task timeout works
with READY credits, the file-descriptor limit is fitted to max_connections,
FAILED reasons fit the frame limit, a setting that cannot be honoured stops
the start, a second SIGTERM does not break the stop, and failures are logged
as a summary rather than line by line.
"""

from __future__ import annotations

import resource
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from quicx.daemon.control import fetch_status
from quicx.protocol import wire
from quicx.protocol.wire import ErrorCode
from tests.conftest import DaemonProcess, config_option
from tests.net.test_tls import pki as pki  # a fixture
from tests.peer import Peer
from tools.launcher import daemon_command

# -- every reply on a connection leaves in request order -----------------------------


@pytest.mark.parametrize("fsync", ["always", "everysec", "no", None])
def test_pipelined_replies_keep_request_order(tmp_path: Path, start_daemon, fsync) -> None:
    args = [] if fsync is None else [f"--journal={tmp_path / 'j'}", f"--fsync={fsync}"]
    daemon = start_daemon(*args)
    bad_submit = wire.frame(wire.MessageType.SUBMIT, b"\x09short")  # type longer than it
    pipeline = [
        (wire.encode_submit(b"t", b"one"), wire.Ok),
        (wire.encode_submit(b"t", b"two"), wire.Ok),
        (bad_submit, wire.Error),
        (wire.encode_submit(b"t", b"x" * 1025), wire.Error),
        (wire.encode_heartbeat(), wire.Pong),
        (wire.encode_stats(), wire.StatsResponse),
        (wire.encode_submit(b"t", b"three"), wire.Ok),
    ] * 20
    with Peer(daemon.address) as producer:
        producer.send(b"".join(request for request, _ in pipeline))
        replies = [producer.receive() for _ in pipeline]
    assert [type(reply) for reply in replies] == [kind for _, kind in pipeline]
    ids = [reply.task_id for reply in replies if isinstance(reply, wire.Ok)]
    assert ids == sorted(ids) and len(set(ids)) == 60


# -- READY credits with a task timeout ----------------------------------------------------


# -- file descriptors --------------------------------------------------------------------


def _limit_files(soft: int, hard: int):
    def preexec() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return preexec


def _start_limited(tmp_path: Path, soft: int, hard: int, *args: str) -> DaemonProcess:
    daemon = DaemonProcess(tmp_path, list(args))
    daemon.preexec = _limit_files(soft, hard)
    return daemon.start()


def test_the_soft_file_limit_is_raised_to_fit_max_connections(tmp_path: Path) -> None:
    daemon = _start_limited(tmp_path, 256, 8192)
    try:
        limits = Path(f"/proc/{daemon.process.pid}/limits").read_text()  # type: ignore[union-attr]
        line = next(x for x in limits.splitlines() if x.startswith("Max open files"))
        assert line.split()[3:5] == [str(4096 + 128), "8192"]
        assert "max_connections lowered" not in daemon.log()
    finally:
        daemon.kill()


def test_past_a_low_hard_limit_connections_get_the_documented_error(tmp_path: Path) -> None:
    daemon = _start_limited(tmp_path, 200, 200)
    opened: list[socket.socket] = []
    try:
        assert "max_connections lowered from 4096 to 72: the open-file limit is 200" in daemon.log()
        for _ in range(72):
            peer = Peer(daemon.address)
            opened.append(peer.sock)
            assert isinstance(peer.request(wire.encode_stats()), wire.StatsResponse)
        for _ in range(60):
            with Peer(daemon.address) as refused:
                reply = refused.receive()
                assert isinstance(reply, wire.Error) and reply.code == ErrorCode.QUEUE_FULL
                assert "max_connections = 72" in reply.message
        status = fetch_status(str(daemon.control_path))
        assert status["connections"]["total"] == 72
    finally:
        for sock in opened:
            sock.close()
        daemon.kill()


def _answer(sock: socket.socket, size: int = 4096) -> bytes:
    """What the daemon sent on C{sock} before closing it (up to C{size} bytes)."""
    sock.settimeout(10)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            break
        data += chunk
    return data


def test_connections_past_the_limit_get_the_error_even_once_descriptors_run_out(
    tmp_path: Path,
) -> None:
    """
    Past the 128 descriptors kept beyond max_connections, Twisted closed what
    it accepted unanswered: of 204 connections at once, 87 were reset.
    """
    daemon = _start_limited(tmp_path, 200, 200)
    opened: list[socket.socket] = []
    try:
        for _ in range(72):
            peer = Peer(daemon.address)
            opened.append(peer.sock)
            assert isinstance(peer.request(wire.encode_stats()), wire.StatsResponse)
        burst = [socket.create_connection(daemon.address) for _ in range(300)]
        opened += burst
        for sock in burst:
            answer = _answer(sock)
            assert answer[:2] == bytes((1, wire.MessageType.ERROR)), answer
            assert answer[6] == ErrorCode.QUEUE_FULL and b"too many connections" in answer
        # Whether the spare answered some of them (the log's "out of file
        # descriptors") depends on how many wait at once, so on the machine's
        # load: tests/net/test_spare.py proves that path in-process.
        with Peer(daemon.address) as refused:
            assert isinstance(refused.receive(), wire.Error)
        opened.pop(0).close()
        status = fetch_status(str(daemon.control_path))
        assert status["connections"]["total"] <= 72
    finally:
        for sock in opened:
            sock.close()
        daemon.kill()


def test_idle_dashboard_connections_leave_the_task_port_its_descriptors(tmp_path: Path) -> None:
    """
    600 idle connections to the dashboard (no token needed to open one)
    took every descriptor of 512: a new producer was reset, unanswered.
    """
    daemon = _start_limited(
        tmp_path, 512, 512, "--web-listen=tcp:0:interface=127.0.0.1", "--web-monitor-token=m"
    )
    web = daemon.announced_port("dashboard")
    assert "max_connections lowered from 4096 to 320: the open-file limit is 512" in daemon.log()
    opened: list[socket.socket] = []
    try:
        opened += [socket.create_connection(("127.0.0.1", web)) for _ in range(600)]
        for sock in opened[64:]:  # the first 64 are held; the rest answered and closed
            answer = _answer(sock)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert b"too many connections ([web] max_connections = 64)" in answer
        with Peer(daemon.address) as producer:
            assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
        assert fetch_status(str(daemon.control_path))["connections"]["total"] == 0
    finally:
        for sock in opened:
            sock.close()
        daemon.kill()


def test_tls_dashboard_connections_past_the_cap_leave_the_task_port_its_descriptors(
    tmp_path: Path, pki
) -> None:
    """
    Over TLS, the 503 past [web] max_connections waits for the client's
    handshake: 600 connections that never sent one each kept a descriptor,
    for good, and took every one of 512 (a new producer was reset).
    """
    server, key = pki["server"]
    conf = tmp_path / "tls-web.conf"
    conf.write_text(
        f"[server]\nlisten = tcp:0:interface=127.0.0.1\n[tls]\ncertificate = {server}\n"
        f"private_key = {key}\n[web]\nlisten = tls:0:interface=127.0.0.1\nmonitor_token = m\n"
    )
    daemon = _start_limited(tmp_path, 512, 512, f"--config={conf}")
    web = daemon.announced_port("dashboard")
    # 64 held, 64 waiting to be refused: the budget counts both.
    assert "max_connections lowered from 4096 to 256: the open-file limit is 512" in daemon.log()
    opened: list[socket.socket] = []
    try:
        opened += [socket.create_connection(("127.0.0.1", web)) for _ in range(600)]
        # The daemon has seen them all once a connection made after them is answered.
        with Peer(daemon.address) as producer:
            assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
        with Peer(daemon.address) as producer:
            assert isinstance(producer.submit(b"t", b"p"), wire.Ok)
        assert daemon.alive()
    finally:
        for sock in opened:
            sock.close()
        daemon.kill()


# -- the HTTP listeners: connections at once, no request body ---------------------------------

HTTP = {
    "metrics": ("--metrics-listen=tcp:0:interface=127.0.0.1", "metrics"),
    "web": ("--web-listen=tcp:0:interface=127.0.0.1", "dashboard"),
}
"""Each HTTP listener's section: how it is turned on, and what it is announced as."""


def _http_daemon(start_daemon, section: str, *args: str) -> tuple[DaemonProcess, int]:
    listen, announced = HTTP[section]
    daemon = start_daemon(listen, "--web-monitor-token=m", *args)
    return daemon, daemon.announced_port(announced)


def _get(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        return _answer(sock, 1 << 20)


@pytest.mark.parametrize("section", HTTP)
def test_an_http_listener_holds_max_connections_and_answers_one_more_503(
    start_daemon, section: str
) -> None:
    daemon, port = _http_daemon(start_daemon, section, f"--{section}-max-connections=3")
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
    try:
        for _ in range(2):
            answer = _get(port)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
            assert f"too many connections ([{section}] max_connections = 3)".encode() in answer
        held.pop().close()
        deadline = time.monotonic() + 10
        while (answer := _get(port)).startswith(b"HTTP/1.1 503 "):  # until the close is seen
            assert time.monotonic() < deadline, answer
        assert answer.startswith((b"HTTP/1.1 200 ", b"HTTP/1.1 401 ")), answer
        assert daemon.alive()
    finally:
        for sock in held:
            sock.close()


@pytest.mark.parametrize("section", HTTP)
def test_an_http_request_body_is_refused_from_its_header(start_daemon, section: str) -> None:
    """/metrics took (and spooled to disk) a 64 MiB POST body."""
    _daemon, port = _http_daemon(start_daemon, section)
    heads = [
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 67108864\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nExpect: 100-continue\r\n\r\n",
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
    ]
    for head in heads:
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(head)  # the body never comes: the answer and the close do
            answer = _answer(sock)
        assert answer.startswith(b"HTTP/1.1 413 "), (head, answer)
        assert answer.endswith(b"\r\n\r\nno request here has a body\n"), answer
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
        assert not _answer(sock, 12).startswith(b"HTTP/1.1 413")


# -- FAILED reasons and the frame limit -----------------------------------------------------


@pytest.mark.parametrize("limit", [1024, 4096, 100_000])
def test_a_reason_of_max_reason_length_is_accepted_and_one_more_is_refused(
    tmp_path: Path, start_daemon, limit: int
) -> None:
    conf = "" if limit == 1024 else f"[limits]\nmax_reason_length = {limit}\n"
    daemon = start_daemon(config_option(tmp_path, conf))
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"t", b"p")
        task = worker.request(wire.encode_ready())
        reply = worker.request(wire.encode_failed(task.task_id, "x" * (limit + 1)))
        assert isinstance(reply, wire.Error)
        if limit + 4 > 1280:  # the reason sets the frame limit: refused at the header
            assert reply.code == ErrorCode.PAYLOAD_TOO_LARGE
            assert f"exceeds the limit of {limit + 4}" in reply.message
        else:  # the largest SUBMIT sets it: the reason check refuses it
            assert reply.code == ErrorCode.INVALID_MESSAGE
            assert f"exceeds max_reason_length ({limit})" in reply.message
        worker.send(wire.encode_failed(task.task_id, "y" * limit))
        assert producer.receive() == wire.Failed(ok.task_id, "y" * limit)


# -- settings that cannot be honoured; signals ------------------------------------------------


def run_twistd(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        daemon_command("--listen=tcp:0:interface=127.0.0.1", "--control=none", *args),
        capture_output=True,
        text=True,
        timeout=30,
        cwd=tmp_path,
    )


def test_an_events_directory_that_cannot_be_made_stops_the_start(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    result = run_twistd(tmp_path, f"--events={tmp_path / 'file' / 'events'}")
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"quicx: [events] directory: cannot create {tmp_path / 'file' / 'events'}: Not a directory"
    )
    assert "Traceback" not in result.stdout + result.stderr


def test_a_second_sigterm_cuts_the_drain_short_without_a_traceback(start_daemon) -> None:
    daemon = start_daemon("--drain-timeout=60")
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        producer.submit(b"t", b"never finished")
        assert isinstance(worker.request(wire.encode_ready()), wire.Task)
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGTERM)
        daemon.wait_for_log("draining: 0 queued and 1 running tasks")
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(10) == 0
        assert time.monotonic() - started < 5
    log = daemon.log()
    assert "SIGTERM again: not waiting for the drain" in log
    assert "Traceback" not in log and "ReactorNotRunning" not in log


# -- failures are summarised, not logged one by one --------------------------------------------


def test_failures_are_logged_as_a_summary(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(config_option(tmp_path, "[log]\nsummary_interval = 0.5\n"))
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ids = [producer.submit(b"resize", b"%d" % n).task_id for n in range(200)]
        worker.send(wire.encode_ready())
        for n, _ in enumerate(ids):
            task = worker.receive()
            reason = "bad image" if n < 199 else "disk full"
            worker.send(wire.encode_failed(task.task_id, reason))
        for _ in ids:
            assert isinstance(producer.receive(), wire.Failed)
    log = daemon.wait_for_log("task(s) failed in the last 0.5 s: disk full")
    assert "199 resize task(s) failed in the last 0.5 s: bad image" in log
    assert log.count("failed on ") == 2, "one line per reason, each with its last task"


def test_a_summary_interval_of_0_logs_each_failure(tmp_path: Path, start_daemon) -> None:
    daemon = start_daemon(config_option(tmp_path, "[log]\nsummary_interval = 0\n"))
    with Peer(daemon.address) as producer, Peer(daemon.address) as worker:
        ok = producer.submit(b"t", b"p")
        worker.request(wire.encode_ready())
        worker.send(wire.encode_failed(ok.task_id, "no"))
        assert producer.receive() == wire.Failed(ok.task_id, "no")
    daemon.wait_for_log(f"task {ok.task_id} (t) failed on ")
