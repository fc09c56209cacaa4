"""
C{quicx status --watch} against a real daemon on loopback, as a subprocess:
plain blocks into a pipe, rich's in-place view on a pseudo-terminal, JSON
lines; Ctrl-C and a daemon that goes away.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from quicx.clients.blocking import QuicxClient
from quicx.protocol import wire
from quicx.status.text import NONE
from tests.cli.test_cli import QUICX, env_for, quicx
from tests.conftest import DaemonProcess
from tests.peer import Peer

HIDE_CURSOR, SHOW_CURSOR = b"\x1b[?25l", b"\x1b[?25h"
CURSOR_UP, ERASE_LINE = b"\x1b[1A", b"\x1b[2K"


def watching(daemon: DaemonProcess, *args: str) -> list[str]:
    return ["status", f"--control={daemon.control_path}", "--watch", *args]


@pytest.fixture
def traffic(daemon: DaemonProcess, tmp_path: Path) -> Iterator[None]:
    """Tasks flowing through C{daemon}: a producer submits, a worker runs them."""
    (tmp_path / "handlers.py").write_text(
        "import time\nhandlers = {'t': lambda payload: time.sleep(0.002)}\n"
    )
    env = {**env_for(daemon), "PYTHONPATH": f"{env_for(daemon)['PYTHONPATH']}:{tmp_path}"}
    worker = subprocess.Popen(
        [QUICX, "worker", "handlers:handlers", "-n", "2"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    stop = threading.Event()

    def produce() -> None:
        with QuicxClient(daemon.client_address) as client:
            while not stop.is_set():
                client.submit_many(("t", b"x") for _ in range(20))
                stop.wait(0.02)

    with QuicxClient(daemon.client_address) as client:
        client.wait(client.submit("t", b"first"), timeout=30)  # the worker is there
    producer = threading.Thread(target=produce)
    producer.start()
    try:
        yield
    finally:
        stop.set()
        producer.join(15)
        worker.kill()
        worker.wait()


def overall(block: str) -> list[str]:
    """The cells of a view's C{all} row, after the label."""
    return next(line.split()[1:] for line in block.splitlines() if line.startswith("all "))


@pytest.mark.usefixtures("traffic")
def test_watch_into_a_pipe_prints_plain_blocks_with_rates_and_latencies(
    daemon: DaemonProcess,
) -> None:
    result = quicx(*watching(daemon, "--count", "3", "--interval", "0.5"), env=env_for(daemon))
    assert (result.returncode, result.stderr) == (0, "")
    assert "\x1b" not in result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    blocks = re.split(r"^(?=Quicx )", result.stdout, flags=re.MULTILINE)[1:]
    assert len(blocks) == 3
    assert "tasks per second since start" in blocks[0]
    for block in blocks[1:]:
        assert re.search(r"tasks per second over the last 0\.\d s", block)  # ~0.5
        submitted, done, _, *latencies = overall(block)
        assert float(submitted.replace(",", "")) > 0
        assert float(done.replace(",", "")) > 0
        assert NONE not in latencies  # waits and runs ended in every interval
        assert re.search(r"^queue default +[\d,]+ +[\d.,]+ ", block, re.MULTILINE)
        assert re.search(r"^type t +[\d,]+ ", block, re.MULTILINE)
        assert re.search(r"^default +[\d,]+ +\d+ +0 +0 +2 +\d+$", block, re.MULTILINE)
        assert re.search(r"^workers 2 \(\d idle\)   connections [34] ", block, re.MULTILINE)
        assert re.search(r"^memory  \[█+░*\]  ", block, re.MULTILINE)


def test_a_task_type_cannot_write_escape_codes_to_the_terminal_nor_break_a_row(
    daemon: DaemonProcess,
) -> None:
    """A producer names the task types: the view shows their control characters escaped."""
    producer = Peer(daemon.address)
    for task_type in (b"\x1b]0;owned\x07\x1b[2J", b"two\nlines"):
        producer.send(wire.encode_submit(task_type, b""))
        assert isinstance(producer.receive(), wire.Ok)
    result = quicx(*watching(daemon, "--count", "1"), env=env_for(daemon))
    assert (result.returncode, result.stderr) == (0, "")
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout
    assert re.search(r"^type \\x1b\]0;owned\\x07", result.stdout, re.MULTILINE)
    assert re.search(r"^type two\\nlines +[\d.]+ ", result.stdout, re.MULTILINE)


def test_json_watch_prints_a_document_a_line(daemon: DaemonProcess) -> None:
    watch = watching(daemon, "--json", "--count", "2", "--interval", "0.2")
    result = quicx(*watch, env=env_for(daemon))
    assert (result.returncode, result.stderr) == (0, "")
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["format"] == second["format"] == "quicx-status/1"
    assert second["uptime"] - first["uptime"] == pytest.approx(0.2, abs=0.15)


class Terminal:
    """C{quicx ARGS} run on a pseudo-terminal of 100 columns, its output read back."""

    def __init__(self, daemon: DaemonProcess, *args: str) -> None:
        self.master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 100, 0, 0))
        env = {k: v for k, v in env_for(daemon).items() if k not in ("COLUMNS", "LINES")}
        self.process = subprocess.Popen(
            [QUICX, *args], stdin=slave, stdout=slave, stderr=slave, env=env
        )
        os.close(slave)
        self.output = b""

    def read(self, until: Callable[[bytes], bool], timeout: float = 20) -> bytes:
        """What it wrote, once C{until} says it is enough or it closed the terminal."""
        deadline = time.monotonic() + timeout
        while not until(self.output):
            left = deadline - time.monotonic()
            assert left > 0, f"not seen within {timeout} s: {self.output!r}"
            if select.select([self.master], [], [], left)[0]:
                try:
                    chunk = os.read(self.master, 1 << 16)
                except OSError:  # EIO: the command exited, the terminal closed
                    break
                if not chunk:
                    break
                self.output += chunk
        return self.output

    def finish(self) -> tuple[int, bytes]:
        self.read(lambda output: False)
        os.close(self.master)
        return self.process.wait(15), self.output


@pytest.mark.usefixtures("traffic")
def test_watch_on_a_terminal_redraws_in_place(daemon: DaemonProcess) -> None:
    terminal = Terminal(daemon, *watching(daemon, "--count", "3", "--interval", "0.3"))
    status, output = terminal.finish()
    assert status == 0, output
    headers = re.findall(rb"tasks per second (since start|over the last [\d.]+ s)", output)
    # Three views, and the last once more as the view stops.
    assert headers[0] == b"since start"
    assert len(headers) in (3, 4) and b"since start" not in headers[1:]
    assert output.startswith(HIDE_CURSOR)
    assert CURSOR_UP in output and ERASE_LINE in output  # each view over the last
    assert output.rstrip(b"\r\n").endswith(SHOW_CURSOR)
    assert b"Traceback" not in output


def test_ctrl_c_ends_a_watch_quietly(daemon: DaemonProcess) -> None:
    terminal = Terminal(daemon, *watching(daemon))
    terminal.read(lambda output: b"memory" in output)
    terminal.process.send_signal(signal.SIGINT)
    status, output = terminal.finish()
    assert status == 0, output
    assert output.rstrip(b"\r\n").endswith(SHOW_CURSOR)
    assert b"Traceback" not in output and b"quicx:" not in output


def test_a_daemon_that_goes_away_ends_the_watch_with_one_line(
    daemon: DaemonProcess, tmp_path: Path
) -> None:
    out, err = tmp_path / "out", tmp_path / "err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [QUICX, *watching(daemon, "--interval", "0.2")],
            stdout=stdout,
            stderr=stderr,
            env=env_for(daemon),
        )
    try:
        deadline = time.monotonic() + 20
        while out.read_text().count("Quicx ") < 2:
            assert process.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        daemon.kill()
        assert process.wait(15) == 1
    finally:
        process.kill()
    assert re.fullmatch(
        rf"quicx: no daemon answers on {re.escape(str(daemon.control_path))}: .+\n",
        err.read_text(),
    )
    assert "\x1b" not in out.read_text()


def test_one_shot_options_of_the_watch_are_refused_without_it(daemon: DaemonProcess) -> None:
    for option in ("--count=2", "--interval=2"):
        refused = quicx("status", f"--control={daemon.control_path}", option, env=env_for(daemon))
        assert (refused.returncode, refused.stderr) == (
            2,
            "quicx: --interval and --count go with --watch\n",
        )
    both = quicx(*watching(daemon, "--classes"), env=env_for(daemon))
    assert both.returncode == 2
    assert "not allowed with argument" in both.stderr
