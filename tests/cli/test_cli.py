"""The `quicx` command and the examples, run as real subprocesses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicx import __version__ as quicx_version
from quicx.clients.blocking import QuicxClient
from quicx.daemon import config
from tests.conftest import DaemonProcess

QUICX = str(Path(sys.executable).with_name("quicx"))
ROOT = Path(__file__).resolve().parents[2]


def quicx(*args: str, timeout: float = 60, **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([QUICX, *args], capture_output=True, text=True, timeout=timeout, **kwargs)


def env_for(daemon: DaemonProcess) -> dict[str, str]:
    return {
        **os.environ,
        "QUICX_ADDRESS": f"tcp:127.0.0.1:{daemon.port}",
        "PYTHONPATH": str(ROOT),
    }


class Background:
    """A long-running quicx subprocess whose output goes to a file."""

    def __init__(self, log: Path, *args: str, **kwargs) -> None:
        self.log_path = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [QUICX, *args], stdout=out, stderr=subprocess.STDOUT, **kwargs
            )

    def log(self) -> str:
        return self.log_path.read_text()

    def wait_for(self, pattern: str, timeout: float = 20) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := re.search(pattern, self.log()):
                return match
            assert self.process.poll() is None, self.log()
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} not in:\n{self.log()}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(15)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def background(tmp_path: Path):
    started: list[Background] = []

    def start(*args: str, **kwargs) -> Background:
        process = Background(tmp_path / f"bg{len(started)}.log", *args, **kwargs)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()


def test_version_is_one_parsable_line() -> None:
    result = quicx("version")
    assert result.returncode == 0
    assert re.fullmatch(r"quicx \d+\.\d+\.\d+ protocol 1, 2\n", result.stdout)


def test_version_option_prints_what_the_command_does() -> None:
    option = quicx("--version")
    assert (option.returncode, option.stderr) == (0, "")
    assert option.stdout == quicx("version").stdout == f"quicx {quicx_version} protocol 1, 2\n"


def test_init_prints_the_built_in_default(tmp_path: Path) -> None:
    result = quicx("init")
    path = tmp_path / "quicx.conf"
    path.write_text(result.stdout)
    assert config.load(path) == config.Config(source=str(path))


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["start"],
        ["stop"],
        ["status"],
        ["submit"],
        ["result"],
        ["group"],
        ["publish"],
        ["events"],
        ["worker"],
        ["version"],
        ["init"],
        ["report"],
        ["repair-journal"],
    ],
)
def test_every_command_has_help(command: list[str]) -> None:
    result = quicx(*command, "--help")
    assert result.returncode == 0
    assert "usage: quicx" in result.stdout
    assert len(result.stdout.splitlines()) > 3


def test_help_groups_the_commands_by_who_uses_them() -> None:
    result = quicx("--help")
    assert result.returncode == 0
    listed: dict[str, list[str]] = {}
    group: list[str] = []
    for line in result.stdout.splitlines():
        if re.fullmatch(r"[a-z ]+:", line) and line != "options:":
            group = listed.setdefault(line[:-1], [])
        elif match := re.fullmatch(r"  ([a-z][a-z-]*) {2,}\S.*", line):
            group.append(match.group(1))
    assert listed == {
        "run the daemon": ["start", "stop", "init", "repair-journal"],
        "producers and monitors": [
            "submit",
            "result",
            "group",
            "publish",
            "status",
            "queues",
            "peek",
            "task",
            "schedules",
            "events",
        ],
        "admins": [
            "cancel",
            "pause",
            "resume",
            "purge",
            "dlq",
            "tasks",
            "schedule",
            "step-down",
            "promote",
        ],
        "workers": ["worker", "workers", "quiet", "terminate"],
        "data": ["report"],
        "about quicx": ["version"],
    }
    assert "usage: quicx [-h] [--version] COMMAND ..." in result.stdout


def test_start_status_stop_find_the_daemon_from_quicx_config(tmp_path: Path, background) -> None:
    control, pid_file, events = tmp_path / "c.sock", tmp_path / "q.pid", tmp_path / "events"
    conf = tmp_path / "quicx.conf"
    conf.write_text(
        f"[server]\nlisten = tcp:0:interface=127.0.0.1\ncontrol = {control}\n"
        f"pid_file = {pid_file}\n"
    )
    env = {**os.environ, "QUICX_CONFIG": str(conf)}
    # Flags quicx start did not have before the settings table: they work too.
    daemon = background("start", f"--events={events}", "--allow=t", "--max-credits=2", env=env)
    port = int(daemon.wait_for(r"listening on 127\.0\.0\.1:(\d+)").group(1))
    daemon.wait_for("control socket on")
    assert events.is_dir()
    wire_env = {**env, "QUICX_ADDRESS": f"tcp:127.0.0.1:{port}"}
    assert quicx("submit", "t", "x", env=wire_env).returncode == 0
    refused = quicx("submit", "u", "x", env=wire_env)
    assert (refused.returncode, refused.stderr) == (1, "quicx: unknown task type: u\n")
    status = quicx("status", "--json", env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["config"] == str(conf)
    stopped = quicx("stop", env=env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped quicx (pid {daemon.process.pid})" in stopped.stdout
    assert daemon.process.wait(5) == 0


def test_connect_overrides_quicx_address(daemon: DaemonProcess) -> None:
    env = {**os.environ, "QUICX_ADDRESS": "tcp:127.0.0.1:1"}
    down = quicx("submit", "t", "x", env=env)
    assert down.returncode == 1
    assert down.stderr.startswith("quicx: cannot connect to tcp:127.0.0.1:1")
    up = quicx("submit", "t", "x", f"--connect=tcp:127.0.0.1:{daemon.port}", env=env)
    assert up.returncode == 0, up.stderr
    assert int(up.stdout) >= 1


def test_start_status_stop(tmp_path: Path, background) -> None:
    control, pid_file = tmp_path / "c.sock", tmp_path / "q.pid"
    daemon = background(
        "start",
        "--listen=tcp:0:interface=127.0.0.1",
        f"--control={control}",
        f"--pid-file={pid_file}",
    )
    port = int(daemon.wait_for(r"listening on 127\.0\.0\.1:(\d+)").group(1))
    daemon.wait_for("control socket on")
    assert int(pid_file.read_text()) == daemon.process.pid
    with QuicxClient(f"tcp:127.0.0.1:{port}") as client:
        client.submit_many(("t", b"x" * 100) for _ in range(1234))
        table = quicx("status", f"--control={control}")
        detail = quicx("status", f"--control={control}", "--classes")
        document = quicx("status", f"--control={control}", "--json")
    assert table.returncode == 0, table.stderr
    assert f"pid {daemon.process.pid}" in table.stdout
    assert re.search(r"submitted\s+1,234", table.stdout)
    assert re.search(r"in flight\s+1,234\s+\(1,234 queued \+ 0 running\)", table.stdout)
    assert re.search(r"producers\s+1", table.stdout)
    assert re.search(r"112 B  \[█+░*\]\s+655 / 655", table.stdout)  # that class is full
    # 655 tasks fill the 112-byte class; the other 579 spill into the 128-byte
    # class. Blocks carry 16-byte headers; the metadata carve-out is 80 bytes.
    used = 80 + 655 * (112 + 16) + 579 * (128 + 16)
    assert f"{used / 1024:.1f} KiB / 8.0 MiB" in table.stdout
    assert re.search(r"128 B  \[█+░*\]\s+579 / 582", table.stdout)
    # Folded: the classes in use, the fullest first; --classes shows each one.
    folded = table.stdout.partition("Size classes")[2].splitlines()
    in_use = r" +2 of 64 in use, 1,234 / [\d,]+ blocks \(--classes: each one\)"
    assert re.fullmatch(in_use, folded[0])
    assert [line.split(" B")[0].strip() for line in folded[1:]] == ["112", "128"]
    assert detail.returncode == 0, detail.stderr
    every = detail.stdout.partition("Size classes")[2].splitlines()
    assert every[0].strip() == "blocks used / total"
    assert len(every) == 1 + 64
    assert re.search(r"112 B  \[█+\]\s+655 / 655", detail.stdout)
    assert re.search(r"1,024 B  \[░+\]\s+0 / 161", detail.stdout)
    assert "shared data: 0 names, 0 B (0 versions published, 0 followers)" in table.stdout
    status = json.loads(document.stdout)
    assert status["tasks"]["queued"] == 1234
    assert status["memory"] == {"used": used, "total": 8 << 20}
    assert sum(c["blocks_used"] for c in status["classes"]) == 1234
    assert status["listening"] == [f"127.0.0.1:{port}"]

    stopped = quicx("stop", f"--pid-file={pid_file}")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped quicx (pid {daemon.process.pid})" in stopped.stdout
    assert daemon.process.wait(5) == 0
    assert "stopping with 1234 queued, 0 delayed and 0 running tasks" in daemon.log()
    assert not pid_file.exists()
    again = quicx("stop", f"--pid-file={pid_file}")
    assert (again.returncode, again.stderr) == (
        1,
        f"quicx: no daemon to stop: no pid file at {pid_file}\n",
    )


def test_second_start_with_the_same_pid_file_is_refused(tmp_path: Path, background) -> None:
    pid_file = tmp_path / "q.pid"
    first = background(
        "start",
        "--listen=tcp:0:interface=127.0.0.1",
        f"--control={tmp_path / 'c'}",
        f"--pid-file={pid_file}",
    )
    first.wait_for("listening on")
    second = quicx(
        "start",
        "--listen=tcp:0:interface=127.0.0.1",
        f"--control={tmp_path / 'c2'}",
        f"--pid-file={pid_file}",
    )
    assert second.returncode == 1
    assert f"a daemon is already running (pid {first.process.pid}" in second.stderr


def test_submit_and_worker_round_trip(daemon: DaemonProcess, background) -> None:
    env = env_for(daemon)
    worker = background("worker", "examples.send_email:worker", "-n", "2", env=env, cwd=ROOT)
    done = quicx("submit", "send_email", '{"to":"user@gmail.com"}', "--wait", env=env)
    assert done.returncode == 0, done.stderr
    task_id = int(done.stdout.splitlines()[0])
    assert done.stdout.splitlines()[1] == f"task {task_id} done"
    failed = quicx("submit", "send_email", "-", "--wait", input='{"to":"nobody"}', env=env)
    assert failed.returncode == 1
    assert failed.stdout.splitlines()[1] == f"task {task_id + 1} failed: cannot send to 'nobody'"
    worker.wait_for(re.escape("sent mail to user@gmail.com (queue default, attempt 1)"))
    assert worker.stop() == 0  # graceful: finished, then exited


def test_worker_from_a_plain_mapping(daemon: DaemonProcess, background, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(
        "def shout(payload):\n    print(payload.decode().upper(), flush=True)\n"
        "handlers = {'shout': shout}\n"
    )
    env = {**env_for(daemon), "PYTHONPATH": str(tmp_path)}
    worker = background("worker", "handlers:handlers", env=env)
    assert quicx("submit", "shout", "hello", "--wait", env=env).returncode == 0
    worker.wait_for("HELLO")


def test_worker_credits_and_busy_poll(daemon: DaemonProcess, background, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text("handlers = {'t': lambda payload: None}\n")
    env = {**env_for(daemon), "PYTHONPATH": str(tmp_path)}
    worker = background(
        "worker", "handlers:handlers", "--credits", "8", "--busy-poll", "0", env=env
    )
    with QuicxClient(env["QUICX_ADDRESS"]) as client:
        ids = client.submit_many(("t", b"") for _ in range(100))
        for task_id in ids:
            client.wait(task_id)  # type: ignore[arg-type]
        stats = client.stats()
    assert (stats.workers_total, stats.workers_idle) == (1, 1)
    assert worker.stop() == 0
    for option, bad in (
        ("--credits", "0"),
        ("--credits", "65536"),
        ("--credits", "many"),
        ("--busy-poll", "0.5"),
    ):
        refused = quicx("worker", "handlers:handlers", option, bad, env=env)
        assert refused.returncode == 2
        assert option in refused.stderr


@pytest.mark.parametrize(
    "example", ["blocking_producer.py", "twisted_producer.py", "twisted_cluster_producer.py"]
)
def test_examples(daemon: DaemonProcess, background, example: str) -> None:
    env = env_for(daemon)
    background("worker", "examples.send_email:worker", env=env, cwd=ROOT)
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / example), "user@gmail.com", "nobody"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert result.returncode == 1, result.stderr  # one of the two fails
    assert "mail to user@gmail.com sent" in result.stdout
    assert "cannot send to 'nobody'" in result.stdout


def test_twisted_worker_example(daemon: DaemonProcess, background) -> None:
    env = env_for(daemon)
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "twisted_worker.py")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    try:
        with QuicxClient(env["QUICX_ADDRESS"]) as client:
            client.wait(client.submit("send_email", '{"to":"a@b.c"}'), timeout=30)
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=15)
    assert "sent mail to a@b.c" in output


def test_status_detects_another_format(tmp_path: Path) -> None:
    import socket
    import threading

    path = tmp_path / "odd.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        conn.recv(100)
        conn.sendall(b'{"format": "quicx-status/9"}\n')
        conn.close()

    threading.Thread(target=answer, daemon=True).start()
    result = quicx("status", f"--control={path}")
    server.close()
    assert result.returncode == 1
    assert "speaks another status format ('quicx-status/9'" in result.stderr


def test_cli_worker_serves_its_queues(daemon: DaemonProcess, background, tmp_path: Path) -> None:
    (tmp_path / "handlers.py").write_text(
        "def shout(payload, context):\n"
        "    print(context.queue, payload.decode().upper(), flush=True)\n"
        "handlers = {'shout': shout}\n"
    )
    env = {**env_for(daemon), "PYTHONPATH": str(tmp_path)}
    worker = background("worker", "handlers:handlers", "--queues", "loud,quiet", env=env)
    done = quicx("submit", "shout", "hello", "--queue", "quiet", "--wait", env=env)
    assert done.returncode == 0, done.stderr
    worker.wait_for("quiet HELLO")


def test_a_worker_on_a_reactor_without_epoll_runs_without_busy_polling(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    # Busy polling is on by default: a reactor without epoll (another
    # platform's default) must not stop quicx worker from running.
    (tmp_path / "handlers.py").write_text("handlers = {'t': lambda payload: None}\n")
    (tmp_path / "poll_worker.py").write_text(
        "import sys\n"
        "from twisted.internet import pollreactor\n"
        "pollreactor.install()\n"
        "from quicx.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {**env_for(daemon), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        worker = subprocess.Popen(
            [sys.executable, str(tmp_path / "poll_worker.py"), "worker", "handlers:handlers"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        with QuicxClient(env["QUICX_ADDRESS"]) as client:
            assert client.wait(client.submit("t", b""), timeout=10) is None
        assert "busy polling is off: busy polling needs the epoll reactor, not PollReactor" in (
            log.read_text()
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(15) == 0


def test_submit_help_has_no_stray_punctuation() -> None:
    result = quicx("submit", "--help")
    assert result.returncode == 0
    assert ",:" not in result.stdout and "list of):" in result.stdout


def test_what_a_newcomer_reads_is_right(start_daemon) -> None:
    """Issue 30, item 16: the words of status, task and dlq show."""
    daemon = start_daemon()
    env = env_for(daemon)
    workers = [
        Background(daemon.directory / f"w{n}.log", "worker", "examples.send_email:worker",
                   "--queues=default", env=env, cwd=ROOT)
        for n in range(2)
    ]  # fmt: skip
    try:
        control = f"--control={daemon.control_path}"
        until_status = time.monotonic() + 20
        while "2 workers" not in (table := quicx("status", control).stdout):
            assert time.monotonic() < until_status, table
            time.sleep(0.05)
        assert re.search(r"\(protocol 2\): 2 workers$", table, re.M), table
        assert quicx("pause", "default", control).returncode == 0
        submitted = quicx("submit", "send_email", '{"to":"a@b.c"}', env=env)
        task = quicx("task", submitted.stdout.strip(), env=env)
        assert "waiting: queue default is paused" in task.stdout
        assert "estimated start: none while queue default is paused" in task.stdout
        assert "estimated start: in" not in task.stdout
        missing = quicx("dlq", "show", "999", env=env)
        assert (missing.returncode, missing.stderr) == (
            1,
            "quicx: no dead task 999 (quicx dlq list shows them)\n",
        )
    finally:
        for worker in workers:
            worker.kill()


def test_plain_status_shows_each_daemon_of_a_quicx_address_list(start_daemon) -> None:
    one, two = start_daemon(), start_daemon()
    env = {**os.environ, "QUICX_ADDRESS": f"{one.client_address},{two.client_address}"}
    status = quicx("status", env=env)
    assert status.returncode == 0, status.stderr
    assert one.client_address.removeprefix("tcp:") in status.stdout
    assert two.client_address.removeprefix("tcp:") in status.stdout


def test_stop_says_what_the_drain_waits_for(tmp_path: Path, background) -> None:
    conf = tmp_path / "quicx.conf"
    conf.write_text(
        f"[server]\nlisten = tcp:0:interface=127.0.0.1\ncontrol = {tmp_path / 'c.sock'}\n"
        f"pid_file = {tmp_path / 'q.pid'}\ndrain_timeout = 60\n"
    )
    daemon = background("start", f"--config={conf}")
    port = int(daemon.wait_for(r"listening on 127\.0\.0\.1:(\d+)").group(1))
    daemon.wait_for("control socket on")
    address = f"tcp:127.0.0.1:{port}"
    go = tmp_path / "go"
    (tmp_path / "slow.py").write_text(
        "import os, time\n"
        "def slow(payload):\n"
        "    print('started', flush=True)\n"
        "    deadline = time.monotonic() + 120\n"
        f"    while not os.path.exists({str(go)!r}) and time.monotonic() < deadline:\n"
        "        time.sleep(0.02)\n"
        "handlers = {'slow': slow}\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    worker = background("worker", "slow:handlers", f"--connect={address}", env=env)
    with QuicxClient(address) as client:
        client.submit("slow", b"")
        client.submit("slow", b"", queue="nobody-serves-this", delay=600)
        client.submit("other", b"", queue="nobody-serves-this")
    worker.wait_for("started")
    # The running task holds the drain (quicx stop waits for it) until the
    # test has read what stop says it waits for.
    stopping = background("stop", f"--config={conf}")
    said = stopping.wait_for(r"stopping quicx .*\n").group(0)
    go.touch()
    assert stopping.process.wait(60) == 0, stopping.log()
    assert said == (
        f"stopping quicx (pid {daemon.process.pid}): waiting up to 60 s (drain_timeout)"
        " for 1 running tasks and 0 queued to finish\n"
    )
    assert "stopping with 1 queued, 1 delayed and 0 running tasks" in daemon.log()
