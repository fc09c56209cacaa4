"""
Fixtures shared by every suite, the interop suite included: so this module
imports nothing from the project.  It starts real C{twistd -n quicx}
processes on loopback ports and stops each one it started.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

TWISTD = str(Path(sys.executable).with_name("twistd"))
LISTENING = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


class DaemonProcess:
    """
    A C{twistd -n quicx} process listening on an ephemeral loopback port.

    @ivar port: the port it bound.
    @ivar log_path: where its log goes.
    """

    def __init__(self, directory: Path, args: list[str]) -> None:
        self.directory = directory
        self.log_path = directory / "quicx.log"
        self.control_path = directory / "control.sock"
        self.args = args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        # Run in the child before twistd (resource limits, for instance).
        self.preexec: Callable[[], None] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self, timeout: float = 20.0) -> DaemonProcess:
        self.log_path.write_bytes(b"")
        command = [TWISTD, "-n", "--pidfile=", "quicx", *self.args]
        if not any(a.startswith(("--listen", "--config")) for a in self.args):
            command.append("--listen=tcp:0:interface=127.0.0.1")
        if not any(a.startswith("--control") for a in self.args):
            command.append(f"--control={self.control_path}")
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
            preexec_fn=self.preexec,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            match = LISTENING.search(self.log())
            if match:
                self.port = int(match.group(1))
                return self
            if self.process.poll() is not None:
                raise RuntimeError(f"quicx exited with {self.process.returncode}:\n{self.log()}")
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"quicx did not start listening:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """The log once it holds C{text}; fails the test after C{timeout}."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            if time.monotonic() > deadline:
                raise AssertionError(f"{text!r} not logged within {timeout:g} s:\n{log}")
            time.sleep(0.05)
        return log

    def stop(self, timeout: float = 15.0) -> int:
        """SIGTERM, wait for the exit, and return its status."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
        return self.process.returncode

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def config_option(tmp_path: Path, text: str = "") -> str:
    """
    C{--config=...} for a quicx.conf in C{tmp_path} that listens on an
    ephemeral loopback port, followed by C{text} (which may go on with
    C{[server]} keys).
    """
    path = tmp_path / "quicx.conf"
    path.write_text("[server]\nlisten = tcp:0:interface=127.0.0.1\n" + text)
    return f"--config={path}"


@pytest.fixture
def start_daemon(tmp_path: Path) -> Iterator:
    """Start daemons with given twistd-quicx arguments; stop them all after."""
    started: list[DaemonProcess] = []

    def start(*args: str) -> DaemonProcess:
        directory = tmp_path / f"daemon{len(started)}"
        directory.mkdir()
        daemon = DaemonProcess(directory, list(args))
        started.append(daemon)
        return daemon.start()

    yield start
    for daemon in started:
        daemon.kill()


@pytest.fixture
def daemon(start_daemon) -> DaemonProcess:
    """A daemon on the built-in default configuration."""
    return start_daemon()


@pytest.fixture(scope="session")
def spark() -> Iterator:
    """A local Spark session (needs quicx[spark] and Java), shared by the suite."""
    pytest.importorskip("pyspark", reason="pip install 'quicx[spark]'")
    from pyspark.sql import SparkSession

    # No PYSPARK_PYTHON: quicx.clients.spark has local executors run this interpreter.
    session = (
        SparkSession.builder.master("local[2]")
        .appName("quicx-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def pytest_report_header() -> str:
    return f"quicx daemon: {TWISTD} -n quicx (pid {os.getpid()} starts and stops each one)"
