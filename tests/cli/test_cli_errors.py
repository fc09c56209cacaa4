"""
Every `quicx` command, given a user's mistake, ends with a short message on
stderr and a non-zero exit, and never a traceback: run as the real console
script, against files and sockets made here.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from quicx.clients.blocking import QuicxClient
from tests.conftest import DaemonProcess

QUICX = str(Path(sys.executable).with_name("quicx"))
ROOT = Path(__file__).resolve().parents[2]
LISTEN = "--listen=tcp:0:interface=127.0.0.1"
CONNECT_TLS = "--connect=tls:localhost:1:trustRoots="

USAGE = 2  # argparse's status, and a worker module that fails to import
FAILED = 1


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """The files the bad inputs name; also the commands' cwd and PYTHONPATH."""
    (tmp_path / "bad.conf").write_text("[server]\nport = 16381\nbogus line\n")
    (tmp_path / "no-control.conf").write_text("[server]\ncontrol = none\n")
    (tmp_path / "short-heartbeat.conf").write_text(
        "[server]\nheartbeat_interval = 10\nheartbeat_timeout = 25\n"
    )
    (tmp_path / "not-a-pid").write_text("hello\n")
    (tmp_path / "empty.pem").write_text("")
    (tmp_path / "handlers.py").write_text("handlers = {'t': print}\n")
    (tmp_path / "numbered.py").write_text("handlers = {1: print}\n")
    (tmp_path / "broken.py").write_text("import os\nhandlers = {'t': 1 / 0}\n")
    (tmp_path / "unfinished.py").write_text("handlers = {\n\ndef\n")
    (tmp_path / "needs_more.py").write_text("import quicx_no_such_dependency\n")
    return tmp_path


# (arguments, exit status, what stderr says, how many lines it takes)
# {tmp} is the workspace.
CASES = {
    "no command": ([], USAGE, "the following arguments are required: COMMAND", 1),
    "unknown command": (["frobnicate"], USAGE, "invalid choice: 'frobnicate'", 1),
    "unknown option": (
        ["status", "--frobnicate"],
        USAGE,
        "unrecognized arguments: --frobnicate",
        1,
    ),
    "version extra": (["version", "now"], USAGE, "unrecognized arguments: now", 1),
    "init extra": (["init", "--force"], USAGE, "unrecognized arguments: --force", 1),
    "start missing config": (
        ["start", "--config=/nonexistent.conf"],
        FAILED,
        "cannot read configuration",
        1,
    ),
    "start bad config line": (
        ["start", "--config={tmp}/bad.conf"],
        FAILED,
        "bad.conf:3: expected 'key = value', got 'bogus line'",
        1,
    ),
    "start bad listen": (["start", "--listen=bogus:1"], FAILED, "bad listen address", 1),
    "start control in no directory": (
        ["start", "--control=/nonexistent/dir/c.sock"],
        FAILED,
        "[server] control: /nonexistent/dir/c.sock: no such directory /nonexistent/dir",
        1,
    ),
    "repair-journal no file": (
        ["repair-journal"],
        USAGE,
        "the following arguments are required: file",
        1,
    ),
    "repair-journal missing": (
        ["repair-journal", "{tmp}/absent"],
        FAILED,
        "absent: offset 0: no journal to repair",
        1,
    ),
    "repair-journal not a journal": (
        ["repair-journal", "{tmp}/bad.conf"],
        FAILED,
        "bad.conf: offset 0: not a Quicx journal (bad magic)",
        1,
    ),
    "start tls without certificate": (
        ["start", "--listen=tls:0:interface=127.0.0.1"],
        FAILED,
        "a tls: listener needs [tls] certificate",
        1,
    ),
    "start bad fsync": (["start", "--fsync=sometimes"], USAGE, "invalid choice: 'sometimes'", 1),
    "start bad setting flag": (
        ["start", "--busy-poll=0.5"],
        USAGE,
        "argument --busy-poll: 0.5 seconds is out of range (0 to 0.01)",
        1,
    ),
    "start repeated flag bad": (
        ["start", "--class=16,50", "--class=lots,50"],
        USAGE,
        "argument --class: 'lots,50' is not SIZE,PERCENT",
        1,
    ),
    "start conflicting flags": (
        ["start", "--heartbeat-interval=10", "--heartbeat-timeout=5"],
        FAILED,
        "quicx: command line: heartbeat_timeout (5 s) must be longer than heartbeat_interval"
        " (10 s) (--heartbeat-timeout, --heartbeat-interval)",
        1,
    ),
    "start flags against the file": (
        ["start", "--config={tmp}/short-heartbeat.conf", "--heartbeat-interval=30"],
        FAILED,
        "heartbeat_interval (30 s) (--heartbeat-interval)",
        1,
    ),
    "start unwritable pid file": (
        ["start", LISTEN, "--pid-file=/nonexistent/q.pid"],
        FAILED,
        "cannot write pid file /nonexistent/q.pid",
        1,
    ),
    "start unwritable journal": (
        ["start", LISTEN, "--journal=/nonexistent/journal"],
        FAILED,
        "journal /nonexistent/journal",
        1,
    ),
    "stop no pid file": (
        ["stop", "--pid-file={tmp}/none.pid"],
        FAILED,
        "no daemon to stop: no pid file at",
        1,
    ),
    "stop not a pid file": (
        ["stop", "--pid-file={tmp}/not-a-pid"],
        FAILED,
        "not-a-pid holds no pid",
        1,
    ),
    "stop negative timeout": (
        ["stop", "--timeout=-1"],
        USAGE,
        "--timeout: -1 seconds: it must be more than 0",
        1,
    ),
    "stop bad config": (["stop", "--config={tmp}/bad.conf"], FAILED, "bad.conf:3", 1),
    "status no daemon": (
        ["status", "--control=/nonexistent/quicx.sock"],
        FAILED,
        "no daemon: control socket",
        1,
    ),
    "status control off": (
        ["status", "--config={tmp}/no-control.conf"],
        FAILED,
        "turns the control socket off",
        1,
    ),
    "status zero timeout": (["status", "--timeout=0"], USAGE, "it must be more than 0", 1),
    "submit empty type": (["submit", "", "x"], USAGE, "a task type is 1 to 255 bytes, not 0", 1),
    "submit long type": (["submit", "t" * 256, "x"], USAGE, "1 to 255 bytes, not 256", 1),
    "submit negative timeout": (
        ["submit", "t", "x", "--wait", "--timeout=-1"],
        USAGE,
        "--timeout: -1 seconds: it must be more than 0",
        1,
    ),
    "submit nan timeout": (
        ["submit", "t", "x", "--timeout=nan"],
        USAGE,
        "'nan' is not a number of seconds",
        1,
    ),
    "submit endless timeout": (
        ["submit", "t", "x", "--timeout=inf"],
        USAGE,
        "it must be under a year",
        1,
    ),
    "submit daemon down": (
        ["submit", "t", "x", "--connect=tcp:127.0.0.1:1"],
        FAILED,
        "cannot connect to tcp:127.0.0.1:1",
        1,
    ),
    "submit bad address": (["submit", "t", "x", "--connect=nowhere"], FAILED, "bad address", 1),
    "submit port out of range": (
        ["submit", "t", "x", "--connect=tcp:127.0.0.1:99999"],
        FAILED,
        "bad address: 'tcp:127.0.0.1:99999': port 99999 is out of range (1 to 65535)",
        1,
    ),
    "submit unknown tls option": (
        ["submit", "t", "x", "--connect=tls:localhost:1:bogus=1"],
        FAILED,
        "unknown tls: option bogus",
        1,
    ),
    "submit missing trust roots": (
        ["submit", "t", "x", CONNECT_TLS + "{tmp}/missing.pem"],
        FAILED,
        "missing.pem: No such file or directory",
        1,
    ),
    "submit empty trust roots": (
        ["submit", "t", "x", CONNECT_TLS + "{tmp}/empty.pem"],
        FAILED,
        "empty.pem: no PEM certificate in it",
        1,
    ),
    "submit empty key": (
        ["submit", "t", "x", "--key="],
        USAGE,
        "argument --key: a key is 1 to 255 bytes, not 0",
        1,
    ),
    "submit long fairness key": (
        ["submit", "t", "x", "--fairness-key=" + "k" * 256],
        USAGE,
        "argument --fairness-key: a key is 1 to 255 bytes, not 256",
        1,
    ),
    "submit bad queue": (["submit", "t", "x", "--queue=a/b"], USAGE, "not 'a/b'", 1),
    "submit bad delay": (
        ["submit", "t", "x", "--delay=soon"],
        USAGE,
        "'soon' is not a duration",
        1,
    ),
    "submit long delay": (["submit", "t", "x", "--delay=60d"], USAGE, "a delay is at most", 1),
    "submit delay and time": (
        ["submit", "t", "x", "--delay=1s", "--at=2026-12-01T09:00:00Z"],
        USAGE,
        "argument --at: not allowed with argument --delay",
        1,
    ),
    "submit time without zone": (
        ["submit", "t", "x", "--at=2026-12-01T09:00"],
        USAGE,
        "2026-12-01T09:00:00 has no time zone",
        1,
    ),
    "submit not a time": (["submit", "t", "x", "--at=noon"], USAGE, "'noon' is not a time", 1),
    "submit bad backoff": (
        ["submit", "t", "x", "--backoff=linear:1s"],
        USAGE,
        "argument --backoff: 'linear:1s' is not a backoff",
        1,
    ),
    "submit backoff over its cap": (
        ["submit", "t", "x", "--backoff=exponential:5m:1s"],
        USAGE,
        "the base is longer than the cap",
        1,
    ),
    "submit too many retries": (
        ["submit", "t", "x", "--retries=70000"],
        USAGE,
        "70000 is not from 0 to 65535",
        1,
    ),
    "queues daemon down": (
        ["queues", "--connect=tcp:127.0.0.1:1"],
        FAILED,
        "cannot connect to tcp:127.0.0.1:1",
        1,
    ),
    "peek bad count": (["peek", "mail", "-n", "1001"], USAGE, "1001 is not from 1 to 1000", 1),
    "task not a number": (["task", "seven"], USAGE, "'seven' is not a whole number", 1),
    "cancel no daemon": (
        ["cancel", "7", "--control=/nonexistent/quicx.sock"],
        FAILED,
        "cannot connect to unix:/nonexistent/quicx.sock",
        1,
    ),
    "pause control off": (
        ["pause", "mail", "--config={tmp}/no-control.conf"],
        FAILED,
        "turns the control socket off",
        1,
    ),
    "purge without --yes": (
        ["purge", "mail"],
        USAGE,
        "purge cancels every queued task of mail: add --yes to do it",
        1,
    ),
    "dlq without an action": (["dlq"], USAGE, "the following arguments are required: ACTION", 1),
    "tasks without an action": (
        ["tasks"],
        USAGE,
        "the following arguments are required: ACTION",
        1,
    ),
    "tasks cancel of dead tasks": (
        ["tasks", "cancel", "--state=dead"],
        USAGE,
        "cancel does not act on dead tasks",
        1,
    ),
    "tasks move without --to": (
        ["tasks", "move", "--queue=mail"],
        USAGE,
        "the following arguments are required: --to",
        1,
    ),
    "tasks move to its own queue": (
        ["tasks", "move", "--queue=mail", "--to=mail"],
        USAGE,
        "the tasks of queue mail are in it already",
        1,
    ),
    "tasks with a bad age": (["tasks", "purge", "--older-than=soon"], USAGE, "soon", 1),
    "tasks no daemon": (
        ["tasks", "purge", "--dry-run", "--control=/nonexistent/quicx.sock"],
        FAILED,
        "cannot connect to unix:/nonexistent/quicx.sock",
        1,
    ),
    "dlq list daemon down": (
        ["dlq", "list", "--connect=tcp:127.0.0.1:1"],
        FAILED,
        "cannot connect to tcp:127.0.0.1:1",
        1,
    ),
    "dlq show not a number": (["dlq", "show", "x"], USAGE, "'x' is not a whole number", 1),
    "dlq replay nothing named": (["dlq", "replay"], USAGE, "name a dead task's ID, or --all", 1),
    "dlq replay a task and all": (
        ["dlq", "replay", "7", "--all"],
        USAGE,
        "name a dead task's ID, or --all (not both)",
        1,
    ),
    "dlq replay a task of a queue": (
        ["dlq", "replay", "7", "--queue=mail"],
        USAGE,
        "--queue goes with --all",
        1,
    ),
    "dlq replay no daemon": (
        ["dlq", "replay", "--all", "--control=/nonexistent/quicx.sock"],
        FAILED,
        "cannot connect to unix:/nonexistent/quicx.sock",
        1,
    ),
    "dlq purge without --yes": (
        ["dlq", "purge", "mail"],
        USAGE,
        "dlq purge drops every dead task of queue mail: add --yes to do it",
        1,
    ),
    "dlq purge all without --yes": (
        ["dlq", "purge"],
        USAGE,
        "dlq purge drops every dead task of every queue: add --yes to do it",
        1,
    ),
    "schedules daemon down": (
        ["schedules", "--connect=tcp:127.0.0.1:1"],
        FAILED,
        "cannot connect to tcp:127.0.0.1:1",
        1,
    ),
    "schedule add without a cadence": (
        ["schedule", "add", "nightly", "t", "x"],
        USAGE,
        "one of the arguments --cron --every is required",
        1,
    ),
    "schedule add cron and interval": (
        ["schedule", "add", "nightly", "--cron=* * * * *", "--every=1m", "t", "x"],
        USAGE,
        "argument --every: not allowed with argument --cron",
        1,
    ),
    "schedule add part seconds": (
        ["schedule", "add", "nightly", "--every=1.5s", "t", "x"],
        USAGE,
        "1.5s: an interval is whole seconds",
        1,
    ),
    "schedule add empty cron": (
        ["schedule", "add", "nightly", "--cron=", "t", "x", "--control=/nonexistent/q.sock"],
        USAGE,
        "a cron expression or an interval, not both or neither",
        1,
    ),
    "schedule add bad name": (
        ["schedule", "add", "a/b", "--every=1m", "t", "x"],
        USAGE,
        "a schedule name is 1 to 64 letters, digits or '_.:-', not 'a/b'",
        1,
    ),
    "schedule add bad missed": (
        ["schedule", "add", "s", "--every=1m", "t", "x", "--missed=never"],
        USAGE,
        "invalid choice: 'never'",
        1,
    ),
    "schedule remove no daemon": (
        ["schedule", "remove", "nightly", "--control=/nonexistent/quicx.sock"],
        FAILED,
        "cannot connect to unix:/nonexistent/quicx.sock",
        1,
    ),
    "worker queue twice": (
        ["worker", "handlers:handlers", "--queues=a,b,a"],
        USAGE,
        "'a,b,a' names a queue twice",
        1,
    ),
    "worker queues in version 1": (
        ["worker", "handlers:handlers", "--queues=a", "--protocol=1"],
        FAILED,
        "--queues needs protocol version 2",
        1,
    ),
    "worker follow in version 1": (
        ["worker", "handlers:handlers", "--follow=rates", "--protocol=1"],
        FAILED,
        "--follow needs protocol version 2",
        1,
    ),
    "worker follows twice": (
        ["worker", "handlers:handlers", "--follow=a,a"],
        USAGE,
        "'a,a' names shared data twice",
        1,
    ),
    "worker not module:object": (["worker", "json"], USAGE, "'json' is not MODULE:OBJECT", 1),
    "worker example without object": (
        ["worker", "examples.send_email"],
        USAGE,
        "'examples.send_email' is not MODULE:OBJECT (e.g. examples.send_email:worker)",
        1,
    ),
    "worker no such object": (["worker", "json:nothing"], FAILED, "json has no 'nothing'", 1),
    "worker not handlers": (
        ["worker", "json:dumps"],
        FAILED,
        "json:dumps is a function, not a Worker",
        1,
    ),
    "worker handlers not named": (
        ["worker", "numbered:handlers"],
        FAILED,
        "numbered:handlers maps 1 to builtin_function_or_method",
        1,
    ),
    "worker no such module": (
        ["worker", "no_such_module:handlers"],
        USAGE,
        "cannot import no_such_module: ModuleNotFoundError: No module named 'no_such_module'",
        1,
    ),
    "worker module raises": (
        ["worker", "broken:handlers"],
        USAGE,
        "cannot import broken: ZeroDivisionError: division by zero\n  at {tmp}/broken.py:2",
        2,
    ),
    "worker module does not parse": (
        ["worker", "unfinished:handlers"],
        USAGE,
        "cannot import unfinished: SyntaxError: ",
        2,
    ),
    "worker module's import fails": (
        ["worker", "needs_more:handlers"],
        USAGE,
        "ModuleNotFoundError: No module named 'quicx_no_such_dependency'\n"
        "  at {tmp}/needs_more.py:1",
        2,
    ),
    "worker bad credits": (
        ["worker", "handlers:handlers", "--credits=0"],
        USAGE,
        "--credits: 0 is not from 1 to 65535",
        1,
    ),
    "worker bad address": (
        ["worker", "handlers:handlers", "--connect=nowhere"],
        FAILED,
        "bad address",
        1,
    ),
    "worker missing trust roots": (
        ["worker", "handlers:handlers", CONNECT_TLS + "{tmp}/missing.pem"],
        FAILED,
        "missing.pem: No such file or directory",
        1,
    ),
    "report without --out": (["report", "events"], USAGE, "the following arguments are", 1),
    "submit bad result ttl": (
        ["submit", "t", "x", "--result-ttl=soon"],
        USAGE,
        "'soon' is not a duration",
        1,
    ),
    "submit no result ttl": (
        ["submit", "t", "x", "--result-ttl=0"],
        USAGE,
        "a result TTL is a positive number of seconds up to 4,294,967,295",
        1,
    ),
    "result bad id": (["result", "0"], USAGE, "0 is not from 1 to 4294967295", 1),
    "result daemon down": (
        ["result", "5", "--wait", "--connect=tcp:127.0.0.1:1"],
        FAILED,
        "cannot connect to tcp:127.0.0.1:1",
        1,
    ),
    "group bad id": (["group", "seven"], USAGE, "'seven' is not a whole number", 1),
    "publish no data": (["publish", "rates"], USAGE, "give the data's FILE", 1),
    "publish data and delete": (
        ["publish", "rates", "{tmp}/handlers.py", "--delete"],
        USAGE,
        "give the data's FILE ('-': stdin), or --delete (not both)",
        1,
    ),
    "publish bad name": (
        ["publish", "no way", "{tmp}/handlers.py"],
        USAGE,
        "a shared-data name is 1 to 64 letters, digits or '_.:-', not 'no way'",
        1,
    ),
    "publish missing file": (
        ["publish", "rates", "{tmp}/missing.bin"],
        FAILED,
        "cannot read {tmp}/missing.bin: No such file or directory",
        1,
    ),
}


def run_quicx(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        # The workspace's modules, and this checkout's quicx.
        "PYTHONPATH": os.pathsep.join([str(workspace), str(ROOT)]),
        # Default pid files and control sockets: the workspace's.
        "XDG_RUNTIME_DIR": str(workspace),
    }
    env.pop("QUICX_ADDRESS", None)
    return subprocess.run(
        [QUICX, *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        cwd=workspace,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.parametrize(("args", "status", "message", "lines"), CASES.values(), ids=CASES)
def test_a_mistake_is_a_short_message_and_an_exit_status(
    workspace: Path, args: list[str], status: int, message: str, lines: int
) -> None:
    result = run_quicx(workspace, *(arg.format(tmp=workspace) for arg in args))
    assert "Traceback" not in result.stdout + result.stderr
    assert result.returncode == status, result.stderr
    assert result.stderr.startswith("quicx")
    assert message.format(tmp=workspace) in result.stderr
    assert len(result.stderr.splitlines()) == lines, result.stderr


@pytest.mark.parametrize(
    ("command", "message"),
    [
        (["queues"], "no answer from tcp:127.0.0.1:{port} within 0.3 s"),
        (["submit", "t", "x"], "no answer from the daemon within 0.3 s"),
    ],
)
def test_a_daemon_that_does_not_answer(workspace: Path, command: list[str], message: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as silent:
        port = silent.getsockname()[1]
        result = run_quicx(workspace, *command, f"--connect=tcp:127.0.0.1:{port}", "--timeout=0.3")
    assert (result.returncode, result.stderr) == (
        FAILED,
        f"quicx: {message.format(port=port)}\n",
    )


def test_version_2_commands_against_a_version_1_daemon(start_daemon, workspace: Path) -> None:
    daemon = start_daemon("--protocol-versions=1")
    connect = f"--connect={daemon.client_address}"
    for command in (
        ["queues"],
        ["peek", "default"],
        ["task", "1"],
        ["submit", "t", "x", "--queue=q"],
        ["submit", "t", "x", "--delay=5s"],
        ["dlq", "list"],
        ["dlq", "show", "1"],
        ["schedules"],
        ["submit", "t", "x", "--keep-result"],
        ["result", "1"],
        ["group", "1", "--wait"],
        ["publish", "rates", "--delete"],
    ):
        result = run_quicx(workspace, *command, connect)
        assert result.returncode == FAILED, result
        assert result.stderr.startswith("quicx: ") and result.stderr.count("\n") == 1
        assert "need" in result.stderr and "protocol version 2" in result.stderr
    assert run_quicx(workspace, "submit", "t", "x", connect).stdout == "1\n"


@pytest.mark.parametrize("command", [["start"], ["status"], ["stop"]])
def test_quicx_config_is_the_default_config(workspace: Path, command: list[str]) -> None:
    env = {**os.environ, "QUICX_CONFIG": str(workspace / "bad.conf")}
    result = subprocess.run(
        [QUICX, *command], capture_output=True, text=True, timeout=30, env=env, cwd=workspace
    )
    assert (result.returncode, result.stderr) == (
        FAILED,
        f"quicx: {workspace}/bad.conf:3: expected 'key = value', got 'bogus line'\n",
    )


def test_a_second_interrupt_stops_the_worker_at_once(
    daemon: DaemonProcess, workspace: Path
) -> None:
    (workspace / "slow.py").write_text(
        "import time\n"
        "def slow(payload):\n"
        "    print('started', flush=True)\n"
        "    time.sleep(60)\n"
        "handlers = {'slow': slow}\n"
    )
    output = workspace / "worker.out"
    address = f"tcp:127.0.0.1:{daemon.port}"
    with output.open("w") as out:
        worker = subprocess.Popen(
            [QUICX, "worker", "slow:handlers", f"--connect={address}"],
            stdout=out,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(workspace)},
        )
    try:
        with QuicxClient(address) as client:
            client.submit("slow", b"")
            deadline = time.monotonic() + 15
            while "started" not in output.read_text():
                assert time.monotonic() < deadline and worker.poll() is None
                time.sleep(0.05)
            worker.send_signal(signal.SIGINT)
            # The first interrupt waits for the task in hand ...
            with pytest.raises(subprocess.TimeoutExpired):
                worker.wait(0.5)
            worker.send_signal(signal.SIGINT)
            # ... the second does not.
            _, errors = worker.communicate(timeout=5)
            assert worker.returncode == 128 + signal.SIGINT
            assert errors.splitlines()[-2:] == [
                "quicx: stopping once the tasks in hand are done (Ctrl-C again to stop now)",
                "quicx: stopping now; the daemon requeues the tasks in hand",
            ]
            assert "Traceback" not in errors and "ReactorNotRunning" not in errors
            # The daemon has the task back, for the next worker.
            deadline = time.monotonic() + 10
            while client.stats().queue_depth != 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_a_reader_that_goes_away_stops_the_command_without_a_traceback(unbuffered: str) -> None:
    # `quicx task 3 | head -1`: head exits, and the next write meets a closed
    # pipe (when the output is written, or when it is flushed at the end).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = unbuffered
    read, write = os.pipe()
    os.close(read)
    try:
        done = subprocess.run(
            [QUICX, "version"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=env,
        )
    finally:
        os.close(write)
    assert (done.returncode, done.stderr) == (141, "")


@pytest.mark.parametrize("listener", ["metrics", "web"])
def test_a_failed_start_leaves_no_control_socket(workspace: Path, listener: str) -> None:
    control = workspace / "c.sock"
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_quicx(
            workspace,
            "start",
            LISTEN,
            f"--control={control}",
            f"--{listener}-listen=tcp:{port}:interface=127.0.0.1",
            "--web-admin-token=t",
        )
    assert result.returncode == FAILED
    assert (
        f"cannot listen on tcp:{port}" in result.stderr and f"[{listener}] listen" in result.stderr
    )
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith("c.sock")) == []


@pytest.mark.parametrize(
    ("command", "way"),
    [
        (["status"], "--control PATH, --config FILE or --connect ADDRESS"),
        (["pause", "mail"], "--control PATH or --config FILE"),
    ],
)
def test_a_missing_control_socket_says_quicx_address_is_not_read(
    workspace: Path, command: list[str], way: str
) -> None:
    # A newcomer who exports QUICX_ADDRESS for a daemon on another port: the
    # control socket commands look for the default socket, and say why.
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "XDG_RUNTIME_DIR": str(workspace),
        "QUICX_ADDRESS": "tcp:127.0.0.1:1",
    }
    env.pop("QUICX_CONFIG", None)
    result = subprocess.run(
        [QUICX, *command], capture_output=True, text=True, timeout=30, env=env, cwd=workspace
    )
    socket_path = workspace / "quicx-16381.sock"
    assert (result.returncode, result.stderr) == (
        FAILED,
        f"quicx: no daemon: control socket {socket_path} does not exist; this command"
        f" reads the control socket, not $QUICX_ADDRESS: give {way}\n",
    )
