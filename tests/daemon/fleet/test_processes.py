"""
Several daemons on one host: C{quicx start --processes N} and C{--instance I}.

The instances' configurations and the supervisor's rule in-process; the
supervisor's restarts with short shell commands; then the real command,
three daemons, each with its own port, control socket and journal.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from quicx.cli import main
from quicx.clients.blocking import QuicxClient
from quicx.daemon.config import Config, ConfigError, with_settings
from quicx.daemon.control import StatusUnavailable, fetch_status
from quicx.daemon.fleet import instances
from quicx.daemon.fleet.supervisor import STEADY, Action, Daemon, Supervisor, decide

ROOT = Path(__file__).resolve().parents[3]

# -- each daemon's configuration ----------------------------------------------------------


def test_instance_takes_the_next_port_and_paths_of_its_own() -> None:
    base = with_settings(
        Config(),
        port=16381,
        control="/run/quicx/quicx.sock",
        journal="/var/lib/quicx/tasks.journal",
        events_directory="/var/log/quicx",
        metrics_listen="tcp:9464:interface=127.0.0.1",
    )
    second = instances.instance_config(base, 2)
    assert second.server.endpoints == ("tcp:16383:interface=127.0.0.1",)
    assert second.server.control_path == "/run/quicx/quicx.2.sock"
    assert second.server.pid_path.endswith("/quicx-16381.2.pid")
    assert second.journal.path == "/var/lib/quicx/2/tasks.journal"
    assert second.events.directory == "/var/log/quicx/2"
    assert second.metrics.listen == "tcp:9466:interface=127.0.0.1"
    assert instances.address_of(second) == "tcp:127.0.0.1:16383"
    assert (
        instances.instance_config(with_settings(Config(), control="none"), 1).server.control_path
        is None
    )


def test_listen_endpoints_shift_their_port_or_path() -> None:
    listen = ("tcp:port=7000:interface=10.0.0.5", "tls:7100", "unix:/run/q\\:x.sock", "tcp:0")
    first = instances.instance_config(with_settings(Config(), listen=listen), 1)
    assert first.server.listen == (
        "tcp:port=7001:interface=10.0.0.5",
        "tls:7101",
        "unix:/run/q\\:x.1.sock",
        "tcp:0",  # each picks its own
    )
    assert instances.address_of(first) == "tcp:10.0.0.5:7001"
    assert (
        instances.address_of(with_settings(Config(), listen=("unix:/run/q.sock",)))
        == "unix:/run/q.sock"
    )
    anywhere = with_settings(Config(), listen=("tls:7000",))
    assert instances.address_of(anywhere) == f"tls:{socket.gethostname()}:7000"


def test_each_daemon_of_a_set_polls_the_others_of_one_peer_list() -> None:
    everyone = "tcp:127.0.0.1:16381, tcp:127.0.0.1:16382, 127.0.0.1:16383, tcp:h4:16381"
    peers = [
        c.cluster.addresses
        for c in instances.instance_configs(with_settings(Config(), cluster_peers=everyone), 3)
    ]
    assert peers == [
        ("tcp:127.0.0.1:16382", "tcp:127.0.0.1:16383", "tcp:h4:16381"),
        ("tcp:127.0.0.1:16381", "tcp:127.0.0.1:16383", "tcp:h4:16381"),
        ("tcp:127.0.0.1:16381", "tcp:127.0.0.1:16382", "tcp:h4:16381"),
    ]
    assert instances.instance_config(Config(), 1).cluster.addresses == ()


@pytest.mark.parametrize(
    ("config", "count", "error"),
    [
        (with_settings(Config(), port=0), 2, "--processes 2 needs a fixed port"),
        (with_settings(Config(), listen=("tcp:0",)), 3, "--processes 3 needs a fixed port"),
        (with_settings(Config(), port=65534), 3, "needs ports up to 65536, past 65535"),
        (Config(), 0, "--processes 0: from 1 to 256"),
        (
            with_settings(Config(), listen=("systemd:domain=INET:index=0",)),
            2,
            "need tcp:, tls: or unix:",
        ),
    ],
)
def test_sets_that_cannot_run_are_refused(config: Config, count: int, error: str) -> None:
    with pytest.raises(ConfigError, match=error):
        instances.instance_configs(config, count)


def test_one_process_is_the_configuration_unchanged_but_its_paths() -> None:
    # Port 0 is fine for one daemon; the set of one is daemon 0.
    (only,) = instances.instance_configs(with_settings(Config(), port=0), 1)
    assert only.server.port == 0


# -- the supervisor --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "ran", "stopping", "action"),
    [
        (0, 1.0, False, Action.NOTHING),  # stopped on its own: stays stopped
        (1, STEADY, False, Action.RESTART),  # crashed after running: restarted
        (-9, STEADY + 60, False, Action.RESTART),
        (1, STEADY - 0.1, False, Action.STOP_ALL),  # fails at its start: would again
        (-9, 0.5, True, Action.NOTHING),  # the set is stopping anyway
    ],
)
def test_what_the_parent_does_when_a_daemon_exits(
    status: int, ran: float, stopping: bool, action: Action
) -> None:
    assert decide(status, ran, stopping) is action


def shell(script: str) -> list[str]:
    return ["/bin/sh", "-c", script]


def test_a_daemon_that_crashes_after_running_a_while_is_restarted(tmp_path: Path) -> None:
    flag = tmp_path / "crashed"
    # Crashes the first time, stops cleanly the second.
    crashing = Daemon("daemon 0", shell(f"test -e {flag} && exit 0; touch {flag}; exit 3"))
    steady = Daemon("daemon 1", shell("exit 0"))
    clock = itertools.count(step=STEADY)  # every daemon has run STEADY s when it exits
    supervisor = Supervisor([crashing, steady], "a,b", clock=lambda: next(clock))
    assert supervisor.run() == 0
    assert flag.exists()
    assert crashing.process is not None and crashing.process.returncode == 0


def test_a_daemon_failing_at_its_start_stops_the_others(tmp_path: Path) -> None:
    failing = Daemon("daemon 0", shell("exit 2"))
    other = Daemon("daemon 1", ["sleep", "20"])
    supervisor = Supervisor([failing, other], "a,b", clock=lambda: 0.0)
    started = time.monotonic()
    assert supervisor.run() == 1
    assert time.monotonic() - started < 10
    assert other.process is not None and other.process.returncode == -signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is not supervisor._signalled


def test_a_stop_during_the_start_stops_the_daemons_started_and_starts_no_more() -> None:
    # SIGTERM comes as the first daemon has just started (its start time
    # read), to this thread, as to the supervisor's one thread: a signal sent
    # to the process goes to any thread, and pytest-xdist's worker has others
    # (then the supervisor's catch-up sends it, as the daemons started later).
    signalled: list[bool] = []

    def clock() -> float:
        if not signalled:
            signalled.append(True)
            signal.raise_signal(signal.SIGTERM)
        return 0.0

    first, *others = [Daemon(f"daemon {n}", ["sleep", "20"]) for n in range(3)]
    supervisor = Supervisor([first, *others], "a,b,c", clock=clock)
    started = time.monotonic()
    assert supervisor.run() == 0
    assert time.monotonic() - started < 10
    # It got the SIGTERM (not held, as the parent held it while starting it).
    assert first.process is not None and first.process.returncode == -signal.SIGTERM
    assert [daemon.process for daemon in others] == [None, None]


def test_a_daemon_a_stop_missed_while_it_started_gets_its_sigterm_when_recorded() -> None:
    # As when another thread took the SIGTERM: the stop runs between the
    # daemon's start and its recording, so it does not see that daemon.
    supervisor: Supervisor

    def clock() -> float:
        if not supervisor.stopping:
            supervisor.stop()
        return 0.0

    first, *others = [Daemon(f"daemon {n}", ["sleep", "20"]) for n in range(3)]
    supervisor = Supervisor([first, *others], "a,b,c", clock=clock)
    started = time.monotonic()
    assert supervisor.run() == 0
    assert time.monotonic() - started < 10
    assert first.process is not None and first.process.returncode == -signal.SIGTERM
    assert first.stops == 1  # one SIGTERM: a drain, not the second signal's stop
    assert [daemon.process for daemon in others] == [None, None]


# -- the real command ----------------------------------------------------------------------


def free_ports(count: int) -> int:
    """The first of C{count} consecutive free loopback ports."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            base = probe.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                sock = socket.socket()
                held.append(sock)
                sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            for sock in held:
                sock.close()
        return base
    raise AssertionError("no consecutive free ports")


def quicx(*args: str, **kwargs) -> subprocess.Popen[bytes]:
    """The repository's C{quicx}, whatever is installed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-m", "quicx.cli", *args], env=env, **kwargs)


def run_quicx(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "quicx.cli", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)


def wait_for_status(path: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fetch_status(path, timeout=2)
        except StatusUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture
def three(tmp_path: Path) -> Iterator[tuple[Path, int, list[subprocess.Popen[bytes]]]]:
    """A quicx.conf for three daemons; the parents started, killed after."""
    port = free_ports(3)
    config = tmp_path / "quicx.conf"
    config.write_text(
        f"[server]\nport = {port}\ncontrol = {tmp_path / 'quicx.sock'}\n"
        f"pid_file = {tmp_path / 'quicx.pid'}\n[journal]\npath = {tmp_path / 'tasks.journal'}\n"
    )
    started: list[subprocess.Popen[bytes]] = []
    yield config, port, started
    for parent in started:
        if parent.poll() is None:
            parent.kill()  # its daemons get SIGTERM (PR_SET_PDEATHSIG)
            parent.wait()


def test_three_daemons_each_with_its_own_journal(tmp_path: Path, three) -> None:
    config, port, started = three
    log = tmp_path / "start.log"

    def start() -> subprocess.Popen[bytes]:
        with log.open("ab") as out:
            parent = quicx("start", f"--config={config}", "--processes=3", stdout=out, stderr=out)
        started.append(parent)
        return parent

    parent = start()
    controls = [str(tmp_path / f"quicx.{index}.sock") for index in range(3)]
    statuses = [wait_for_status(path) for path in controls]
    addresses = [f"tcp:127.0.0.1:{port + index}" for index in range(3)]
    assert f"QUICX_ADDRESS={','.join(addresses)}" in log.read_text()
    pids = {status["pid"] for status in statuses}
    assert len(pids) == 3 and parent.pid not in pids
    for index, status in enumerate(statuses):
        assert status["listening"] == [f"127.0.0.1:{port + index}"]
        assert status["journal"]["path"] == str(tmp_path / str(index) / "tasks.journal")
    # Daemon I keeps I + 1 tasks (no worker takes them).
    for index, address in enumerate(addresses):
        with QuicxClient(address) as client:
            client.submit_many((f"t{index}", b"x") for _ in range(index + 1))
    shown = run_quicx("status", f"--config={config}", "--instance=2", "--json")
    assert json.loads(shown.stdout)["tasks"]["queued"] == 3, shown.stderr

    parent.send_signal(signal.SIGTERM)
    assert parent.wait(20) == 0, log.read_text()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_dir()) == ["0", "1", "2"]

    start()
    for index, path in enumerate(controls):
        tasks = wait_for_status(path)["tasks"]
        assert tasks["queued"] == index + 1
    # quicx stop finds the parent, which stops every daemon.
    stopped = run_quicx("stop", f"--config={config}")
    assert stopped.returncode == 0, stopped.stderr
    assert started[-1].wait(20) == 0


def test_a_daemon_that_cannot_start_stops_the_set(tmp_path: Path, three) -> None:
    config, port, started = three
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", port + 1))
        taken.listen()
        parent = quicx(
            "start",
            f"--config={config}",
            "--processes=3",
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        started.append(parent)
        output, _ = parent.communicate(timeout=30)
    assert parent.returncode == 1
    assert b"daemon 1 (tcp:127.0.0.1:" in output and b"stopping the others" in output


@pytest.mark.parametrize("command", [["status"], ["pause", "mail"]])
def test_a_command_without_instance_names_the_set_it_finds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: list[str]
) -> None:
    for index in range(3):  # the control sockets of a set's daemons
        (tmp_path / f"quicx.{index}.sock").touch()
    assert main([*command, f"--control={tmp_path / 'quicx.sock'}"]) == 1
    error = capsys.readouterr().err
    assert "but 3 of a set (quicx start --processes)" in error
    assert "give --instance I, from 0 to 2" in error


@pytest.mark.parametrize(
    ("args", "status", "error"),
    [
        (["--processes=0"], 2, "argument --processes: 0 is not from 1 to 256"),
        (["--processes=two"], 2, "argument --processes: 'two' is not a whole number"),
        (["--processes=2", "--port=0"], 1, "quicx: --processes 2 needs a fixed port"),
        (["--processes=2", "--instance=1"], 1, "quicx: --processes runs a set of daemons"),
    ],
)
def test_bad_processes_is_one_line(args: list[str], status: int, error: str) -> None:
    result = run_quicx("start", *args)
    assert result.returncode == status
    assert error in result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_the_systemd_unit_is_the_one_the_docs_show() -> None:
    operations = (ROOT / "docs" / "operations.md").read_text()
    unit = (ROOT / "contrib" / "quicx@.service").read_text()
    assert f"```ini\n{unit}```" in operations
    assert "--instance %i" in unit
