"""
The daemon launcher of the tests and tools (tools/launcher.py), on real
C{twistd -n quicx} processes.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tools.launcher import DaemonError, DaemonProcess, tools_environment


def test_context_manager_reports_the_port_and_stops_cleanly(tmp_path: Path) -> None:
    with DaemonProcess(tmp_path) as daemon:
        assert daemon.port > 0
        socket.create_connection(daemon.address, timeout=5).close()
        assert daemon.client_address == f"tcp:127.0.0.1:{daemon.port}"
        assert daemon.control_path.exists()
    assert not daemon.alive()
    assert daemon.process is not None and daemon.process.returncode == 0
    assert "stopping with no live tasks" in daemon.log()


def test_a_restart_logs_to_the_same_file_and_log_shows_the_last_run(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path).start()
    first = daemon.port
    daemon.kill()
    assert daemon.process is not None and daemon.process.returncode == -signal.SIGKILL
    daemon.start()
    try:
        assert daemon.log().count("listening on") == 1
        assert f"listening on 127.0.0.1:{daemon.port} " in daemon.log()
        assert daemon.log_path.read_text().count("listening on") == 2
        assert f"listening on 127.0.0.1:{first} " in daemon.log_path.read_text()
    finally:
        daemon.stop()


def test_stop_kills_a_daemon_that_does_not_stop_in_time(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path).start()
    os.kill(daemon.pid, signal.SIGSTOP)  # SIGTERM stays pending; SIGKILL still works
    assert daemon.stop(timeout=0.5) == -signal.SIGKILL
    assert not daemon.alive()


def test_pipe_keeps_a_file_size_limit_off_the_log(tmp_path: Path) -> None:
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))

    with DaemonProcess(tmp_path, preexec=limit, pipe=True) as daemon:
        limits = Path(f"/proc/{daemon.pid}/limits").read_text()
        assert "Max file size             200" in limits
    # The daemon wrote far more than 200 bytes; this process wrote the file.
    assert daemon.log_path.stat().st_size > 1000
    assert "stopping with no live tasks" in daemon.log()


def test_without_twistd_the_error_says_what_to_install(tmp_path: Path) -> None:
    daemon = DaemonProcess(tmp_path, twistd=str(tmp_path / "twistd"))
    with pytest.raises(DaemonError, match=r"^no .*twistd: install quicx \(pip install \.\)"):
        daemon.start()
    assert daemon.stop() is None


def test_tools_environment_lets_a_child_import_tools_from_anywhere(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import tools.launcher"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    assert subprocess.run(command, cwd=tmp_path, env=env, capture_output=True).returncode == 1
    done = subprocess.run(command, cwd=tmp_path, env=tools_environment(env), capture_output=True)
    assert done.returncode == 0, done.stderr
